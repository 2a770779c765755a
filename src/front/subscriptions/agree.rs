//! Whether a cursor's position still agrees with this member's log (docs/ha.md "Subscriptions across terms", "positions
//! across terms"), from the log's epoch history alone: pure, so the rule is tested here.
//!
//! Two entries with the same (epoch, offset) are the same entry, and so are the logs up to it:
//! an epoch has one primary, which writes each offset once, and a member appends only after
//! truncating to where it agrees with that primary. A position `(e, o)` therefore agrees with a
//! log that holds epoch `e` at `o`. When it does not, the logs agree up to the last offset this
//! log wrote under an epoch `<= e` (Kafka's leader-epoch end offset), capped at `o`.

/// `(epoch, offset of its epoch entry)`, ascending: `Engine::epochs`.
pub type Epochs = [(u64, u64)];

/// What a resume position is to this log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// The log holds the position's entry (or the position lies past the head within the
    /// log's newest epoch: the member is merely behind, as without epochs).
    Agrees,
    /// The log no longer has the position's entry: resume from `(epoch, offset)`, the last
    /// position both logs hold.
    Diverged { epoch: u64, offset: u64 },
    /// The position is of an epoch this log has not reached (`log_epoch` is its newest): this
    /// member is behind the cursor and cannot tell where they agree.
    Behind { log_epoch: u64 },
}

/// The epoch that wrote `offset` (0 before the first epoch entry).
pub fn epoch_of(epochs: &Epochs, offset: u64) -> u64 {
    let i = epochs.partition_point(|&(_, at)| at <= offset);
    i.checked_sub(1).map_or(0, |i| epochs[i].0)
}

/// Checks position `(epoch, offset)` against a log with `epochs` and `head`.
pub fn check(epochs: &Epochs, head: u64, epoch: u64, offset: u64) -> Agreement {
    let newest = epochs.last().map_or(0, |&(e, _)| e);
    if offset == 0 {
        return Agreement::Agrees;
    }
    if epoch > newest {
        return Agreement::Behind { log_epoch: newest };
    }
    // The first epoch above the position's, where this log left it.
    let above = epochs.partition_point(|&(e, _)| e <= epoch);
    let end = epochs.get(above).map_or(head, |&(_, at)| at - 1);
    if offset <= head && epoch_of(epochs, offset) == epoch {
        return Agreement::Agrees;
    }
    if offset > head && end == head {
        return Agreement::Agrees;
    }
    let mut agree = offset.min(end);
    if agree == offset {
        // This log holds an older epoch at `offset`: the cursor's term is one this log never
        // had. Its range here began at its epoch entry; resume before it.
        let i = epochs.partition_point(|&(_, at)| at <= offset);
        agree = i.checked_sub(1).map_or(0, |i| epochs[i].1 - 1);
    }
    Agreement::Diverged {
        epoch: epoch_of(epochs, agree),
        offset: agree,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Agreement::*;

    /// Epoch 1 from offset 1, epoch 2 from 11, epoch 4 from 21; head 30.
    const LOG: &Epochs = &[(1, 1), (2, 11), (4, 21)];

    #[test]
    fn a_position_this_log_holds_agrees() {
        assert_eq!(check(LOG, 30, 1, 5), Agrees);
        assert_eq!(check(LOG, 30, 2, 20), Agrees);
        assert_eq!(check(LOG, 30, 4, 30), Agrees);
        assert_eq!(check(LOG, 30, 4, 0), Agrees);
        assert_eq!(check(&[], 9, 0, 9), Agrees, "a log that never replicated");
        assert_eq!(check(LOG, 30, 4, 35), Agrees, "behind in its newest epoch");
    }

    #[test]
    fn a_position_past_where_the_logs_part_resumes_where_they_agree() {
        // The cursor's log went on in epoch 2 past 20, where this one began epoch 4.
        assert_eq!(
            check(LOG, 30, 2, 25),
            Diverged {
                epoch: 2,
                offset: 20
            }
        );
        // ... even past this log's head.
        assert_eq!(
            check(LOG, 30, 1, 40),
            Diverged {
                epoch: 1,
                offset: 10
            }
        );
        // A term this log never had (3): its range here is epoch 2's, from 11.
        assert_eq!(
            check(LOG, 30, 3, 15),
            Diverged {
                epoch: 1,
                offset: 10
            }
        );
        // A truncated tail: this log's head is 12, in epoch 2, the cursor at 14 in epoch 1.
        assert_eq!(
            check(&[(1, 1), (2, 11)], 12, 1, 14),
            Diverged {
                epoch: 1,
                offset: 10
            }
        );
    }

    #[test]
    fn an_epoch_this_log_has_not_reached_is_behind() {
        assert_eq!(check(LOG, 30, 5, 3), Behind { log_epoch: 4 });
        assert_eq!(check(&[], 3, 1, 3), Behind { log_epoch: 0 });
    }
}
