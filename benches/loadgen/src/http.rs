//! `--http`: the same workloads over the HTTP API (docs/http.md) instead of RCP1, so one run
//! compares the two codecs at the same requests in flight. Requests are HTTP/1.1 keep-alive,
//! pipelined up to `--in-flight` per connection (the server answers them in order); each
//! response is matched with the oldest request of its connection, as RCP1 responses are.
//!
//! Requests are written from pre-rendered pieces like the RCP1 ones (`workload.rs`); responses
//! are read by their status line and `Content-Length` only (a failure's problem body is parsed
//! for its `code`).

use super::rng::Rng;
use super::workload::{write_u64, OpKind, Plan, EVENT, MACHINE, MACHINE_VERSION};

/// Longest response head the reader accepts.
const HEAD_BYTES_MAX: usize = 16 * 1024;

/// Appends one request for `op` (picked by the caller) to `out`.
pub fn write_request(
    plan: &Plan,
    op: OpKind,
    host: &str,
    rng: &mut Rng,
    create: (u64, &mut u64),
    out: &mut Vec<u8>,
) {
    let mut body = Vec::new();
    let (method, path): (&str, Vec<u8>) = match op {
        // `validate` refuses ping for --http: there is no HTTP path for PING.
        OpKind::Ping | OpKind::Get => ("GET", instance_path(plan, rng, b"")),
        OpKind::Apply => {
            body.extend_from_slice(br#"{"event":""#);
            body.extend_from_slice(EVENT.as_bytes());
            body.extend_from_slice(br#"","payload":"#);
            body.extend_from_slice(plan.payload_json.as_bytes());
            body.push(b'}');
            ("POST", instance_path(plan, rng, b"/events"))
        }
        OpKind::Create => {
            let (conn, seq) = create;
            body.extend_from_slice(br#"{"machine":""#);
            body.extend_from_slice(MACHINE.as_bytes());
            body.extend_from_slice(br#"","version":"#);
            write_u64(&mut body, u64::from(MACHINE_VERSION));
            body.extend_from_slice(br#","id":""#);
            body.extend_from_slice(plan.create_prefix.as_bytes());
            write_u64(&mut body, conn);
            body.push(b'.');
            write_u64(&mut body, *seq);
            *seq += 1;
            body.extend_from_slice(br#"","context":"#);
            body.extend_from_slice(plan.payload_json.as_bytes());
            body.push(b'}');
            ("POST", b"/instances".to_vec())
        }
        OpKind::Batch => ("POST", b"/batch".to_vec()),
    };
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(&path);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    if !body.is_empty() {
        out.extend_from_slice(b"\r\nContent-Type: application/json\r\nContent-Length: ");
        write_u64(out, body.len() as u64);
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&body);
}

/// `/instances/<random pre-created id><suffix>` (ids are plain ASCII: no escaping needed).
fn instance_path(plan: &Plan, rng: &mut Rng, suffix: &[u8]) -> Vec<u8> {
    let mut p = b"/instances/".to_vec();
    p.extend_from_slice(plan.instance_prefix.as_bytes());
    write_u64(&mut p, rng.below(plan.instances));
    p.extend_from_slice(suffix);
    p
}

/// One parsed response: `Ok(None)` is a success, `Ok(Some(code))` a failure with its code.
pub type Outcome = Result<Option<String>, String>;

/// The response at the start of `buf`: its outcome and length, or `None` when incomplete.
pub fn read_response(buf: &[u8]) -> Option<(Outcome, usize)> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (buf.len() > HEAD_BYTES_MAX).then(|| (Err("response head too long".into()), 0));
    };
    let head = &buf[..end];
    let status = head
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok());
    let Some(status) = status.filter(|_| head.starts_with(b"HTTP/1.1 ")) else {
        return Some((Err("not an HTTP/1.1 status line".into()), 0));
    };
    let length = content_length(head).unwrap_or(0);
    let total = end + 4 + length;
    if buf.len() < total {
        return None;
    }
    let outcome = match status {
        200..=299 => Ok(None),
        _ => Ok(Some(problem_code(&buf[end + 4..total], status))),
    };
    Some((outcome, total))
}

fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

fn problem_code(body: &[u8], status: u16) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("HTTP_{status}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Mix;

    /// (method, target, body) of one request as the server's parser reads it: a request line,
    /// headers ending in a blank line, and exactly `Content-Length` bytes of body.
    fn split(out: &[u8]) -> (String, String, Vec<u8>) {
        let text = String::from_utf8(out.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap().split(' ');
        let (method, target) = (first.next().unwrap(), first.next().unwrap());
        assert_eq!(first.next(), Some("HTTP/1.1"));
        let length = lines
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |n| n.parse::<usize>().unwrap());
        assert_eq!(body.len(), length);
        (method.into(), target.into(), body.as_bytes().to_vec())
    }

    #[test]
    fn requests_are_what_the_server_parses() {
        let plan = Plan::new(Mix::only(OpKind::Apply), 10, 3, "t1");
        let mut rng = Rng::new(1);
        let mut seq = 0;
        let mut out = Vec::new();
        write_request(
            &plan,
            OpKind::Apply,
            "h:1",
            &mut rng,
            (2, &mut seq),
            &mut out,
        );
        let (method, target, body) = split(&out);
        assert_eq!(method, "POST");
        assert!(target.starts_with("/instances/bt1-") && target.ends_with("/events"));
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["payload"]["p"], "xxx");
        let mut out = Vec::new();
        write_request(
            &plan,
            OpKind::Create,
            "h:1",
            &mut rng,
            (2, &mut seq),
            &mut out,
        );
        let (_, _, body) = split(&out);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((body["id"].clone(), seq), (serde_json::json!("nt1-2.0"), 1));
    }

    #[test]
    fn responses_are_read_by_status_and_length() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 422";
        assert_eq!(read_response(ok), Some((Ok(None), ok.len() - 12)));
        let problem = br#"{"code":"GUARD_FAILED"}"#;
        let mut failed = format!(
            "HTTP/1.1 422 X\r\ncontent-length: {}\r\n\r\n",
            problem.len()
        )
        .into_bytes();
        failed.extend_from_slice(problem);
        let n = failed.len();
        assert_eq!(
            read_response(&failed),
            Some((Ok(Some("GUARD_FAILED".into())), n))
        );
        assert_eq!(read_response(&failed[..n - 1]), None);
        assert!(matches!(
            read_response(b"garbage\r\n\r\n"),
            Some((Err(_), _))
        ));
    }
}
