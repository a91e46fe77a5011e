//! The retention cut (SPEC §4, purge): which prefix of a conversation's log is past retention.

use chrono::{DateTime, Duration, Utc};

/// The oldest time an event may have and stay: `now - retention_ms`.
pub fn cutoff(now: DateTime<Utc>, retention_ms: i64) -> DateTime<Utc> {
    now - Duration::milliseconds(retention_ms)
}

/// Whether a conversation whose oldest stored event was created at `oldest` has anything past
/// retention at `now`.
pub fn is_due(oldest: DateTime<Utc>, retention_ms: i64, now: DateTime<Utc>) -> bool {
    oldest < cutoff(now, retention_ms)
}

/// The part of the log one purge transaction deletes: `min_seq..=through_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub through_seq: i64,
    /// The batch was full and wholly past retention: more may be due.
    pub full: bool,
}

/// The cut over the first events from `min_seq` (at most `batch_len_max`, ascending): the
/// longest run from `min_seq` of events older than `cutoff`. `created_at` is each
/// transaction's start, so it is not strictly ordered by seq; stopping at the first younger
/// event keeps every deleted event past retention, and stopping at the first missing seq keeps
/// the remaining seqs without a hole (P1). `None` when nothing is past retention.
pub fn plan_cut(
    min_seq: i64,
    oldest_events: &[(i64, DateTime<Utc>)],
    cutoff: DateTime<Utc>,
    batch_len_max: usize,
) -> Option<Cut> {
    assert!(
        oldest_events.len() <= batch_len_max,
        "{} events read for a batch of {batch_len_max}",
        oldest_events.len()
    );
    let mut through = None;
    for (expected, (seq, created_at)) in (min_seq..).zip(oldest_events) {
        if *seq != expected || *created_at >= cutoff {
            break;
        }
        through = Some(*seq);
    }
    let through_seq = through?;
    let cut_len = usize::try_from(through_seq - min_seq + 1).unwrap_or(usize::MAX);
    assert!(
        cut_len <= oldest_events.len(),
        "a cut longer than what was read"
    );
    Some(Cut {
        through_seq,
        full: cut_len == batch_len_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn due_strictly_before_the_cutoff() {
        assert!(is_due(t(0), 10_000, t(11)));
        assert!(!is_due(t(0), 10_000, t(10)));
    }

    #[test]
    fn the_cut_stops_at_the_first_young_event_or_hole() {
        let cutoff = t(100);
        let events = [(5, t(1)), (6, t(2)), (7, t(150)), (8, t(3))];
        assert_eq!(
            plan_cut(5, &events, cutoff, 10),
            Some(Cut {
                through_seq: 6,
                full: false
            })
        );
        let holed = [(5, t(1)), (7, t(2))];
        assert_eq!(
            plan_cut(5, &holed, cutoff, 10),
            Some(Cut {
                through_seq: 5,
                full: false
            })
        );
        assert_eq!(plan_cut(5, &[(5, t(100))], cutoff, 10), None);
        assert_eq!(plan_cut(5, &[], cutoff, 10), None);
    }

    #[test]
    fn a_full_batch_wholly_past_retention_asks_for_more() {
        let cutoff = t(100);
        let events = [(1, t(1)), (2, t(2)), (3, t(3))];
        assert_eq!(
            plan_cut(1, &events, cutoff, 3),
            Some(Cut {
                through_seq: 3,
                full: true
            })
        );
        assert_eq!(
            plan_cut(1, &events[..2], cutoff, 3).map(|c| c.full),
            Some(false)
        );
    }
}
