//! Machine definitions on the shard: PUT_MACHINE (logged like any write), the install of a
//! primary's definitions on a replica, GET_MACHINE, LIST_MACHINES and MACHINE_STATS.

use serde_json::{json, Value};
use shards::engine::{Command, Decision, Entry};
use shards::Rejection;

use super::message::ReplyBody;
use super::runtime::{internal, to_json, Needs, Outcome, Shard};
use crate::ops;
use crate::util::time::now_ms;

impl Shard {
    pub(super) fn put_machine(&self, params: Option<&[u8]>) -> Outcome {
        let cmd = match ops::machines::put_command(params) {
            Ok(c) => c,
            Err(rej) => return (Err(rej), Needs::NOTHING),
        };
        let decision = self.engine.borrow().decide(&cmd, now_ms());
        match decision {
            Err(rej) => (Err(rej), Needs::NOTHING),
            Ok(Decision::Write(entry)) => match self.log_and_apply(entry.clone()) {
                Ok((v, offset)) => (
                    Ok(ReplyBody::Machine {
                        result: to_json(&v),
                        entry,
                    }),
                    Needs::durable(offset),
                ),
                Err(rej) => (Err(rej), Needs::NOTHING),
            },
            Ok(Decision::Answer(v)) => {
                let Command::PutMachine {
                    machine, version, ..
                } = &cmd
                else {
                    return (
                        Err(internal("put_command built another command")),
                        Needs::NOTHING,
                    );
                };
                let entry = self
                    .engine
                    .borrow()
                    .machine_entries()
                    .into_iter()
                    .find(|e| {
                        matches!(e, Entry::PutMachine { machine: m, version: ver, .. }
                        if m == machine && ver == version)
                    });
                match entry {
                    Some(entry) => (
                        Ok(ReplyBody::Machine {
                            result: to_json(&v),
                            entry,
                        }),
                        Needs::durable(self.log.head()),
                    ),
                    None => (
                        Err(internal("identical machine version not found")),
                        Needs::NOTHING,
                    ),
                }
            }
        }
    }

    pub(super) fn install_machines(&self, entries: Vec<Entry>) -> Outcome {
        for entry in entries {
            let Entry::PutMachine {
                machine,
                version,
                definition,
                ..
            } = entry
            else {
                continue;
            };
            let cmd = Command::PutMachine {
                machine,
                version,
                definition,
            };
            let decision = self.engine.borrow().decide(&cmd, now_ms());
            match decision {
                Ok(Decision::Answer(_)) => {}
                Ok(Decision::Write(e)) => {
                    if let Err(rej) = self.log_and_apply(e) {
                        return (Err(rej), Needs::NOTHING);
                    }
                }
                Err(rej) => {
                    log::error!(
                        "shard {}: cannot install definition: {}",
                        self.index,
                        rej.message
                    );
                    return (Err(rej), Needs::NOTHING);
                }
            }
        }
        (
            Ok(ReplyBody::Json(b"{}".to_vec())),
            Needs::durable(self.log.head()),
        )
    }

    pub(super) fn get_machine(&self, params: Option<&[u8]>) -> Result<ReplyBody, Rejection> {
        let (name, version) = ops::machines::get_query(params)?;
        let v = self.engine.borrow().machine(&name, version)?;
        Ok(ReplyBody::Json(to_json(&v)))
    }

    pub(super) fn list_machines(&self, params: Option<&[u8]>) -> Result<ReplyBody, Rejection> {
        ops::machines::list_query(params)?;
        let machines: Vec<Value> = self
            .engine
            .borrow()
            .machines()
            .into_iter()
            .map(|(m, versions)| json!({"machine": m, "versions": versions}))
            .collect();
        Ok(ReplyBody::Json(to_json(&json!({ "machines": machines }))))
    }

    /// MACHINE_STATS on this shard: `{state: count}` from the engine's counters.
    pub(super) fn machine_stats(&self, params: Option<&[u8]>) -> Result<ReplyBody, Rejection> {
        let machine = ops::machines::stats_query(params)?;
        let counts = self.engine.borrow().state_counts(&machine)?;
        let states: serde_json::Map<String, Value> =
            counts.into_iter().map(|(s, n)| (s, n.into())).collect();
        Ok(ReplyBody::Value(Value::Object(states)))
    }
}
