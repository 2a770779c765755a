//! `--fill`: resident memory per instance (issue 14).
//!
//! Creates `--instances` instances with context `{"n":0}`, applies `--events-per-instance`
//! events to each (payload `{"n":k}`, so each event adds one history item and the context
//! keeps its size), and reports the server's resident bytes per instance: VmRSS from
//! /proc/<pid>/status before the first create and after the last response. With
//! `--fill-recover` (spawned servers only) the server is then SIGKILLed and restarted on the
//! same data dir; the report adds the recovery time (start to the `listening` line, which
//! follows recovery) and the bytes per instance after recovery.
//!
//! Requests go over `--connections` connections (one thread each, ids split among them), each
//! keeping `--in-flight` requests in flight; nothing here is timed except the phases.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use smdb_client::{into_result, Client};

use super::spawn::SpawnedServer;
use super::workload::{MACHINE, MACHINE_VERSION};
use super::{setup, Options};

/// How long the server is left alone before RSS is read (background work settles).
const SETTLE: Duration = Duration::from_millis(500);

/// What one fill measured.
#[derive(Debug, Clone, Default)]
pub struct FillReport {
    pub instances: u64,
    pub events_per_instance: u64,
    pub rss_before: u64,
    pub rss_after: u64,
    pub fill_s: f64,
    /// Set by `--fill-recover`.
    pub recovery_s: Option<f64>,
    pub rss_recovered: Option<u64>,
}

impl FillReport {
    fn per_instance(&self, rss: u64) -> f64 {
        rss.saturating_sub(self.rss_before) as f64 / self.instances.max(1) as f64
    }

    pub fn to_text(&self) -> String {
        let mut out = format!(
            "fill: {} instances x {} events in {:.1} s\n\
             rss: {} -> {} bytes: {:.0} bytes per instance\n",
            self.instances,
            self.events_per_instance,
            self.fill_s,
            self.rss_before,
            self.rss_after,
            self.per_instance(self.rss_after),
        );
        if let (Some(secs), Some(rss)) = (self.recovery_s, self.rss_recovered) {
            out += &format!(
                "recovery after SIGKILL: {secs:.2} s; rss {rss} bytes: {:.0} bytes per instance\n",
                self.per_instance(rss)
            );
        }
        out
    }

    pub fn to_json_line(&self) -> String {
        json!({
            "mode": "fill",
            "instances": self.instances,
            "events_per_instance": self.events_per_instance,
            "fill_s": self.fill_s,
            "rss_before": self.rss_before,
            "rss_after": self.rss_after,
            "bytes_per_instance": self.per_instance(self.rss_after),
            "recovery_s": self.recovery_s,
            "rss_recovered": self.rss_recovered,
            "bytes_per_instance_recovered": self.rss_recovered.map(|r| self.per_instance(r)),
        })
        .to_string()
    }
}

/// Runs `--fill` against `addr` (server `pid`); `server` is the spawned one for
/// `--fill-recover`.
pub fn run(
    opts: &Options,
    addr: &str,
    pid: u32,
    server: Option<&mut SpawnedServer>,
) -> Result<FillReport, String> {
    let tls = opts.tls_options();
    let tag = super::run_tag();
    let mut c = setup::connect(addr, opts.token.as_deref(), tls.as_ref(), "smdb-bench-fill")?;
    setup::put_machine(&mut c, opts.indexes)?;
    drop(c);
    std::thread::sleep(SETTLE);
    let mut report = FillReport {
        instances: opts.instances,
        events_per_instance: opts.events_per_instance,
        rss_before: vm_rss(pid)?,
        ..FillReport::default()
    };
    let started = Instant::now();
    let threads = opts.connections.min(opts.instances.max(1) as usize);
    let mut handles = Vec::new();
    for t in 0..threads {
        let (addr, token, tls) = (addr.to_string(), opts.token.clone(), tls.clone());
        let ids: Vec<(u64, String)> = (t as u64..opts.instances)
            .step_by(threads)
            .map(|k| (k, format!("f{tag}-{k}")))
            .collect();
        let (window, events, indexes) = (opts.in_flight, opts.events_per_instance, opts.indexes);
        handles.push(std::thread::spawn(move || -> Result<(), String> {
            let mut c = setup::connect(&addr, token.as_deref(), tls.as_ref(), "smdb-bench-fill")?;
            let creates = ids.iter().map(|(k, id)| create(id, *k, indexes));
            pipelined(&mut c, window, creates)?;
            for k in 1..=events {
                pipelined(&mut c, window, ids.iter().map(|(_, id)| event(id, k)))?;
            }
            Ok(())
        }));
    }
    for h in handles {
        h.join()
            .map_err(|_| "a fill thread panicked".to_string())??;
    }
    report.fill_s = started.elapsed().as_secs_f64();
    std::thread::sleep(SETTLE);
    report.rss_after = vm_rss(pid)?;
    if let Some(server) = server {
        let secs = server.kill_and_restart()?;
        std::thread::sleep(SETTLE);
        report.recovery_s = Some(secs);
        report.rss_recovered = Some(vm_rss(server.pid)?);
        check_recovered(opts, &server.addr, &format!("f{tag}-0"))?;
    }
    Ok(report)
}

fn create(id: &str, k: u64, indexes: Option<u8>) -> (&'static str, Value) {
    let mut context = json!({"n": 0});
    super::workload::with_indexed_fields(&mut context, indexes, k);
    let params = json!({"machine": MACHINE, "version": MACHINE_VERSION, "id": id,
                        "context": context});
    ("CREATE_INSTANCE", params)
}

fn event(id: &str, k: u64) -> (&'static str, Value) {
    let params = json!({"instance_id": id, "event": super::workload::EVENT, "payload": {"n": k}});
    ("APPLY_EVENT", params)
}

/// Sends every request of `reqs`, keeping `window` in flight; fails on the first error.
fn pipelined(
    c: &mut Client,
    window: usize,
    reqs: impl Iterator<Item = (&'static str, Value)>,
) -> Result<(), String> {
    let mut reqs = reqs.peekable();
    let mut pending: VecDeque<Value> = VecDeque::new();
    while reqs.peek().is_some() || !pending.is_empty() {
        while pending.len() < window.max(1) {
            let Some((op, params)) = reqs.next() else {
                break;
            };
            c.send(op, &params).map_err(|e| e.to_string())?;
            pending.push_back(params);
        }
        let resp = c.recv_response().map_err(|e| e.to_string())?;
        let sent = pending.pop_front().unwrap_or_default();
        into_result(resp).map_err(|e| format!("fill request {sent}: {e}"))?;
    }
    Ok(())
}

/// After recovery the first instance is back with every event.
fn check_recovered(opts: &Options, addr: &str, id: &str) -> Result<(), String> {
    let tls = opts.tls_options();
    let mut c = setup::connect(addr, opts.token.as_deref(), tls.as_ref(), "smdb-bench-fill")?;
    let got = c
        .call("GET_INSTANCE", json!({"id": id}))
        .map_err(|e| format!("GET_INSTANCE {id} after recovery: {e}"))?;
    let count = got.get("event_count").and_then(Value::as_u64);
    if count != Some(opts.events_per_instance) {
        return Err(format!("after recovery {id} has event_count {count:?}"));
    }
    Ok(())
}

/// Resident bytes of process `pid` (its VmRSS), read as the server's own metric reads it.
pub fn vm_rss(pid: u32) -> Result<u64, String> {
    resident_bytes_of(pid).ok_or_else(|| {
        format!("cannot read the resident size of process {pid} (/proc/{pid}/statm)")
    })
}

/// Resident bytes of process `pid` (`/proc/<pid>/statm`, second field, in pages).
fn resident_bytes_of(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it returns -1 on error, rejected below.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().map(|p| p * pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_rss_is_read_and_per_instance_divides_the_growth() {
        let rss = vm_rss(std::process::id()).unwrap();
        assert!(rss > 0);
        let r = FillReport {
            instances: 4,
            rss_before: 1000,
            rss_after: 3000,
            ..FillReport::default()
        };
        assert_eq!(r.per_instance(r.rss_after), 500.0);
        assert!(
            r.to_text().contains("500 bytes per instance"),
            "{}",
            r.to_text()
        );
    }
}
