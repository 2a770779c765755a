//! Where each executor runs: fronts and control from core 0 up, shards on the cores after.

use crate::config::Config;

/// Where each executor runs.
#[derive(Debug, Clone)]
pub struct Placements {
    pub shards: Vec<usize>,
    pub fronts: Vec<usize>,
    pub control: usize,
}

/// Default placement: fronts and control from core 0 up, shards on the remaining cores (wrapping
/// when there are more executors than cores). `shards.cores` overrides the shard cores. With
/// `network.fronts_on_shards` there is one front per shard, run by the shard's own executor
/// (`fronts` then names the shards' cores); the shards take the cores from 1 up as they do
/// beside one front, and the control executor keeps core 0.
pub fn placements(config: &Config, cpus: usize) -> Placements {
    let cpus = cpus.max(1);
    let shard_count = config.shard_count(cpus) as usize;
    let fronts_n = config.network.acceptor_cores as usize;
    if config.network.fronts_on_shards {
        let shards = match &config.shards.cores {
            Some(c) => c.clone(),
            None => (0..shard_count).map(|i| (1 + i) % cpus).collect(),
        };
        return Placements {
            fronts: shards.clone(),
            shards,
            control: 0,
        };
    }
    let fronts: Vec<usize> = (0..fronts_n).map(|i| i % cpus).collect();
    let shards = match &config.shards.cores {
        Some(c) => c.clone(),
        None => (0..shard_count).map(|i| (fronts_n + i) % cpus).collect(),
    };
    Placements {
        shards,
        fronts,
        control: 0,
    }
}
