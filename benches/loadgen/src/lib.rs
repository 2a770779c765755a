//! `smdb-bench`: a closed-loop load generator speaking RCP1 (issue 6).
//!
//! Owns the client side of benchmarking only; nothing in the server depends on it.
//! * `options`: the command line. `workload`: what is sent and how requests are built.
//! * `setup`: unmeasured preparation through `smdb_client` (HELLO, AUTH, INFO, PUT_MACHINE,
//!   pre-created instances).
//! * `driver`: the load threads (non-blocking sockets, poll(2), many connections per thread).
//! * `stats`: HDR histograms and counters. `cpu`: where the CPU went, from /proc.
//! * `spawn`: starting servers for `--spawn` and `--scale`. `report`: text, JSON, markdown.
//! * `http`: `--http`, the same load over the HTTP API.
//! * `cluster`: `--cluster`, requests routed by slot to each group primary.

pub mod cluster;
pub mod cpu;
pub mod driver;
pub mod fill;
pub mod http;
pub mod options;
pub mod report;
pub mod rng;
pub mod setup;
pub mod spawn;
pub mod stats;
pub mod workload;

use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use options::Options;

use driver::{Schedule, ThreadSpec};
use report::{Host, RunReport, SpawnInfo};
use spawn::{ServerSpec, SpawnedServer};
use stats::RunCounts;
use workload::{Mix, Plan};

/// How long after the window outstanding responses may take before they are abandoned.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The server a run loads.
struct Target {
    addr: String,
    /// A spawned server's HTTP listener (`--http`).
    http_addr: Option<String>,
    pid: Option<u32>,
    /// Shard count known without asking (announced by a spawned server).
    shards: Option<u32>,
    spawn: Option<SpawnInfo>,
}

/// Runs whatever `opts` asks for and prints the results on stdout.
pub fn run(opts: &Options) -> Result<(), String> {
    opts.validate()?;
    if !opts.report.is_empty() {
        let runs = report::read_reports(&opts.report)?;
        print!("{}", report::summary_table(&runs));
        return Ok(());
    }
    if let Some(n) = opts.scale {
        return run_scale(opts, n);
    }
    if opts.fill {
        return run_fill(opts);
    }
    let run = if opts.spawn {
        let server = server_spec(opts)?.start(opts.server_shards)?;
        run_load(opts, &spawned_target(opts, &server))?
    } else {
        let target = Target {
            addr: opts.addr.clone(),
            http_addr: None,
            pid: opts.server_pid,
            shards: None,
            spawn: None,
        };
        run_load(opts, &target)?
    };
    emit(opts, &run);
    Ok(())
}

fn emit(opts: &Options, run: &RunReport) {
    if opts.json {
        println!("{}", run.to_json_line());
    } else {
        print!("{}", run.to_text());
    }
}

/// `--fill`: see `fill`.
fn run_fill(opts: &Options) -> Result<(), String> {
    let report = if opts.spawn {
        let mut server = server_spec(opts)?.start(opts.server_shards)?;
        let (addr, pid) = (server.addr.clone(), server.pid);
        let recover = opts.fill_recover.then_some(&mut server);
        fill::run(opts, &addr, pid, recover)?
    } else {
        let pid = opts
            .server_pid
            .ok_or("--fill needs --spawn or --server-pid")?;
        fill::run(opts, &opts.addr, pid, None)?
    };
    if opts.json {
        println!("{}", report.to_json_line());
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

fn server_spec(opts: &Options) -> Result<ServerSpec, String> {
    let bin = match &opts.server_bin {
        Some(p) => p.clone(),
        None => spawn::default_server_bin()?,
    };
    Ok(ServerSpec {
        bin,
        base_config: opts.server_config.clone(),
        cores: opts.server_cores.clone(),
        fsync: opts.fsync,
        data_parent: opts.data_parent.clone(),
        http: opts.http,
    })
}

fn spawned_target(opts: &Options, server: &SpawnedServer) -> Target {
    Target {
        addr: server.addr.clone(),
        http_addr: server.http_addr.clone(),
        pid: Some(server.pid),
        shards: (server.shards > 0).then_some(server.shards),
        spawn: Some(SpawnInfo {
            fsync: opts.fsync.as_str().to_string(),
            shard_cores: server.cores.clone(),
        }),
    }
}

/// `--scale N`: the same load against fresh servers with 1..=N shards.
fn run_scale(opts: &Options, n: u32) -> Result<(), String> {
    let spec = server_spec(opts)?;
    let mut runs = Vec::new();
    for k in 1..=n {
        let server = spec.start(Some(k))?;
        let mut scaled = opts.clone();
        scaled.label = Some(format!("{} shards={k}", opts.run_label()));
        let run = run_load(&scaled, &spawned_target(opts, &server))?;
        drop(server);
        emit(&scaled, &run);
        runs.push(run);
    }
    if !opts.json {
        println!("\nscaling curve ({}):", opts.run_label());
        print!("{}", report::scale_table(&runs));
    }
    Ok(())
}

/// A short id part unique to this run, so repeated runs against one server never collide.
fn run_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = rng::Rng::new(nanos ^ (u64::from(std::process::id()) << 32));
    format!("{:08x}", rng.next_u64() as u32)
}

/// Set-up, warm-up, window, drain: one measured run.
fn run_load(opts: &Options, target: &Target) -> Result<RunReport, String> {
    let mix = Mix::for_workload(opts.workload, opts.mix);
    let setup_started = Instant::now();
    let tls = opts.tls_options();
    let mut c = setup::connect(
        &target.addr,
        opts.token.as_deref(),
        tls.as_ref(),
        "smdb-bench-setup",
    )?;
    let routes = match opts.cluster {
        true => cluster::Routes::load(&mut c)?.map(Arc::new),
        false => None,
    };
    let shards = match (opts.shards.or(target.shards), &routes) {
        (Some(n), _) => n,
        (None, Some(r)) => cluster::shard_count(r, opts.token.as_deref(), tls.as_ref())?,
        (None, None) => setup::shard_count(&mut c).map_err(|e| format!("{e} (pass --shards)"))?,
    };
    let batch_size = match opts.workload {
        workload::WorkloadKind::Batch => opts.batch_size,
        _ => 0,
    };
    let instances = match (mix.needs_instances(), batch_size) {
        (false, _) => 0,
        (true, 0) => opts.instances,
        (true, n) => opts.instances.div_ceil(n) * n,
    };
    let plan =
        Plan::new(mix, instances, opts.payload_bytes, &run_tag()).with_batch_size(batch_size);
    let plan = plan.with_indexes(opts.indexes);
    if mix.needs_machine() {
        setup::put_machine(&mut c, opts.indexes)?;
    }
    if mix.needs_instances() {
        match &routes {
            Some(r) => cluster::precreate(r, opts.token.as_deref(), tls.as_ref(), &plan)?,
            None => setup::precreate(&mut c, &plan)?,
        }
    }
    drop(c);
    let setup_s = setup_started.elapsed().as_secs_f64();

    let http = match (opts.http, &target.http_addr) {
        (false, _) => None,
        (true, Some(spawned)) => Some(spawned.as_str()),
        (true, None) => Some(opts.http_addr.as_str()),
    };
    let groups = routes.as_ref().map_or(0, |r| r.addrs.len());
    let (handles, gos) = start_threads(opts, &target.addr, http, Arc::new(plan), routes)?;
    let start = Instant::now();
    let window_start = start + Duration::from_secs_f64(opts.warmup);
    let window_end = window_start + Duration::from_secs_f64(opts.duration);
    let schedule = Schedule {
        window_start,
        window_end,
        drain_until: window_end + DRAIN_TIMEOUT,
    };
    for g in &gos {
        let _ = g.send(schedule);
    }
    sleep_until(window_start);
    let before = cpu::Snapshot::take(target.pid);
    sleep_until(window_end);
    let after = cpu::Snapshot::take(target.pid);
    let mut counts = RunCounts::default();
    for h in handles {
        let c = h.join().map_err(|_| "a load thread panicked".to_string())?;
        counts.merge(&c);
    }

    let mut run = RunReport {
        label: opts.run_label(),
        workload: opts.workload.as_str().into(),
        mix: mix.to_string(),
        addr: target.addr.clone(),
        connections: opts.connections,
        in_flight: opts.in_flight,
        threads: opts.threads,
        payload_bytes: opts.payload_bytes,
        instances,
        warmup_s: opts.warmup,
        setup_s,
        shards,
        server: target.spawn.clone(),
        pin_cpu: opts.pin_cpu.clone(),
        host: Host::current(),
        cpu: before.usage_until(&after),
        ..RunReport::default()
    };
    run.cluster_groups = groups;
    run.fill_counts(&counts, opts.duration);
    run.set_batch_size(batch_size);
    Ok(run)
}

type Threads = (Vec<JoinHandle<RunCounts>>, Vec<mpsc::Sender<Schedule>>);

/// Starts the load threads and waits until every connection is open. On a failure the
/// threads already started are released (their schedule channel closes) and joined.
fn start_threads(
    opts: &Options,
    addr: &str,
    http: Option<&str>,
    plan: Arc<Plan>,
    routes: Option<Arc<cluster::Routes>>,
) -> Result<Threads, String> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::new();
    let mut gos = Vec::new();
    let mut failure = None;
    for t in 0..opts.threads {
        let spec = ThreadSpec {
            addr: addr.to_string(),
            token: opts.token.clone(),
            tls: opts.tls_options(),
            conns: (t..opts.connections)
                .step_by(opts.threads)
                .map(|n| n as u64)
                .collect(),
            in_flight: opts.in_flight,
            plan: plan.clone(),
            seed: opts.seed,
            pin: (!opts.pin_cpu.is_empty()).then(|| opts.pin_cpu[t % opts.pin_cpu.len()]),
            http: http.map(str::to_string),
            routes: routes.clone(),
        };
        let (go_tx, go_rx) = mpsc::channel();
        let ready = ready_tx.clone();
        match std::thread::Builder::new()
            .name(format!("smdb-bench-load{t}"))
            .spawn(move || driver::run_thread(spec, ready, go_rx))
        {
            Ok(h) => {
                handles.push(h);
                gos.push(go_tx);
            }
            Err(e) => {
                failure = Some(format!("start a load thread: {e}"));
                break;
            }
        }
    }
    drop(ready_tx);
    for _ in 0..handles.len() {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failure.get_or_insert(e);
            }
            Err(_) => {
                failure.get_or_insert_with(|| "a load thread died during connect".into());
            }
        }
    }
    if let Some(e) = failure {
        drop(gos);
        for h in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    Ok((handles, gos))
}

fn sleep_until(t: Instant) {
    let left = t.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}
