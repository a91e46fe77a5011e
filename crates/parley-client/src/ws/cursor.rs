//! The cursors of a realtime session: one conversation cursor (`cursor.rs`, whose rules the
//! catch-up of a [`crate::SyncState`] follows too) per tracked conversation, whether it waits
//! for a catch-up, and the checks that keep a fetch from applying to a cursor that moved while
//! the fetch was in flight.

use std::collections::HashMap;

use crate::cursor::{ConvCursor, Progress};
use crate::types::{Event, EventsPage};

pub use crate::cursor::{Position, Verdict};

/// The events of a page that the app does not have yet, and where the cursor went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageOutcome {
    /// Ascending, each above the cursor the page was fetched from.
    pub events: Vec<Event>,
    /// The cursor lay below `min_seq`: events between were purged and are gone for good.
    pub truncated: bool,
    pub position: Position,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    cursor: ConvCursor,
    /// The conversation must be caught up through events-after (newly tracked, or a fetch
    /// failed and is to be retried).
    stale: bool,
}

/// The cursors of every tracked conversation.
#[derive(Debug, Default, Clone)]
pub struct Cursors {
    convs: HashMap<String, Entry>,
}

impl Cursors {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tracks `conv_id` from `position`, replacing any earlier cursor, and marks it stale so it
    /// is caught up: the app may lack events committed before it started tracking.
    pub fn track(&mut self, conv_id: &str, position: Position) {
        self.insert(conv_id, position, true);
    }

    /// Tracks `conv_id` from `position` unless it is tracked already; answers whether it was
    /// adopted. Used when a push arrives for a conversation the app never mentioned.
    pub fn adopt(&mut self, conv_id: &str, position: Position) -> bool {
        if self.convs.contains_key(conv_id) {
            return false;
        }
        self.insert(conv_id, position, false);
        true
    }

    fn insert(&mut self, conv_id: &str, position: Position, stale: bool) {
        let cursor = ConvCursor::new(position);
        self.convs
            .insert(conv_id.to_owned(), Entry { cursor, stale });
    }

    pub fn untrack(&mut self, conv_id: &str) {
        self.convs.remove(conv_id);
    }

    pub fn position(&self, conv_id: &str) -> Option<Position> {
        self.convs.get(conv_id).map(|e| e.cursor.position())
    }

    pub fn tracked(&self) -> Vec<String> {
        self.convs.keys().cloned().collect()
    }

    pub fn verdict(&self, conv_id: &str, seq: i64) -> Verdict {
        self.convs
            .get(conv_id)
            .map_or(Verdict::Untracked, |e| e.cursor.verdict(seq))
    }

    /// Advances past `seq` when it is the next event; answers whether it is to be delivered.
    pub fn accept(&mut self, conv_id: &str, seq: i64) -> bool {
        self.convs
            .get_mut(conv_id)
            .is_some_and(|e| e.cursor.accept(seq))
    }

    /// Applies a page of events-after fetched from `from`. Answers `None`, changing nothing,
    /// when the cursor moved or the conversation was re-tracked while the page was in flight:
    /// the page then belongs to a position that no longer exists and is fetched again.
    pub fn apply_page(
        &mut self,
        conv_id: &str,
        from: Position,
        page: EventsPage,
    ) -> Option<PageOutcome> {
        let entry = self.at_mut(conv_id, from)?;
        let step = entry.cursor.apply_page(page);
        Some(PageOutcome {
            events: step.events,
            truncated: step.restart,
            position: entry.cursor.position(),
        })
    }

    /// Restarts `conv_id` at `epoch` with no events, after the server said the cursor belongs to
    /// another epoch; answers false, changing nothing, when the cursor moved meanwhile.
    pub fn reset_epoch(&mut self, conv_id: &str, from: Position, epoch: i64) -> bool {
        self.at_mut(conv_id, from)
            .map(|e| e.cursor.reset_epoch(epoch))
            .is_some()
    }

    /// The entry of `conv_id` if its cursor still stands at `from`.
    fn at_mut(&mut self, conv_id: &str, from: Position) -> Option<&mut Entry> {
        self.convs
            .get_mut(conv_id)
            .filter(|e| e.cursor.position() == from)
    }

    pub fn mark_stale(&mut self, conv_id: &str) {
        if let Some(e) = self.convs.get_mut(conv_id) {
            e.stale = true;
        }
    }

    /// The stale conversations, cleared: the caller catches them up or marks them again.
    pub fn take_stale(&mut self) -> Vec<String> {
        self.convs
            .iter_mut()
            .filter(|(_, e)| e.stale)
            .map(|(conv_id, e)| {
                e.stale = false;
                conv_id.clone()
            })
            .collect()
    }
}

/// Whether a catch-up that moved the cursor from `before` to `after` on a page reporting
/// `head` is complete: the cursor reached `target` (the head when `None`), reached the head
/// (nothing more exists yet), or the page made no progress (asking again would loop).
pub fn fill_finished(before: i64, after: i64, head: i64, target: Option<i64>) -> bool {
    Progress::of(before, after, head) != Progress::More || target.is_some_and(|t| after >= t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{page, seqs};

    fn at(seq: i64) -> Position {
        Position { epoch: 1, seq }
    }

    #[test]
    fn only_tracked_conversations_take_pushes() {
        let mut c = Cursors::new();
        assert_eq!(c.verdict("c", 1), Verdict::Untracked);
        assert!(!c.accept("c", 1));
        c.track("c", at(5));
        assert_eq!(c.verdict("c", 5), Verdict::Seen);
        assert_eq!(c.verdict("c", 6), Verdict::Next);
        assert_eq!(c.verdict("c", 8), Verdict::Gap);
        assert!(c.accept("c", 6));
        assert!(!c.accept("c", 6), "a repeat is dropped");
        assert_eq!(c.position("c"), Some(at(6)));
        assert!(!c.accept("other", 1));
    }

    #[test]
    fn a_page_outcome_carries_the_new_events_truncation_and_position() {
        let mut c = Cursors::new();
        c.track("c", at(2));
        // Seqs 6..=9 are outside the user's membership: the server examined them, sent nothing.
        let out = c.apply_page("c", at(2), page(&[1, 3, 4, 5], 9, 9)).unwrap();
        assert_eq!((seqs(&out.events), out.truncated), (vec![3, 4, 5], false));
        assert_eq!(out.position, at(9));
        assert_eq!(c.verdict("c", 10), Verdict::Next, "no phantom gap at 6..=9");
        let mut p = page(&[50, 51], 51, 51);
        p.truncated = true;
        p.min_seq = 50;
        let out = c.apply_page("c", at(9), p).unwrap();
        assert!(out.truncated);
        assert_eq!((seqs(&out.events), out.position), (vec![50, 51], at(51)));
    }

    #[test]
    fn a_page_for_a_moved_cursor_changes_nothing() {
        let mut c = Cursors::new();
        c.track("c", at(2));
        assert!(c.accept("c", 3));
        assert_eq!(c.apply_page("c", at(2), page(&[3, 4], 4, 4)), None);
        assert_eq!(c.position("c"), Some(at(3)));
        assert_eq!(c.apply_page("gone", at(0), page(&[1], 1, 1)), None);
    }

    #[test]
    fn a_new_epoch_restarts_from_nothing_unless_the_cursor_moved() {
        let mut c = Cursors::new();
        c.track("c", at(7));
        assert!(!c.reset_epoch("c", at(6), 2), "stale expectation");
        assert_eq!(c.position("c"), Some(at(7)));
        assert!(!c.reset_epoch("gone", at(7), 2));
        assert!(c.reset_epoch("c", at(7), 2));
        assert_eq!(c.position("c"), Some(Position { epoch: 2, seq: 0 }));
        let mut p = page(&[1], 1, 1);
        p.epoch = 2;
        let out = c.apply_page("c", Position { epoch: 2, seq: 0 }, p).unwrap();
        assert_eq!(out.position, Position { epoch: 2, seq: 1 });
    }

    #[test]
    fn tracking_marks_stale_and_adoption_does_not() {
        let mut c = Cursors::new();
        c.track("a", at(0));
        assert!(c.adopt("b", at(9)));
        assert!(!c.adopt("a", at(5)), "an explicit cursor wins");
        assert_eq!(c.position("a"), Some(at(0)));
        assert_eq!(c.take_stale(), ["a"]);
        assert!(c.take_stale().is_empty());
        c.mark_stale("b");
        assert_eq!(c.take_stale(), ["b"]);
        c.untrack("b");
        assert_eq!(c.position("b"), None);
    }

    #[test]
    fn a_fill_ends_at_the_target_the_head_or_without_progress() {
        assert!(!fill_finished(0, 500, 1200, Some(1200)));
        assert!(fill_finished(500, 1200, 1200, Some(1200)));
        assert!(fill_finished(0, 10, 12, Some(10)), "target reached");
        assert!(fill_finished(0, 12, 12, None), "head reached");
        assert!(fill_finished(0, 8, 8, Some(10)), "target beyond head");
        assert!(fill_finished(4, 4, 9, None), "no progress");
        assert!(!fill_finished(0, 4, 9, None), "more to come");
    }
}
