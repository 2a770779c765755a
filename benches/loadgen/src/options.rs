//! Command-line options of `smdb-bench` (every option is documented in `--help`).

use std::path::PathBuf;

use clap::Parser;

use super::spawn::Fsync;
use super::workload::{Mix, OpKind, WorkloadKind};
use smdb_client::ClientTlsOptions;

/// Largest `--in-flight`: the server's default `network.max_inflight_per_connection`.
pub const IN_FLIGHT_MAX: usize = 1024;
/// Largest `--connections`: the server's default `network.max_connections`.
pub const CONNECTIONS_MAX: usize = 1024;
/// Largest `--payload-bytes`: keeps frames far below the server's 16 MiB frame limit.
pub const PAYLOAD_BYTES_MAX: usize = 1 << 20;

const AFTER_HELP: &str = "\
Modes:
  (default)        load an already running server at --addr
  --spawn          start smdb-server (sibling binary or --server-bin) in a temp dir, load it
  --scale N        start it with shards.count = 1, 2, .., N in turn; print the scaling curve
  --report FILES   read --json outputs and print a markdown table (median of repeated labels)
  --cluster        route by slot: read the map from --addr (CLUSTER_SLOTS) and send each request
                   to its slot's group primary (one socket per primary per connection)
  --fill           create --instances instances with context {\"n\":0}, --events-per-instance
                   events each, and print the server's resident bytes per instance (VmRSS
                   growth; --spawn or --server-pid); --fill-recover adds SIGKILL + recovery

Phases: set-up (PUT_MACHINE, pre-creating --instances; not measured), --warmup seconds of load
(not counted), --duration seconds counted, then a drain of outstanding responses (not counted).
Latency is per request, from queueing it for the socket to reading its response.

Examples:
  smdb-bench --workload apply -c 16 --in-flight 8 --duration 10
  smdb-bench --spawn --fsync always --workload get --pin-cpu 1 --server-cores 0 --json
  smdb-bench --scale 2 --workload apply --server-cores 1,0
  smdb-bench --spawn --workload batch --batch-size 10 -c 16 --in-flight 8
  smdb-bench --spawn --fill --fill-recover --instances 1000000 --events-per-instance 1
  smdb-bench --cluster --addr 127.0.0.1:7401 --workload apply -c 16 --in-flight 8
  smdb-bench --report out/*.json";

/// smdb-bench: closed-loop RCP1 load generator for smdb.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "smdb-bench",
    version,
    about = "smdb-bench: closed-loop RCP1 load generator for smdb",
    after_help = AFTER_HELP
)]
pub struct Options {
    /// Server address (ignored with --spawn/--scale); with --cluster, the seed.
    #[arg(long, default_value = "127.0.0.1:7401", value_name = "HOST:PORT")]
    pub addr: String,

    /// Route by slot, as smdb-client's cluster mode: read the slot map from --addr
    /// (CLUSTER_SLOTS) once, pre-create each instance on its slot's group primary, and send
    /// every request to its slot's primary (each connection holds one socket per primary;
    /// --in-flight counts over all of them). Against a server not in cluster mode, the same
    /// as without.
    #[arg(long, conflicts_with_all = ["spawn", "scale", "fill", "http", "report"])]
    pub cluster: bool,

    /// TCP connections.
    #[arg(short = 'c', long, default_value_t = 16, value_name = "N")]
    pub connections: usize,

    /// Requests kept in flight (pipelined) on each connection.
    #[arg(
        short = 'd',
        long,
        alias = "depth",
        default_value_t = 8,
        value_name = "N"
    )]
    pub in_flight: usize,

    /// What to send: ping (front only), get (GET_INSTANCE of random pre-created instances),
    /// create (CREATE_INSTANCE, new ids), apply (APPLY_EVENT on random pre-created instances),
    /// mixed (--mix).
    #[arg(short = 'w', long, value_enum, default_value_t = WorkloadKind::Ping)]
    pub workload: WorkloadKind,

    /// Op weights for --workload mixed; keys ping, get, create, apply.
    #[arg(
        long,
        default_value = "get=70,apply=25,create=5",
        value_name = "K=W,.."
    )]
    pub mix: Mix,

    /// Ops per atomic BATCH for --workload batch (instances are grouped by this many under
    /// one hash tag; --instances is rounded up to a multiple).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub batch_size: u64,

    /// Instances pre-created for get, apply and mixed (ids are random among them); created
    /// and measured by --fill.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub instances: u64,

    /// Fill mode: create --instances instances with context {"n":0}, apply
    /// --events-per-instance events to each and report the server's resident bytes per
    /// instance (VmRSS growth; needs --spawn or --server-pid). No load window.
    #[arg(long, conflicts_with_all = ["scale", "report"])]
    pub fill: bool,

    /// Events applied to each instance by --fill (payload {"n":k}: one history item each).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub events_per_instance: u64,

    /// Declare N indexes (0-2: ctx.customer, ctx.region) in the bench machine, and give every
    /// instance those fields (customer one of 100,000, region one of 8; with 0 too, for a
    /// baseline of the same context). Without it, contexts are as before.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub indexes: Option<u8>,

    /// With --fill --spawn: SIGKILL the server after the fill, restart it on the same data and
    /// report the recovery time and the bytes per instance after recovery.
    #[arg(long, requires = "fill")]
    pub fill_recover: bool,

    /// Length of the string in the APPLY_EVENT payload / CREATE_INSTANCE context
    /// ({"p":"xx.."}; 0 sends {}).
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    pub payload_bytes: usize,

    /// Seconds of counted load.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub duration: f64,

    /// Seconds of load before counting starts.
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub warmup: f64,

    /// Load threads; connections are shared among them round-robin (each thread polls its
    /// connections, so 1-2 threads drive dozens of connections).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,

    /// Send the load over the HTTP API (keep-alive, pipelined up to --in-flight) instead of
    /// RCP1; set-up still uses --addr. Workloads get, apply, create and mixed.
    #[arg(long)]
    pub http: bool,

    /// The HTTP API's address for --http (ignored with --spawn: the spawned server's).
    #[arg(long, default_value = "127.0.0.1:7480", value_name = "HOST:PORT")]
    pub http_addr: String,

    /// Bearer token: every connection sends AUTH after HELLO.
    #[arg(long, value_name = "TOKEN", env = "SMDB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Connect with TLS (tls.enabled servers; for --spawn pass a --server-config with [tls]).
    /// Implied by --ca, --cert and --key.
    #[arg(long, env = "SMDB_TLS", value_parser = clap::builder::BoolishValueParser::new())]
    pub tls: bool,

    /// PEM file of the CA that signed the server's certificate (default: the system CAs).
    #[arg(long, value_name = "FILE", env = "SMDB_CA")]
    pub ca: Option<PathBuf>,

    /// PEM client certificate chain, for servers with mutual TLS.
    #[arg(long, value_name = "FILE", env = "SMDB_CERT", requires = "key")]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert.
    #[arg(long, value_name = "FILE", env = "SMDB_KEY", requires = "cert")]
    pub key: Option<PathBuf>,

    /// Print one JSON object per run (JSON Lines) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Name of the run in --json output and --report tables (default: workload and shape).
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,

    /// Pin load threads to these CPUs (thread i gets the i-th, cycling), e.g. 1 or 0,1.
    #[arg(long, value_delimiter = ',', value_name = "CPU,..")]
    pub pin_cpu: Vec<usize>,

    /// Shard count for the per-shard figure (default: INFO's `shards`).
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,

    /// Pid of the server, to report its CPU use (automatic with --spawn/--scale).
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,

    /// Seed of the id and op choices (runs with one seed send the same sequence).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Start smdb-server for this run (see --server-*).
    #[arg(long, conflicts_with = "scale")]
    pub spawn: bool,

    /// Start smdb-server with 1..=N shards in turn and print ops/s and ops/s per shard for each.
    #[arg(long, value_name = "N")]
    pub scale: Option<u32>,

    /// shards.count of the --spawn server (default: the server's own, cores minus one).
    #[arg(long, value_name = "N")]
    pub server_shards: Option<u32>,

    /// smdb-server binary for --spawn/--scale (default: next to smdb-bench).
    #[arg(long, value_name = "PATH")]
    pub server_bin: Option<PathBuf>,

    /// shards.cores for spawned servers: shard i on the i-th CPU, cycling (default: the
    /// server's placement). Fronts and the control executor stay on core 0.
    #[arg(long, value_delimiter = ',', value_name = "CPU,..")]
    pub server_cores: Vec<usize>,

    /// storage.fsync of spawned servers.
    #[arg(long, value_enum, default_value_t = Fsync::Always)]
    pub fsync: Fsync,

    /// Base TOML config of spawned servers (bind address, data dir, shard keys, fsync are set
    /// by smdb-bench).
    #[arg(long, value_name = "FILE")]
    pub server_config: Option<PathBuf>,

    /// Where spawned servers get their temp data dir (use a real disk, not tmpfs).
    #[arg(long, default_value = "/tmp", value_name = "DIR")]
    pub data_parent: PathBuf,

    /// Read these --json outputs and print a markdown table; runs sharing a label are
    /// summarised by their median ops/s.
    #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with_all = ["spawn", "scale"])]
    pub report: Vec<PathBuf>,
}

impl Options {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        let range = |name: &str, v: usize, max: usize| {
            if (1..=max).contains(&v) {
                Ok(())
            } else {
                Err(format!("--{name} must be in 1..={max}, got {v}"))
            }
        };
        range("connections", self.connections, CONNECTIONS_MAX)?;
        range("in-flight", self.in_flight, IN_FLIGHT_MAX)?;
        range("threads", self.threads, self.connections)?;
        if self.payload_bytes > PAYLOAD_BYTES_MAX {
            return Err(format!("--payload-bytes must be <= {PAYLOAD_BYTES_MAX}"));
        }
        if !(self.duration.is_finite() && self.duration > 0.0) {
            return Err("--duration must be a positive number of seconds".into());
        }
        if !(self.warmup.is_finite() && self.warmup >= 0.0) {
            return Err("--warmup must be zero or more seconds".into());
        }
        let mix = Mix::for_workload(self.workload, self.mix);
        if mix.needs_instances() && self.instances == 0 {
            return Err("--instances must be >= 1 for get, apply and mixed".into());
        }
        if self.fill && !(self.spawn || self.server_pid.is_some()) {
            return Err("--fill reads the server's RSS: pass --spawn or --server-pid".into());
        }
        if self.fill_recover && !self.spawn {
            return Err("--fill-recover restarts the server: it needs --spawn".into());
        }
        if !(1..=1000).contains(&self.batch_size) {
            return Err("--batch-size must be 1 to 1000".into());
        }
        if self.http && (mix.weight(OpKind::Ping) > 0 || self.workload == WorkloadKind::Batch) {
            return Err(
                "--http sends get, apply and create (PING and BATCH have no path here)".into(),
            );
        }
        if self.http && self.tls_options().is_some() {
            return Err("--http speaks plain HTTP only".into());
        }
        if self.scale == Some(0) || self.server_shards == Some(0) || self.shards == Some(0) {
            return Err("shard counts must be >= 1".into());
        }
        Ok(())
    }

    /// The TLS options, when --tls or any of --ca, --cert, --key is given.
    pub fn tls_options(&self) -> Option<ClientTlsOptions> {
        let wanted = self.tls || self.ca.is_some() || self.cert.is_some() || self.key.is_some();
        wanted.then(|| ClientTlsOptions {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            server_name: None,
        })
    }

    /// The label of a run: --label, else e.g. `apply 16x8`.
    pub fn run_label(&self) -> String {
        self.label.clone().unwrap_or_else(|| {
            format!(
                "{} {}x{}",
                self.workload.as_str(),
                self.connections,
                self.in_flight
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("smdb-bench").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_validate() {
        let o = parse(&[]).unwrap();
        o.validate().unwrap();
        assert_eq!((o.connections, o.in_flight), (16, 8));
        assert_eq!(o.run_label(), "ping 16x8");
    }

    #[test]
    fn lists_and_bounds() {
        let o = parse(&["--pin-cpu", "1,0", "--server-cores", "1", "-w", "mixed"]).unwrap();
        assert_eq!(o.pin_cpu, vec![1, 0]);
        assert_eq!(o.server_cores, vec![1]);
        assert!(parse(&["--threads", "5", "-c", "4"])
            .unwrap()
            .validate()
            .is_err());
        assert!(parse(&["--in-flight", "0"]).unwrap().validate().is_err());
        assert!(parse(&["--duration", "0"]).unwrap().validate().is_err());
        assert!(parse(&["--mix", "nope=1"]).is_err());
        assert!(parse(&["--spawn", "--scale", "2"]).is_err());
    }
}
