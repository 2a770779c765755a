//! A layered, left-to-right layout for state machines (docs/http.md, "Diagrams", says why
//! this one and not a general graph layout).
//!
//! 1. Ranks: a state's column is its distance in transitions from the initial state (states
//!    not reachable from it start their own ranks at 0), so the usual forward flow reads left
//!    to right and every retry or cancel path is a back edge.
//! 2. Order: declaration order, then barycenter sweeps down and up the columns to reduce
//!    crossings.
//! 3. Edges: to the next column, a curve from the source's right side to the target's left
//!    side, the label at its middle; self-loops stacked above their state; every other edge
//!    (back, same column, or skipping columns) leaves into the gap right of its column, runs
//!    along a lane above (forward) or below (back) the states, and comes down the gap left of
//!    its target, so no edge crosses a state. Lanes are shared by edges whose spans (label
//!    included) do not overlap. Ports are spread along a state's side so edges do not meet.

use crate::model::Graph;
pub use crate::route::n;
use crate::route::{curve, laned, self_loop, Ports};

/// Pixels per character of the 12 px monospace font (its advance is 0.6 em).
pub const CHAR_W: f64 = 7.2;
pub const NODE_W_MIN: f64 = 72.0;
pub const NODE_H_MIN: f64 = 40.0;
const NODE_PAD_X: f64 = 14.0;
/// Vertical room per port on a state's side.
const PORT_STEP: f64 = 14.0;
const MARGIN: f64 = 16.0;
/// The gap between columns when no label needs more.
const GAP_MIN: f64 = 56.0;
const LABEL_PAD: f64 = 12.0;
/// Horizontal room per vertical lane track in a gap.
const TRACK_W: f64 = 8.0;
/// Vertical room per lane (a label line and its edge).
const LANE_H: f64 = 22.0;
const ROW_GAP: f64 = 28.0;
/// The first self-loop's height above its state, and each next one's extra.
pub(crate) const LOOP_H: f64 = 22.0;
pub(crate) const LOOP_STEP: f64 = 20.0;
/// Space left of the first column for the start dot's edge.
const START_LEN: f64 = 26.0;
/// Longest label drawn, in characters (the whole one is the edge's tooltip).
pub const LABEL_CHARS_MAX: usize = 48;

/// A state's box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Box {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// Where an edge's label goes and how it is anchored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Label {
    pub x: f64,
    pub y: f64,
    /// `text-anchor`: "middle" or "start".
    pub anchor: &'static str,
}

/// One edge, drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// SVG path data.
    pub path: String,
    pub label: Label,
}

/// The whole drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The drawing's box (`viewBox`): every state, edge and label is inside it.
    pub min_x: f64,
    pub min_y: f64,
    pub width: f64,
    pub height: f64,
    pub nodes: Vec<Box>,
    /// The start dot's centre.
    pub start: (f64, f64),
    pub start_path: String,
    /// One per `Graph::edges`, same order.
    pub edges: Vec<Route>,
}

/// A label as drawn (cut to `LABEL_CHARS_MAX`).
pub fn short_label(label: &str) -> String {
    match label.char_indices().nth(LABEL_CHARS_MAX) {
        Some((end, _)) => format!("{}…", &label[..end]),
        None => label.to_string(),
    }
}

fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

fn label_w(g: &Graph, e: usize) -> f64 {
    text_w(&short_label(&g.edges[e].label()))
}

/// How each edge is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    SelfLoop,
    /// To the next column.
    Next,
    /// Along lane `n` above the states.
    Top(usize),
    /// Along lane `n` below the states.
    Bottom(usize),
}

/// Lays `g` out.
pub fn layout(g: &Graph) -> Layout {
    let rank = ranks(g);
    let columns = order(g, &rank);
    let mut kinds: Vec<Kind> = (g.edges.iter())
        .map(
            |e| match (e.from == e.to, rank[e.to] as i64 - rank[e.from] as i64) {
                (true, _) => Kind::SelfLoop,
                (false, 1) => Kind::Next,
                (false, d) if d > 1 => Kind::Top(0),
                _ => Kind::Bottom(0),
            },
        )
        .collect();
    let mut geo = Geometry::new(g, &rank, &columns, &kinds);
    geo.lanes(g, &rank, &mut kinds);
    geo.place(g, &rank, &columns, &kinds);
    geo.route(g, &rank, &kinds)
}

/// Distance from the initial state (other roots in definition order start at 0).
fn ranks(g: &Graph) -> Vec<usize> {
    let n = g.states.len();
    let mut rank = vec![usize::MAX; n];
    let roots = std::iter::once(g.initial).chain(0..n);
    for root in roots {
        if rank[root] != usize::MAX {
            continue;
        }
        rank[root] = 0;
        let mut queue = std::collections::VecDeque::from([root]);
        while let Some(s) = queue.pop_front() {
            for e in g.edges.iter().filter(|e| e.from == s) {
                if rank[e.to] == usize::MAX {
                    rank[e.to] = rank[s] + 1;
                    queue.push_back(e.to);
                }
            }
        }
    }
    rank
}

/// States per column, ordered to reduce crossings (barycenters of neighbours in the
/// adjacent column, a few sweeps each way).
fn order(g: &Graph, rank: &[usize]) -> Vec<Vec<usize>> {
    let columns_n = rank.iter().max().map_or(0, |r| r + 1);
    let mut columns: Vec<Vec<usize>> = vec![Vec::new(); columns_n];
    for (s, &r) in rank.iter().enumerate() {
        columns[r].push(s);
    }
    let mut pos = vec![0.0; rank.len()];
    let set_pos = |columns: &Vec<Vec<usize>>, pos: &mut Vec<f64>| {
        for col in columns {
            for (i, &s) in col.iter().enumerate() {
                pos[s] = i as f64;
            }
        }
    };
    set_pos(&columns, &mut pos);
    for sweep in 0..8 {
        let down = sweep % 2 == 0;
        let seq: Vec<usize> = match down {
            true => (1..columns_n).collect(),
            false => (0..columns_n.saturating_sub(1)).rev().collect(),
        };
        for r in seq {
            let other = if down { r - 1 } else { r + 1 };
            let bary = |s: usize| {
                let near: Vec<f64> = (g.edges.iter())
                    .filter_map(|e| match (e.from == s, e.to == s) {
                        (true, _) if rank[e.to] == other => Some(pos[e.to]),
                        (_, true) if rank[e.from] == other => Some(pos[e.from]),
                        _ => None,
                    })
                    .collect();
                match near.is_empty() {
                    true => pos[s],
                    false => near.iter().sum::<f64>() / near.len() as f64,
                }
            };
            let mut keyed: Vec<(f64, usize)> = columns[r].iter().map(|&s| (bary(s), s)).collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(pos[a.1].total_cmp(&pos[b.1])));
            columns[r] = keyed.into_iter().map(|(_, s)| s).collect();
            set_pos(&columns, &mut pos);
        }
    }
    columns
}

/// Sizes and positions being worked out.
struct Geometry {
    nodes: Vec<Box>,
    /// Per column: width and left x.
    col_w: Vec<f64>,
    col_x: Vec<f64>,
    /// Gap `k` is left of column `k` (gap `columns` is right of the last one).
    gap_w: Vec<f64>,
    /// Tracks used in each gap from its left side (edges leaving the column on its left) and
    /// from its right side (edges entering the column on its right).
    tracks_left: Vec<usize>,
    tracks_right: Vec<usize>,
    top_lanes: usize,
    bottom_lanes: usize,
    /// Where the states start and end vertically.
    nodes_top: f64,
    nodes_bottom: f64,
}

impl Geometry {
    fn new(g: &Graph, rank: &[usize], columns: &[Vec<usize>], kinds: &[Kind]) -> Geometry {
        let n = g.states.len();
        let (mut left, mut right) = (vec![0usize; n], vec![0usize; n]);
        for (e, k) in g.edges.iter().zip(kinds) {
            match k {
                Kind::SelfLoop => {}
                Kind::Next | Kind::Top(_) => {
                    right[e.from] += 1;
                    left[e.to] += 1;
                }
                Kind::Bottom(_) => {
                    right[e.from] += 1;
                    left[e.to] += 1;
                }
            }
        }
        left[g.initial] += 1; // the start edge
        let nodes = (0..n)
            .map(|s| Box {
                x: 0.0,
                y: 0.0,
                w: (text_w(&g.states[s]) + 2.0 * NODE_PAD_X).max(NODE_W_MIN),
                h: (PORT_STEP * (left[s].max(right[s]) + 1) as f64).max(NODE_H_MIN),
            })
            .collect::<Vec<_>>();
        let col_w = (columns.iter())
            .map(|c| c.iter().map(|&s| nodes[s].w).fold(0.0, f64::max))
            .collect::<Vec<_>>();
        let gaps = columns.len() + 1;
        let mut label_room = vec![0.0f64; gaps];
        for (i, k) in kinds.iter().enumerate() {
            if *k == Kind::Next {
                let gap = rank[g.edges[i].to];
                label_room[gap] = label_room[gap].max(label_w(g, i));
            }
        }
        Geometry {
            nodes,
            col_x: vec![0.0; columns.len()],
            col_w,
            gap_w: label_room,
            tracks_left: vec![0; gaps],
            tracks_right: vec![0; gaps],
            top_lanes: 0,
            bottom_lanes: 0,
            nodes_top: 0.0,
            nodes_bottom: 0.0,
        }
    }

    /// Track counts per gap, gap widths, column x, then lanes for the edges that need one.
    fn lanes(&mut self, g: &Graph, rank: &[usize], kinds: &mut [Kind]) {
        for (e, k) in g.edges.iter().zip(kinds.iter()) {
            if matches!(k, Kind::Top(_) | Kind::Bottom(_)) {
                self.tracks_left[rank[e.from] + 1] += 1;
                self.tracks_right[rank[e.to]] += 1;
            }
        }
        let mut x = MARGIN + START_LEN;
        for c in 0..self.col_w.len() {
            let tracks = (self.tracks_left[c] + self.tracks_right[c]) as f64 * TRACK_W;
            let room = match c {
                0 => 0.0,
                _ => (self.gap_w[c] + 2.0 * LABEL_PAD).max(GAP_MIN),
            };
            self.gap_w[c] = room + tracks;
            x += self.gap_w[c];
            self.col_x[c] = x;
            x += self.col_w[c];
        }
        let last = self.col_w.len();
        self.gap_w[last] = (self.tracks_left[last] + self.tracks_right[last]) as f64 * TRACK_W;
        // Lanes: shorter spans nearer the states; a lane holds spans that do not overlap.
        let mut want: Vec<(usize, f64, f64)> = Vec::new();
        for (i, (e, k)) in g.edges.iter().zip(kinds.iter()).enumerate() {
            if matches!(k, Kind::Top(_) | Kind::Bottom(_)) {
                let (a, b) = (self.col_x[rank[e.from]], self.col_x[rank[e.to]]);
                let (lo, hi) = (
                    a.min(b),
                    a.max(b) + self.col_w[rank[e.from].max(rank[e.to])],
                );
                let mid = (lo + hi) / 2.0;
                let half = (label_w(g, i) / 2.0 + LABEL_PAD).max((hi - lo) / 2.0);
                want.push((i, mid - half, mid + half));
            }
        }
        want.sort_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1)).then(a.0.cmp(&b.0)));
        let mut taken: [Vec<Vec<(f64, f64)>>; 2] = [Vec::new(), Vec::new()];
        for (i, lo, hi) in want {
            let side = usize::from(matches!(kinds[i], Kind::Bottom(_)));
            let lanes = &mut taken[side];
            let free = lanes
                .iter()
                .position(|spans| spans.iter().all(|&(a, b)| hi < a || lo > b));
            let lane = free.unwrap_or_else(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
            lanes[lane].push((lo, hi));
            kinds[i] = match side {
                0 => Kind::Top(lane),
                _ => Kind::Bottom(lane),
            };
        }
        self.top_lanes = taken[0].len();
        self.bottom_lanes = taken[1].len();
    }

    /// States' positions: each column stacked (room above each state for its self-loops)
    /// and centred on the tallest column, below the top lanes.
    fn place(&mut self, g: &Graph, _rank: &[usize], columns: &[Vec<usize>], kinds: &[Kind]) {
        let mut loops = vec![0usize; g.states.len()];
        for (e, k) in g.edges.iter().zip(kinds) {
            if *k == Kind::SelfLoop {
                loops[e.from] += 1;
            }
        }
        let loop_room = |s: usize| match loops[s] {
            0 => 0.0,
            n => 0.75 * (LOOP_H + (n - 1) as f64 * LOOP_STEP) + 16.0,
        };
        let heights: Vec<f64> = (columns.iter())
            .map(|c| {
                c.iter()
                    .map(|&s| loop_room(s) + self.nodes[s].h + ROW_GAP)
                    .sum::<f64>()
            })
            .collect();
        let tallest = heights.iter().copied().fold(0.0, f64::max);
        self.nodes_top = MARGIN + self.top_lanes as f64 * LANE_H + 8.0;
        for (c, col) in columns.iter().enumerate() {
            let mut y = self.nodes_top + (tallest - heights[c]) / 2.0;
            for &s in col {
                y += loop_room(s);
                let node = &mut self.nodes[s];
                node.x = self.col_x[c] + (self.col_w[c] - node.w) / 2.0;
                node.y = y;
                y += node.h + ROW_GAP;
            }
        }
        self.nodes_bottom = self.nodes_top + tallest - ROW_GAP;
    }

    /// Every edge's path and label position.
    fn route(self, g: &Graph, rank: &[usize], kinds: &[Kind]) -> Layout {
        let ports = Ports::new(g, &self.nodes, kinds, self.nodes_top, self.nodes_bottom);
        let mut used_left = self.tracks_left.iter().map(|_| 0usize).collect::<Vec<_>>();
        let mut used_right = used_left.clone();
        let mut loops_seen = vec![0usize; g.states.len()];
        let mut edges = Vec::with_capacity(g.edges.len());
        for ((i, e), k) in g.edges.iter().enumerate().zip(kinds) {
            let (a, b) = (self.nodes[e.from], self.nodes[e.to]);
            let route = match *k {
                Kind::SelfLoop => {
                    loops_seen[e.from] += 1;
                    self_loop(a, loops_seen[e.from] - 1)
                }
                Kind::Next => {
                    let (sy, ty) = (ports.out_y(i), ports.in_y(i));
                    curve((a.x + a.w, sy), (b.x, ty))
                }
                Kind::Top(lane) | Kind::Bottom(lane) => {
                    let out_gap = rank[e.from] + 1;
                    let in_gap = rank[e.to];
                    used_left[out_gap] += 1;
                    used_right[in_gap] += 1;
                    let gx_out = self.gap_left(out_gap) + used_left[out_gap] as f64 * TRACK_W;
                    let gx_in = self.gap_right(in_gap) - used_right[in_gap] as f64 * TRACK_W;
                    let lane_y = match *k {
                        Kind::Top(_) => self.nodes_top - 8.0 - (lane as f64 + 0.5) * LANE_H,
                        _ => self.nodes_bottom + 8.0 + (lane as f64 + 0.5) * LANE_H,
                    };
                    let from = (a.x + a.w, ports.out_y(i));
                    let to = (b.x, ports.in_y(i));
                    laned(from, gx_out, lane_y, gx_in, to)
                }
            };
            edges.push(route);
        }
        let init = self.nodes[g.initial];
        let start_y = ports.start_y();
        let start = (MARGIN + 6.0, start_y);
        let height = self.nodes_bottom + 8.0 + self.bottom_lanes as f64 * LANE_H + MARGIN;
        let width = self.col_x.last().copied().unwrap_or(0.0)
            + self.col_w.last().copied().unwrap_or(0.0)
            + self.gap_w.last().copied().unwrap_or(0.0)
            + MARGIN;
        let (x0, y0, x1, y1) = bounds(g, &edges, width, height);
        Layout {
            min_x: x0,
            min_y: y0,
            width: x1 - x0,
            height: y1 - y0,
            start,
            start_path: format!("M{} {}H{}", n(start.0 + 5.0), n(start_y), n(init.x)),
            nodes: self.nodes,
            edges,
        }
    }

    /// The x where gap `k` begins (right edge of column `k - 1`).
    fn gap_left(&self, k: usize) -> f64 {
        match k {
            0 => self.col_x.first().copied().unwrap_or(0.0) - self.gap_w[0],
            _ => self.col_x[k - 1] + self.col_w[k - 1],
        }
    }

    /// The x where gap `k` ends (left edge of column `k`).
    fn gap_right(&self, k: usize) -> f64 {
        match self.col_x.get(k) {
            Some(x) => *x,
            None => self.gap_left(k) + self.gap_w[k],
        }
    }
}

/// The drawing's box, `(x0, y0, x1, y1)`: `width` x `height` grown to hold every label (a
/// long self-loop label may reach past the states, on any side).
fn bounds(g: &Graph, edges: &[Route], width: f64, height: f64) -> (f64, f64, f64, f64) {
    let (mut x0, mut y0, mut x1, mut y1) = (0.0f64, 0.0f64, width, height);
    for (i, r) in edges.iter().enumerate() {
        let w = label_w(g, i);
        let (lx, rx) = match r.label.anchor {
            "start" => (r.label.x, r.label.x + w),
            _ => (r.label.x - w / 2.0, r.label.x + w / 2.0),
        };
        x0 = x0.min(lx - 4.0);
        x1 = x1.max(rx + 4.0);
        y0 = y0.min(r.label.y - 16.0);
        y1 = y1.max(r.label.y + 6.0);
    }
    (x0, y0, x1, y1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn graph(def: serde_json::Value) -> Graph {
        Graph::from_definition(&def).unwrap()
    }

    fn order_def() -> Graph {
        graph(
            json!({"states": ["new", "paid", "shipped", "cancelled"], "initial": "new",
            "final": ["shipped", "cancelled"], "transitions": [
                {"from": "new", "event": "pay", "to": "paid"},
                {"from": "paid", "event": "ship", "to": "shipped"},
                {"from": ["new", "paid"], "event": "cancel", "to": "cancelled"},
                {"from": "paid", "event": "touch", "to": "paid"},
                {"from": "paid", "event": "refund", "to": "new"}]}),
        )
    }

    #[test]
    fn ranks_are_distances_from_the_initial_state() {
        assert_eq!(ranks(&order_def()), vec![0, 1, 2, 1]);
        let g = graph(json!({"states": ["a", "b", "island"], "initial": "a",
            "transitions": [{"from": "a", "event": "e", "to": "b"}]}));
        assert_eq!(ranks(&g), vec![0, 1, 0]);
    }

    #[test]
    fn no_state_overlaps_another_and_everything_is_inside() {
        let g = order_def();
        let l = layout(&g);
        for (i, a) in l.nodes.iter().enumerate() {
            assert!(a.x >= 0.0 && a.y >= 0.0, "{a:?}");
            assert!(
                a.x + a.w <= l.min_x + l.width && a.y + a.h <= l.min_y + l.height,
                "{a:?}"
            );
            for b in &l.nodes[i + 1..] {
                let apart =
                    a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y;
                assert!(apart, "{a:?} {b:?}");
            }
        }
        assert_eq!(l.edges.len(), g.edges.len());
        // Columns run left to right by rank.
        assert!(l.nodes[0].x < l.nodes[1].x && l.nodes[1].x < l.nodes[2].x);
    }

    #[test]
    fn long_labels_are_cut() {
        let long = "x".repeat(100);
        assert_eq!(short_label(&long).chars().count(), LABEL_CHARS_MAX + 1);
        assert_eq!(short_label("pay"), "pay");
    }
}
