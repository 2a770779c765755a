//! A connection against a scripted peer over an in-memory pipe: what a call gets back when
//! its answer takes the one-pass read (`fast`), the general read, or comes too late.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::conn::Conn;
use super::reader::{Answer, Expect};
use crate::error::Error;
use crate::frame::{decode_frame, encode_frame};
use crate::ops::{self, Applied, ApplyOptions, ApplyParams};

/// The peer's end: reads request frames, writes answers.
struct Peer {
    io: DuplexStream,
    buf: Vec<u8>,
}

impl Peer {
    /// The next request's envelope.
    async fn request(&mut self) -> Value {
        loop {
            if let Some((range, used)) = decode_frame(&self.buf, 1 << 20).unwrap() {
                let v = serde_json::from_slice(&self.buf[range]).unwrap();
                self.buf.drain(..used);
                return v;
            }
            let mut chunk = [0u8; 4096];
            let n = self.io.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the client closed the pipe");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Writes `payload` as one frame.
    async fn answer(&mut self, payload: &str) {
        let mut out = Vec::new();
        encode_frame(payload.as_bytes(), &mut out);
        self.io.write_all(&out).await.unwrap();
    }
}

fn connect(timeout: Option<Duration>) -> (Arc<Conn>, Peer) {
    let (client, peer) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(client);
    let peer = Peer {
        io: peer,
        buf: Vec::new(),
    };
    (Conn::start(r, w, timeout), peer)
}

/// The answer of an APPLY_EVENT call on `conn` whose response the peer writes from `result`
/// (`{id}` replaced by the request's id).
async fn apply_answered(conn: &Conn, peer: &mut Peer, response: &str) -> crate::Result<Answer> {
    let payload = json!({"p": "x"});
    let none = ApplyOptions::default();
    let p = ApplyParams::new("i1", "go", Some(&payload), &none);
    let call = conn.call("APPLY_EVENT".into(), Some(&p), None, Expect::Applied);
    let serve = async {
        let req = peer.request().await;
        assert_eq!(req["op"], "APPLY_EVENT");
        assert_eq!(
            req["params"],
            json!({"instance_id": "i1", "event": "go", "payload": payload})
        );
        let id = req["id"].as_str().unwrap().to_string();
        peer.answer(&response.replace("{id}", &id)).await;
    };
    let (answer, ()) = tokio::join!(call, serve);
    answer
}

/// What the caller of `apply_event` makes of an answer (as `Client::apply_event` does).
fn applied(answer: crate::Result<Answer>) -> crate::Result<Applied> {
    match answer? {
        Answer::Applied(a) => Ok(a),
        Answer::Raw(raw) => ops::decode_raw("APPLY_EVENT", &raw),
    }
}

const RESULT: &str = r#"{"applied":true,"context":{"a":1,"p":"x"},"from_state":"s","instance_id":"i1","to_state":"t","wal_offset":9,"later":[1]}"#;

#[tokio::test]
async fn the_usual_answer_is_decoded_by_the_reader_and_equals_the_general_read() {
    let (conn, mut peer) = connect(None);
    let usual = format!(r#"{{"type":"response","id":"{{id}}","status":"ok","result":{RESULT}}}"#);
    let got = apply_answered(&conn, &mut peer, &usual).await.unwrap();
    let Answer::Applied(a) = got else {
        panic!("the usual answer took the general read: {got:?}");
    };
    let want: Applied = serde_json::from_str(RESULT).unwrap();
    assert_eq!(a, want);
    assert_eq!(a.extra["later"], json!([1]));
    // Another member order, whitespace, an escaped member name: the general read, the same
    // `Applied`.
    for odd in [
        format!(r#"{{"status":"ok","type":"response","id":"{{id}}","result":{RESULT}}}"#),
        format!(r#"{{"type":"response","id":"{{id}}","status":"ok","result": {RESULT}}}"#),
        format!(
            r#"{{"type":"response","id":"{{id}}","status":"ok","result":{}}}"#,
            RESULT.replace(r#""to_state":"#, r#""to\u005fstate":"#)
        ),
    ] {
        let got = apply_answered(&conn, &mut peer, &odd).await;
        assert!(matches!(got, Ok(Answer::Raw(_))), "{odd}: {got:?}");
        assert_eq!(applied(got).unwrap(), want, "{odd}");
    }
}

#[tokio::test]
async fn errors_and_undecodable_results_are_what_the_general_read_gives() {
    let (conn, mut peer) = connect(None);
    let refused = r#"{"type":"response","id":"{id}","status":"error","error":{"code":"INSTANCE_NOT_FOUND","message":"m","retryable":false}}"#;
    let e = apply_answered(&conn, &mut peer, refused).await.unwrap_err();
    assert_eq!(e.code(), Some("INSTANCE_NOT_FOUND"));
    let missing = r#"{"type":"response","id":"{id}","status":"ok","result":{"applied":true}}"#;
    let got = apply_answered(&conn, &mut peer, missing).await;
    let e = applied(got).unwrap_err();
    assert!(e.to_string().contains("does not decode"), "{e}");
    // The connection still serves.
    let usual = format!(r#"{{"type":"response","id":"{{id}}","status":"ok","result":{RESULT}}}"#);
    assert!(applied(apply_answered(&conn, &mut peer, &usual).await).is_ok());
}

#[tokio::test]
async fn a_raw_call_of_the_same_answer_gets_its_text() {
    let (conn, mut peer) = connect(None);
    let call = conn.call::<Value>("APPLY_EVENT".into(), None, None, Expect::Raw);
    let serve = async {
        let req = peer.request().await;
        let id = req["id"].as_str().unwrap().to_string();
        let usual = format!(r#"{{"type":"response","id":"{id}","status":"ok","result":{RESULT}}}"#);
        peer.answer(&usual).await;
    };
    let (got, ()) = tokio::join!(call, serve);
    let Ok(Answer::Raw(raw)) = got else {
        panic!("{got:?}");
    };
    assert_eq!(raw.get(), RESULT);
}

#[tokio::test]
async fn a_late_answer_after_a_timeout_is_dropped_and_the_connection_serves_on() {
    let (conn, mut peer) = connect(Some(Duration::from_millis(100)));
    let payload = json!({});
    let none = ApplyOptions::default();
    let p = ApplyParams::new("i1", "go", Some(&payload), &none);
    let late = conn.call("APPLY_EVENT".into(), Some(&p), None, Expect::Applied);
    let serve = async {
        let req = peer.request().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        req["id"].as_str().unwrap().to_string()
    };
    let (got, id) = tokio::join!(late, serve);
    assert!(
        matches!(&got, Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut),
        "{got:?}"
    );
    let usual = format!(r#"{{"type":"response","id":"{id}","status":"ok","result":{RESULT}}}"#);
    peer.answer(&usual).await;
    let next = format!(r#"{{"type":"response","id":"{{id}}","status":"ok","result":{RESULT}}}"#);
    assert!(applied(apply_answered(&conn, &mut peer, &next).await).is_ok());
    assert!(conn.is_alive());
}

#[tokio::test]
async fn an_answer_for_no_pending_call_ends_the_connection() {
    let (conn, mut peer) = connect(None);
    // An odd id takes the one-pass read; still no call waits for it.
    let stray = format!(r#"{{"type":"response","id":"12345","status":"ok","result":{RESULT}}}"#);
    peer.answer(&stray).await;
    let e = conn
        .call::<Value>("PING".into(), None, None, Expect::Raw)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("response for request 12345, which is not pending"),
        "{e}"
    );
    assert!(!conn.is_alive());
}

#[tokio::test]
async fn a_dropped_call_leaves_its_answer_to_be_dropped() {
    let (conn, mut peer) = connect(None);
    let payload = json!({});
    let none = ApplyOptions::default();
    let p = ApplyParams::new("i1", "go", Some(&payload), &none);
    let call = conn.send("APPLY_EVENT".into(), Some(&p), None, Expect::Applied);
    let req = peer.request().await;
    drop(call);
    let id = req["id"].as_str().unwrap();
    let usual = format!(r#"{{"type":"response","id":"{id}","status":"ok","result":{RESULT}}}"#);
    peer.answer(&usual).await;
    let next = format!(r#"{{"type":"response","id":"{{id}}","status":"ok","result":{RESULT}}}"#);
    assert!(applied(apply_answered(&conn, &mut peer, &next).await).is_ok());
}

#[test]
fn ids_carry_what_their_call_expects() {
    for n in [1, 2, 1000, u64::MAX / 2] {
        for e in [Expect::Raw, Expect::Applied] {
            assert_eq!(Expect::of(e.id(n)), e);
        }
        assert_ne!(Expect::Raw.id(n), Expect::Applied.id(n));
    }
}

#[tokio::test]
async fn a_second_answer_to_one_request_ends_the_connection_after_the_first_is_taken() {
    let (conn, mut peer) = connect(None);
    let payload = json!({});
    let none = ApplyOptions::default();
    let p = ApplyParams::new("i1", "go", Some(&payload), &none);
    let call = conn.call("APPLY_EVENT".into(), Some(&p), None, Expect::Applied);
    let serve = async {
        let req = peer.request().await;
        let id = req["id"].as_str().unwrap().to_string();
        let usual = format!(r#"{{"type":"response","id":"{id}","status":"ok","result":{RESULT}}}"#);
        // Both in one write: the reader reads the second before the caller takes the first.
        let mut out = Vec::new();
        encode_frame(usual.as_bytes(), &mut out);
        encode_frame(usual.as_bytes(), &mut out);
        peer.io.write_all(&out).await.unwrap();
    };
    let (got, ()) = tokio::join!(call, serve);
    assert!(applied(got).is_ok());
    tokio::task::yield_now().await;
    assert!(!conn.is_alive());
    let e = conn
        .call::<Value>("PING".into(), None, None, Expect::Raw)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("which is not pending"), "{e}");
}
