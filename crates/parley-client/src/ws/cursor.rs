//! Per-conversation cursors: which events the app already has, and what a pushed event or a
//! fetched page means for it.
//!
//! The logic is pure (no IO), so the rules that make delivery exact are tested on their own:
//! a seq at or below the cursor is a duplicate; `cursor + 1` is the next event; anything
//! beyond is a gap to fetch; a fetched page moves the cursor to its `through_seq`, not to its
//! last event, so seqs the user cannot see never look like a gap.

use std::collections::HashMap;

use crate::types::{Event, EventsPage};

/// Where the app stands in one conversation: the log's epoch and the last seq it has (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub epoch: i64,
    pub seq: i64,
}

/// What a pushed seq means for a conversation's cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The conversation is not tracked.
    Untracked,
    /// At or below the cursor: the app has it already.
    Seen,
    /// Exactly `cursor + 1`: deliver it and advance.
    Next,
    /// Beyond `cursor + 1`: the events in between must be fetched first.
    Gap,
}

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
    position: Position,
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
        self.convs.insert(
            conv_id.to_owned(),
            Entry {
                position,
                stale: true,
            },
        );
    }

    /// Tracks `conv_id` from `position` unless it is tracked already; answers whether it was
    /// adopted. Used when a push arrives for a conversation the app never mentioned.
    pub fn adopt(&mut self, conv_id: &str, position: Position) -> bool {
        if self.convs.contains_key(conv_id) {
            return false;
        }
        self.convs.insert(
            conv_id.to_owned(),
            Entry {
                position,
                stale: false,
            },
        );
        true
    }

    pub fn untrack(&mut self, conv_id: &str) {
        self.convs.remove(conv_id);
    }

    pub fn position(&self, conv_id: &str) -> Option<Position> {
        self.convs.get(conv_id).map(|e| e.position)
    }

    pub fn tracked(&self) -> Vec<String> {
        self.convs.keys().cloned().collect()
    }

    pub fn verdict(&self, conv_id: &str, seq: i64) -> Verdict {
        match self.convs.get(conv_id) {
            None => Verdict::Untracked,
            Some(e) if seq <= e.position.seq => Verdict::Seen,
            Some(e) if seq == e.position.seq + 1 => Verdict::Next,
            Some(_) => Verdict::Gap,
        }
    }

    /// Advances past `seq` when it is the next event; answers whether it is to be delivered.
    pub fn accept(&mut self, conv_id: &str, seq: i64) -> bool {
        match self.convs.get_mut(conv_id) {
            Some(e) if seq == e.position.seq + 1 => {
                e.position.seq = seq;
                true
            }
            _ => false,
        }
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
        let entry = self.convs.get_mut(conv_id)?;
        if entry.position != from {
            return None;
        }
        let events: Vec<Event> = page
            .events
            .into_iter()
            .filter(|e| e.seq > from.seq)
            .collect();
        let last_event = events.last().map_or(from.seq, |e| e.seq);
        let seq = from.seq.max(page.through_seq).max(last_event);
        entry.position = Position {
            epoch: page.epoch,
            seq,
        };
        Some(PageOutcome {
            events,
            truncated: page.truncated,
            position: entry.position,
        })
    }

    /// Restarts `conv_id` at `epoch` with no events, after the server said the cursor belongs to
    /// another epoch; answers false, changing nothing, when the cursor moved meanwhile.
    pub fn reset_epoch(&mut self, conv_id: &str, from: Position, epoch: i64) -> bool {
        match self.convs.get_mut(conv_id) {
            Some(e) if e.position == from => {
                e.position = Position { epoch, seq: 0 };
                true
            }
            _ => false,
        }
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
    after >= target.unwrap_or(head).min(head) || after <= before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EventKind;

    fn event(seq: i64) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: EventKind::Msg,
            created_at: "2024-01-01T00:00:00Z".into(),
            message_id: None,
            sender_user: None,
            sender_device: None,
            client_msg_id: None,
            body: None,
            recalled: false,
            subject_user: None,
            target_seq: None,
        }
    }

    fn page(seqs: &[i64], through_seq: i64, head: i64) -> EventsPage {
        EventsPage {
            events: seqs.iter().copied().map(event).collect(),
            head,
            min_seq: 1,
            epoch: 1,
            through_seq,
            truncated: false,
            next_before: None,
        }
    }

    fn at(seq: i64) -> Position {
        Position { epoch: 1, seq }
    }

    fn seqs(outcome: &PageOutcome) -> Vec<i64> {
        outcome.events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn pushes_are_sorted_into_seen_next_and_gap() {
        let mut c = Cursors::new();
        assert_eq!(c.verdict("c", 1), Verdict::Untracked);
        c.track("c", at(5));
        assert_eq!(c.verdict("c", 4), Verdict::Seen);
        assert_eq!(c.verdict("c", 5), Verdict::Seen);
        assert_eq!(c.verdict("c", 6), Verdict::Next);
        assert_eq!(c.verdict("c", 8), Verdict::Gap);
    }

    #[test]
    fn accept_delivers_each_seq_once_and_in_order() {
        let mut c = Cursors::new();
        c.track("c", at(0));
        assert!(c.accept("c", 1));
        assert!(!c.accept("c", 1), "a repeat is dropped");
        assert!(!c.accept("c", 3), "a gap is not skipped");
        assert!(c.accept("c", 2));
        assert_eq!(c.position("c"), Some(at(2)));
        assert!(!c.accept("other", 1));
    }

    #[test]
    fn a_page_advances_to_through_seq_not_to_its_last_event() {
        let mut c = Cursors::new();
        c.track("c", at(2));
        // Seqs 6..=9 are outside the user's membership: the server examined them, sent nothing.
        let out = c.apply_page("c", at(2), page(&[3, 4, 5], 9, 9)).unwrap();
        assert_eq!(seqs(&out), [3, 4, 5]);
        assert_eq!(out.position, at(9));
        assert_eq!(c.verdict("c", 10), Verdict::Next, "no phantom gap at 6..=9");
    }

    #[test]
    fn a_page_drops_what_the_cursor_already_covers() {
        let mut c = Cursors::new();
        c.track("c", at(4));
        let out = c.apply_page("c", at(4), page(&[3, 4, 5, 6], 6, 6)).unwrap();
        assert_eq!(seqs(&out), [5, 6]);
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
    fn a_truncated_page_restarts_at_min_seq() {
        let mut c = Cursors::new();
        c.track("c", at(3));
        let mut p = page(&[50, 51], 51, 51);
        p.truncated = true;
        p.min_seq = 50;
        let out = c.apply_page("c", at(3), p).unwrap();
        assert!(out.truncated);
        assert_eq!((seqs(&out), out.position), (vec![50, 51], at(51)));
    }

    #[test]
    fn a_new_epoch_restarts_from_nothing() {
        let mut c = Cursors::new();
        c.track("c", at(7));
        assert!(!c.reset_epoch("c", at(6), 2), "stale expectation");
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
    }
}
