//! A definition read into what the writers draw: states, and one edge per (state covered,
//! transition).

use serde_json::Value;

/// Most states drawn; a definition with more is refused (a drawing that large is unreadable,
/// and the layout's sweeps grow with the square of a rank's size).
pub const STATES_MAX: usize = 1000;
/// Most edges drawn, `*` and multi-`from` transitions counted once per state they cover.
pub const EDGES_MAX: usize = 10_000;

/// When a timed transition fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timer {
    /// `after_ms`: this long after the state is entered.
    After(u64),
    /// `at`: the time held in this context field.
    At(String),
}

impl Timer {
    /// `after 30s`, `after 1.5s`, `at ctx.deadline`.
    pub fn label(&self) -> String {
        match self {
            Timer::After(ms) => format!("after {}", duration(*ms)),
            Timer::At(field) => format!("at {field}"),
        }
    }
}

/// `1500` → `1.5s`, `120000` → `2m`, `250` → `250ms`.
fn duration(ms: u64) -> String {
    let units = [(3_600_000, "h"), (60_000, "m"), (1000, "s")];
    for (size, unit) in units {
        if ms >= size {
            let whole = ms / size;
            let tenth = (ms % size) * 10 / size;
            return match (tenth, ms % size == 0) {
                (_, true) => format!("{whole}{unit}"),
                (0, false) => format!("{whole}{unit}+"),
                (t, false) => format!("{whole}.{t}{unit}"),
            };
        }
    }
    format!("{ms}ms")
}

/// One transition out of one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub event: String,
    pub guard: Option<String>,
    pub timer: Option<Timer>,
}

impl Edge {
    /// `event [guard] (after 30s)`: the edge's label, whole (ASCII around the names: a
    /// symbol for the timer would need a font every viewer may not have).
    pub fn label(&self) -> String {
        let mut s = self.event.clone();
        if let Some(g) = &self.guard {
            s.push_str(&format!(" [{g}]"));
        }
        if let Some(t) = &self.timer {
            s.push_str(&format!(" ({})", t.label()));
        }
        s
    }
}

/// A machine as drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    /// In definition order.
    pub states: Vec<String>,
    pub initial: usize,
    pub finals: Vec<bool>,
    /// In definition order; a `*` or list `from` gives one edge per state, in state order.
    pub edges: Vec<Edge>,
}

impl Graph {
    /// Reads `{"states", "initial", "final"?, "transitions"}`.
    pub fn from_definition(def: &Value) -> Result<Graph, String> {
        let states: Vec<String> =
            strings(&def["states"]).ok_or("`states` must be a list of names")?;
        if states.is_empty() || states.len() > STATES_MAX {
            return Err(format!("a drawing holds 1 to {STATES_MAX} states"));
        }
        let index = |name: &str| {
            states
                .iter()
                .position(|s| s == name)
                .ok_or_else(|| format!("unknown state {name:?}"))
        };
        let initial = index(def["initial"].as_str().ok_or("`initial` must be a state")?)?;
        let mut finals = vec![false; states.len()];
        for f in strings(&def["final"]).unwrap_or_default() {
            finals[index(&f)?] = true;
        }
        let mut edges = Vec::new();
        let transitions = def["transitions"]
            .as_array()
            .ok_or("`transitions` must be a list")?;
        for t in transitions {
            let to = index(t["to"].as_str().ok_or("a transition lacks `to`")?)?;
            let event = t["event"].as_str().ok_or("a transition lacks `event`")?;
            let froms: Vec<usize> = match &t["from"] {
                Value::String(s) if s == "*" => (0..states.len()).filter(|&i| !finals[i]).collect(),
                Value::String(s) => vec![index(s)?],
                v => strings(v)
                    .ok_or("`from` must be a state, a list of states or \"*\"")?
                    .iter()
                    .map(|s| index(s))
                    .collect::<Result<_, _>>()?,
            };
            let timer = match (&t["after_ms"], &t["at"]) {
                (Value::Number(n), _) => n.as_u64().map(Timer::After),
                (_, Value::String(field)) => Some(Timer::At(field.clone())),
                _ => None,
            };
            for from in froms {
                if edges.len() == EDGES_MAX {
                    return Err(format!("a drawing holds at most {EDGES_MAX} edges"));
                }
                edges.push(Edge {
                    from,
                    to,
                    event: event.to_string(),
                    guard: t["guard"].as_str().map(str::to_string),
                    timer: timer.clone(),
                });
            }
        }
        Ok(Graph {
            states,
            initial,
            finals,
            edges,
        })
    }
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn star_and_lists_cover_each_state_and_timers_are_read() {
        let def = json!({"states": ["a", "b", "c"], "initial": "a", "final": ["c"],
            "transitions": [
                {"from": "*", "event": "x", "to": "c"},
                {"from": ["a", "b"], "event": "y", "to": "b", "guard": "ctx.n > 1"},
                {"from": "b", "event": "t", "to": "c", "after_ms": 1500},
                {"from": "b", "event": "u", "to": "a", "at": "ctx.due"}]});
        let g = Graph::from_definition(&def).unwrap();
        let pairs: Vec<(usize, usize)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
        assert_eq!(pairs, vec![(0, 2), (1, 2), (0, 1), (1, 1), (1, 2), (1, 0)]);
        assert_eq!(g.edges[2].label(), "y [ctx.n > 1]");
        assert_eq!(g.edges[4].label(), "t (after 1.5s)");
        assert_eq!(g.edges[5].label(), "u (at ctx.due)");
        assert_eq!(g.finals, vec![false, false, true]);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        let got: Vec<String> = [250, 1000, 1500, 60_000, 90_000, 3_600_000, 61_001]
            .map(duration)
            .to_vec();
        assert_eq!(got, ["250ms", "1s", "1.5s", "1m", "1.5m", "1h", "1m+"]);
    }

    #[test]
    fn bad_definitions_say_what_is_wrong() {
        for def in [
            json!({}),
            json!({"states": [], "initial": "a", "transitions": []}),
            json!({"states": ["a"], "initial": "b", "transitions": []}),
            json!({"states": ["a"], "initial": "a", "transitions": [{"from": "a", "event": "e", "to": "z"}]}),
        ] {
            assert!(Graph::from_definition(&def).is_err(), "{def}");
        }
    }
}
