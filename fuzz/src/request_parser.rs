//! The request envelope parser (`smdb::protocol::parse_request`) and the params parser of every
//! op that takes params (`smdb::ops`, `smdb::front::subscriptions::params`), on arbitrary payloads.

use shards::routing::{Layout, Routing};
use smdb::front::subscriptions::params as watch;
use smdb::ops::batch::{engine_op, parse_batch};
use smdb::ops::{cluster, events, instances, machines, route};
use smdb::protocol::parse_request;

use crate::apply_event_differential;

/// The shards the subscription params are checked against (they name shards by index), under
/// either routing.
const SHARDS: [Layout; 2] = [
    Layout {
        routing: Routing::Hash,
        count: 4,
    },
    Layout {
        routing: Routing::Slots,
        count: 4,
    },
];

/// Parses `data` as a request payload and gives its params to every op's parser, as the front
/// and the shards would: each returns a value or a `BAD_REQUEST`, never panics. The params, as
/// the envelope checked them, also go through the APPLY_EVENT differential.
pub fn request_parser(data: &[u8]) {
    let Ok(req) = parse_request(data) else {
        return;
    };
    let params = req.params.map(|p| p.get().as_bytes());
    params_of_every_op(params);
    if let Some(raw) = params {
        apply_event_differential(raw);
    }
}

fn params_of_every_op(params: Option<&[u8]>) {
    let _ = route::route_key(params);
    let _ = instances::create_command(params);
    let _ = instances::delete_command(params);
    let _ = instances::id_param(params);
    let _ = instances::list_query(params);
    let _ = events::apply_event_params(params);
    let _ = events::apply_command(params);
    let _ = events::history_query(params);
    let _ = machines::put_command(params);
    let _ = machines::get_query(params);
    let _ = machines::list_query(params);
    for layout in SHARDS {
        let _ = watch::watch_instance(params, layout);
    }
    let _ = watch::watch_all(params, SHARDS[0].count);
    let _ = cluster::keyslot(params);
    let _ = watch::unwatch(params);
    batch(params);
}

/// BATCH params, then each op of the batch as its shard reads it.
fn batch(params: Option<&[u8]>) {
    let Ok(batch) = parse_batch(params) else {
        return;
    };
    for item in batch.ops.iter() {
        let _ = batch.ops.route_key(item);
        let _ = engine_op(&batch.ops, item);
    }
}
