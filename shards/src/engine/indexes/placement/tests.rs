//! The placement index against a model: a list of (group, id) filtered and sorted per page.

use proptest::prelude::*;

use super::*;

fn group(machine: NameId, state: NameId, armed: bool) -> Group {
    Group {
        machine,
        state,
        armed,
    }
}

/// What a page must hold: the model's matching ids after `after`, sorted, the first `limit`.
fn model_page(
    model: &[(Group, String)],
    filter: GroupFilter,
    after: Option<&str>,
    limit: usize,
) -> (Vec<String>, bool) {
    let mut ids: Vec<String> = model
        .iter()
        .filter(|(g, id)| filter.matches(g) && after.is_none_or(|a| id.as_str() > a))
        .map(|(_, id)| id.clone())
        .collect();
    ids.sort();
    let more = ids.len() > limit;
    ids.truncate(limit);
    (ids, more)
}

#[test]
fn a_page_merges_the_selected_groups_by_id() {
    let mut p = Placement::default();
    p.insert(group(1, 10, false), "c".into());
    p.insert(group(1, 11, false), "a".into());
    p.insert(group(1, 11, true), "d".into());
    p.insert(group(2, 10, false), "b".into());
    let all = GroupFilter::default();
    assert_eq!(p.page(all, None, 10), (vec!["a", "b", "c", "d"], false));
    assert_eq!(p.page(all, Some("a"), 2), (vec!["b", "c"], true));
    assert_eq!(p.page(all, None, 0), (vec![], true));
    let m1 = GroupFilter {
        machine: Some(1),
        ..GroupFilter::default()
    };
    assert_eq!(p.page(m1, None, 10), (vec!["a", "c", "d"], false));
    let state10 = GroupFilter {
        state: Some(10),
        ..GroupFilter::default()
    };
    assert_eq!(p.page(state10, None, 10), (vec!["b", "c"], false));
    let armed = GroupFilter {
        armed: Some(true),
        ..GroupFilter::default()
    };
    assert_eq!(p.page(armed, None, 10), (vec!["d"], false));
    assert_eq!(p.len(), 4);
}

#[test]
fn moving_keeps_one_entry_and_an_emptied_group_is_dropped() {
    let mut p = Placement::default();
    let (a, b) = (group(1, 10, false), group(1, 11, false));
    p.insert(a, "x".into());
    p.moved(a, b, "x");
    p.moved(b, b, "x");
    assert_eq!(p.len(), 1);
    assert_eq!(p.groups.len(), 1);
    assert_eq!(p.remove(b, "x").as_deref(), Some("x"));
    assert!(p.groups.is_empty());
    assert_eq!(p.remove(b, "x"), None);
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Group, String),
    Move(usize, Group),
    Remove(usize),
}

fn any_group() -> impl Strategy<Value = Group> {
    (0u32..3, 0u32..4, any::<bool>()).prop_map(|(m, s, a)| group(m, s, a))
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any_group(), "[a-e]{0,3}").prop_map(|(g, id)| Op::Insert(g, id)),
        (any::<usize>(), any_group()).prop_map(|(i, g)| Op::Move(i, g)),
        any::<usize>().prop_map(Op::Remove),
    ]
}

fn any_filter() -> impl Strategy<Value = GroupFilter> {
    (
        proptest::option::of(0u32..3),
        proptest::option::of(0u32..4),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(machine, state, armed)| GroupFilter {
            machine,
            state,
            armed,
        })
}

proptest! {
    /// After any inserts, moves and removals (ids unique, as instance ids are), a built copy
    /// and the maintained index both page exactly like the model, under every filter.
    #[test]
    fn pages_follow_the_model(
        ops in proptest::collection::vec(any_op(), 0..60),
        filter in any_filter(),
        after in proptest::option::of("[a-e]{0,2}"),
        limit in 0usize..6,
    ) {
        let mut p = Placement::default();
        let mut model: Vec<(Group, String)> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(g, id) if !model.iter().any(|(_, m)| *m == id) => {
                    p.insert(g, id.as_str().into());
                    model.push((g, id));
                }
                Op::Move(i, to) if !model.is_empty() => {
                    let i = i % model.len();
                    let (from, id) = model[i].clone();
                    p.moved(from, to, &id);
                    model[i].0 = to;
                }
                Op::Remove(i) if !model.is_empty() => {
                    let (g, id) = model.swap_remove(i % model.len());
                    prop_assert!(p.remove(g, &id).is_some());
                }
                _ => {}
            }
        }
        let built = Placement::build(model.iter().map(|(g, id)| (*g, id.as_str().into())));
        let want = model_page(&model, filter, after.as_deref(), limit);
        for index in [&p, &built] {
            let (ids, more) = index.page(filter, after.as_deref(), limit);
            let ids: Vec<String> = ids.into_iter().map(str::to_owned).collect();
            prop_assert_eq!(&(ids, more), &want);
            prop_assert_eq!(index.len(), model.len());
        }
    }
}
