//! The channels between the fronts and the control executor that carry replication: a
//! `REPLICATE` link, its frames, and the control ops (REPLICATION_STATUS, PROMOTE, ...) a front
//! relays (`front::relay` is the front's side, `control::replication::hub` the control
//! executor's). One pair per front, made at boot.

use glommio::channels::shared_channel::{self, SharedReceiver, SharedSender};
use shards::Rejection;

use crate::protocol::routes;

/// Messages a relay channel holds before the sender waits.
pub const RELAY_QUEUE_DEPTH_MAX: usize = 1024;

/// Front → control.
pub enum Up {
    /// A `REPLICATE` request on link `link`; answered with `Down::Opened`.
    Open {
        link: u64,
        params: Option<Vec<u8>>,
        peer: String,
    },
    /// A frame the replica sent after `REPLICATE` (an ack).
    Frame { link: u64, payload: Vec<u8> },
    /// The link's connection ended.
    Closed { link: u64 },
    /// A control op (REPLICATION_STATUS, PROMOTE, ...); answered with `Down::Answer`.
    Call {
        token: u64,
        op: routes::Control,
        params: Option<Vec<u8>>,
    },
}

/// Control → front.
pub enum Down {
    /// The `REPLICATE` response: the result JSON, or the refusal.
    Opened {
        link: u64,
        result: Result<Vec<u8>, Rejection>,
    },
    /// Encoded frames for the link, in order.
    Frames { link: u64, bytes: Vec<u8> },
    /// End the link's connection (after the frames before this).
    Close { link: u64 },
    Answer {
        token: u64,
        result: Result<Vec<u8>, Rejection>,
    },
}

/// One front's channel ends (front half, control half), made in `main`.
pub type FrontEnds = (SharedSender<Up>, SharedReceiver<Down>);
pub type ControlEnds = (SharedReceiver<Up>, SharedSender<Down>);

/// A pair of relay channels per front.
pub fn channels(fronts: usize) -> (Vec<FrontEnds>, Vec<ControlEnds>) {
    (0..fronts)
        .map(|_| {
            let (up_tx, up_rx) = shared_channel::new_bounded(RELAY_QUEUE_DEPTH_MAX);
            let (down_tx, down_rx) = shared_channel::new_bounded(RELAY_QUEUE_DEPTH_MAX);
            ((up_tx, down_rx), (up_rx, down_tx))
        })
        .unzip()
}
