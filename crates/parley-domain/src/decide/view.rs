//! What a reader may see of a conversation (SPEC §5, P8, P11): the head, the read position,
//! the unread ranges and the last visible event, planned from the reader's periods so that
//! a store only reads what the plan names.

use crate::membership::{periods_disjoint, visible_ranges, Period};

/// Whether the reader holds an open period.
pub fn is_current(periods: &[Period]) -> bool {
    periods.iter().any(|p| p.to_seq.is_none())
}

/// The head as this reader may see it: the log's head for a current member, the end of the
/// last period for a former one (whose view stops there, P11), 0 without any period.
pub fn reader_head(periods: &[Period], log_head: i64) -> i64 {
    if is_current(periods) {
        log_head
    } else {
        periods.iter().filter_map(|p| p.to_seq).max().unwrap_or(0)
    }
}

/// The position a mark-read request moves to (before the monotonic max with the stored one):
/// never above the head the reader may see, never below 0.
pub fn clamp_read(seq: i64, head: i64) -> i64 {
    seq.min(head).max(0)
}

/// One conversation's view for one reader, before its events are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewPlan {
    pub head: i64,
    /// The stored read position, never above `head`.
    pub read_seq: i64,
    pub is_member: bool,
    /// The visible seqs after `read_seq`, ascending and disjoint: the unread messages are the
    /// msg events in them (not recalled, not the reader's own).
    pub unread_ranges: Vec<(i64, i64)>,
    /// The last visible seq still stored, if any.
    pub last_seq: Option<i64>,
}

/// Plans the view of a log `[min_seq, next_seq)` for a reader with `periods` (at least one)
/// and the stored read position `read_mark`.
pub fn plan(periods: &[Period], next_seq: i64, min_seq: i64, read_mark: Option<i64>) -> ViewPlan {
    assert!(!periods.is_empty(), "a view for a reader without a period");
    assert!(
        periods_disjoint(periods),
        "overlapping periods: {periods:?}"
    );
    assert!(
        1 <= min_seq && min_seq <= next_seq,
        "log bounds {min_seq}..{next_seq}"
    );
    let head = reader_head(periods, next_seq - 1);
    let read_seq = read_mark.unwrap_or(0).min(head);
    let unread_ranges = visible_ranges(periods, (read_seq + 1).max(min_seq), head);
    let last_seq = visible_ranges(periods, min_seq, head).last().map(|r| r.1);
    ViewPlan {
        head,
        read_seq,
        is_member: is_current(periods),
        unread_ranges,
        last_seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(from_seq: i64, to_seq: Option<i64>) -> Period {
        Period { from_seq, to_seq }
    }

    #[test]
    fn a_former_member_sees_up_to_the_end_of_the_last_period() {
        assert_eq!(reader_head(&[p(1, None)], 40), 40);
        assert_eq!(reader_head(&[p(1, Some(5)), p(9, Some(12))], 40), 12);
        assert_eq!(reader_head(&[p(1, Some(5)), p(9, None)], 40), 40);
        assert_eq!(reader_head(&[], 40), 0);
    }

    #[test]
    fn read_positions_are_clamped_to_the_visible_head() {
        assert_eq!(clamp_read(99, 12), 12);
        assert_eq!(clamp_read(-3, 12), 0);
        assert_eq!(clamp_read(7, 12), 7);
    }

    #[test]
    fn unread_ranges_skip_the_gaps_between_periods_and_the_purged_prefix() {
        // Member 2..=5, left, rejoined at 9; log 1..=20 with 1..=3 purged; read up to 2.
        let periods = [p(2, Some(5)), p(9, None)];
        let plan = plan(&periods, 21, 4, Some(2));
        assert_eq!(
            plan,
            ViewPlan {
                head: 20,
                read_seq: 2,
                is_member: true,
                unread_ranges: vec![(4, 5), (9, 20)],
                last_seq: Some(20),
            }
        );
    }

    #[test]
    fn a_former_members_view_ends_with_their_period() {
        let periods = [p(1, Some(6))];
        let plan = plan(&periods, 30, 1, Some(50));
        assert_eq!(plan.head, 6);
        assert_eq!(plan.read_seq, 6);
        assert!(!plan.is_member);
        assert!(plan.unread_ranges.is_empty());
        assert_eq!(plan.last_seq, Some(6));
    }

    #[test]
    fn nothing_visible_is_stored_after_a_purge_past_the_period() {
        let plan = plan(&[p(1, Some(6))], 30, 10, None);
        assert_eq!((plan.unread_ranges.len(), plan.last_seq), (0, None));
    }

    #[test]
    #[should_panic(expected = "overlapping periods")]
    fn overlapping_periods_are_a_bug() {
        plan(&[p(1, None), p(3, Some(4))], 9, 1, None);
    }

    #[test]
    #[should_panic(expected = "without a period")]
    fn a_view_needs_a_period() {
        plan(&[], 3, 1, None);
    }
}
