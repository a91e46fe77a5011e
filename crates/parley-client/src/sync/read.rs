//! The read position and unread count between catch-ups: the feed brings the server's count
//! (`conv.rs`); a read seen on this or another device moves the position forward and takes off
//! what it covers, and a recall takes off the message it recalls if it was counted.

use crate::sync::sink::Events;
use crate::sync::state::SyncState;
use crate::types::EventKind;

impl SyncState {
    /// Moves the read position of `conv_id` forward to `read_seq` (a `read` delivery, or the
    /// answer of a mark-read); never back. Answers whether it moved. The unread count drops to
    /// 0 when the position covers everything counted; otherwise the messages now read are
    /// taken off when the state keeps the log, and the next catch-up brings the server's count
    /// either way (a moved read position lists the conversation in the feed).
    pub fn apply_read(&mut self, conv_id: &str, read_seq: i64) -> bool {
        let Some(conv) = self.convs.get_mut(conv_id) else {
            return false;
        };
        if read_seq <= conv.read_seq {
            return false;
        }
        let before = conv.read_seq;
        conv.read_seq = read_seq;
        if read_seq >= conv.unread_through {
            conv.unread = 0;
        } else if let Events::Memory(logs) = &self.events {
            // Messages the server counted: from others (an own message moves the sender's read
            // position past it), not recalled, in (before, read_seq].
            let now_read = logs.logs.get(conv_id).map_or(0, |log| {
                let start = log.partition_point(|e| e.seq <= before);
                log[start..]
                    .iter()
                    .take_while(|e| e.seq <= read_seq)
                    .filter(|e| e.kind == EventKind::Msg && !e.recalled)
                    .count()
            });
            conv.unread = (conv.unread - now_read as i64).max(0);
        }
        true
    }

    /// Takes off the unread count each message of `recalled` (`(recall seq, target seq)`
    /// pairs, from kept logs) that the server counted: the recall came after the count, and
    /// the message lies between the read position and the counted head.
    pub(super) fn uncount_recalled(&mut self, conv_id: &str, recalled: &[(i64, i64)]) {
        let Some(conv) = self.convs.get_mut(conv_id) else {
            return;
        };
        for &(recall_seq, target) in recalled {
            let counted = recall_seq > conv.unread_through
                && target > conv.read_seq
                && target <= conv.unread_through;
            if counted {
                conv.unread = (conv.unread - 1).max(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fixtures::{conversation, event, page};
    use crate::sync::SyncState;
    use crate::types::EventKind;

    #[test]
    fn read_state_comes_from_the_feed_and_never_moves_back() {
        let mut state = SyncState::new();
        state.apply_entry(&conversation("c", 10, 4, 6));
        state.apply_entry(&conversation("c", 10, 8, 2));
        assert_eq!((state.read_seq("c"), state.unread("c")), (Some(8), Some(2)));
        // An older answer does not move it back.
        state.apply_entry(&conversation("c", 10, 6, 4));
        assert_eq!(state.read_seq("c"), Some(8));
        assert!(!state.apply_read("c", 7));
        assert!(state.apply_read("c", 10));
        assert_eq!(
            (state.read_seq("c"), state.unread("c")),
            (Some(10), Some(0))
        );
        assert!(!state.apply_read("unknown", 3));
        // A feed entry read before that read arrived does not bring the badge back.
        state.apply_entry(&conversation("c", 10, 8, 2));
        assert_eq!(
            (state.read_seq("c"), state.unread("c")),
            (Some(10), Some(0))
        );
    }

    #[test]
    fn a_partial_read_takes_off_the_messages_it_covers() {
        let mut state = SyncState::new();
        state.apply_entry(&conversation("c", 6, 0, 0));
        state.apply_page("c", page(&[1, 2, 3, 4, 5, 6], 6, 6));
        // The server counted 6 unread; then seq 2 is recalled by the event at 7.
        state.apply_entry(&conversation("c", 6, 0, 6));
        let mut recall = event(7);
        recall.kind = EventKind::Recall;
        recall.target_seq = Some(2);
        state.store("c", vec![recall]);
        let log = state.events("c").unwrap();
        assert!(log[1].recalled && log[1].body.is_none());
        assert_eq!(state.unread("c"), Some(5));
        assert!(state.apply_read("c", 4));
        assert_eq!(state.unread("c"), Some(2), "5 and 6 are left");
    }
}
