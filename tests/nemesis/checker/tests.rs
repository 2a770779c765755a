//! The checker on crafted histories: clean ones accepted, each anomaly class detected.

use super::super::history::{Final, History, Kind, Mode, Op, Outcome, Term};
use super::{check, term_at, Class, Verdict};
use std::collections::BTreeMap;

const I: &str = "i1";

/// An op sent at `t0` and answered at `t1` milliseconds.
fn op(process: u32, member: &str, kind: Kind, (t0, t1): (u64, u64), outcome: Outcome) -> Op {
    Op {
        process,
        member: member.into(),
        instance: I.into(),
        kind,
        invoke_ns: t0 * 1_000_000,
        complete_ns: t1 * 1_000_000,
        outcome,
        error: (outcome != Outcome::Ok).then(|| "TIMEOUT".into()),
        shard: None,
        wal_offset: None,
    }
}

/// An append of `token`; an ok one written at offset `token` of shard 0.
fn append(member: &str, token: u64, t: (u64, u64), outcome: Outcome) -> Op {
    let mut o = op(token as u32 % 2, member, Kind::Append { token }, t, outcome);
    if outcome == Outcome::Ok {
        (o.shard, o.wal_offset) = (Some(0), Some(token));
    }
    o
}

fn read(process: u32, member: &str, tokens: &[u64], t: (u64, u64)) -> Op {
    let kind = Kind::Read {
        tokens: tokens.to_vec(),
    };
    op(process, member, kind, t, Outcome::Ok)
}

/// The op on instance i2, which lives on shard 1 (an ok append at offset 0).
fn on_i2(mut o: Op) -> Op {
    o.instance = "i2".into();
    if o.outcome == Outcome::Ok {
        (o.shard, o.wal_offset) = (Some(1), Some(0));
    }
    o
}

/// Tokens 1, 2, 3 acknowledged by m1 one after another, 4 indeterminate, 5 failed; on i2,
/// token 10 acknowledged.
fn writes() -> Vec<Op> {
    vec![
        append("m1", 1, (0, 10), Outcome::Ok),
        append("m1", 2, (20, 30), Outcome::Ok),
        append("m1", 3, (40, 50), Outcome::Ok),
        append("m1", 4, (45, 90), Outcome::Info),
        append("m1", 5, (46, 47), Outcome::Fail),
        on_i2(append("m1", 10, (5, 15), Outcome::Ok)),
    ]
}

/// Monotonic reads by process 7 at m2, one concurrent with a write (its tail uncommitted).
fn reads() -> Vec<Op> {
    vec![
        read(7, "m2", &[1], (12, 18)),
        read(7, "m2", &[1, 2], (32, 38)),
        read(7, "m2", &[1, 2, 3], (60, 70)),
        read(8, "m3", &[], (0, 1)),
    ]
}

/// Every member holding `i1` (as given) and `i2` = [10]; m1 held the only term, from offset 0
/// of shards 0 and 1.
fn fin(i1: &[u64]) -> Final {
    let map = BTreeMap::from([(I.to_string(), i1.to_vec()), ("i2".to_string(), vec![10])]);
    let members = ["m1", "m2", "m3"].map(|m| (m.to_string(), map.clone()));
    Final {
        members: members.into(),
        truncated: 0,
        terms: vec![term(1, "m1", &[0, 0])],
    }
}

fn term(epoch: u64, node_id: &str, start_offsets: &[u64]) -> Term {
    let (node_id, start_offsets) = (node_id.into(), start_offsets.to_vec());
    Term {
        epoch,
        node_id,
        start_offsets,
    }
}

fn history(mode: Mode, ops: Vec<Op>, fin: Final) -> History {
    History { mode, ops, fin }
}

fn clean(mode: Mode) -> History {
    history(mode, [writes(), reads()].concat(), fin(&[1, 2, 3]))
}

/// The anomalies of one class, as (tokens, explanation).
fn found(v: &Verdict, class: Class) -> Vec<(Vec<u64>, String)> {
    v.of(class)
        .map(|a| (a.tokens.clone(), a.explanation.clone()))
        .collect()
}

fn tokens_of(v: &Verdict, class: Class) -> Vec<Vec<u64>> {
    found(v, class).into_iter().map(|(t, _)| t).collect()
}

#[test]
fn a_clean_history_is_accepted_in_both_modes() {
    for mode in [Mode::Sync, Mode::Async] {
        let v = check(&clean(mode));
        assert!(v.is_clean(), "{v}");
        assert_eq!((v.acknowledged, v.indeterminate, v.failed), (4, 1, 1));
        assert_eq!((v.lost, v.uncommitted_reads, v.truncated), (0, 0, 0));
    }
}

#[test]
fn a_lost_write_is_flagged_in_sync_mode() {
    let v = check(&history(Mode::Sync, writes(), fin(&[1, 2])));
    assert_eq!(tokens_of(&v, Class::Lost), [vec![3]]);
    assert_eq!(v.lost, 1);
    assert!(
        v.to_string()
            .contains("lost [i1] tokens [3]: acknowledged by m1"),
        "{v}"
    );
}

#[test]
fn async_mode_allows_as_many_lost_writes_as_were_truncated() {
    let mut h = history(Mode::Async, writes(), fin(&[1]));
    h.fin.truncated = 2;
    let v = check(&h);
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.lost, v.lost_within_truncated), (2, 2));

    h.fin.truncated = 1;
    let v = check(&h);
    assert_eq!(tokens_of(&v, Class::Lost), [vec![2], vec![3]]);
    assert!(found(&v, Class::Lost)[0].1.contains("2 lost > 1 truncated"));
    assert_eq!((v.lost, v.lost_within_truncated), (2, 0));
}

#[test]
fn a_write_applied_twice_is_a_duplicate() {
    let v = check(&history(Mode::Sync, writes(), fin(&[1, 2, 2, 3])));
    let dups = found(&v, Class::Duplicate);
    assert_eq!(dups.len(), 1, "{v}");
    assert_eq!(dups[0].0, [2]);
    assert!(
        dups[0].1.contains("m1 (x2), m2 (x2), m3 (x2)"),
        "{}",
        dups[0].1
    );
}

#[test]
fn a_token_read_twice_is_a_duplicate() {
    let ops = [writes(), vec![read(7, "m2", &[1, 2, 2], (60, 70))]].concat();
    let v = check(&history(Mode::Sync, ops, fin(&[1, 2, 3])));
    assert_eq!(tokens_of(&v, Class::Duplicate), [vec![2]]);
    assert_eq!(v.duplicates, 1);
}

#[test]
fn a_token_never_sent_is_a_phantom() {
    let ops = [writes(), vec![read(7, "m2", &[1, 2, 3, 99], (60, 70))]].concat();
    let v = check(&history(Mode::Sync, ops, fin(&[1, 2, 3, 99])));
    let phantoms = found(&v, Class::Phantom);
    assert_eq!(phantoms.len(), 1, "{v}");
    assert_eq!(phantoms[0].0, [99]);
    assert!(phantoms[0].1.contains("never sent"));
    assert!(phantoms[0].1.contains("[m1, m2, m3] and in 1 ok reads"));
    // Token 10 was sent, but to another instance.
    let v = check(&history(Mode::Sync, writes(), fin(&[1, 2, 3, 10])));
    assert_eq!(tokens_of(&v, Class::Phantom), [vec![10]]);
}

#[test]
fn a_definite_failure_that_happened_is_a_phantom() {
    let v = check(&history(Mode::Sync, writes(), fin(&[1, 2, 3, 5])));
    let phantoms = found(&v, Class::Phantom);
    assert_eq!(phantoms.len(), 1, "{v}");
    assert_eq!(phantoms[0].0, [5]);
    assert!(phantoms[0].1.contains("failed definitely"));
    // An indeterminate write that happened is fine.
    assert!(check(&history(Mode::Sync, writes(), fin(&[1, 2, 3, 4]))).is_clean());
}

#[test]
fn a_write_ordered_before_one_acknowledged_before_it_was_sent_is_an_order_violation() {
    // 2 was sent at 20, after 1 was acknowledged at 10.
    let v = check(&history(Mode::Sync, writes(), fin(&[2, 1, 3])));
    assert_eq!(tokens_of(&v, Class::OrderViolation), [vec![2, 1]], "{v}");
    assert_eq!(v.order_violations, 1);
    // 4 (sent at 45) and 3 (acknowledged at 50) were concurrent: either order is fine.
    assert!(check(&history(Mode::Sync, writes(), fin(&[1, 2, 4, 3]))).is_clean());
}

#[test]
fn a_read_that_is_not_a_prefix_of_the_final_history_is_bad() {
    let ops = [writes(), vec![read(7, "m2", &[1, 3], (60, 70))]].concat();
    let v = check(&history(Mode::Sync, ops, fin(&[1, 2, 3])));
    let bad = found(&v, Class::BadRead);
    assert_eq!(bad.len(), 1, "{v}");
    assert_eq!(bad[0].0, [3]);
    assert!(
        bad[0].1.contains("at position 1: read 3, final 2"),
        "{}",
        bad[0].1
    );
}

#[test]
fn a_read_showing_a_write_not_yet_acknowledged_is_uncommitted_not_bad() {
    // 4 was indeterminate and never made it; 6 was never answered at all yet was sent.
    let mut ops = [writes(), vec![read(7, "m2", &[1, 2, 3, 4], (60, 70))]].concat();
    ops.push(append("m1", 6, (80, 90), Outcome::Info));
    ops.push(read(7, "m2", &[1, 2, 3, 6], (92, 95)));
    let v = check(&history(Mode::Sync, ops.clone(), fin(&[1, 2, 3])));
    assert!(v.is_clean(), "{v}");
    assert_eq!(v.uncommitted_reads, 2);
    // An acknowledged write past the final history is no uncommitted tail: 3 is lost.
    ops.push(read(8, "m3", &[1, 2, 3], (60, 70)));
    let v = check(&history(Mode::Sync, ops, fin(&[1, 2])));
    assert_eq!(
        tokens_of(&v, Class::BadRead),
        [vec![3, 4], vec![3, 6], vec![3]],
        "{v}"
    );
}

/// The deposed primary m1 shows 6 (answered `NO_PRIMARY` with `maybe_committed`) in a read;
/// a failover truncates it, and its resend is applied again after 8. Allowed once members
/// report a truncation; without one the read departs from the history for no reason.
#[test]
fn a_read_of_a_truncated_tail_resent_and_applied_again_is_uncommitted() {
    let mut ops = writes();
    ops.push(append("m1", 6, (80, 90), Outcome::Info));
    ops.push(read(7, "m1", &[1, 2, 3, 6], (85, 88)));
    ops.push(append("m1", 8, (82, 95), Outcome::Ok));
    ops.push(append("m1", 6, (100, 110), Outcome::Ok));
    let mut f = fin(&[1, 2, 3, 8, 6]);
    f.truncated = 1;
    let v = check(&history(Mode::Sync, ops.clone(), f));
    assert!(v.is_clean(), "{v}");
    assert_eq!(v.uncommitted_reads, 1);
    let v = check(&history(Mode::Sync, ops, fin(&[1, 2, 3, 8, 6])));
    assert_eq!(tokens_of(&v, Class::BadRead), [vec![6]], "{v}");
}

/// The deposed primary m1 still serves a read of its tail (6, answered `TIMEOUT` there) after
/// the new primary m2 acknowledged 6's resend at another place: allowed once members report
/// a truncation; a token acknowledged with no indeterminate answer is no such copy.
#[test]
fn a_deposed_primarys_tail_read_after_the_resend_was_acknowledged_is_uncommitted() {
    let mut ops = writes();
    ops.push(append("m1", 6, (80, 90), Outcome::Info));
    ops.push(append("m1", 8, (82, 95), Outcome::Ok));
    ops.push(append("m1", 6, (100, 110), Outcome::Ok));
    ops.push(read(7, "m1", &[1, 2, 3, 6], (120, 125)));
    let mut f = fin(&[1, 2, 3, 8, 6]);
    f.truncated = 1;
    let v = check(&history(Mode::Sync, ops.clone(), f.clone()));
    assert!(v.is_clean(), "{v}");
    assert_eq!(v.uncommitted_reads, 1);
    // 8 was acknowledged with no indeterminate answer: a read showing it out of place is bad.
    ops.push(read(7, "m1", &[1, 2, 3, 6, 8], (130, 135)));
    let v = check(&history(Mode::Sync, ops, f));
    assert_eq!(tokens_of(&v, Class::BadRead), [vec![6, 8]], "{v}");
}

/// Async mode: a read may show an acknowledged write a failover then lost (within what the
/// members report truncated); sync mode flags both the loss and the read.
#[test]
fn async_a_read_may_show_a_write_lost_within_truncated() {
    let ops = [writes(), vec![read(7, "m2", &[1, 2, 3], (60, 70))]].concat();
    let mut f = fin(&[1, 2]);
    f.truncated = 1;
    let v = check(&history(Mode::Async, ops.clone(), f.clone()));
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.lost_within_truncated, v.uncommitted_reads), (1, 1));
    let v = check(&history(Mode::Sync, ops, f));
    assert_eq!(tokens_of(&v, Class::BadRead), [vec![3]], "{v}");
    assert_eq!(tokens_of(&v, Class::Lost), [vec![3]], "{v}");
}

#[test]
fn a_read_that_goes_backwards_is_flagged_unless_members_truncated() {
    let backwards = vec![
        read(7, "m2", &[1, 2, 3], (60, 70)),
        read(7, "m2", &[1], (71, 72)),
    ];
    let ops = [writes(), backwards].concat();
    let v = check(&history(Mode::Sync, ops.clone(), fin(&[1, 2, 3])));
    let found = found(&v, Class::BackwardsRead);
    assert_eq!(found.len(), 1, "{v}");
    assert_eq!(found[0].0, [2, 3]);
    assert!(
        found[0]
            .1
            .contains("has 1 tokens, not the 3 committed ones"),
        "{}",
        found[0].1
    );
    // Not once any member truncated.
    let mut h = history(Mode::Async, ops, fin(&[1, 2, 3]));
    h.fin.truncated = 1;
    assert!(check(&h).is_clean());
}

#[test]
fn reads_not_ordered_in_real_time_or_at_other_members_may_differ() {
    let reads = vec![
        read(7, "m2", &[1, 2, 3], (60, 80)),
        read(7, "m2", &[1], (70, 75)), // overlaps the first (a pipelined client)
        read(7, "m3", &[], (81, 82)),  // another member
        read(8, "m2", &[1], (83, 84)), // another process
    ];
    let v = check(&history(
        Mode::Sync,
        [writes(), reads].concat(),
        fin(&[1, 2, 3]),
    ));
    assert!(v.is_clean(), "{v}");
}

#[test]
fn an_ok_from_a_member_outside_its_term_is_a_split_term() {
    let mut h = clean(Mode::Sync);
    // m2's term began at offset 3 of shard 0 (none on shard 1: i2's write is judged by m1's
    // term); m3's term has no start offsets and is skipped.
    h.fin
        .terms
        .extend([term(2, "m2", &[3]), term(3, "m3", &[])]);
    let v = check(&h);
    let split = found(&v, Class::SplitTerm);
    assert_eq!(split.len(), 1, "{v}");
    assert_eq!(split[0].0, [3]);
    assert!(
        split[0]
            .1
            .contains("term 2 of m2 wrote that offset (from 3)"),
        "{}",
        split[0].1
    );
}

#[test]
fn term_lookup_takes_the_greatest_start_at_or_below_the_offset() {
    let terms = [
        term(1, "a", &[0, 0]),
        term(2, "b", &[5]),
        term(3, "c", &[5, 9]),
    ];
    let terms: Vec<&Term> = terms.iter().collect();
    let node = |shard, offset| term_at(&terms, shard, offset).map(|(_, t)| t.node_id.clone());
    assert_eq!(node(0, 4).as_deref(), Some("a"));
    assert_eq!(node(0, 5).as_deref(), Some("c")); // a tie goes to the newer epoch
    assert_eq!(node(1, 8).as_deref(), Some("a")); // b has no start on shard 1
    assert_eq!(node(1, 9).as_deref(), Some("c"));
    assert_eq!(node(2, 9), None);
}

#[test]
fn a_lost_async_write_is_judged_by_its_members_own_terms() {
    // m1 acknowledged 3 at offset 3 in its term, then m2 took over from offset 3 and 3 was
    // truncated: lost within truncated, no split term.
    let mut h = history(Mode::Async, writes(), fin(&[1, 2]));
    (h.fin.truncated, h.fin.terms) = (1, vec![term(1, "m1", &[0, 0]), term(2, "m2", &[3])]);
    assert!(check(&h).is_clean(), "{}", check(&h));
    // m3, which never held a term, cannot have acknowledged it.
    let three = h
        .ops
        .iter_mut()
        .find(|o| o.kind == Kind::Append { token: 3 });
    three.unwrap().member = "m3".into();
    assert_eq!(tokens_of(&check(&h), Class::SplitTerm), [vec![3]]);
}

#[test]
fn a_resend_counts_once_judged_by_its_strongest_answer() {
    // 3 went to m1, timed out, and was resent to m2 (now primary), which answered with the
    // first result: the offset m1 wrote in its term.
    let mut ops = writes();
    ops.retain(|o| o.kind != Kind::Append { token: 3 });
    ops.push(append("m1", 3, (40, 50), Outcome::Info));
    ops.push(append("m2", 3, (51, 60), Outcome::Ok));
    ops.push(append("m2", 3, (61, 70), Outcome::Fail)); // a weaker answer changes nothing
    let mut h = history(Mode::Sync, ops, fin(&[1, 2, 3]));
    h.fin.terms.push(term(2, "m2", &[4]));
    let v = check(&h);
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.acknowledged, v.indeterminate, v.failed), (4, 1, 1));
    // Acknowledged: losing it is flagged.
    h.fin = Final {
        terms: h.fin.terms.clone(),
        ..fin(&[1, 2])
    };
    assert_eq!(tokens_of(&check(&h), Class::Lost), [vec![3]]);
}

#[test]
fn members_holding_different_histories_diverge() {
    let mut h = clean(Mode::Sync);
    let m3 = h.fin.members.get_mut("m3").unwrap();
    m3.insert(I.into(), vec![1, 2]);
    m3.remove("i2");
    let v = check(&h);
    let div = found(&v, Class::Divergent);
    assert_eq!(div.len(), 2, "{v}");
    assert_eq!(div[0].0, [3]);
    assert_eq!(
        div[0].1,
        "members differ from position 2 (m1: 3, m2: 3, m3: 2)"
    );
    assert!(div[1].1.contains("m3: absent"), "{}", div[1].1);
    // The final history is the longest one: nothing is lost.
    assert_eq!((v.lost, v.divergent), (0, 2));
}

#[test]
fn an_instance_no_member_holds_has_lost_every_acknowledged_write() {
    let mut h = clean(Mode::Sync);
    h.fin
        .members
        .values_mut()
        .for_each(|m| drop(m.remove("i2")));
    assert_eq!(tokens_of(&check(&h), Class::Lost), [vec![10]]);
}

#[test]
fn the_summary_names_every_figure_and_caps_the_anomalies_printed() {
    let v = check(&clean(Mode::Sync));
    let expected = "acknowledged 4, indeterminate 1, failed 1, lost 0 (0 within truncated), \
                    truncated 0, duplicates 0, phantoms 0, order violations 0, bad reads 0, \
                    backwards reads 0, uncommitted reads 0, split terms 0, divergent members 0";
    assert_eq!(v.to_string(), expected);
    let phantoms: Vec<u64> = (100..125).collect();
    let v = check(&history(
        Mode::Sync,
        writes(),
        fin(&[[1, 2, 3].as_slice(), &phantoms].concat()),
    ));
    assert_eq!(v.phantoms, 25);
    let text = v.to_string();
    assert_eq!(text.lines().count(), 22, "{text}");
    assert!(text.ends_with("\n  ... and 5 more"), "{text}");
    assert!(
        text.contains("\n  phantom [i1] tokens [100]: never sent"),
        "{text}"
    );
}
