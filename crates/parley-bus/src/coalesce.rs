//! One batch of announcements for other gateways: the heads of conversations, coalesced, and
//! notices, in order.
//!
//! A gateway that learns a conversation's head reads the log up to it, so of several heads of
//! one conversation only the highest needs to travel: it covers the lower ones. Notices are
//! not in the log, so each one travels as it was made.

use std::collections::HashMap;

use parley_domain::ConvId;

use crate::Notice;

/// What the announcing node queues for other gateways.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A conversation's head after a commit.
    Head(ConvId, i64),
    Notice(Notice),
}

/// Announcements gathered for one send.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    heads: HashMap<ConvId, i64>,
    notices: Vec<Notice>,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one announcement: a head raises its conversation's head, a notice is appended.
    pub fn add(&mut self, entry: Outbound) {
        match entry {
            Outbound::Head(conv_id, head) => {
                let slot = self.heads.entry(conv_id).or_insert(head);
                *slot = (*slot).max(head);
            }
            Outbound::Notice(notice) => self.notices.push(notice),
        }
    }

    /// The highest head of each conversation.
    pub fn heads(&self) -> &HashMap<ConvId, i64> {
        &self.heads
    }

    /// The notices in the order they were added.
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// Entries that will travel: one per conversation and one per notice.
    pub fn len(&self) -> usize {
        self.heads.len() + self.notices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_domain::{DeviceId, UserId};

    fn conv(s: &str) -> ConvId {
        ConvId::parse(s).expect("valid conv id")
    }

    fn read(seq: i64) -> Notice {
        Notice::ReadMoved {
            user_id: UserId::from_trusted("u".into()),
            conv_id: conv("a"),
            read_seq: seq,
            origin_device: DeviceId::from_trusted("d".into()),
        }
    }

    #[test]
    fn coalescing_keeps_the_highest_head_per_conversation() {
        let mut batch = Batch::new();
        for (c, h) in [("a", 3), ("b", 1), ("a", 5), ("a", 4), ("b", 2)] {
            batch.add(Outbound::Head(conv(c), h));
        }
        assert_eq!(
            batch.heads(),
            &HashMap::from([(conv("a"), 5), (conv("b"), 2)])
        );
        assert_eq!(batch.len(), 2);
    }

    #[test]
    fn notices_are_kept_each_and_in_order_between_heads() {
        let mut batch = Batch::new();
        batch.add(Outbound::Notice(read(4)));
        batch.add(Outbound::Head(conv("a"), 9));
        batch.add(Outbound::Notice(read(2)));
        batch.add(Outbound::Notice(read(4)));
        assert_eq!(batch.notices(), &[read(4), read(2), read(4)]);
        assert_eq!(batch.len(), 4);
        assert!(!batch.is_empty());
        assert!(Batch::new().is_empty());
    }
}
