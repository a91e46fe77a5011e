//! Where a device stands in one conversation: its cursor, kept by the rules of `cursor.rs`,
//! and the read state the feed reports.

use serde::{Deserialize, Serialize};

use crate::cursor::{ConvCursor, PageStep, Position, Verdict};
use crate::types::{Conversation, EventsPage};

/// Where a device stands in one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvSync {
    /// The generation of the log the cursor belongs to.
    pub epoch: i64,
    /// Every seq at or below it was examined: the next events-after starts here.
    pub cursor: i64,
    /// The user's read position (monotonic).
    pub read_seq: i64,
    /// Visible messages from others after `read_seq`, as the server counted them.
    pub unread: i64,
    /// The head `unread` was counted up to.
    pub unread_through: i64,
    /// The largest seq as this user may see it (for a former member, the end of their last
    /// membership period).
    pub head: i64,
    pub min_seq: i64,
    /// The last seq handed to the app since the log (re)started; 0: none.
    pub last_seq: i64,
    /// Events-after must be asked whether or not the feed lists the conversation: a fetch was
    /// cut short, or a pushed delivery could not be placed.
    pub stale: bool,
}

impl ConvSync {
    /// A conversation the state meets for the first time, positioned just before its first
    /// stored event, so nothing is reported missing.
    pub(super) fn from_entry(entry: &Conversation) -> Self {
        Self {
            epoch: entry.epoch,
            cursor: Position::before(entry.epoch, entry.min_seq).seq,
            read_seq: entry.read_seq,
            unread: entry.unread,
            unread_through: entry.head,
            head: entry.head,
            min_seq: entry.min_seq,
            last_seq: 0,
            stale: false,
        }
    }

    /// The fields whose change makes a conversation count as changed in a report.
    pub(super) fn observable(&self) -> (i64, i64, i64, i64, i64, i64, i64) {
        (
            self.epoch,
            self.cursor,
            self.read_seq,
            self.unread,
            self.head,
            self.min_seq,
            self.last_seq,
        )
    }

    /// Takes the read state of a feed entry. The position never moves back; the count is the
    /// server's unless the device already knows of a read covering everything counted.
    pub(super) fn take_read_state(&mut self, read_seq: i64, unread: i64, head: i64) {
        if self.read_seq > read_seq && self.read_seq >= head {
            self.unread = 0;
        } else {
            self.unread = unread;
        }
        self.read_seq = self.read_seq.max(read_seq);
        self.unread_through = head;
    }

    /// Whether events-after has anything to say beyond what the state has.
    pub(super) fn needs_fetch(&self, entry: &Conversation) -> bool {
        self.stale || entry.epoch != self.epoch || self.cursor < entry.head
    }

    pub(super) fn verdict(&self, seq: i64) -> Verdict {
        self.log_cursor().verdict(seq)
    }

    /// Restarts at `epoch` with no events: every cursor of the old epoch is void.
    pub(super) fn reset_epoch(&mut self, epoch: i64) {
        self.with_cursor(|c| c.reset_epoch(epoch));
    }

    /// Applies one events-after page fetched from `self.cursor` at `self.epoch`, taking the
    /// page's head and `min_seq`.
    pub(crate) fn apply_page(&mut self, page: EventsPage) -> PageStep {
        self.head = page.head;
        self.min_seq = page.min_seq;
        self.with_cursor(|c| c.apply_page(page))
    }

    /// Takes a pushed event when it is exactly the next seq and the conversation is not
    /// waiting for a catch-up; answers whether it was taken.
    pub(super) fn accept_push(&mut self, seq: i64) -> bool {
        if self.stale || !self.with_cursor(|c| c.accept(seq)) {
            return false;
        }
        self.head = self.head.max(seq);
        true
    }

    fn log_cursor(&self) -> ConvCursor {
        ConvCursor {
            epoch: self.epoch,
            through_seq: self.cursor,
            last_seq: self.last_seq,
        }
    }

    /// Runs `step` on the conversation's cursor and keeps where it left the cursor.
    fn with_cursor<T>(&mut self, step: impl FnOnce(&mut ConvCursor) -> T) -> T {
        let mut cursor = self.log_cursor();
        let answer = step(&mut cursor);
        self.epoch = cursor.epoch;
        self.cursor = cursor.through_seq;
        self.last_seq = cursor.last_seq;
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::Progress;
    use crate::fixtures::{page, seqs};

    fn conv_at(cursor: i64) -> ConvSync {
        ConvSync {
            epoch: 1,
            cursor,
            read_seq: 0,
            unread: 0,
            unread_through: 0,
            head: cursor,
            min_seq: 1,
            last_seq: cursor,
            stale: false,
        }
    }

    #[test]
    fn a_page_moves_the_cursor_and_takes_the_head_and_min_seq() {
        let mut c = conv_at(2);
        let mut p = page(&[3, 4, 5], 9, 12);
        p.min_seq = 2;
        let step = c.apply_page(p);
        assert_eq!(seqs(&step.events), [3, 4, 5]);
        assert_eq!(step.progress, Progress::More);
        assert_eq!((c.cursor, c.last_seq, c.head, c.min_seq), (9, 5, 12, 2));
        assert!(c.accept_push(10), "no phantom gap at 6..=9");
        assert_eq!((c.cursor, c.last_seq, c.head), (10, 10, 12));
    }

    #[test]
    fn a_stale_conversation_takes_no_push() {
        let mut c = conv_at(3);
        assert!(!c.accept_push(5), "a gap");
        assert_eq!(c.verdict(5), Verdict::Gap);
        c.stale = true;
        assert_eq!(c.verdict(4), Verdict::Next);
        assert!(!c.accept_push(4), "it waits for the catch-up");
        c.stale = false;
        assert!(c.accept_push(4));
        assert_eq!((c.cursor, c.last_seq, c.head), (4, 4, 4));
    }

    #[test]
    fn an_epoch_reset_keeps_the_read_state() {
        let mut c = conv_at(7);
        c.read_seq = 5;
        c.reset_epoch(2);
        assert_eq!((c.epoch, c.cursor, c.last_seq, c.read_seq), (2, 0, 0, 5));
    }
}
