//! `smdb-server restore` (docs/backup.md "Restore"): offline, builds a data
//! directory from a backup (`smdb-cli backup --out`) and the WAL archive
//! (`storage.archive_dir`), replaying archived segments along one epoch chain after the
//! backup's cut up to `--until` a time or per-shard offsets. One entry point, [`run`].
//!
//! * `error`: why a restore refused, with the path, the shard or the flag;
//! * `chain`: which epochs the restore follows, and where each began on each shard;
//! * `segments`: the archive's segment files and the entries they hold;
//! * `replay`: one shard's walk from the backup's cut along the chain;
//! * `target`: the staging directory and the segments written into it.

mod chain;
mod error;
mod replay;
mod segments;
mod target;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use shards::engine::rfc3339;
use smdb_format::verify::{read_manifest, verify};

pub use error::RestoreError;
pub use replay::{Limit, Outcome, Stop};

/// What `smdb-server restore` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    pub backup: PathBuf,
    pub archive: Option<PathBuf>,
    pub until: Until,
    pub data_dir: PathBuf,
    pub pause_timers: bool,
}

/// `--until` / `--until-offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Until {
    Everything,
    /// Epoch milliseconds.
    Time(u64),
    /// Per shard; shards not named replay all the archive holds.
    Offsets(BTreeMap<u32, u64>),
}

impl Until {
    /// Reads the two flags (at most one given).
    pub fn parse(time: Option<&str>, offsets: Option<&str>) -> Result<Until, RestoreError> {
        match (time, offsets) {
            (Some(_), Some(_)) => Err(flag("--until and --until-offset exclude each other")),
            (Some(t), None) => rfc3339::parse_ms(t).map(Until::Time).ok_or_else(|| {
                flag(format!(
                    "--until {t:?}: not an RFC 3339 time with Z or an offset"
                ))
            }),
            (None, Some(list)) => parse_offsets(list).map(Until::Offsets),
            (None, None) => Ok(Until::Everything),
        }
    }

    fn limit(&self, shard: u32) -> Limit {
        match self {
            Until::Everything => Limit::None,
            Until::Time(t) => Limit::Time(*t),
            Until::Offsets(m) => m.get(&shard).map_or(Limit::None, |&o| Limit::Offset(o)),
        }
    }
}

fn flag(why: impl Into<String>) -> RestoreError {
    RestoreError::Flag(why.into())
}

fn parse_offsets(list: &str) -> Result<BTreeMap<u32, u64>, RestoreError> {
    let mut out = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parsed = item
            .split_once(':')
            .and_then(|(s, o)| Some((s.trim().parse().ok()?, o.trim().parse().ok()?)));
        let Some((shard, offset)) = parsed else {
            return Err(flag(format!(
                "--until-offset: {item:?} is not SHARD:OFFSET"
            )));
        };
        if out.insert(shard, offset).is_some() {
            return Err(flag(format!("--until-offset: shard {shard} named twice")));
        }
    }
    if out.is_empty() {
        return Err(flag("--until-offset: no SHARD:OFFSET given"));
    }
    Ok(out)
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Report {
    pub data_dir: PathBuf,
    pub epochs: Vec<u64>,
    pub shards: Vec<Outcome>,
    pub backup_files: usize,
    pub seconds: f64,
    pub timers_paused: bool,
}

impl Report {
    pub fn positions(&self) -> BTreeMap<String, u64> {
        self.shards
            .iter()
            .map(|s| (s.shard.to_string(), s.reached))
            .collect()
    }

    pub fn entries(&self) -> u64 {
        self.shards.iter().map(|s| s.entries).sum()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for s in &self.shards {
            let why = match &s.stop {
                Stop::EndOfArchive => "the archive holds nothing later".to_string(),
                Stop::Offset => "--until-offset".to_string(),
                Stop::Time { next_at_ms } => format!(
                    "--until: the next entry is at {}",
                    rfc3339::format_ms(*next_at_ms)
                ),
            };
            writeln!(
                f,
                "shard {}: backup at {}, replayed {} entries from {} archived segment(s) \
                 (epochs {:?}), stopped at {}: {why}",
                s.shard, s.from, s.entries, s.segments, s.epochs, s.reached
            )?;
        }
        let rate = self.entries() as f64 / self.seconds.max(1e-9);
        writeln!(
            f,
            "restored {} from a backup of {} files along epochs {:?}: {} entries replayed in \
             {:.2} s ({rate:.0}/s){}",
            self.data_dir.display(),
            self.backup_files,
            self.epochs,
            self.entries(),
            self.seconds,
            if self.timers_paused {
                "; timers paused until `smdb-cli timers resume`"
            } else {
                ""
            }
        )?;
        let positions = serde_json::to_string(&self.positions()).map_err(|_| std::fmt::Error)?;
        write!(f, "positions {positions}")
    }
}

/// Runs a restore; the error says what was refused and why.
pub fn run(o: &Options) -> Result<Report, RestoreError> {
    let started = Instant::now();
    let files = verify(&o.backup).map_err(|problem| RestoreError::Backup {
        path: o.backup.clone(),
        problem,
    })?;
    let manifest = read_manifest(&o.backup).map_err(|p| RestoreError::Manifest(p.to_string()))?;
    if let Until::Offsets(m) = &o.until {
        if let Some(s) = m.keys().find(|&&s| s >= manifest.shards) {
            return Err(flag(format!(
                "--until-offset names shard {s}; the backup has {}",
                manifest.shards
            )));
        }
    }
    let staging = target::Staging::create(&o.data_dir)?;
    staging.copy_backup(&o.backup, &manifest)?;
    let chain = match &o.archive {
        Some(a) => chain::Chain::load(a, manifest.epoch)?,
        None => chain::Chain {
            root: manifest.epoch,
            epochs: Vec::new(),
        },
    };
    let mut shards = Vec::new();
    for shard in 0..manifest.shards {
        let pos = manifest
            .positions
            .get(&shard.to_string())
            .copied()
            .ok_or_else(|| {
                RestoreError::Manifest(format!("the manifest has no position for shard {shard}"))
            })?;
        shards.push(restore_shard(o, &staging, &chain, shard, pos)?);
    }
    if o.pause_timers {
        staging.pause_timers("paused by smdb-server restore --pause-timers\n")?;
    }
    staging.commit()?;
    Ok(Report {
        data_dir: o.data_dir.clone(),
        epochs: chain.names(),
        shards,
        backup_files: files,
        seconds: started.elapsed().as_secs_f64(),
        timers_paused: o.pause_timers,
    })
}

fn restore_shard(
    o: &Options,
    staging: &target::Staging,
    chain: &chain::Chain,
    shard: u32,
    pos: u64,
) -> Result<Outcome, RestoreError> {
    let limit = o.until.limit(shard);
    match limit {
        Limit::Offset(l) if l < pos => {
            return Err(RestoreError::shard(
                shard,
                format!("--until-offset {l} is before the backup's position {pos}"),
            ));
        }
        Limit::Time(t) => {
            if let Some((offset, at)) = replay::backup_last_time(staging.path(), shard)? {
                if at > t {
                    let why = format!(
                        "the backup holds offset {offset} from {}, after --until {}: restore \
                         from an older backup",
                        rfc3339::format_ms(at),
                        rfc3339::format_ms(t)
                    );
                    return Err(RestoreError::shard(shard, why));
                }
            }
        }
        _ => {}
    }
    let Some(archive) = &o.archive else {
        if let Limit::Offset(l) = limit {
            if l > pos {
                return Err(RestoreError::shard(
                    shard,
                    format!(
                        "--until-offset {l} is past the backup ({pos}) and no --archive was \
                         given"
                    ),
                ));
            }
        }
        return Ok(Outcome {
            shard,
            from: pos,
            reached: pos,
            entries: 0,
            segments: 0,
            epochs: Vec::new(),
            stop: Stop::EndOfArchive,
        });
    };
    let bounds = chain.bounds(shard)?;
    let mut out = target::SegmentWriter::new(staging.path(), shard)?;
    let outcome = replay::shard(archive, shard, pos, &bounds, limit, &mut out)?;
    if let Limit::Offset(l) = limit {
        if outcome.reached < l {
            return Err(RestoreError::shard(
                shard,
                format!(
                    "the archive ends at offset {}, before --until-offset {l}",
                    outcome.reached
                ),
            ));
        }
    }
    verify_written(&out.written)?;
    Ok(outcome)
}

/// Checks each segment restore wrote as `smdb-cli verify` would.
fn verify_written(written: &[PathBuf]) -> Result<(), RestoreError> {
    for path in written {
        let mut f = std::fs::File::open(path).map_err(|e| RestoreError::io(path, e))?;
        smdb_format::verify::check_segment(&mut f).map_err(|e| RestoreError::Written {
            path: path.clone(),
            why: e.to_string(),
        })?;
    }
    Ok(())
}
