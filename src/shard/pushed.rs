//! What a subscription is pushed, built from a log entry alone (live pushes and replay
//! reads alike): an applied event (`EventView`), or a lifecycle notice (`Notice`: an instance
//! migrated to another version, or deleted by DELETE_INSTANCES or its retention;
//! docs/lifecycle.md). `Pushed` is either, with the filter test and the push body.
//!
//! A body is the push's members without braces; the front adds `type` (`event` unless the body
//! begins with its own `"type"` member, as a notice's does), `subscription_id`, `shard`,
//! `wal_offset` and `cursor` (`front::subscriptions::sub`).

use serde::Serialize;
use serde_json::Map;
use shards::engine::{Context, DeleteReason, Entry, JsonText};

use super::subs::Filter;

/// The fields of an applied event, borrowed from its log entry.
pub struct EventView<'a> {
    pub instance_id: &'a str,
    pub machine: Option<&'a str>,
    pub version: Option<u32>,
    pub event: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub payload: Option<&'a JsonText>,
    /// Applied by a durable timer.
    pub timer: bool,
}

impl<'a> EventView<'a> {
    /// The event an entry records; `None` for entries that are not events.
    pub fn of(entry: &'a Entry) -> Option<EventView<'a>> {
        let ev = entry.as_event()?;
        let payload = match entry {
            Entry::Apply { payload, .. } => payload.as_ref(),
            _ => None,
        };
        Some(EventView {
            instance_id: ev.instance_id,
            machine: ev.machine,
            version: ev.version,
            event: ev.event,
            from: ev.from,
            to: ev.to,
            payload,
            timer: ev.timer,
        })
    }

    /// The push body (see `PushMsg`). Replayed events say so and carry no context.
    pub fn body(&self, context: Option<&Context>, replayed: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(160);
        member(&mut out, "instance_id", &self.instance_id, false);
        member(&mut out, "machine", &self.machine, true);
        member(&mut out, "version", &self.version, true);
        member(&mut out, "event", &self.event, true);
        member(&mut out, "from_state", &self.from, true);
        member(&mut out, "to_state", &self.to, true);
        match self.payload {
            Some(payload) => member(&mut out, "payload", payload, true),
            // An empty `Map` writes `{}` without allocating.
            None => member(&mut out, "payload", &Map::new(), true),
        }
        if let Some(ctx) = context {
            member(&mut out, "context", ctx, true);
        }
        if self.timer {
            out.extend_from_slice(br#","timer":true"#);
        }
        if replayed {
            out.extend_from_slice(br#","replayed":true"#);
        }
        out
    }
}

/// Appends `"key":value` (with a leading comma unless `first`).
fn member<T: Serialize + ?Sized>(out: &mut Vec<u8>, key: &str, value: &T, comma: bool) {
    if comma {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    // Strings, numbers and JSON maps always serialize into a Vec. A `JsonText` that fails its
    // check does so before writing anything, so the member still gets a value.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.extend_from_slice(b"null");
    }
}

impl Filter {
    pub fn matches(&self, ev: &EventView<'_>) -> bool {
        let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        self.instance_id
            .as_deref()
            .is_none_or(|id| id == ev.instance_id)
            && (self.machines.is_empty() || ev.machine.is_some_and(|m| any(&self.machines, m)))
            && any(&self.from_states, ev.from)
            && any(&self.to_states, ev.to)
            && any(&self.events, ev.event)
    }
}

/// A lifecycle notice: an instance migrated, or deleted by DELETE_INSTANCES or its retention.
/// WATCH_ALL's `machines` filter and WATCH_INSTANCE's instance apply to it; state and event
/// filters do not.
pub struct Notice<'a> {
    pub instance_id: &'a str,
    pub machine: &'a str,
    what: NoticeKind<'a>,
}

enum NoticeKind<'a> {
    Migrated {
        from_version: u32,
        to_version: u32,
        from_state: &'a str,
        to_state: &'a str,
    },
    Deleted(DeleteReason),
}

impl<'a> Notice<'a> {
    /// The notice an entry gives; None for other entries, for a DELETE_INSTANCE's delete
    /// (it names no machine: deleting one instance pushes nothing, as before), and for a slot
    /// move's cleanup at the source (`DeleteReason::Moved`: the instance lives on elsewhere,
    /// docs/cluster.md "Moving slots").
    pub fn of(entry: &'a Entry) -> Option<Notice<'a>> {
        match entry {
            Entry::Migrate {
                id,
                machine,
                from_version,
                to_version,
                from_state,
                to_state,
                ..
            } => Some(Notice {
                instance_id: id,
                machine,
                what: NoticeKind::Migrated {
                    from_version: *from_version,
                    to_version: *to_version,
                    from_state,
                    to_state,
                },
            }),
            Entry::Delete {
                id,
                machine: Some(machine),
                reason,
                ..
            } if *reason != Some(DeleteReason::Moved) => Some(Notice {
                instance_id: id,
                machine,
                what: NoticeKind::Deleted(reason.unwrap_or(DeleteReason::Delete)),
            }),
            _ => None,
        }
    }

    /// The push body, its `type` first.
    fn body(&self, replayed: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(160);
        let kind = match self.what {
            NoticeKind::Migrated { .. } => "migrated",
            NoticeKind::Deleted(_) => "deleted",
        };
        member(&mut out, "type", kind, false);
        member(&mut out, "instance_id", self.instance_id, true);
        member(&mut out, "machine", self.machine, true);
        match &self.what {
            NoticeKind::Migrated {
                from_version,
                to_version,
                from_state,
                to_state,
            } => {
                member(&mut out, "from_version", from_version, true);
                member(&mut out, "to_version", to_version, true);
                member(&mut out, "from_state", from_state, true);
                member(&mut out, "to_state", to_state, true);
            }
            NoticeKind::Deleted(reason) => member(&mut out, "reason", reason.as_str(), true),
        }
        if replayed {
            out.extend_from_slice(br#","replayed":true"#);
        }
        out
    }
}

/// What an entry pushes to the subscriptions it matches.
pub enum Pushed<'a> {
    Event(EventView<'a>),
    Notice(Notice<'a>),
}

impl<'a> Pushed<'a> {
    /// None for an entry that pushes nothing.
    pub fn of(entry: &'a Entry) -> Option<Pushed<'a>> {
        match EventView::of(entry) {
            Some(ev) => Some(Pushed::Event(ev)),
            None => Notice::of(entry).map(Pushed::Notice),
        }
    }

    /// Whether an entry pushes anything (decided before `apply` consumes it).
    pub fn pushes(entry: &Entry) -> bool {
        match entry {
            Entry::Apply { .. } | Entry::Migrate { .. } => true,
            Entry::Delete {
                machine, reason, ..
            } => machine.is_some() && *reason != Some(DeleteReason::Moved),
            _ => false,
        }
    }

    pub fn instance_id(&self) -> &'a str {
        match self {
            Pushed::Event(ev) => ev.instance_id,
            Pushed::Notice(n) => n.instance_id,
        }
    }

    /// Whether `filter` wants it (see `Notice` for what applies to a notice).
    pub fn matches(&self, filter: &Filter) -> bool {
        match self {
            Pushed::Event(ev) => filter.matches(ev),
            Pushed::Notice(n) => {
                let machines = &filter.machines;
                (filter.instance_id.as_deref()).is_none_or(|id| id == n.instance_id)
                    && (machines.is_empty() || machines.iter().any(|m| m == n.machine))
            }
        }
    }

    /// The push body; `context` is used by events only (a notice carries none).
    pub fn body(&self, context: Option<&Context>, replayed: bool) -> Vec<u8> {
        match self {
            Pushed::Event(ev) => ev.body(context, replayed),
            Pushed::Notice(n) => n.body(replayed),
        }
    }

    /// `body`, plus in cluster mode (`group`: the member's) `"group"` and the instance's
    /// `"slot"` (docs/cluster.md, "Subscriptions").
    pub fn body_in(
        &self,
        context: Option<&Context>,
        replayed: bool,
        group: Option<&str>,
    ) -> Vec<u8> {
        let mut out = self.body(context, replayed);
        if let Some(group) = group {
            let id = match self {
                Pushed::Event(ev) => ev.instance_id,
                Pushed::Notice(n) => n.instance_id,
            };
            member(&mut out, "group", group, true);
            member(&mut out, "slot", &smdb_protocol::slot::slot_of(id), true);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(machine: Option<&str>) -> Entry {
        Entry::Apply {
            instance_id: "o1".into(),
            event: "pay".into(),
            from: "new".into(),
            to: "paid".into(),
            payload: serde_json::from_value(json!({"amount": 3})).ok(),
            idempotency_key: None,
            at_ms: 1,
            machine: machine.map(str::to_string),
            version: machine.map(|_| 2),
            timer: false,
        }
    }

    #[test]
    fn body_is_object_members_in_push_order() {
        let entry = apply(Some("order"));
        let ev = EventView::of(&entry).unwrap();
        let body = String::from_utf8(ev.body(None, true)).unwrap();
        assert_eq!(
            body,
            r#""instance_id":"o1","machine":"order","version":2,"event":"pay","from_state":"new","to_state":"paid","payload":{"amount":3},"replayed":true"#
        );
        let ctx: Context = serde_json::from_value(json!({"a": 1})).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&[b"{", &ev.body(Some(&ctx), false)[..], b"}"].concat())
                .unwrap();
        assert_eq!(v["context"], json!({"a": 1}));
        assert!(v.get("replayed").is_none());
    }

    #[test]
    fn filters_match_every_given_list() {
        let entry = apply(Some("order"));
        let ev = EventView::of(&entry).unwrap();
        let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Filter::default().matches(&ev));
        let f = Filter {
            machines: strs(&["order", "x"]),
            from_states: strs(&["new"]),
            to_states: strs(&["paid"]),
            events: strs(&["pay"]),
            ..Filter::default()
        };
        assert!(f.matches(&ev));
        assert!(!Filter {
            events: strs(&["ship"]),
            ..f.clone()
        }
        .matches(&ev));
        assert!(!Filter {
            to_states: strs(&["new"]),
            ..f.clone()
        }
        .matches(&ev));
        let other = Filter {
            instance_id: Some("o2".into()),
            ..Filter::default()
        };
        assert!(!other.matches(&ev));
        // An entry from before machines were recorded matches no machine filter.
        let old = apply(None);
        assert!(!f.matches(&EventView::of(&old).unwrap()));
    }

    #[test]
    fn notices_name_their_type_first_and_match_machines_and_instances_only() {
        let migrate = Entry::Migrate {
            id: "o1".into(),
            machine: "order".into(),
            from_version: 1,
            to_version: 2,
            from_state: "new".into(),
            to_state: "open".into(),
            at_ms: 1,
        };
        let pushed = Pushed::of(&migrate).unwrap();
        let body = String::from_utf8(pushed.body(None, false)).unwrap();
        assert_eq!(
            body,
            r#""type":"migrated","instance_id":"o1","machine":"order","from_version":1,"to_version":2,"from_state":"new","to_state":"open""#
        );
        let events = Filter {
            events: vec!["pay".into()],
            to_states: vec!["x".into()],
            ..Filter::default()
        };
        assert!(
            pushed.matches(&events),
            "state and event filters do not apply"
        );
        let other = Filter {
            machines: vec!["invoice".into()],
            ..Filter::default()
        };
        assert!(!pushed.matches(&other));
        let deleted = Entry::Delete {
            id: "o1".into(),
            at_ms: 2,
            machine: Some("order".into()),
            reason: Some(DeleteReason::Retention),
        };
        let body = Pushed::of(&deleted).unwrap().body(None, true);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#""type":"deleted","instance_id":"o1","machine":"order","reason":"retention","replayed":true"#
        );
        let single = Entry::Delete {
            id: "o1".into(),
            at_ms: 2,
            machine: None,
            reason: None,
        };
        assert!(Pushed::of(&single).is_none() && !Pushed::pushes(&single));
        // A slot move's cleanup at the source is no deletion a subscriber sees.
        let moved = Entry::Delete {
            id: "o1".into(),
            at_ms: 2,
            machine: Some("order".into()),
            reason: Some(DeleteReason::Moved),
        };
        assert!(Pushed::of(&moved).is_none() && !Pushed::pushes(&moved));
        let import = Entry::Import {
            move_id: 1,
            lo: 0,
            hi: 9,
            id: "o1".into(),
            image: None,
            at_ms: 2,
        };
        assert!(Pushed::of(&import).is_none() && !Pushed::pushes(&import));
    }

    #[test]
    fn replay_tells_event_records_in_both_formats() {
        let del = Entry::Delete {
            id: "x".into(),
            at_ms: 1,
            machine: None,
            reason: None,
        };
        assert!(Entry::record_is_event(&apply(Some("m")).to_bytes()));
        assert!(Entry::record_is_event(
            &serde_json::to_vec(&apply(Some("m"))).unwrap()
        ));
        assert!(!Entry::record_is_event(&del.to_bytes()));
        assert!(!Entry::record_is_event(&serde_json::to_vec(&del).unwrap()));
    }
}
