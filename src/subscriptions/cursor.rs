//! Subscription cursors: the last delivered log offset in every shard, as an opaque string.
//!
//! Format `c1-<o0>-<o1>-...`, one decimal offset per shard in shard order (version tag `c1`, so
//! the format can change). A cursor names positions *after* which delivery resumes: resuming
//! from it replays offsets `> o_k` of every shard `k`. `"0"` is shorthand for "from the oldest
//! retained entry of every shard".

use shards::{ErrorCode, Rejection};

const PREFIX: &str = "c1";

/// Where a WATCH_ALL starts, from its `from_cursor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// `"0"`: everything still retained.
    Oldest,
    /// After these positions, one per shard.
    After(Vec<u64>),
}

/// Encodes positions (one per shard).
pub fn encode(positions: &[u64]) -> String {
    let mut s = String::with_capacity(PREFIX.len() + positions.len() * 8);
    s.push_str(PREFIX);
    for p in positions {
        s.push('-');
        s.push_str(&p.to_string());
    }
    s
}

/// Decodes a client's cursor for a server with `shards` shards.
pub fn decode(cursor: &str, shards: u32) -> Result<Start, Rejection> {
    if cursor == "0" {
        return Ok(Start::Oldest);
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
    if parts.next() != Some(PREFIX) {
        return Err(bad());
    }
    let positions: Vec<u64> = parts
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_zero_means_oldest() {
        let c = encode(&[0, 17, 123456789]);
        assert_eq!(c, "c1-0-17-123456789");
        assert_eq!(decode(&c, 3).unwrap(), Start::After(vec![0, 17, 123456789]));
        assert_eq!(decode("0", 5).unwrap(), Start::Oldest);
    }

    #[test]
    fn refuses_other_shard_counts_and_garbage() {
        for bad in ["c1-1-2", "c2-1-2-3", "c1-1-x-3", "", "c1", "c1-1-2-3-"] {
            let e = decode(bad, 3).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
        }
        assert!(decode("c1-1-2", 3).unwrap_err().message.contains("3"));
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
