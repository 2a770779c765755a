//! WATCH_INSTANCE, WATCH_ALL and UNWATCH params → what to subscribe to and where to start.

use serde::Deserialize;
use shards::routing::Layout;
use shards::{ErrorCode, Rejection};

use super::cursor::{self, Pos, Start};
use crate::ops::params::{check_id, parse};
use crate::shard::subs::Filter;

/// Most values in one filter list (`machines`, `from_states`, ...): a shard checks every
/// applied event against every live subscription, so filters stay small.
pub const FILTER_VALUES_MAX: usize = 256;

/// Where one shard's delivery starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// Live only: events after the shard's head at subscription time.
    Head,
    /// Everything the shard still retains.
    Oldest,
    /// Offsets after this position (the last delivered; a cursor's, with its epoch when
    /// the cursor carries one).
    After(Pos),
    /// Offsets from this one on, which must still be retained (WATCH_INSTANCE `from_offset`).
    At(u64),
}

/// A parsed WATCH request.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    pub filter: Filter,
    /// Per shard: `None` if this subscription does not watch it.
    pub from: Vec<Option<From>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchInstanceParams {
    #[serde(alias = "id")]
    instance_id: String,
    #[serde(default)]
    include_context: bool,
    #[serde(default)]
    from_offset: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchAllParams {
    #[serde(default)]
    machines: Vec<String>,
    #[serde(default)]
    from_states: Vec<String>,
    #[serde(default)]
    to_states: Vec<String>,
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    include_context: bool,
    #[serde(default)]
    from_cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnwatchParams {
    subscription_id: u64,
}

/// WATCH_INSTANCE: the instance's shard only.
pub fn watch_instance(raw: Option<&[u8]>, shards: Layout) -> Result<WatchSpec, Rejection> {
    let p: WatchInstanceParams = parse(raw)?;
    check_id(&p.instance_id)?;
    let mut from = vec![None; shards.count as usize];
    let shard = shards.shard_of(&p.instance_id) as usize;
    from[shard] = Some(match p.from_offset {
        None => From::Head,
        Some(o) => From::At(o.max(1)),
    });
    let filter = Filter {
        instance_id: Some(p.instance_id),
        include_context: p.include_context,
        ..Filter::default()
    };
    Ok(WatchSpec { filter, from })
}

/// WATCH_ALL: every shard.
pub fn watch_all(raw: Option<&[u8]>, shards: u32) -> Result<WatchSpec, Rejection> {
    let p: WatchAllParams = parse(raw)?;
    for (name, list) in [
        ("machines", &p.machines),
        ("from_states", &p.from_states),
        ("to_states", &p.to_states),
        ("events", &p.events),
    ] {
        if list.len() > FILTER_VALUES_MAX {
            return Err(Rejection::new(
                ErrorCode::BadRequest,
                format!(
                    "{name} has {} values; the limit is {FILTER_VALUES_MAX}",
                    list.len()
                ),
            ));
        }
    }
    let from = match p.from_cursor.as_deref().map(|c| cursor::decode(c, shards)) {
        None => vec![Some(From::Head); shards as usize],
        Some(Err(rej)) => return Err(rej),
        Some(Ok(Start::Oldest)) => vec![Some(From::Oldest); shards as usize],
        Some(Ok(Start::After(pos))) => pos.into_iter().map(|o| Some(From::After(o))).collect(),
    };
    let filter = Filter {
        instance_id: None,
        machines: p.machines,
        from_states: p.from_states,
        to_states: p.to_states,
        events: p.events,
        include_context: p.include_context,
    };
    Ok(WatchSpec { filter, from })
}

/// UNWATCH: the subscription id.
pub fn unwatch(raw: Option<&[u8]>) -> Result<u64, Rejection> {
    let p: UnwatchParams = parse(raw)?;
    Ok(p.subscription_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shards::routing::Routing;

    fn hash(count: u32) -> Layout {
        Layout {
            routing: Routing::Hash,
            count,
        }
    }

    #[test]
    fn watch_instance_watches_one_shard() {
        let spec =
            watch_instance(Some(br#"{"instance_id":"a","from_offset":0}"#), hash(4)).unwrap();
        let watched: Vec<_> = spec.from.iter().flatten().collect();
        assert_eq!(watched, vec![&From::At(1)]);
        assert_eq!(spec.filter.instance_id.as_deref(), Some("a"));
        assert!(watch_instance(Some(br#"{"instance_id":""}"#), hash(4)).is_err());
        assert!(watch_instance(Some(br#"{"instance_id":"a","x":1}"#), hash(4)).is_err());
    }

    #[test]
    fn watch_all_starts_from_the_cursor() {
        let spec = watch_all(Some(br#"{"from_cursor":"c1-3-4","events":["pay"]}"#), 2).unwrap();
        let at = |offset| {
            Some(From::After(Pos {
                offset,
                epoch: None,
            }))
        };
        assert_eq!(spec.from, vec![at(3), at(4)]);
        assert_eq!(spec.filter.events, vec!["pay".to_string()]);
        let spec = watch_all(Some(br#"{"from_cursor":"0"}"#), 2).unwrap();
        assert_eq!(spec.from, vec![Some(From::Oldest); 2]);
        assert_eq!(watch_all(None, 2).unwrap().from, vec![Some(From::Head); 2]);
        let e = watch_all(Some(br#"{"from_cursor":"c1-3"}"#), 2).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
    }
}
