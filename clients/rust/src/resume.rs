//! Where a subscription stands, so it can be opened again after a lost connection or a
//! `subscription_lagged` without a gap or a duplicate. Shared by the blocking and the async
//! subscription.

use serde_json::Value;

use crate::ops::{self, Event, Request, WatchAllFilter, WatchOptions, Watching};

/// What a subscription watches.
#[derive(Debug, Clone)]
pub enum Target {
    All(WatchAllFilter),
    Instance { id: String, opts: WatchOptions },
}

/// A subscription's target and position.
#[derive(Debug, Clone)]
pub struct Position {
    target: Target,
    /// The cursor after the last event delivered (or the WATCH response's, or a lag's).
    cursor: Option<String>,
    /// `wal_offset` of the last event delivered (WATCH_INSTANCE resumes after it).
    last_offset: Option<u64>,
}

impl Position {
    pub fn new(target: Target) -> Position {
        Position {
            target,
            cursor: None,
            last_offset: None,
        }
    }

    /// The WATCH request that (re)opens the subscription where it stands.
    pub fn request(&self) -> Request<Watching> {
        match &self.target {
            Target::All(filter) => {
                let mut f = filter.clone();
                if let Some(c) = &self.cursor {
                    f.from_cursor = Some(c.clone());
                }
                ops::watch_all(&f)
            }
            Target::Instance { id, opts } => {
                let mut o = opts.clone();
                let from = match (self.last_offset, &self.cursor) {
                    (Some(off), _) => Some(off + 1),
                    (None, Some(c)) => cursor_max(c).map(|m| m + 1),
                    (None, None) => None,
                };
                if from.is_some() {
                    o.from_offset = from;
                }
                ops::watch_instance(id, &o)
            }
        }
    }

    /// The subscription was (re)opened.
    pub fn opened(&mut self, w: &Watching) {
        if self.cursor.is_none() {
            self.cursor = Some(w.cursor.clone());
        }
    }

    /// An event was delivered.
    pub fn delivered(&mut self, e: &Event) {
        self.cursor = Some(e.cursor.clone());
        self.last_offset = Some(e.wal_offset);
    }

    /// The server ended the subscription for lag; it resumes from `resume_cursor`.
    pub fn lagged(&mut self, resume_cursor: &str) {
        self.cursor = Some(resume_cursor.to_string());
        if let Some(m) = cursor_max(resume_cursor) {
            self.last_offset = Some(m);
        }
    }

    /// The cursor to resume from, when known.
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }
}

/// The highest shard position in a cursor (`c1-<o0>-<o1>-...`, or `c2-<e0>.<o0>-...` with
/// each offset's epoch). A WATCH_INSTANCE cursor holds its shard's position and zeros, so this
/// is the instance shard's position.
fn cursor_max(cursor: &str) -> Option<u64> {
    // In cluster mode the positions are followed by `@<group>`.
    let cursor = cursor.split('@').next().unwrap_or(cursor);
    if let Some(rest) = cursor.strip_prefix("c1-") {
        return rest.split('-').map(|p| p.parse::<u64>().ok()).max()?;
    }
    let rest = cursor.strip_prefix("c2-")?;
    let offset = |p: &str| p.split_once('.').and_then(|(_, o)| o.parse::<u64>().ok());
    rest.split('-').map(offset).max()?
}

/// A push of subscription `id`: `Some(Ok(event))`, `Some(Err(resume_cursor))` for its lag,
/// `None` for anything else (another subscription's push, a stale one).
pub fn classify(push: &Value, id: &Value) -> Option<Result<Event, String>> {
    if &push["subscription_id"] != id {
        return None;
    }
    match push["type"].as_str() {
        Some("event") => serde_json::from_value(push.clone()).ok().map(Ok),
        Some("subscription_lagged") => Some(Err(push["resume_cursor"]
            .as_str()
            .unwrap_or("0")
            .to_string())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn instance_subscriptions_resume_after_the_last_offset() {
        let mut p = Position::new(Target::Instance {
            id: "a".into(),
            opts: WatchOptions::default(),
        });
        assert_eq!(p.request().params, json!({"instance_id": "a"}));
        p.opened(&Watching {
            subscription_id: json!(1),
            cursor: "c1-0-7".into(),
        });
        assert_eq!(p.request().params["from_offset"], 8);
        p.lagged("c1-0-9");
        assert_eq!(p.request().params["from_offset"], 10);
    }

    #[test]
    fn all_subscriptions_resume_from_the_cursor() {
        let mut p = Position::new(Target::All(WatchAllFilter::default()));
        assert_eq!(p.request().params, json!({}));
        p.opened(&Watching {
            subscription_id: json!(1),
            cursor: "c1-3-4".into(),
        });
        assert_eq!(p.request().params["from_cursor"], "c1-3-4");
        assert_eq!(cursor_max("c1-3-4"), Some(4));
        assert_eq!(cursor_max("c2-1.3-2.4"), Some(4));
        assert_eq!(cursor_max("c2-1-2"), None);
        assert_eq!(cursor_max("0"), None);
    }
}
