//! Subscription cursors: the last delivered log position in every shard, as an opaque string.
//!
//! Two forms, both still read:
//! * `c1-<o0>-<o1>-...`: one decimal offset per shard in shard order. Issued when every
//!   position is of epoch 0 (a server that never replicated: the cursors are those of earlier
//!   builds, byte for byte). Read as positions *without* an epoch: a resume from one is not
//!   checked against the log's epochs, exactly as before epochs were carried.
//! * `c2-<e0>.<o0>-<e1>.<o1>-...`: each offset with the epoch of the term that wrote the entry
//!   there (`Engine::epoch_of` on the member that delivered it). A resume checks that this
//!   member's log still has that epoch at that offset (`agree.rs`).
//!
//! A cursor names positions *after* which delivery resumes: resuming from it replays offsets
//! `> o_k` of every shard `k`. `"0"` is shorthand for "from the oldest retained entry of every
//! shard".
//!
//! In cluster mode a cursor names its group: `@<group>` follows the positions (`c2-1.5-1.9@g1`;
//! a group name never holds `@`). A member of another group refuses it (`BAD_REQUEST`,
//! `details: {cursor_group, group}`): its offsets are another group's log. A cursor without a
//! group (an older one, or `"0"`) is still read.

use std::sync::OnceLock;

use shards::{ErrorCode, Rejection};

const PREFIX_V1: &str = "c1";
const PREFIX_V2: &str = "c2";
/// Between a cursor's positions and its group.
const GROUP_MARK: char = '@';

/// This member's group in cluster mode, set once at start-up (`set_group`), before any
/// front serves: every cursor the process issues names it.
static GROUP: OnceLock<String> = OnceLock::new();

/// Cluster mode: the cursors of this process name `group` (docs/cluster.md, "Subscriptions").
/// Called once at start-up; a later call changes nothing.
pub fn set_group(group: &str) {
    let _ = GROUP.set(group.to_string());
}

/// One shard's position: the offset, and the epoch of its entry when the cursor said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub offset: u64,
    /// `None` for a `c1` cursor: not checked against the log's epochs.
    pub epoch: Option<u64>,
}

/// Where a WATCH_ALL starts, from its `from_cursor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// `"0"`: everything still retained.
    Oldest,
    /// After these positions, one per shard.
    After(Vec<Pos>),
}

/// Encodes `(epoch, offset)` positions (one per shard): `c1` when every epoch is 0, else `c2`.
pub fn encode(positions: &[(u64, u64)]) -> String {
    let v2 = positions.iter().any(|&(e, _)| e != 0);
    let mut s = String::with_capacity(PREFIX_V2.len() + positions.len() * 12);
    s.push_str(if v2 { PREFIX_V2 } else { PREFIX_V1 });
    for (e, o) in positions {
        s.push('-');
        if v2 {
            s.push_str(&e.to_string());
            s.push('.');
        }
        s.push_str(&o.to_string());
    }
    if let Some(g) = GROUP.get() {
        s.push(GROUP_MARK);
        s.push_str(g);
    }
    s
}

/// Decodes a client's cursor for a server with `shards` shards.
pub fn decode(cursor: &str, shards: u32) -> Result<Start, Rejection> {
    decode_in(cursor, shards, GROUP.get().map(String::as_str))
}

/// `decode` on a member of group `mine` (None: not in cluster mode).
fn decode_in(cursor: &str, shards: u32, mine: Option<&str>) -> Result<Start, Rejection> {
    if cursor == "0" {
        return Ok(Start::Oldest);
    }
    let (cursor, named) = match cursor.split_once(GROUP_MARK) {
        Some((positions, group)) => (positions, Some(group)),
        None => (cursor, None),
    };
    match (named, mine) {
        (Some(theirs), Some(mine)) if theirs != mine => {
            let msg = format!(
                "from_cursor is a cursor of group {:?}; this member is in group {mine:?}",
                smdb_protocol::codes::quote(theirs)
            );
            return Err(Rejection::new(ErrorCode::BadRequest, msg)
                .with("cursor_group", theirs)
                .with("group", mine));
        }
        (Some(_), None) => named_but_standalone(cursor)?,
        _ => {}
    }
    let bad = || {
        Rejection::new(
            ErrorCode::BadRequest,
            format!(
                "from_cursor {:?} is not a cursor this server issued",
                smdb_protocol::codes::quote(cursor)
            ),
        )
    };
    let mut parts = cursor.split('-');
    let v2 = match parts.next() {
        Some(PREFIX_V1) => false,
        Some(PREFIX_V2) => true,
        _ => return Err(bad()),
    };
    let num = |s: &str| match s.bytes().all(|b| b.is_ascii_digit()) {
        true => s.parse::<u64>().ok(),
        false => None,
    };
    let part = |p: &str| -> Option<Pos> {
        if !v2 {
            return Some(Pos {
                offset: num(p)?,
                epoch: None,
            });
        }
        let (e, o) = p.split_once('.')?;
        Some(Pos {
            offset: num(o)?,
            epoch: Some(num(e)?),
        })
    };
    let positions: Vec<Pos> = parts
        .map(|p| part(p).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    if positions.len() != shards as usize {
        return Err(Rejection::new(
            ErrorCode::BadRequest,
            format!(
                "from_cursor names {} shard(s); this server has {shards}",
                positions.len()
            ),
        )
        .with("shards", shards));
    }
    Ok(Start::After(positions))
}

/// A cursor naming a group, on a member outside cluster mode: not one it issued.
fn named_but_standalone(cursor: &str) -> Result<(), Rejection> {
    Err(Rejection::new(
        ErrorCode::BadRequest,
        format!(
            "from_cursor {:?} names a cluster group; this server is not in cluster mode",
            smdb_protocol::codes::quote(cursor)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(offsets: &[u64]) -> Vec<Pos> {
        let pos = |&offset| Pos {
            offset,
            epoch: None,
        };
        offsets.iter().map(pos).collect()
    }

    #[test]
    fn round_trips_and_zero_means_oldest() {
        let c = encode(&[(0, 0), (0, 17), (0, 123456789)]);
        assert_eq!(c, "c1-0-17-123456789", "epoch 0 everywhere: the old form");
        assert_eq!(
            decode(&c, 3).unwrap(),
            Start::After(v1(&[0, 17, 123456789]))
        );
        assert_eq!(decode("0", 5).unwrap(), Start::Oldest);
    }

    #[test]
    fn epochs_are_carried_with_the_offsets() {
        let c = encode(&[(0, 0), (3, 17), (4, 90)]);
        assert_eq!(c, "c2-0.0-3.17-4.90");
        let at = |epoch, offset| Pos {
            offset,
            epoch: Some(epoch),
        };
        assert_eq!(
            decode(&c, 3).unwrap(),
            Start::After(vec![at(0, 0), at(3, 17), at(4, 90)])
        );
    }

    #[test]
    fn refuses_other_shard_counts_and_garbage() {
        for bad in [
            "c1-1-2",
            "c3-1-2-3",
            "c1-1-x-3",
            "",
            "c1",
            "c1-1-2-3-",
            "c2-1-2-3",
            "c2-1.2-1.+3-1.4",
            "c1-1.2-3-4",
        ] {
            let e = decode(bad, 3).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
        }
        assert!(decode("c1-1-2", 3).unwrap_err().message.contains("3"));
    }

    #[test]
    fn a_cursor_of_another_group_is_refused_naming_both() {
        let at = |offset| Pos {
            offset,
            epoch: Some(2),
        };
        let mine = decode_in("c2-2.5-2.9@g1", 2, Some("g1")).unwrap();
        assert_eq!(mine, Start::After(vec![at(5), at(9)]));
        let e = decode_in("c2-2.5-2.9@g1", 2, Some("g2")).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert_eq!(e.details["cursor_group"], "g1", "{:?}", e.details);
        assert_eq!(e.details["group"], "g2");
        // Without a group (older cursors, "0"): read in cluster mode; a group outside it: not.
        assert!(decode_in("c1-5-9", 2, Some("g2")).is_ok());
        assert_eq!(decode_in("0", 2, Some("g2")).unwrap(), Start::Oldest);
        assert!(decode_in("c1-5-9@g1", 2, None).is_err());
        assert!(decode_in("c1-5-9@", 2, Some("g1")).is_err());
    }

    /// A bad 100 KB cursor comes back as a short prefix, not whole.
    #[test]
    fn a_huge_bad_cursor_is_quoted_short() {
        let huge = format!("c1-{}", "9".repeat(100_000));
        let e = decode(&huge, 1).unwrap_err();
        assert!(e.message.len() < 200, "{}", e.message.len());
        let huge = "x".repeat(100_000);
        assert!(decode(&huge, 1).unwrap_err().message.len() < 200);
    }
}
