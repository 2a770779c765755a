//! The shapes of edges: ports spread along a state's sides, curves to the next column,
//! stacked self-loops, and laned paths around the states (see `layout`).

use crate::layout::{Box, Kind, Label, Route, LOOP_H, LOOP_STEP};
use crate::model::Graph;

/// Where edges attach: ports spread down each state's left (in) and right (out) side, in the
/// vertical order of the other ends, so edges leave and arrive without crossing at the state.
pub(crate) struct Ports {
    out: Vec<f64>,
    inn: Vec<f64>,
    start: f64,
}

impl Ports {
    pub(crate) fn new(g: &Graph, nodes: &[Box], kinds: &[Kind], top: f64, bottom: f64) -> Ports {
        let n = g.states.len();
        // (key: the other end's height, edge) per side; the start edge is edge `usize::MAX`.
        let mut left: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
        let mut right: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
        for (i, (e, k)) in g.edges.iter().zip(kinds).enumerate() {
            let (far_from, far_to) = match k {
                Kind::SelfLoop => continue,
                Kind::Next => (mid(nodes[e.to]), mid(nodes[e.from])),
                Kind::Top(l) => (top - *l as f64, top - *l as f64),
                Kind::Bottom(l) => (bottom + *l as f64, bottom + *l as f64),
            };
            right[e.from].push((far_from, i));
            left[e.to].push((far_to, i));
        }
        left[g.initial].push((f64::MIN, usize::MAX));
        let mut out = vec![0.0; g.edges.len()];
        let mut inn = vec![0.0; g.edges.len()];
        let mut start = 0.0;
        for s in 0..n {
            for (side, ys) in [(&mut right[s], &mut out), (&mut left[s], &mut inn)] {
                side.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let k = side.len() as f64;
                for (j, &(_, e)) in side.iter().enumerate() {
                    let y = nodes[s].y + nodes[s].h * (j as f64 + 1.0) / (k + 1.0);
                    match e {
                        usize::MAX => start = y,
                        e => ys[e] = y,
                    }
                }
            }
        }
        Ports { out, inn, start }
    }

    pub(crate) fn out_y(&self, e: usize) -> f64 {
        self.out[e]
    }

    pub(crate) fn in_y(&self, e: usize) -> f64 {
        self.inn[e]
    }

    pub(crate) fn start_y(&self) -> f64 {
        self.start
    }
}

fn mid(b: Box) -> f64 {
    b.y + b.h / 2.0
}

/// A coordinate as written: whole pixels.
pub fn n(v: f64) -> i64 {
    v.round() as i64
}

/// To the next column: a horizontal S curve, the label above its middle.
pub(crate) fn curve(from: (f64, f64), to: (f64, f64)) -> Route {
    let dx = (to.0 - from.0) / 2.0;
    let path = format!(
        "M{} {}C{} {} {} {} {} {}",
        n(from.0),
        n(from.1),
        n(from.0 + dx),
        n(from.1),
        n(to.0 - dx),
        n(to.1),
        n(to.0),
        n(to.1)
    );
    let label = Label {
        x: (from.0 + to.0) / 2.0,
        y: (from.1 + to.1) / 2.0 - 4.0,
        anchor: "middle",
    };
    Route { path, label }
}

/// Self-loop `k` of a state: an arc above it, each next one wider and higher.
pub(crate) fn self_loop(b: Box, k: usize) -> Route {
    let spread = (k as f64 * 6.0).min(b.w * 0.25);
    let (x1, x2) = (b.x + b.w * 0.3 - spread, b.x + b.w * 0.7 + spread);
    let rise = LOOP_H + k as f64 * LOOP_STEP;
    let path = format!(
        "M{} {}C{} {} {} {} {} {}",
        n(x1),
        n(b.y),
        n(x1),
        n(b.y - rise),
        n(x2),
        n(b.y - rise),
        n(x2),
        n(b.y)
    );
    let label = Label {
        x: b.x + b.w / 2.0,
        y: b.y - 0.75 * rise - 3.0,
        anchor: "middle",
    };
    Route { path, label }
}

/// Out of the source's right side into the gap, along a lane, down the gap left of the
/// target, into its left side; corners rounded. The label sits on the lane.
pub(crate) fn laned(
    from: (f64, f64),
    gx_out: f64,
    lane_y: f64,
    gx_in: f64,
    to: (f64, f64),
) -> Route {
    let r = 6.0f64
        .min((lane_y - from.1).abs() / 2.0)
        .min((lane_y - to.1).abs() / 2.0);
    let down1 = if lane_y > from.1 { 1.0 } else { -1.0 };
    let down2 = if to.1 > lane_y { 1.0 } else { -1.0 };
    let left = if gx_in < gx_out { -1.0 } else { 1.0 };
    let path = format!(
        "M{} {}H{}Q{} {} {} {}V{}Q{} {} {} {}H{}Q{} {} {} {}V{}Q{} {} {} {}H{}",
        n(from.0),
        n(from.1),
        n(gx_out - r),
        n(gx_out),
        n(from.1),
        n(gx_out),
        n(from.1 + down1 * r),
        n(lane_y - down1 * r),
        n(gx_out),
        n(lane_y),
        n(gx_out + left * r),
        n(lane_y),
        n(gx_in - left * r),
        n(gx_in),
        n(lane_y),
        n(gx_in),
        n(lane_y + down2 * r),
        n(to.1 - down2 * r),
        n(gx_in),
        n(to.1),
        n(gx_in + r),
        n(to.1),
        n(to.0)
    );
    let label = Label {
        x: (gx_out + gx_in) / 2.0,
        y: lane_y - 4.0,
        anchor: "middle",
    };
    Route { path, label }
}
