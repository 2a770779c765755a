//! Workloads: which ops a run sends, with which ids and payloads, and the request bytes.
//!
//! Request payloads are written straight into the connection's output buffer from pre-rendered
//! pieces (`begin_frame`/`finish_frame` of the project's frame codec around them), so the load
//! generator spends its time on the socket, not on JSON serialisation.

use std::fmt;
use std::str::FromStr;

use smdb_protocol::frame::{begin_frame, finish_frame};

use super::rng::Rng;

/// The machine every write workload uses: one state with a self-loop, so any number of
/// APPLY_EVENTs succeed and the instance context stays the same size.
pub const MACHINE: &str = "smdb-bench";
pub const MACHINE_VERSION: u32 = 1;
/// The self-loop event of `MACHINE`.
pub const EVENT: &str = "inc";

/// The definition of `MACHINE` (PUT_MACHINE `definition`).
/// The bench machine, declaring the first `indexes` of `INDEXED` (`--indexes`).
pub fn machine_definition(indexes: Option<u8>) -> serde_json::Value {
    let mut def = serde_json::json!({
        "states": ["on"],
        "initial": "on",
        "transitions": [{"from": "on", "event": EVENT, "to": "on"}]
    });
    let n = usize::from(indexes.unwrap_or(0));
    if n > 0 {
        def["indexes"] = INDEXED[..n.min(INDEXED.len())].into();
    }
    def
}

/// The paths `--indexes` declares, in order.
pub const INDEXED: [&str; 2] = ["ctx.customer", "ctx.region"];

/// With `--indexes`: the indexed fields of instance number `k` (customer one of 100,000,
/// region one of 8) added to `context`.
pub fn with_indexed_fields(context: &mut serde_json::Value, indexes: Option<u8>, k: u64) {
    if indexes.is_some() {
        context["customer"] = format!("c-{}", k % 100_000).into();
        context["region"] = format!("r-{}", k % 8).into();
    }
}

/// The `--workload` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// PING: answered by the front executor, never reaches a shard.
    Ping,
    /// GET_INSTANCE of random pre-created instances.
    Get,
    /// CREATE_INSTANCE with new unique ids.
    Create,
    /// APPLY_EVENT (self-loop `inc`) on random pre-created instances.
    Apply,
    /// A random mix by `--mix` weights.
    Mixed,
    /// Atomic BATCH of `--batch-size` APPLY_EVENTs, one per member of a random group of
    /// pre-created instances sharing one hash tag (`{b<run>-<group>}:<member>`).
    Batch,
}

impl WorkloadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Ping => "ping",
            WorkloadKind::Get => "get",
            WorkloadKind::Create => "create",
            WorkloadKind::Apply => "apply",
            WorkloadKind::Mixed => "mixed",
            WorkloadKind::Batch => "batch",
        }
    }
}

/// One kind of request the generator sends; indexes per-op statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    Ping = 0,
    Get = 1,
    Create = 2,
    Apply = 3,
    Batch = 4,
}

impl OpKind {
    pub const COUNT: usize = 5;
    pub const ALL: [OpKind; OpKind::COUNT] = [
        OpKind::Ping,
        OpKind::Get,
        OpKind::Create,
        OpKind::Apply,
        OpKind::Batch,
    ];

    /// The wire op name.
    pub fn op_name(self) -> &'static str {
        match self {
            OpKind::Ping => "PING",
            OpKind::Get => "GET_INSTANCE",
            OpKind::Create => "CREATE_INSTANCE",
            OpKind::Apply => "APPLY_EVENT",
            OpKind::Batch => "BATCH",
        }
    }

    /// The `--mix` key.
    pub fn mix_key(self) -> &'static str {
        match self {
            OpKind::Ping => "ping",
            OpKind::Get => "get",
            OpKind::Create => "create",
            OpKind::Apply => "apply",
            OpKind::Batch => "batch",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Relative weights of each op kind, e.g. `get=70,apply=25,create=5`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; OpKind::COUNT],
}

impl Mix {
    /// Only `op`.
    pub fn only(op: OpKind) -> Mix {
        let mut weights = [0; OpKind::COUNT];
        weights[op.index()] = 1;
        Mix { weights }
    }

    /// The mix a workload sends: a single op, or `mix` for `mixed`.
    pub fn for_workload(kind: WorkloadKind, mix: Mix) -> Mix {
        match kind {
            WorkloadKind::Ping => Mix::only(OpKind::Ping),
            WorkloadKind::Get => Mix::only(OpKind::Get),
            WorkloadKind::Create => Mix::only(OpKind::Create),
            WorkloadKind::Apply => Mix::only(OpKind::Apply),
            WorkloadKind::Mixed => mix,
            WorkloadKind::Batch => Mix::only(OpKind::Batch),
        }
    }

    pub fn weight(&self, op: OpKind) -> u32 {
        self.weights[op.index()]
    }

    fn total(&self) -> u64 {
        self.weights.iter().map(|w| u64::from(*w)).sum()
    }

    /// True when some op of the mix needs pre-created instances.
    pub fn needs_instances(&self) -> bool {
        self.weight(OpKind::Get) > 0
            || self.weight(OpKind::Apply) > 0
            || self.weight(OpKind::Batch) > 0
    }

    /// True when some op of the mix needs the bench machine.
    pub fn needs_machine(&self) -> bool {
        self.needs_instances() || self.weight(OpKind::Create) > 0
    }

    /// Picks an op with probability proportional to its weight.
    pub fn pick(&self, rng: &mut Rng) -> OpKind {
        let total = self.total();
        if self.weights.iter().filter(|w| **w > 0).count() == 1 {
            return OpKind::ALL[self.weights.iter().position(|w| *w > 0).unwrap_or(0)];
        }
        let mut r = rng.below(total);
        for op in OpKind::ALL {
            let w = u64::from(self.weight(op));
            if r < w {
                return op;
            }
            r -= w;
        }
        OpKind::Ping
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = OpKind::ALL
            .iter()
            .filter(|op| self.weight(**op) > 0)
            .map(|op| format!("{}={}", op.mix_key(), self.weight(*op)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Mix, String> {
        let mut weights = [0u32; OpKind::COUNT];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("mix entry {part:?} is not KEY=WEIGHT"))?;
            let op = OpKind::ALL
                .into_iter()
                .filter(|op| *op != OpKind::Batch) // its own workload: ids come in groups
                .find(|op| op.mix_key() == key.trim())
                .ok_or_else(|| format!("mix key {key:?} is not one of ping, get, create, apply"))?;
            weights[op.index()] = value
                .trim()
                .parse()
                .map_err(|e| format!("mix weight {value:?} for {key}: {e}"))?;
        }
        if weights.iter().all(|w| *w == 0) {
            return Err("mix needs at least one positive weight".into());
        }
        Ok(Mix { weights })
    }
}

/// What every connection of a run shares: the mix, the id spaces and the payload text.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mix: Mix,
    /// Pre-created instance ids are `{instance_prefix}{k}` for k in 0..instances.
    pub instance_prefix: String,
    pub instances: u64,
    /// New ids are `{create_prefix}{conn}.{seq}`.
    pub create_prefix: String,
    /// The JSON object sent as APPLY_EVENT payload and CREATE_INSTANCE context.
    pub payload_json: String,
    /// Ops per BATCH (0 unless the mix sends batches): instances come in groups of this
    /// many that share a hash tag, and a batch changes every member of one group.
    pub batch_size: u64,
    /// `--indexes`: pre-created instances carry the indexed fields.
    pub indexes: Option<u8>,
}

impl Plan {
    /// `tag` keeps ids of different runs against one server apart.
    pub fn new(mix: Mix, instances: u64, payload_bytes: usize, tag: &str) -> Plan {
        Plan {
            mix,
            instance_prefix: format!("b{tag}-"),
            instances,
            create_prefix: format!("n{tag}-"),
            payload_json: payload_object(payload_bytes),
            batch_size: 0,
            indexes: None,
        }
    }

    /// The plan with `--indexes` set.
    pub fn with_indexes(mut self, indexes: Option<u8>) -> Plan {
        self.indexes = indexes;
        self
    }

    /// Instances in groups of `size` sharing a hash tag, for the batch workload.
    pub fn with_batch_size(mut self, size: u64) -> Plan {
        self.batch_size = size;
        self
    }

    /// The id of pre-created instance `k`: `{prefix}{k}`, or with batches
    /// `{{prefix}{group}}:{member}`.
    pub fn instance_id(&self, k: u64) -> String {
        match self.batch_size {
            0 => format!("{}{k}", self.instance_prefix),
            n => format!("{{{}{}}}:{}", self.instance_prefix, k / n, k % n),
        }
    }
}

/// `{"p":"xxxx"}` with `bytes` x's; `{}` for 0.
pub fn payload_object(bytes: usize) -> String {
    if bytes == 0 {
        return "{}".into();
    }
    format!("{{\"p\":\"{}\"}}", "x".repeat(bytes))
}

/// The random choices of one request (`RequestWriter::pick`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub op: OpKind,
    /// The pre-created instance (get, apply) or batch group (batch) it names; 0 otherwise.
    pub k: u64,
}

/// Builds the requests of one connection.
#[derive(Debug, Clone)]
pub struct RequestWriter {
    rng: Rng,
    /// This connection's number, part of the ids it creates.
    conn: u64,
    create_seq: u64,
}

impl RequestWriter {
    pub fn new(seed: u64, conn: u64) -> RequestWriter {
        RequestWriter {
            rng: Rng::new(seed ^ conn.wrapping_mul(0xA076_1D64_78BD_642F)),
            conn,
            create_seq: 0,
        }
    }

    /// Appends one request frame with request id `id` to `out`; returns the op it carries.
    pub fn write(&mut self, plan: &Plan, id: u64, out: &mut Vec<u8>) -> OpKind {
        let pick = self.pick(plan);
        self.write_pick(plan, id, pick, out)
    }

    /// The random choices of the next request (its op, and the instance or batch group it
    /// names), made before its bytes are written so that `--cluster` can route it by slot.
    pub fn pick(&mut self, plan: &Plan) -> Pick {
        let op = plan.mix.pick(&mut self.rng);
        let k = match op {
            OpKind::Get | OpKind::Apply => self.rng.below(plan.instances),
            OpKind::Batch => self
                .rng
                .below((plan.instances / plan.batch_size.max(1)).max(1)),
            OpKind::Ping | OpKind::Create => 0,
        };
        Pick { op, k }
    }

    /// Writes the routing id of `pick` (the instance id it names; a batch's hash tag; the id
    /// a create would use) into `key`, empty for PING. `--cluster` hashes it to a slot.
    pub fn route_key(&self, plan: &Plan, pick: Pick, key: &mut Vec<u8>) {
        key.clear();
        match pick.op {
            OpKind::Ping => {}
            OpKind::Get | OpKind::Apply => {
                key.extend_from_slice(plan.instance_prefix.as_bytes());
                write_u64(key, pick.k);
            }
            OpKind::Batch => {
                key.push(b'{');
                key.extend_from_slice(plan.instance_prefix.as_bytes());
                write_u64(key, pick.k);
                key.push(b'}');
            }
            OpKind::Create => {
                key.extend_from_slice(plan.create_prefix.as_bytes());
                write_u64(key, self.conn);
                key.push(b'.');
                write_u64(key, self.create_seq);
            }
        }
    }

    /// Appends the request frame of `pick` with request id `id` to `out`; returns its op.
    pub fn write_pick(&mut self, plan: &Plan, id: u64, pick: Pick, out: &mut Vec<u8>) -> OpKind {
        let op = pick.op;
        let start = begin_frame(out);
        out.extend_from_slice(br#"{"type":"request","id":"#);
        write_u64(out, id);
        out.extend_from_slice(br#","op":""#);
        out.extend_from_slice(op.op_name().as_bytes());
        out.push(b'"');
        match op {
            OpKind::Ping => {}
            OpKind::Get => {
                out.extend_from_slice(br#","params":{"id":""#);
                out.extend_from_slice(plan.instance_prefix.as_bytes());
                write_u64(out, pick.k);
                out.extend_from_slice(b"\"}");
            }
            OpKind::Apply => {
                out.extend_from_slice(br#","params":{"instance_id":""#);
                out.extend_from_slice(plan.instance_prefix.as_bytes());
                write_u64(out, pick.k);
                out.extend_from_slice(br#"","event":""#);
                out.extend_from_slice(EVENT.as_bytes());
                out.extend_from_slice(br#"","payload":"#);
                out.extend_from_slice(plan.payload_json.as_bytes());
                out.push(b'}');
            }
            OpKind::Create => {
                out.extend_from_slice(br#","params":{"machine":""#);
                out.extend_from_slice(MACHINE.as_bytes());
                out.extend_from_slice(br#"","version":"#);
                write_u64(out, u64::from(MACHINE_VERSION));
                out.extend_from_slice(br#","id":""#);
                out.extend_from_slice(plan.create_prefix.as_bytes());
                write_u64(out, self.conn);
                out.push(b'.');
                write_u64(out, self.create_seq);
                self.create_seq += 1;
                out.extend_from_slice(br#"","context":"#);
                out.extend_from_slice(plan.payload_json.as_bytes());
                out.push(b'}');
            }
            OpKind::Batch => write_batch(plan, pick.k, out),
        }
        out.push(b'}');
        finish_frame(out, start);
        op
    }

    /// `write`'s twin for `--http`: one HTTP request (`bench::http`).
    pub fn write_http(&mut self, plan: &Plan, host: &str, out: &mut Vec<u8>) -> OpKind {
        let op = plan.mix.pick(&mut self.rng);
        let create = (self.conn, &mut self.create_seq);
        super::http::write_request(plan, op, host, &mut self.rng, create, out);
        op
    }
}

/// `,"params":{"mode":"atomic","ops":[APPLY_EVENT on each member of batch group `group`]}`.
fn write_batch(plan: &Plan, group: u64, out: &mut Vec<u8>) {
    let size = plan.batch_size.max(1);
    out.extend_from_slice(br#","params":{"mode":"atomic","ops":["#);
    for member in 0..size {
        if member > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"op":"APPLY_EVENT","params":{"instance_id":"{"#);
        out.extend_from_slice(plan.instance_prefix.as_bytes());
        write_u64(out, group);
        out.extend_from_slice(b"}:");
        write_u64(out, member);
        out.extend_from_slice(br#"","event":""#);
        out.extend_from_slice(EVENT.as_bytes());
        out.extend_from_slice(br#"","payload":"#);
        out.extend_from_slice(plan.payload_json.as_bytes());
        out.extend_from_slice(b"}}");
    }
    out.extend_from_slice(b"]}");
}

/// Appends `n` in decimal.
pub(crate) fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use smdb_protocol::frame::{decode_frame, FRAME_PAYLOAD_BYTES_DEFAULT};
    use smdb_protocol::parse_request;

    fn decode(out: &[u8]) -> Value {
        let (range, used) = decode_frame(out, FRAME_PAYLOAD_BYTES_DEFAULT)
            .unwrap()
            .unwrap();
        assert_eq!(used, out.len());
        parse_request(&out[range.clone()]).expect("the server's parser accepts it");
        serde_json::from_slice(&out[range]).unwrap()
    }

    #[test]
    fn mix_parses_prints_and_refuses_junk() {
        let m: Mix = "get=70, apply=25,create=5".parse().unwrap();
        assert_eq!(m.to_string(), "get=70,create=5,apply=25");
        assert!("get=1,bogus=2".parse::<Mix>().is_err());
        assert!("get=x".parse::<Mix>().is_err());
        assert!("get=0".parse::<Mix>().is_err());
        assert!("get".parse::<Mix>().is_err());
    }

    #[test]
    fn mix_picks_roughly_by_weight() {
        let m: Mix = "get=70,apply=25,create=5".parse().unwrap();
        let mut rng = Rng::new(1);
        let mut n = [0u32; OpKind::COUNT];
        for _ in 0..100_000 {
            n[m.pick(&mut rng).index()] += 1;
        }
        assert_eq!(n[OpKind::Ping.index()], 0);
        assert!((69_000..71_000).contains(&n[OpKind::Get.index()]), "{n:?}");
        assert!(
            (24_000..26_000).contains(&n[OpKind::Apply.index()]),
            "{n:?}"
        );
        assert!((4_500..5_500).contains(&n[OpKind::Create.index()]), "{n:?}");
    }

    #[test]
    fn requests_are_valid_frames_of_the_expected_shape() {
        let plan = Plan::new(Mix::only(OpKind::Apply), 10, 5, "t1");
        let mut w = RequestWriter::new(1, 3);
        let mut out = Vec::new();
        assert_eq!(w.write(&plan, 42, &mut out), OpKind::Apply);
        let v = decode(&out);
        assert_eq!(v["id"], 42);
        assert_eq!(v["op"], "APPLY_EVENT");
        assert_eq!(v["params"]["event"], EVENT);
        assert_eq!(v["params"]["payload"]["p"], "xxxxx");
        assert!(v["params"]["instance_id"]
            .as_str()
            .unwrap()
            .starts_with("bt1-"));

        let plan = Plan::new(Mix::only(OpKind::Create), 10, 0, "t1");
        let mut out = Vec::new();
        w.write(&plan, 1, &mut out);
        let mut second = Vec::new();
        w.write(&plan, 2, &mut second);
        let (a, b) = (decode(&out), decode(&second));
        assert_eq!(a["params"]["id"], "nt1-3.0");
        assert_eq!(b["params"]["id"], "nt1-3.1");
        assert_eq!(a["params"]["context"], serde_json::json!({}));

        for op in [OpKind::Ping, OpKind::Get] {
            let plan = Plan::new(Mix::only(op), 1, 0, "z");
            let mut out = Vec::new();
            w.write(&plan, u64::MAX, &mut out);
            let v = decode(&out);
            assert_eq!(v["op"], op.op_name());
            assert_eq!(v["id"], u64::MAX);
        }
    }

    #[test]
    fn batch_requests_change_one_tagged_group() {
        let plan = Plan::new(Mix::only(OpKind::Batch), 30, 0, "t1").with_batch_size(10);
        assert_eq!(plan.instance_id(0), "{bt1-0}:0");
        assert_eq!(plan.instance_id(27), "{bt1-2}:7");
        let mut w = RequestWriter::new(1, 3);
        let mut out = Vec::new();
        assert_eq!(w.write(&plan, 5, &mut out), OpKind::Batch);
        let v = decode(&out);
        assert_eq!(v["op"], "BATCH");
        assert_eq!(v["params"]["mode"], "atomic");
        let ops = v["params"]["ops"].as_array().unwrap();
        assert_eq!(ops.len(), 10);
        let first = ops[0]["params"]["instance_id"]
            .as_str()
            .unwrap()
            .to_string();
        let tag = &first[..first.find(':').unwrap()];
        for (m, op) in ops.iter().enumerate() {
            assert_eq!(op["op"], "APPLY_EVENT");
            assert_eq!(op["params"]["instance_id"], format!("{tag}:{m}"));
            assert_eq!(op["params"]["payload"], serde_json::json!({}));
        }
    }
}
