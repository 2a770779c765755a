//! The command line, as clap definitions: global options and one subcommand per operation.
//! The same `Command` enum parses the subcommand forms typed at the REPL, and generates the
//! shell completions and the man page, so help, completions and docs never drift apart.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub const DEFAULT_ADDR: &str = "127.0.0.1:7401";

/// Help heading of the options every command takes.
const GLOBAL: &str = "Global options";

const AFTER_HELP: &str = "\
Run without a command to start the interactive shell (REPL): `OP [JSON]` sends one request,
e.g. `GET_INSTANCE {\"id\":\"order-1\"}`; the subcommand forms above work there too; `help`
lists everything. When standard input is not a terminal, commands are read from it one per line.

Exit status: 0 success, 1 the server answered with an error, 2 usage error (bad arguments or
JSON), 3 connection error (cannot connect, connection lost, timeout, bad frame).
Errors are printed to stderr as `error: CODE: message`.";

/// smdb-cli: command-line client and interactive shell for the smdb state-machine database.
#[derive(Parser, Debug)]
#[command(name = "smdb-cli", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options that apply to every command.
#[derive(Args, Debug, Clone)]
pub struct GlobalOpts {
    /// Server address (host:port), or several separated by commas (the members of a failover
    /// cluster: writes follow the primary).
    #[arg(long, short = 'a', env = "SMDB_ADDR", default_value = DEFAULT_ADDR, global = true, help_heading = GLOBAL)]
    pub addr: String,

    /// Print each result as raw JSON on one line instead of human-readable tables.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,

    /// Seconds to wait for a response before giving up (exit 3).
    #[arg(long, value_name = "SECS", default_value_t = 30.0, global = true, help_heading = GLOBAL)]
    pub timeout: f64,

    /// Seconds to wait for the TCP connection to be established.
    #[arg(long, value_name = "SECS", default_value_t = 5.0, global = true, help_heading = GLOBAL)]
    pub connect_timeout: f64,

    /// Bearer token: sent with AUTH right after HELLO (servers with auth.required).
    #[arg(long, env = "SMDB_TOKEN", hide_env_values = true, global = true, help_heading = GLOBAL)]
    pub token: Option<String>,

    /// Connect with TLS (servers with tls.enabled). Implied by --ca, --cert and --key.
    #[arg(long, env = "SMDB_TLS", value_parser = clap::builder::BoolishValueParser::new(), global = true, help_heading = GLOBAL)]
    pub tls: bool,

    /// PEM file of the CA that signed the server's certificate (default: the system CAs).
    #[arg(long, value_name = "FILE", env = "SMDB_CA", global = true, help_heading = GLOBAL)]
    pub ca: Option<PathBuf>,

    /// PEM client certificate chain, for servers with mutual TLS (tls.client_ca_path).
    #[arg(long, value_name = "FILE", env = "SMDB_CERT", requires = "key", global = true, help_heading = GLOBAL)]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert.
    #[arg(long, value_name = "FILE", env = "SMDB_KEY", requires = "cert", global = true, help_heading = GLOBAL)]
    pub key: Option<PathBuf>,

    /// Name the server's certificate must carry (default: the host part of --addr).
    #[arg(long, value_name = "NAME", global = true, help_heading = GLOBAL)]
    pub tls_server_name: Option<String>,
}

impl GlobalOpts {
    /// The TLS options, when --tls or any of --ca, --cert, --key is given.
    pub fn tls_options(&self) -> Option<smdb_client::ClientTlsOptions> {
        let wanted = self.tls || self.ca.is_some() || self.cert.is_some() || self.key.is_some();
        wanted.then(|| smdb_client::ClientTlsOptions {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            server_name: self.tls_server_name.clone(),
        })
    }
}

/// One operation of the server, or a local helper.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Check that the server answers (PING).
    Ping,

    /// Show server version, uptime, role, shard count, limits and WAL totals (INFO).
    Info,

    /// Define a machine version (PUT_MACHINE).
    ///
    /// FILE holds `{"machine": M, "version": V, "definition": {...}}`, the format of
    /// `storage.definitions_dir` files. With --machine and --version, FILE may hold just the
    /// definition `{"states": [...], "initial": S, "transitions": [...]}`; the flags override
    /// the file's machine and version. `-` reads standard input.
    PutMachine {
        /// JSON file, or `-` for standard input.
        file: String,
        /// Machine name (required when FILE holds only the definition).
        #[arg(long, short = 'm')]
        machine: Option<String>,
        /// Machine version (required when FILE holds only the definition).
        #[arg(long = "version", short = 'v', value_name = "VERSION")]
        machine_version: Option<u64>,
    },

    /// Show a machine definition (GET_MACHINE); the latest version unless --version is given.
    GetMachine {
        machine: String,
        #[arg(long = "version", short = 'v', value_name = "VERSION")]
        machine_version: Option<u64>,
    },

    /// List machines and their versions (LIST_MACHINES).
    ListMachines,

    /// Draw a machine version (GET_MACHINE, drawn here): SVG laid out with no script and no
    /// network, or DOT (Graphviz) or Mermaid text. The same bytes as the HTTP API's
    /// `GET /machines/{m}/versions/{v}/diagram?format=...`.
    ///
    /// Example: smdb-cli diagram order --format dot | dot -Tpng > order.png
    Diagram {
        machine: String,
        /// Machine version; the latest when omitted.
        #[arg(long = "version", short = 'v', value_name = "VERSION")]
        machine_version: Option<u64>,
        /// Output format.
        #[arg(long, short = 'f', default_value = "svg", value_parser = ["svg", "dot", "mermaid"])]
        format: String,
    },

    /// Create an instance of a machine (CREATE_INSTANCE).
    Create {
        /// Machine name.
        machine: String,
        /// Instance id (1 to 256 bytes).
        id: String,
        /// Machine version; defaults to the latest (looked up with GET_MACHINE first).
        #[arg(long = "version", short = 'v', value_name = "VERSION")]
        machine_version: Option<u64>,
        /// Initial context: a JSON object, `@FILE` or `-` for standard input.
        #[arg(long, short = 'c', value_name = "JSON")]
        context: Option<String>,
        /// Makes a retried create return the first result instead of INSTANCE_EXISTS.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },

    /// Show one instance: state, context, counters (GET_INSTANCE).
    Get {
        /// Instance id.
        id: String,
    },

    /// List instances in id order, optionally filtered (LIST_INSTANCES).
    List {
        /// Only instances of this machine.
        #[arg(long, short = 'm')]
        machine: Option<String>,
        /// Only instances in this state.
        #[arg(long, short = 's')]
        state: Option<String>,
        /// Page size (server default when omitted).
        #[arg(long, short = 'l')]
        limit: Option<u64>,
        /// Resume after the `next_cursor` of a previous page.
        #[arg(long)]
        cursor: Option<String>,
        /// Follow `next_cursor` until the last page.
        #[arg(long, conflicts_with = "cursor")]
        all: bool,
    },

    /// Find instances of a machine by its declared indexes, in id order (FIND_INSTANCES).
    ///
    /// Each --where is PATH OP VALUE with OP one of = > >= < <= (quote it for the shell):
    /// `--where ctx.customer=c-9 --where 'ctx.total>=10'`. VALUE is JSON when it parses as a
    /// number, true, false, null or a quoted string, else a plain string; `PATH=in:a,b` is
    /// one of several values. Every PATH must be an index the machine declares.
    Find(QueryArgs),

    /// Look for instances of a machine by any context path, a bounded walk per page
    /// (SCAN_INSTANCES); the same arguments as find, --where optional.
    Scan(QueryArgs),

    /// Move a machine's instances from one version to another (MIGRATE_INSTANCES, scope
    /// admin), call after call to the end: progress on stderr, the totals as JSON on stdout.
    /// Ctrl-C stops between calls and prints the --cursor that resumes.
    Migrate(crate::lifecycle::MigrateArgs),

    /// Delete a machine's instances that match (DELETE_INSTANCES, scope admin), call after
    /// call to the end, as migrate does.
    DeleteInstances(crate::lifecycle::DeleteArgs),

    /// Delete an instance (DELETE_INSTANCE).
    Delete {
        /// Instance id.
        id: String,
    },

    /// Apply an event to an instance (APPLY_EVENT).
    ///
    /// The payload object is merged into the instance's context. A failed guard gives
    /// GUARD_FAILED, an event with no transition from the current state INVALID_TRANSITION, a
    /// wrong expectation CONFLICT.
    Apply {
        /// Instance id.
        id: String,
        /// Event name.
        event: String,
        /// Event payload: a JSON object, `@FILE` or `-` for standard input.
        #[arg(long, short = 'p', value_name = "JSON")]
        payload: Option<String>,
        /// Refuse (CONFLICT) unless the instance is in this state.
        #[arg(long, value_name = "STATE")]
        expected_state: Option<String>,
        /// Refuse (CONFLICT) unless the instance's wal_offset is this.
        #[arg(long, value_name = "OFFSET")]
        expected_offset: Option<u64>,
        /// Makes a retried event return the first result (applied: false).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },

    /// Show an instance's applied events in order (GET_HISTORY).
    History {
        /// Instance id.
        id: String,
        /// First event number (1-based).
        #[arg(long)]
        from: Option<u64>,
        /// Most events to show.
        #[arg(long, short = 'l')]
        limit: Option<u64>,
    },

    /// Stream events until Ctrl-C (WATCH_INSTANCE with ID, otherwise WATCH_ALL).
    ///
    /// Prints one line per event (one JSON object per line with --json). If the server ends
    /// the subscription because this client fell behind, prints the cursor to resume from
    /// (--from-cursor) and exits 1.
    Watch(WatchArgs),

    /// Replication: `replication status` shows role, peers, positions and lag
    /// (REPLICATION_STATUS).
    Replication {
        #[command(subcommand)]
        command: ReplicationCommand,
    },

    /// Turn a replica into a primary: it stops following and accepts writes (PROMOTE).
    Promote,

    /// Automatic failover (ha.enabled): `ha status` shows role, epoch, primary, members, lag
    /// and why no member is elected; `ha history` the terms; `ha pause` / `ha resume` stop and
    /// restart automatic failover cluster-wide (HA_PAUSE / HA_RESUME).
    Ha {
        #[command(subcommand)]
        command: HaCommand,
    },

    /// Planned handover of the primary role with no acknowledged write lost (SWITCHOVER):
    /// the primary stops taking writes, waits until the target has its log, and resigns so
    /// only the target takes over. Give every member with --addr a,b,c.
    Switchover {
        /// The member (node id) to hand over to; default: the most advanced eligible one.
        #[arg(long, value_name = "NODE")]
        to: Option<String>,
    },

    /// Cluster mode (docs/cluster.md): `create`, `add-group`, `move-slots`, `cancel`,
    /// `rebalance`, `status` and `check`. Give seeds with --addr a,b,c.
    Cluster {
        #[command(subcommand)]
        command: crate::cluster::ClusterCommand,
    },

    /// Durable timers: `timers resume` lets a data dir restored with `--pause-timers` fire
    /// its timers (TIMERS_RESUME).
    Timers {
        #[command(subcommand)]
        command: TimersCommand,
    },

    /// Run several ops as one BATCH: atomic (all or nothing, one shard) unless --best-effort.
    ///
    /// OPS is a JSON array of {"op": NAME, "params": {...}} (CREATE_INSTANCE, APPLY_EVENT,
    /// DELETE_INSTANCE, GET_INSTANCE; at most 1000), `@FILE` or `-` for standard input.
    /// Example: smdb-cli batch '[{"op":"GET_INSTANCE","params":{"id":"{o7}:a"}}]'
    Batch {
        /// The ops: a JSON array, `@FILE` or `-` for standard input.
        ops: String,
        /// Run each op on its own, across shards (mode best_effort).
        #[arg(long)]
        best_effort: bool,
    },

    /// Send any operation with JSON params and print the raw result.
    ///
    /// Example: smdb-cli raw GET_INSTANCE '{"id":"order-1"}'
    Raw {
        /// Operation name, e.g. GET_INSTANCE.
        op: String,
        /// Params: a JSON object, `@FILE` or `-` for standard input; omitted when absent.
        params: Option<String>,
    },

    /// Take an online backup into a new directory (`--out DIR`: BACKUP, scope `replicate`;
    /// DIR must not exist or be empty and becomes a data directory a server can start on), or
    /// check one offline (`--verify DIR`, no server): every file against backup.json (present,
    /// same size, same CRC32C), no file left unlisted, and each log segment and snapshot
    /// against its own checksums. Exits 1 naming the first file that fails.
    #[command(group(clap::ArgGroup::new("what").required(true).args(["out", "verify"])))]
    Backup {
        /// Where to write the backup (must not exist or be empty).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The backup directory to check.
        #[arg(long, value_name = "DIR")]
        verify: Option<PathBuf>,
    },

    /// Print the SHA-256 digest of a bearer token read from standard input (local; no server).
    ///
    /// The digest goes into the server's `auth.token_hashes` or `[[auth.tokens]] sha256`; the
    /// token itself never goes into a config file. One trailing newline is ignored, so
    /// `smdb-cli hash-token < token-file` and `echo "$TOKEN" | smdb-cli hash-token` agree.
    HashToken,

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },

    /// Print the man page (roff) to stdout, or write one page per command into --dir.
    Man {
        /// Directory to write smdb-cli.1 and smdb-cli-COMMAND.1 into.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Arguments of `watch`.
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// Watch one instance (WATCH_INSTANCE); omit to watch all instances (WATCH_ALL).
    pub id: Option<String>,
    /// Only events of this machine (repeatable; WATCH_ALL).
    #[arg(
        long = "machine",
        short = 'm',
        value_name = "MACHINE",
        conflicts_with = "id"
    )]
    pub machines: Vec<String>,
    /// Only events leaving this state (repeatable; WATCH_ALL).
    #[arg(long = "from-state", value_name = "STATE", conflicts_with = "id")]
    pub from_states: Vec<String>,
    /// Only events entering this state (repeatable; WATCH_ALL).
    #[arg(long = "to-state", value_name = "STATE", conflicts_with = "id")]
    pub to_states: Vec<String>,
    /// Only these events (repeatable; WATCH_ALL).
    #[arg(
        long = "event",
        short = 'e',
        value_name = "EVENT",
        conflicts_with = "id"
    )]
    pub events: Vec<String>,
    /// Include the instance's context in each event.
    #[arg(long)]
    pub include_context: bool,
    /// Replay from this offset of the instance's shard log first (with ID).
    #[arg(long, value_name = "OFFSET", requires = "id")]
    pub from_offset: Option<u64>,
    /// Replay from a cursor of an earlier event or lag notice; `0` replays all retained.
    #[arg(long, value_name = "CURSOR", conflicts_with = "id")]
    pub from_cursor: Option<String>,
    /// Stop after this many events.
    #[arg(long, short = 'n', value_name = "N")]
    pub count: Option<u64>,
}

/// A line typed at the REPL in subcommand form (`get order-1`, `apply order-1 pay ...`).
#[derive(Parser, Debug)]
#[command(
    name = "",
    no_binary_name = true,
    disable_help_subcommand = true,
    disable_version_flag = true
)]
pub struct ReplLine {
    #[command(subcommand)]
    pub command: Command,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
        ReplLine::command().debug_assert();
    }

    #[test]
    fn subcommand_forms_parse() {
        let cli = Cli::try_parse_from(["smdb-cli", "apply", "o1", "pay", "-p", "{}"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Apply { .. })));
        let line = ReplLine::try_parse_from(["create", "order", "o1", "--version", "2"]).unwrap();
        assert!(matches!(
            line.command,
            Command::Create {
                machine_version: Some(2),
                ..
            }
        ));
    }
}

/// `smdb-cli ha ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HaCommand {
    /// Role, epoch, primary, lease, members with lag, and why no member is elected
    /// (REPLICATION_STATUS.ha; --json prints that object).
    Status,
    /// The terms: epoch, who led, when, from which offsets (REPLICATION_STATUS.ha.history).
    History,
    /// Stop automatic failover cluster-wide for maintenance (HA_PAUSE).
    Pause,
    /// Restart automatic failover (HA_RESUME).
    Resume,
}

/// `smdb-cli timers ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TimersCommand {
    /// Let paused timers fire (TIMERS_RESUME): deletes the data dir's `timers.paused` marker
    /// (`smdb-server restore --pause-timers`), then overdue timers fire. Idempotent.
    Resume,
}

/// `smdb-cli replication ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ReplicationCommand {
    /// Role, peers, positions and lag (REPLICATION_STATUS).
    Status,
}

/// `find` and `scan` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct QueryArgs {
    /// Machine name.
    pub machine: String,
    /// A condition, PATH OP VALUE (repeatable; see the command's help).
    #[arg(long = "where", short = 'w', value_name = "COND")]
    pub conditions: Vec<String>,
    /// Only instances in this state.
    #[arg(long, short = 's')]
    pub state: Option<String>,
    /// Page size (server default when omitted).
    #[arg(long, short = 'l')]
    pub limit: Option<u64>,
    /// Resume after the `next_cursor` of a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow `next_cursor` until the last page.
    #[arg(long, conflicts_with = "cursor")]
    pub all: bool,
    /// Include each instance's context.
    #[arg(long)]
    pub context: bool,
}
