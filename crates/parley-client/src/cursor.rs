//! One conversation's cursor: the rules that make delivery exact, followed alike by the
//! realtime session ([`crate::ws`], through [`crate::ws::Cursors`]) and by the catch-up of a
//! [`crate::SyncState`] (through [`crate::ConvSync`]).
//!
//! The rules are pure (no IO), so they are tested on their own:
//!
//! - a seq at or below the cursor is one the app has (a duplicate); `cursor + 1` is the next
//!   event; anything beyond is a gap, filled through events-after before it is delivered;
//! - a fetched page moves the cursor to its `through_seq`, not to its last event, so seqs the
//!   user cannot see (outside their membership periods) never look like a gap;
//! - of a page, only events above everything handed over are kept, strictly increasing, so no
//!   `(conversation, seq)` reaches the app twice;
//! - a `truncated` page (the cursor lay below `min_seq`) restarts the log from that page;
//!   `EPOCH_CHANGED` restarts it at the new epoch from seq 0.

use crate::types::{Event, EventsPage};

/// Where the app stands in one conversation: the log's epoch and the last seq it has (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub epoch: i64,
    pub seq: i64,
}

impl Position {
    /// Just before `first_seq`, the first event to hand over. Starting just before `min_seq`
    /// reports nothing missing: nothing below it exists any more.
    pub fn before(epoch: i64, first_seq: i64) -> Self {
        Self {
            epoch,
            seq: (first_seq - 1).max(0),
        }
    }
}

/// What a pushed seq means for a conversation's cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

/// How far a page brought the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The cursor reached the page's head.
    Done,
    /// More pages follow.
    More,
    /// The page moved the cursor nowhere although the head lies beyond: asking again would
    /// loop.
    Stuck,
}

impl Progress {
    /// What is left after a page moved the cursor from `from` to `to` in a log whose head is
    /// `head`.
    pub(crate) fn of(from: i64, to: i64, head: i64) -> Self {
        if to >= head {
            Self::Done
        } else if to > from {
            Self::More
        } else {
            Self::Stuck
        }
    }
}

/// What one page did to a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageStep {
    /// New to the app, strictly ascending.
    pub(crate) events: Vec<Event>,
    /// The log restarts with `events` (the page was truncated).
    pub(crate) restart: bool,
    pub(crate) progress: Progress,
}

/// One conversation's cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvCursor {
    /// The generation of the log the cursor belongs to.
    pub(crate) epoch: i64,
    /// Every seq at or below it was examined: the next events-after starts here.
    pub(crate) through_seq: i64,
    /// The last seq handed to the app since the log (re)started; 0: none. Never above
    /// `through_seq`.
    pub(crate) last_seq: i64,
}

impl ConvCursor {
    /// At `position`, nothing handed over yet through this cursor.
    pub(crate) fn new(position: Position) -> Self {
        Self {
            epoch: position.epoch,
            through_seq: position.seq,
            last_seq: 0,
        }
    }

    pub(crate) fn position(&self) -> Position {
        Position {
            epoch: self.epoch,
            seq: self.through_seq,
        }
    }

    pub(crate) fn verdict(&self, seq: i64) -> Verdict {
        if seq <= self.through_seq {
            Verdict::Seen
        } else if seq == self.through_seq + 1 {
            Verdict::Next
        } else {
            Verdict::Gap
        }
    }

    /// Advances past `seq` when it is the next event; answers whether it is to be handed over.
    pub(crate) fn accept(&mut self, seq: i64) -> bool {
        if self.verdict(seq) != Verdict::Next {
            return false;
        }
        *self = Self {
            through_seq: seq,
            last_seq: seq,
            ..*self
        };
        true
    }

    /// Applies one events-after page fetched from this cursor: keeps only events above
    /// everything handed over before, strictly increasing, and moves the cursor to the page's
    /// `through_seq` and epoch.
    pub(crate) fn apply_page(&mut self, page: EventsPage) -> PageStep {
        let from = self.through_seq;
        let restart = page.truncated;
        // A truncated page starts a new log, of which nothing was handed over yet.
        let held = if restart { 0 } else { self.last_seq };
        let mut floor = from.max(held);
        let mut events = Vec::with_capacity(page.events.len());
        for event in page.events {
            if event.seq > floor {
                floor = event.seq;
                events.push(event);
            }
        }
        let last_seq = events.last().map_or(held, |e| e.seq);
        // One assignment, so a cursor shared behind a lock is never seen half moved.
        *self = Self {
            epoch: page.epoch,
            through_seq: from.max(page.through_seq).max(last_seq),
            last_seq,
        };
        PageStep {
            events,
            restart,
            progress: Progress::of(from, self.through_seq, page.head),
        }
    }

    /// Restarts at `epoch` with no events: every seq of the old epoch is void.
    pub(crate) fn reset_epoch(&mut self, epoch: i64) {
        *self = Self::new(Position { epoch, seq: 0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{page, seqs};

    fn at(seq: i64) -> ConvCursor {
        ConvCursor::new(Position { epoch: 1, seq })
    }

    #[test]
    fn pushes_in_order_are_taken_once_and_a_gap_is_not_skipped() {
        let mut c = at(5);
        assert_eq!(c.verdict(4), Verdict::Seen);
        assert_eq!(c.verdict(5), Verdict::Seen);
        assert_eq!(c.verdict(6), Verdict::Next);
        assert_eq!(c.verdict(8), Verdict::Gap);
        assert!(c.accept(6));
        assert!(!c.accept(6), "a repeat is dropped");
        assert!(!c.accept(5), "so is an older seq");
        assert!(!c.accept(8), "a gap is not skipped");
        assert_eq!((c.through_seq, c.last_seq), (6, 6));
        assert!(c.accept(7));
        assert_eq!(c.verdict(8), Verdict::Next, "the gap closed");
    }

    #[test]
    fn a_page_moves_to_through_seq_past_seqs_the_user_cannot_see() {
        let mut c = at(2);
        // 6..=9 lie outside the user's periods: examined by the server, not sent.
        let step = c.apply_page(page(&[3, 4, 5], 9, 9));
        assert_eq!(seqs(&step.events), [3, 4, 5]);
        assert_eq!((c.through_seq, c.last_seq), (9, 5));
        assert_eq!(step.progress, Progress::Done);
        assert!(c.accept(10), "no phantom gap at 6..=9");
    }

    #[test]
    fn a_page_keeps_only_new_seqs_in_increasing_order() {
        let mut c = at(4);
        let step = c.apply_page(page(&[3, 4, 5, 5, 7, 6, 8], 8, 8));
        assert_eq!(seqs(&step.events), [5, 7, 8]);
        // The same page again brings nothing.
        let step = c.apply_page(page(&[5, 7, 8], 8, 8));
        assert!(step.events.is_empty());
        assert_eq!(c.through_seq, 8);
    }

    #[test]
    fn progress_says_whether_to_ask_again() {
        let mut c = at(0);
        let step = c.apply_page(page(&[1, 2], 2, 9));
        assert_eq!((step.progress, c.through_seq), (Progress::More, 2));
        let step = c.apply_page(page(&[], 2, 9));
        assert_eq!(step.progress, Progress::Stuck);
        assert_eq!(Progress::of(2, 9, 9), Progress::Done);
        assert_eq!(
            Progress::of(9, 9, 4),
            Progress::Done,
            "a head below the cursor"
        );
    }

    #[test]
    fn a_truncated_page_restarts_the_log_from_the_answer() {
        let mut c = at(3);
        let mut p = page(&[50, 51], 51, 51);
        p.truncated = true;
        p.min_seq = 50;
        let step = c.apply_page(p);
        assert!(step.restart);
        assert_eq!(seqs(&step.events), [50, 51]);
        assert_eq!((c.through_seq, c.last_seq), (51, 51));
        // A truncated page with nothing visible leaves nothing handed over in the new log.
        let mut p = page(&[], 80, 80);
        p.truncated = true;
        let step = c.apply_page(p);
        assert!(step.restart && step.events.is_empty());
        assert_eq!((c.through_seq, c.last_seq), (80, 0));
    }

    #[test]
    fn an_epoch_reset_restarts_from_nothing() {
        let mut c = at(7);
        c.reset_epoch(2);
        assert_eq!((c.epoch, c.through_seq, c.last_seq), (2, 0, 0));
        let mut p = page(&[1, 2], 2, 2);
        p.epoch = 2;
        let step = c.apply_page(p);
        assert_eq!(
            seqs(&step.events),
            [1, 2],
            "seqs of the old epoch do not hide these"
        );
        assert_eq!(c.position(), Position { epoch: 2, seq: 2 });
    }

    #[test]
    fn a_conversation_starts_just_before_its_first_stored_event() {
        assert_eq!(Position::before(3, 30), Position { epoch: 3, seq: 29 });
        assert_eq!(Position::before(1, 1), Position { epoch: 1, seq: 0 });
        assert_eq!(Position::before(1, 0), Position { epoch: 1, seq: 0 });
    }
}
