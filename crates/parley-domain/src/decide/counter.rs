//! Seq allocation (P1, P4): every event of a conversation takes the next seq of its counter,
//! read under the conversation's lock and written back in the same transaction.

/// A conversation's counters as its write transaction read them under the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCounter {
    next_seq: i64,
    msg_count: i64,
}

/// Where one new event goes: its seq, and the number of msg events up to and including it
/// (`msg_ordinal`, which turns unread counts into differences).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub seq: i64,
    pub msg_ordinal: i64,
}

impl LogCounter {
    /// `next_seq` as stored (at least 1, a schema constraint) and the msg events ever written
    /// (0 in a store that keeps no ordinals). At most one event per seq, so no more msg events
    /// than seqs were handed out.
    pub fn new(next_seq: i64, msg_count: i64) -> Self {
        assert!(next_seq >= 1, "next_seq {next_seq} below 1");
        assert!(
            (0..next_seq).contains(&msg_count),
            "msg_count {msg_count} outside 0..{next_seq}"
        );
        Self {
            next_seq,
            msg_count,
        }
    }

    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    pub fn msg_count(&self) -> i64 {
        self.msg_count
    }

    /// The slot of a new msg event: the next seq, one more message.
    pub fn take_msg(&mut self) -> Slot {
        self.msg_count += 1;
        self.take()
    }

    /// The slot of any other event (a join, a leave, a recall): the next seq, carrying the
    /// message count so far.
    pub fn take_event(&mut self) -> Slot {
        self.take()
    }

    fn take(&mut self) -> Slot {
        let slot = Slot {
            seq: self.next_seq,
            msg_ordinal: self.msg_count,
        };
        self.next_seq += 1;
        assert!(
            slot.msg_ordinal <= slot.seq,
            "ordinal {} above seq {}",
            slot.msg_ordinal,
            slot.seq
        );
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_counter_without_a_hole() {
        let mut c = LogCounter::new(4, 2);
        assert_eq!(
            c.take_msg(),
            Slot {
                seq: 4,
                msg_ordinal: 3
            }
        );
        assert_eq!(
            c.take_event(),
            Slot {
                seq: 5,
                msg_ordinal: 3
            }
        );
        assert_eq!(
            c.take_msg(),
            Slot {
                seq: 6,
                msg_ordinal: 4
            }
        );
        assert_eq!((c.next_seq(), c.msg_count()), (7, 4));
    }

    #[test]
    #[should_panic(expected = "next_seq 0 below 1")]
    fn a_counter_below_one_is_a_bug() {
        LogCounter::new(0, 0);
    }

    #[test]
    #[should_panic(expected = "msg_count 5 outside")]
    fn more_messages_than_seqs_is_a_bug() {
        LogCounter::new(5, 5);
    }
}
