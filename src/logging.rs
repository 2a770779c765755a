//! Logging (docs/monitoring/README.md, "Logs"): `log` + `env_logger` on stderr, text or one JSON object per line,
//! and the request-completed line every front writes when a response is ready.
//!
//! `logging.level` sets the level and `RUST_LOG` overrides it. Request lines go to the target
//! `smdb::request` (so `RUST_LOG=info,smdb::request=debug` shows them alone): `debug` for every
//! request, `info` when slower than `logging.slow_request_ms`, `warn` when the server failed
//! (WAL_IO_ERROR, INTERNAL_ERROR). Fronts write them; shards never log per request.

use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use log::kv::{Error as KvError, Key, Source, Value, VisitSource};
use log::{Level, Record};
use shards::ErrorCode;

use crate::config::{LogFormat, Logging};
use crate::protocol::Op;

/// The target of request-completed lines.
pub const REQUEST_TARGET: &str = "smdb::request";
/// The message of request-completed lines.
pub const REQUEST_MESSAGE: &str = "request completed";

/// `logging.slow_request_ms`: written once by `init`, then only read (a shared, never-written
/// cache line costs the fronts nothing).
static SLOW_REQUEST_MS: AtomicU64 = AtomicU64::new(100);

/// Installs the logger. A second call (tests) leaves the first logger in place.
pub fn init(config: &Logging) {
    SLOW_REQUEST_MS.store(config.slow_request_ms, Relaxed);
    let env = env_logger::Env::default().default_filter_or(config.level.clone());
    let mut builder = env_logger::Builder::from_env(env);
    match config.format {
        LogFormat::Text => {
            builder.format_timestamp_millis();
        }
        LogFormat::Json => {
            builder.write_style(env_logger::WriteStyle::Never);
            builder.format(|buf, record| {
                let ts = buf.timestamp_millis();
                let line = json_line(&ts, record);
                buf.write_all(&line)
            });
            // A panic message is one JSON line too (release builds then abort).
            std::panic::set_hook(Box::new(|info| {
                let location = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let message = match info.payload().downcast_ref::<&str>() {
                    Some(s) => (*s).to_string(),
                    None => info
                        .payload()
                        .downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_default(),
                };
                let thread = std::thread::current().name().unwrap_or("?").to_string();
                json_to_stderr(
                    Level::Error,
                    "panic",
                    &[
                        ("panic", &message),
                        ("location", &location),
                        ("thread", &thread),
                    ],
                );
            }));
        }
    }
    let _ = builder.try_init();
}

/// Writes one JSON line with `level`, `message` and `fields` to stderr, outside the logger:
/// for start-up failures before or after logging is set up (`smdb-server` uses it in JSON mode).
pub fn json_to_stderr(level: Level, message: &str, fields: &[(&str, &str)]) {
    let mut line = serde_json::json!({
        "timestamp": now_rfc3339(),
        "level": level.as_str(),
        "target": "smdb::server",
        "message": message,
    });
    for (k, v) in fields {
        line[*k] = (*v).into();
    }
    eprintln!("{line}");
}

/// The current UTC time as RFC 3339 with milliseconds (`2026-01-31T12:00:00.123Z`), the
/// format of the logger's `timestamp` field.
pub fn now_rfc3339() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    shards::engine::rfc3339::format_ms(since.as_millis() as u64)
}

/// One JSON log line: `timestamp`, `level`, `target`, `message`, then the record's key-values
/// (numbers and booleans as JSON numbers and booleans, everything else as strings).
pub fn json_line(timestamp: &dyn Display, record: &Record<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    out.extend_from_slice(b"{\"timestamp\":");
    push_str(&mut out, &timestamp.to_string());
    out.extend_from_slice(b",\"level\":");
    push_str(&mut out, record.level().as_str());
    out.extend_from_slice(b",\"target\":");
    push_str(&mut out, record.target());
    out.extend_from_slice(b",\"message\":");
    match record.args().as_str() {
        Some(s) => push_str(&mut out, s),
        None => push_str(&mut out, &record.args().to_string()),
    }
    let _ = record.key_values().visit(&mut JsonFields(&mut out));
    out.extend_from_slice(b"}\n");
    out
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

struct JsonFields<'a>(&'a mut Vec<u8>);

impl<'kvs> VisitSource<'kvs> for JsonFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), KvError> {
        let out = &mut *self.0;
        out.push(b',');
        push_str(out, key.as_str());
        out.push(b':');
        if let Some(n) = value.to_u64() {
            let _ = write!(out, "{n}");
        } else if let Some(n) = value.to_i64() {
            let _ = write!(out, "{n}");
        } else if let Some(b) = value.to_bool() {
            let _ = write!(out, "{b}");
        } else if let Some(f) = value.to_f64().filter(|f| f.is_finite()) {
            let _ = serde_json::to_writer(&mut *out, &f);
        } else if let Some(s) = value.to_borrowed_str() {
            push_str(out, s);
        } else {
            push_str(out, &value.to_string());
        }
        Ok(())
    }
}

/// The level of a request-completed line.
pub fn request_level(took: Duration, code: Option<ErrorCode>, slow: Duration) -> Level {
    match code {
        Some(ErrorCode::WalIoError | ErrorCode::InternalError) => Level::Warn,
        _ if took > slow => Level::Info,
        _ => Level::Debug,
    }
}

/// Writes the request-completed line for one request, if its level is enabled. The disabled
/// path is a level computation and the `log` crate's max-level check: nothing is formatted.
pub fn request_completed(
    op: Op,
    instance_id: Option<&str>,
    took: Duration,
    code: Option<ErrorCode>,
) {
    let slow = Duration::from_millis(SLOW_REQUEST_MS.load(Relaxed));
    let level = request_level(took, code, slow);
    if !log::log_enabled!(target: REQUEST_TARGET, level) {
        return;
    }
    let fields = RequestFields {
        op: op.as_str(),
        duration_ms: took.as_millis() as u64,
        instance_id,
        code: code.map(ErrorCode::as_str),
    };
    log::logger().log(
        &Record::builder()
            .args(format_args!("request completed"))
            .level(level)
            .target(REQUEST_TARGET)
            .module_path_static(Some(module_path!()))
            .key_values(&fields)
            .build(),
    );
}

/// The fields of a request line: `op`, `duration_ms`, `instance_id` (when the op has one),
/// `status`, and `code` on failures.
struct RequestFields<'a> {
    op: &'static str,
    duration_ms: u64,
    instance_id: Option<&'a str>,
    code: Option<&'static str>,
}

impl Source for RequestFields<'_> {
    fn visit<'kvs>(&'kvs self, v: &mut dyn VisitSource<'kvs>) -> Result<(), KvError> {
        v.visit_pair(Key::from_str("op"), Value::from(self.op))?;
        v.visit_pair(Key::from_str("duration_ms"), Value::from(self.duration_ms))?;
        if let Some(id) = self.instance_id {
            v.visit_pair(Key::from_str("instance_id"), Value::from(id))?;
        }
        let status = if self.code.is_some() { "error" } else { "ok" };
        v.visit_pair(Key::from_str("status"), Value::from(status))?;
        if let Some(code) = self.code {
            v.visit_pair(Key::from_str("code"), Value::from(code))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    fn line(record: &Record<'_>) -> Json {
        let bytes = json_line(&"2026-01-31T12:00:00.123Z", record);
        assert_eq!(bytes.last(), Some(&b'\n'), "one line");
        assert_eq!(
            bytes.iter().filter(|b| **b == b'\n').count(),
            1,
            "exactly one line"
        );
        serde_json::from_slice(&bytes).expect("valid JSON")
    }

    #[test]
    fn json_lines_carry_the_contract_fields() {
        let v = line(
            &Record::builder()
                .args(format_args!("shard {} \"up\"\nnext", 3))
                .level(Level::Info)
                .target("smdb::server")
                .build(),
        );
        assert_eq!(v["timestamp"], "2026-01-31T12:00:00.123Z");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "smdb::server");
        assert_eq!(v["message"], "shard 3 \"up\"\nnext");
    }

    #[test]
    fn request_fields_are_typed() {
        let fields = RequestFields {
            op: "APPLY_EVENT",
            duration_ms: 12,
            instance_id: Some("o\"1"),
            code: Some("GUARD_FAILED"),
        };
        let v = line(
            &Record::builder()
                .args(format_args!("request completed"))
                .level(Level::Debug)
                .target(REQUEST_TARGET)
                .key_values(&fields)
                .build(),
        );
        assert_eq!(v["level"], "DEBUG");
        assert_eq!(v["op"], "APPLY_EVENT");
        assert_eq!(v["duration_ms"], 12, "an integer, not a string");
        assert_eq!(v["instance_id"], "o\"1");
        assert_eq!(v["status"], "error");
        assert_eq!(v["code"], "GUARD_FAILED");
        let ping = RequestFields {
            op: "PING",
            duration_ms: 0,
            instance_id: None,
            code: None,
        };
        let v = line(
            &Record::builder()
                .args(format_args!("request completed"))
                .key_values(&ping)
                .build(),
        );
        assert!(v.get("instance_id").is_none());
        assert_eq!(v["status"], "ok");
    }

    #[test]
    fn rfc3339_matches_the_logger_format() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 24, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
    }

    #[test]
    fn request_level_follows_slowness_and_server_faults() {
        let slow = Duration::from_millis(100);
        let fast = Duration::from_millis(3);
        let late = Duration::from_millis(101);
        assert_eq!(request_level(fast, None, slow), Level::Debug);
        assert_eq!(
            request_level(fast, Some(ErrorCode::GuardFailed), slow),
            Level::Debug
        );
        assert_eq!(request_level(late, None, slow), Level::Info);
        assert_eq!(
            request_level(late, Some(ErrorCode::Conflict), slow),
            Level::Info
        );
        assert_eq!(
            request_level(fast, Some(ErrorCode::WalIoError), slow),
            Level::Warn
        );
        assert_eq!(
            request_level(late, Some(ErrorCode::InternalError), slow),
            Level::Warn
        );
        assert_eq!(
            request_level(Duration::from_millis(100), None, slow),
            Level::Debug
        );
    }
}
