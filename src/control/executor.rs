//! The control executor (the "dedicated core" of the design): start-up work that spans shards
//! (copying definitions, loading `storage.definitions_dir`), the metrics listener
//! (`control::metrics::http`), and replication (`crate::control::replication::hub`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use futures_lite::AsyncReadExt;
use glommio::net::UnixStream;

use crate::control::metrics::http::{self as metrics_http, MetricsSetup};
use crate::mesh::fanout;
use crate::mesh::router::{NoPushes, Router, RouterChannels};

pub struct ControlSetup {
    pub channels: RouterChannels,
    /// One end of a socketpair made at boot for this executor alone; a byte on it stops it.
    pub shutdown_fd: OwnedFd,
    pub definitions_dir: Option<PathBuf>,
    pub ready: std::sync::mpsc::Sender<Result<(), String>>,
    /// Present when `metrics.enabled`.
    pub metrics: Option<MetricsSetup>,
    /// Present when `replication.role` is set.
    pub replication: Option<crate::control::replication::hub::HubSetup>,
}

pub async fn run(setup: ControlSetup) {
    let router = Router::connect(setup.channels, std::rc::Rc::new(NoPushes)).await;
    let hub = match setup.replication {
        Some(r) => Some(crate::control::replication::hub::Hub::start(r, router.clone()).await),
        None => None,
    };
    let started = start_up(&router, setup.definitions_dir.as_deref(), hub.as_deref()).await;
    let failed = started.is_err();
    let metrics = match setup.metrics {
        Some(m) if !failed => Some(metrics_http::start(m, router.clone())),
        _ => None,
    };
    // main waits on this; if it is gone, start-up was abandoned and we just stop.
    let _ = setup.ready.send(started);
    if !failed {
        let mut shutdown: UnixStream = crate::util::fd::adopt(setup.shutdown_fd);
        let mut b = [0u8; 1];
        let _ = shutdown.read(&mut b).await;
    }
    if let Some(m) = metrics {
        m.shut_down().await;
    }
    if let Some(hub) = hub {
        hub.shut_down();
    }
    router.close();
}

async fn start_up(
    router: &Router,
    definitions_dir: Option<&Path>,
    hub: Option<&crate::control::replication::hub::Hub>,
) -> Result<(), String> {
    if let Some(hub) = hub {
        crate::control::replication::promote::start_up(hub).await?;
        if hub.state.is_replica() {
            // A replica writes nothing of its own: its definitions come with the stream.
            if definitions_dir.is_some() {
                log::info!("replica: storage.definitions_dir is not loaded (definitions come from the primary)");
            }
            return Ok(());
        }
    }
    let n = fanout::reconcile_definitions(router)
        .await
        .map_err(|r| format!("copying machine definitions to shards: {}", r.message))?;
    log::debug!("{n} machine definitions present on every shard");
    if let Some(dir) = definitions_dir {
        load_definitions(router, dir).await?;
    }
    Ok(())
}

/// Loads every `*.json` file of `dir` (sorted by name) as PUT_MACHINE params
/// `{machine, version, definition}`. An invalid file stops start-up, naming the file.
async fn load_definitions(router: &Router, dir: &Path) -> Result<(), String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("storage.definitions_dir {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for path in files {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        match fanout::put_machine(router, Some(bytes)).await {
            Ok(_) => log::info!("loaded machine definition {}", path.display()),
            Err(rej) => {
                return Err(format!(
                    "{}: {} {}",
                    path.display(),
                    rej.code.as_str(),
                    rej.message
                ))
            }
        }
    }
    Ok(())
}
