//! PUT_MACHINE, GET_MACHINE, LIST_MACHINES params.

use serde::Deserialize;
use serde_json::Value;
use shards::engine::Command;
use shards::Rejection;

use super::params::parse;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutParams {
    machine: String,
    version: u32,
    definition: Value,
}

/// PUT_MACHINE params → command (the engine validates the definition).
pub fn put_command(raw: Option<&[u8]>) -> Result<Command, Rejection> {
    let p: PutParams = parse(raw)?;
    Ok(Command::PutMachine {
        machine: p.machine,
        version: p.version,
        definition: p.definition,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetParams {
    machine: String,
    #[serde(default)]
    version: Option<u32>,
}

/// GET_MACHINE params: (machine, version or latest).
pub fn get_query(raw: Option<&[u8]>) -> Result<(String, Option<u32>), Rejection> {
    let p: GetParams = parse(raw)?;
    Ok((p.machine, p.version))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {}

/// LIST_MACHINES takes no params; unknown ones are refused.
pub fn list_query(raw: Option<&[u8]>) -> Result<(), Rejection> {
    let _: ListParams = parse(raw)?;
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsParams {
    machine: String,
}

/// MACHINE_STATS params: the machine's name.
pub fn stats_query(raw: Option<&[u8]>) -> Result<String, Rejection> {
    let p: StatsParams = parse(raw)?;
    Ok(p.machine)
}
