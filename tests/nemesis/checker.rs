//! The checker of a nemesis run's history (`history.rs`), in the spirit of Jepsen's Elle over
//! list-append, per instance. A token is one write; every `Op` carrying it is one answer to it
//! (resends with the same idempotency key), and the write's outcome is the strongest of them.
//!
//! Choices where the issue leaves room:
//! - **The final history** of an instance is the longest list any member holds after healing (a
//!   tie goes to the list most members hold, then to the lowest node id). Members must be
//!   identical anyway (checked as `Divergent`), so the choice matters only once that fails; the
//!   longest is the charitable one for `Lost`. An instance no member holds has an empty one.
//! - **Lost**, async mode: lost tokens are allowed while their total over all instances is at
//!   most `fin.truncated`; above it, every lost token is flagged (which ones were truncated
//!   cannot be told apart).
//! - **Reads**: a tail past the final history made only of tokens never acknowledged and absent
//!   from it is an uncommitted read (a locally durable write seen before it was acknowledged:
//!   counted, allowed). Monotonicity is checked per process, member and instance, and skipped
//!   altogether when `fin.truncated > 0` (a member's truncation may rightly shorten its reads).
//! - **Split term**: the term that wrote an ok append's offset is the one with the greatest
//!   `start_offsets[shard] <= wal_offset` (terms with no start for the shard skipped, a tie to
//!   the newer epoch; no such term: not judged, `ha.history` keeps only 20). Its node must be
//!   the member of one of the token's ops, not only of this op: a resend answers with the first
//!   result (`applied: false`), the offset some earlier member wrote. In async mode, a lost
//!   token's offset belongs to a log that was truncated, not to the final one: it is only
//!   required that some term of one of those members started at or before it.
//! - A phantom is a token seen (in a final history or an ok read) that no append of that
//!   instance carried, or whose every op failed definitely.

#![allow(dead_code)]

use super::history::{History, Kind, Mode, Op, Outcome, Term};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The kinds of anomaly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Acknowledged, absent from the final history (sync; async beyond what was truncated).
    Lost,
    /// One token twice in a member's final history or in one read.
    Duplicate,
    /// Seen but never sent, or sent and failed definitely.
    Phantom,
    /// A acknowledged before B was sent, yet B precedes A.
    OrderViolation,
    /// An ok read that is no prefix of the final history (beyond an uncommitted tail).
    BadRead,
    /// A read that lost what an earlier read of the same process and member had seen.
    BackwardsRead,
    /// An ok append from a member that did not hold the term that wrote its offset.
    SplitTerm,
    /// Members holding different histories of an instance after healing.
    Divergent,
}

/// One anomaly: its class, where, which tokens, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    pub class: Class,
    pub instance: String,
    pub tokens: Vec<u64>,
    pub explanation: String,
}

/// The checker's figures and anomalies. `lost` counts every acknowledged token absent from the
/// final history, allowed or not; the other anomaly counts are those of `anomalies`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Distinct tokens (per instance) whose strongest answer was ok, info, fail.
    pub acknowledged: usize,
    pub indeterminate: usize,
    pub failed: usize,
    pub lost: usize,
    /// Lost tokens allowed by async mode (`lost <= truncated`); 0 when they are anomalies.
    pub lost_within_truncated: usize,
    pub truncated: u64,
    pub duplicates: usize,
    pub phantoms: usize,
    pub order_violations: usize,
    pub bad_reads: usize,
    pub backwards_reads: usize,
    pub uncommitted_reads: usize,
    pub split_terms: usize,
    pub divergent: usize,
    pub anomalies: Vec<Anomaly>,
}

impl Verdict {
    pub fn is_clean(&self) -> bool {
        self.anomalies.is_empty()
    }

    /// The anomalies of one class.
    pub fn of(&self, class: Class) -> impl Iterator<Item = &Anomaly> {
        self.anomalies.iter().filter(move |a| a.class == class)
    }
}

/// Judges a run's history.
pub fn check(h: &History) -> Verdict {
    let cx = Ctx::new(h);
    let mut v = Verdict {
        truncated: h.fin.truncated,
        ..Verdict::default()
    };
    for w in cx.writes.values().flat_map(|m| m.values()) {
        match w.outcome {
            Outcome::Ok => v.acknowledged += 1,
            Outcome::Info => v.indeterminate += 1,
            Outcome::Fail => v.failed += 1,
        }
    }
    let out = &mut v.anomalies;
    (v.lost, v.lost_within_truncated) = check_lost(&cx, out);
    check_duplicates(&cx, out);
    check_phantoms(&cx, out);
    check_order(&cx, out);
    v.uncommitted_reads = check_reads(&cx, out);
    check_monotonic(&cx, out);
    check_terms(&cx, out);
    check_divergence(&cx, out);
    let count = |c: Class| v.anomalies.iter().filter(|a| a.class == c).count();
    v.duplicates = count(Class::Duplicate);
    v.phantoms = count(Class::Phantom);
    v.order_violations = count(Class::OrderViolation);
    v.bad_reads = count(Class::BadRead);
    v.backwards_reads = count(Class::BackwardsRead);
    v.split_terms = count(Class::SplitTerm);
    v.divergent = count(Class::Divergent);
    v
}

/// One write (token) of an instance, its ops folded.
#[derive(Debug, Clone)]
struct Write<'a> {
    /// The strongest answer.
    outcome: Outcome,
    first_invoke_ns: u64,
    /// The earliest completion of an ok answer, and who gave it.
    acked: Option<(u64, &'a str, u32)>,
    /// The members its ops went to.
    members: BTreeSet<&'a str>,
    /// Some answer was indeterminate: a copy of it may sit in a member's log without being
    /// the acknowledged one (a deposed primary's tail, before the truncation).
    indeterminate: bool,
}

/// An instance's final history (module doc: the longest).
struct Reference<'a> {
    holder: Option<&'a str>,
    tokens: &'a [u64],
    set: BTreeSet<u64>,
}

/// An ok read and the tokens it returned.
type Read<'a> = (&'a Op, &'a [u64]);

struct Ctx<'a> {
    h: &'a History,
    writes: BTreeMap<&'a str, BTreeMap<u64, Write<'a>>>,
    finals: BTreeMap<&'a str, Reference<'a>>,
}

impl<'a> Ctx<'a> {
    fn new(h: &'a History) -> Self {
        let mut writes: BTreeMap<&str, BTreeMap<u64, Write>> = BTreeMap::new();
        for op in &h.ops {
            let Kind::Append { token } = op.kind else {
                continue;
            };
            let w = writes.entry(&op.instance).or_default().entry(token);
            let w = w.or_insert_with(|| Write {
                outcome: op.outcome,
                first_invoke_ns: op.invoke_ns,
                acked: None,
                members: BTreeSet::new(),
                indeterminate: false,
            });
            w.outcome = w.outcome.max(op.outcome);
            w.first_invoke_ns = w.first_invoke_ns.min(op.invoke_ns);
            w.members.insert(&op.member);
            w.indeterminate |= op.outcome == Outcome::Info;
            if op.outcome == Outcome::Ok && w.acked.is_none_or(|(t, _, _)| op.complete_ns < t) {
                w.acked = Some((op.complete_ns, &op.member, op.process));
            }
        }
        let mut instances: BTreeSet<&str> = h.ops.iter().map(|o| o.instance.as_str()).collect();
        for map in h.fin.members.values() {
            instances.extend(map.keys().map(String::as_str));
        }
        let finals = instances
            .into_iter()
            .map(|i| (i, reference(h, i)))
            .collect();
        Ctx { h, writes, finals }
    }

    fn write(&self, instance: &str, token: u64) -> Option<&Write<'a>> {
        self.writes.get(instance).and_then(|m| m.get(&token))
    }

    /// The final history of an instance; every instance of an op or of a member has one.
    fn fin(&self, instance: &str) -> &Reference<'a> {
        &self.finals[instance]
    }

    /// The ok reads: (op, its tokens).
    fn reads(&self) -> impl Iterator<Item = Read<'a>> {
        self.h.ops.iter().filter_map(|op| match &op.kind {
            Kind::Read { tokens } if op.outcome == Outcome::Ok => Some((op, tokens.as_slice())),
            _ => None,
        })
    }
}

fn reference<'a>(h: &'a History, instance: &str) -> Reference<'a> {
    let lists: Vec<(&str, &[u64])> = (h.fin.members.iter())
        .filter_map(|(m, map)| map.get(instance).map(|l| (m.as_str(), l.as_slice())))
        .collect();
    let held_by = |l: &[u64]| lists.iter().filter(|(_, o)| *o == l).count();
    let mut best: Option<(&str, &[u64], (usize, usize))> = None;
    for &(m, l) in &lists {
        let key = (l.len(), held_by(l));
        if best.is_none_or(|(_, _, k)| key > k) {
            best = Some((m, l, key));
        }
    }
    let (holder, tokens) = best.map_or((None, &[][..]), |(m, l, _)| (Some(m), l));
    let set = tokens.iter().copied().collect();
    Reference {
        holder,
        tokens,
        set,
    }
}

fn anomaly(class: Class, instance: &str, tokens: Vec<u64>, explanation: String) -> Anomaly {
    let instance = instance.to_string();
    Anomaly {
        class,
        instance,
        tokens,
        explanation,
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn describe(op: &Op) -> String {
    let (p, m) = (op.process, &op.member);
    format!(
        "process {p} at {m} ({}..{})",
        ms(op.invoke_ns),
        ms(op.complete_ns)
    )
}

fn holder(f: &Reference) -> String {
    let n = f.tokens.len();
    f.holder.map_or("no member holds it".into(), |m| {
        format!("{m}'s, {n} tokens")
    })
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Returns (lost, lost within truncated).
fn check_lost(cx: &Ctx, out: &mut Vec<Anomaly>) -> (usize, usize) {
    let mut lost = Vec::new();
    for (&inst, writes) in &cx.writes {
        let set = &cx.fin(inst).set;
        for (&t, w) in writes {
            if let Some(acked) = w.acked.filter(|_| !set.contains(&t)) {
                lost.push((inst, t, acked));
            }
        }
    }
    let (n, truncated) = (lost.len(), cx.h.fin.truncated);
    if cx.h.mode == Mode::Async && n as u64 <= truncated {
        return (n, n);
    }
    let why = match cx.h.mode {
        Mode::Sync => "sync mode".to_string(),
        Mode::Async => format!("{n} lost > {truncated} truncated"),
    };
    for (inst, t, (at, member, p)) in lost {
        let f = cx.fin(inst);
        let text = format!(
            "acknowledged by {member} to process {p} at {}, absent from the final history \
             ({}); {why}",
            ms(at),
            holder(f)
        );
        out.push(anomaly(Class::Lost, inst, vec![t], text));
    }
    (n, 0)
}

/// Tokens appearing more than once, with their counts.
fn repeated(tokens: &[u64]) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for &t in tokens {
        *counts.entry(t).or_insert(0) += 1;
    }
    counts.retain(|_, c| *c > 1);
    counts
}

fn check_duplicates(cx: &Ctx, out: &mut Vec<Anomaly>) {
    let mut in_final: BTreeMap<(&str, u64), Vec<String>> = BTreeMap::new();
    for (member, map) in &cx.h.fin.members {
        for (inst, list) in map {
            for (t, c) in repeated(list) {
                in_final
                    .entry((inst, t))
                    .or_default()
                    .push(format!("{member} (x{c})"));
            }
        }
    }
    for ((inst, t), where_) in in_final {
        let text = format!(
            "applied more than once: in the final history of {}",
            where_.join(", ")
        );
        out.push(anomaly(Class::Duplicate, inst, vec![t], text));
    }
    for (op, tokens) in cx.reads() {
        let dups = repeated(tokens);
        if !dups.is_empty() {
            let text = format!("read twice by {}", describe(op));
            out.push(anomaly(
                Class::Duplicate,
                &op.instance,
                dups.into_keys().collect(),
                text,
            ));
        }
    }
}

fn check_phantoms(cx: &Ctx, out: &mut Vec<Anomaly>) {
    // Per (instance, token): the members whose final history holds it, and how many reads saw it.
    let mut seen: BTreeMap<(&str, u64), (BTreeSet<&str>, usize)> = BTreeMap::new();
    for (member, map) in &cx.h.fin.members {
        for (inst, list) in map {
            for &t in list {
                seen.entry((inst, t)).or_default().0.insert(member);
            }
        }
    }
    for (op, tokens) in cx.reads() {
        for &t in tokens.iter().collect::<BTreeSet<_>>() {
            seen.entry((&op.instance, t)).or_default().1 += 1;
        }
    }
    for ((inst, t), (members, reads)) in seen {
        let what = match cx.write(inst, t) {
            None => "never sent by any append of this instance",
            Some(w) if w.outcome == Outcome::Fail => "every request carrying it failed definitely",
            Some(_) => continue,
        };
        let members: Vec<&str> = members.into_iter().collect();
        let text = format!(
            "{what}, yet in the final history of [{}] and in {reads} ok reads",
            members.join(", ")
        );
        out.push(anomaly(Class::Phantom, inst, vec![t], text));
    }
}

/// A acknowledged before B was first sent, B before A in the final history: one anomaly per A,
/// naming the B sent last among those before it.
fn check_order(cx: &Ctx, out: &mut Vec<Anomaly>) {
    for (&inst, f) in &cx.finals {
        let mut latest: Option<(u64, u64)> = None; // (first invoke, token) of those so far
        for &a in f.tokens {
            let Some(w) = cx.write(inst, a) else { continue };
            if let (Some((acked, ..)), Some((sent, b))) = (w.acked, latest) {
                if acked < sent {
                    let text = format!(
                        "{a} acknowledged at {}, {b} first sent at {}, yet {b} precedes {a} in \
                         the final history",
                        ms(acked),
                        ms(sent)
                    );
                    out.push(anomaly(Class::OrderViolation, inst, vec![b, a], text));
                }
            }
            if latest.is_none_or(|(sent, _)| w.first_invoke_ns > sent) {
                latest = Some((w.first_invoke_ns, a));
            }
        }
    }
}

/// Prefix check of every ok read; returns the number of uncommitted reads.
fn check_reads(cx: &Ctx, out: &mut Vec<Anomaly>) -> usize {
    let mut uncommitted = 0;
    for (op, tokens) in cx.reads() {
        let f = cx.fin(&op.instance);
        let k = common_prefix(tokens, f.tokens);
        if k == tokens.len() {
            continue;
        }
        let tail = &tokens[k..];
        if tail.iter().all(|t| uncommitted_in_read(cx, op, f, *t)) {
            uncommitted += 1;
            continue;
        }
        let finals = f
            .tokens
            .get(k)
            .map_or("its end".to_string(), |t| t.to_string());
        let text = format!(
            "read by {} departs from the final history ({}) at position {k}: read {}, \
             final {finals}",
            describe(op),
            holder(f),
            tail[0]
        );
        out.push(anomaly(Class::BadRead, &op.instance, tail.to_vec(), text));
    }
    uncommitted
}

/// Whether token `t`, in the tail of `read` past the final history's prefix, is one a read
/// may show (docs/ha.md: a read may show a locally durable write before it is acknowledged,
/// and a failover may then truncate it):
/// - a write not acknowledged when the read was answered, absent from the final history, or
///   present there at another place once members truncated (the deposed primary's tail,
///   answered `NO_PRIMARY` with `maybe_committed`, then resent with its key and applied again
///   by the new primary);
/// - once members truncated, a write with an indeterminate answer even if its resend was
///   acknowledged before the read: the read may come from the deposed member whose tail holds
///   the first, unacknowledged copy (found by the soak: a client in the cut-off primary's host
///   read its tail 1 s after the new primary acknowledged the resend);
/// - async mode: an acknowledged write the final history lacks (a loss `check_lost` bounds by
///   the truncated count).
fn uncommitted_in_read(cx: &Ctx, read: &Op, f: &Reference, t: u64) -> bool {
    let Some(w) = cx.write(&read.instance, t) else {
        return false; // never sent: a phantom
    };
    let in_final = f.set.contains(&t);
    let truncated = cx.h.fin.truncated > 0;
    let acked_before = w.acked.is_some_and(|(at, _, _)| at < read.complete_ns);
    if !acked_before {
        return !in_final || truncated;
    }
    (truncated && w.indeterminate) || (cx.h.mode == Mode::Async && !in_final)
}

/// Per process, member and instance: a read must hold the committed prefix (the part that is
/// a prefix of the final history) of every read completed before it was sent.
fn check_monotonic(cx: &Ctx, out: &mut Vec<Anomaly>) {
    if cx.h.fin.truncated > 0 {
        return;
    }
    let mut groups: BTreeMap<(u32, &str, &str), Vec<Read>> = BTreeMap::new();
    for (op, tokens) in cx.reads() {
        groups
            .entry((op.process, &op.member, &op.instance))
            .or_default()
            .push((op, tokens));
    }
    for ((_, _, inst), mut by_invoke) in groups {
        let f = cx.fin(inst).tokens;
        let mut by_complete = by_invoke.clone();
        by_invoke.sort_by_key(|(op, _)| op.invoke_ns);
        by_complete.sort_by_key(|(op, _)| op.complete_ns);
        let mut done = by_complete.iter().peekable();
        let mut seen: Option<(usize, &Op)> = None; // the longest committed prefix so far
        for &(op, tokens) in &by_invoke {
            while let Some((earlier, r)) = done.next_if(|(e, _)| e.complete_ns < op.invoke_ns) {
                let k = common_prefix(r, f);
                if seen.is_none_or(|(best, _)| k > best) {
                    seen = Some((k, earlier));
                }
            }
            let Some((k, earlier)) = seen else { continue };
            let have = common_prefix(tokens, f);
            if have < k {
                let text = format!(
                    "read by {} has {} tokens, not the {k} committed ones read by {}",
                    describe(op),
                    tokens.len(),
                    describe(earlier)
                );
                out.push(anomaly(
                    Class::BackwardsRead,
                    inst,
                    f[have..k].to_vec(),
                    text,
                ));
            }
        }
    }
}

/// The term that wrote `offset` on `shard` (module doc).
fn term_at<'t>(terms: &[&'t Term], shard: usize, offset: u64) -> Option<(u64, &'t Term)> {
    let mut best: Option<(u64, &Term)> = None;
    for &t in terms {
        let Some(&start) = t.start_offsets.get(shard) else {
            continue;
        };
        if start <= offset && best.is_none_or(|(b, _)| start >= b) {
            best = Some((start, t));
        }
    }
    best
}

fn check_terms(cx: &Ctx, out: &mut Vec<Anomaly>) {
    let mut terms: Vec<&Term> = cx.h.fin.terms.iter().collect();
    terms.sort_by_key(|t| t.epoch);
    for op in &cx.h.ops {
        let (Kind::Append { token }, Outcome::Ok) = (&op.kind, op.outcome) else {
            continue;
        };
        let (Some(shard), Some(offset)) = (op.shard, op.wal_offset) else {
            continue;
        };
        let Some(w) = cx.write(&op.instance, *token) else {
            continue;
        };
        let Some((start, term)) = term_at(&terms, shard, offset) else {
            continue;
        };
        let lost = !cx.fin(&op.instance).set.contains(token);
        let ok = if cx.h.mode == Mode::Async && lost {
            let own = |t: &&Term| w.members.contains(t.node_id.as_str());
            terms
                .iter()
                .filter(|t| t.start_offsets.get(shard).is_some_and(|&s| s <= offset))
                .any(own)
        } else {
            w.members.contains(term.node_id.as_str())
        };
        if !ok {
            let text = format!(
                "ok from {} (shard {shard}, offset {offset}), but term {} of {} wrote that offset \
                 (from {start})",
                describe(op),
                term.epoch,
                term.node_id
            );
            out.push(anomaly(Class::SplitTerm, &op.instance, vec![*token], text));
        }
    }
}

fn check_divergence(cx: &Ctx, out: &mut Vec<Anomaly>) {
    let members = &cx.h.fin.members;
    if members.len() < 2 {
        return;
    }
    for &inst in cx.finals.keys() {
        let lists: Vec<(&str, Option<&[u64]>)> = (members.iter())
            .map(|(m, map)| (m.as_str(), map.get(inst).map(Vec::as_slice)))
            .collect();
        if lists.iter().all(|(_, l)| *l == lists[0].1) {
            continue;
        }
        let present = lists.iter().filter_map(|(_, l)| *l);
        let at = present
            .clone()
            .map(|l| common_prefix(l, cx.fin(inst).tokens))
            .min()
            .unwrap_or(0);
        let tokens: BTreeSet<u64> = present.filter_map(|l| l.get(at).copied()).collect();
        let shapes: Vec<String> = (lists.iter())
            .map(|(m, l)| l.map_or(format!("{m}: absent"), |l| format!("{m}: {}", l.len())))
            .collect();
        let text = format!("members differ from position {at} ({})", shapes.join(", "));
        out.push(anomaly(
            Class::Divergent,
            inst,
            tokens.into_iter().collect(),
            text,
        ));
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Class::Lost => "lost",
            Class::Duplicate => "duplicate",
            Class::Phantom => "phantom",
            Class::OrderViolation => "order violation",
            Class::BadRead => "bad read",
            Class::BackwardsRead => "backwards read",
            Class::SplitTerm => "split term",
            Class::Divergent => "divergent members",
        })
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        const SHOWN: usize = 8;
        let mut tokens: Vec<String> = self.tokens.iter().take(SHOWN).map(u64::to_string).collect();
        if self.tokens.len() > SHOWN {
            tokens.push(format!("+{} more", self.tokens.len() - SHOWN));
        }
        let (c, i, e) = (self.class, &self.instance, &self.explanation);
        write!(f, "{c} [{i}] tokens [{}]: {e}", tokens.join(", "))
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        const SHOWN: usize = 20;
        let v = self;
        write!(
            f,
            "acknowledged {}, indeterminate {}, failed {}, lost {} ({} within truncated), \
             truncated {}, duplicates {}, phantoms {}, order violations {}, bad reads {}, \
             backwards reads {}, uncommitted reads {}, split terms {}, divergent members {}",
            v.acknowledged,
            v.indeterminate,
            v.failed,
            v.lost,
            v.lost_within_truncated,
            v.truncated,
            v.duplicates,
            v.phantoms,
            v.order_violations,
            v.bad_reads,
            v.backwards_reads,
            v.uncommitted_reads,
            v.split_terms,
            v.divergent
        )?;
        for a in v.anomalies.iter().take(SHOWN) {
            write!(f, "\n  {a}")?;
        }
        if v.anomalies.len() > SHOWN {
            write!(f, "\n  ... and {} more", v.anomalies.len() - SHOWN)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "checker/tests.rs"]
mod tests;
