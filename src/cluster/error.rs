//! What goes wrong in the cluster's etcd work (`admin`, `follow`, `unique`), with its context.
//! `Display` is the text logged and answered; the protocol side maps each kind to its code
//! (`Exists`, `NotACluster`, `UnknownGroup`, `Map`: `BAD_REQUEST`; `NoPrimary`:
//! `CLUSTERDOWN` with `details.groups`; the rest: `INTERNAL_ERROR`).

use std::fmt;

use super::map::MapError;
use crate::control::ha::HaError;

#[derive(Debug)]
pub enum ClusterError {
    /// An etcd call failed.
    Etcd(HaError),
    /// A map could not be made or changed as asked.
    Map(MapError),
    /// `create`: the map exists already, at this epoch.
    Exists { map_epoch: u64 },
    /// `create`: `/smdb/<cluster>/leader` exists: the name is a standalone failover group's.
    NotACluster { cluster: String },
    /// `add_group`: there is no map yet.
    NoMap,
    /// These groups had no primary within the timeout (sorted; empty: no group has one).
    NoPrimary { groups: Vec<String> },
    /// The map changed under every attempt until the deadline.
    Contended,
    /// Too many requests are waiting for the HA thread.
    Busy { pending: usize },
    /// The HA thread did not answer in time (the change may still apply).
    NoAnswer { waited: std::time::Duration },
    /// `CLUSTER_MOVE_SLOTS` / `CLUSTER_CANCEL_MOVE` asked for what cannot be (why).
    BadMove { why: String },
    /// `CLUSTER_CANCEL_MOVE`: the move's switch has committed.
    MoveDone { id: String },
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Etcd(e) => write!(f, "{e}"),
            ClusterError::Map(e) => write!(f, "{e}"),
            ClusterError::Exists { map_epoch } => {
                write!(
                    f,
                    "the cluster's map exists already (map_epoch {map_epoch})"
                )
            }
            ClusterError::NotACluster { cluster } => write!(
                f,
                "/smdb/{cluster}/leader exists: {cluster:?} names a failover group outside \
                 cluster mode"
            ),
            ClusterError::NoMap => f.write_str("the cluster has no map yet (CLUSTER_CREATE)"),
            ClusterError::NoPrimary { groups } if groups.is_empty() => {
                f.write_str("no group has a primary")
            }
            ClusterError::NoPrimary { groups } => {
                write!(f, "no primary in group(s) {}", groups.join(", "))
            }
            ClusterError::Contended => {
                f.write_str("the map kept changing under the transaction; try again")
            }
            ClusterError::Busy { pending } => {
                write!(f, "{pending} cluster requests are already waiting")
            }
            ClusterError::BadMove { why } => f.write_str(why),
            ClusterError::MoveDone { id } => {
                write!(f, "move {id} has switched: it is done, not cancelled")
            }
            ClusterError::NoAnswer { waited } => write!(
                f,
                "no answer from etcd within {waited:?}; the change may still apply"
            ),
        }
    }
}

impl std::error::Error for ClusterError {}

impl From<HaError> for ClusterError {
    fn from(e: HaError) -> ClusterError {
        ClusterError::Etcd(e)
    }
}

impl From<MapError> for ClusterError {
    fn from(e: MapError) -> ClusterError {
        ClusterError::Map(e)
    }
}
