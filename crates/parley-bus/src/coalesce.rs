//! One batch of announcements for other gateways: the heads of conversations, coalesced, and
//! notices, in order.
//!
//! A gateway that learns a conversation's head reads the log up to it, so of several heads of
//! one conversation only the highest needs to travel: it covers the lower ones. Notices are
//! not in the log, so each one travels as it was made.
//!
//! A bus that carries events keeps them too, each conversation's in seq order, up to
//! [`BATCH_EVENTS_LEN_MAX`] per batch: a gateway that receives an event following the last one
//! it pushed pushes it without reading the log. Past the bound only the head is raised, and
//! the receiver reads the rest from the log as it does for a head alone.

use std::collections::HashMap;
use std::sync::Arc;

use parley_domain::{ConvId, Event};

use crate::Notice;

/// What the announcing node queues for other gateways.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A conversation's head after a commit.
    Head(ConvId, i64),
    /// A committed event: its head, and the event itself while the batch has room for it.
    Event(Arc<Event>),
    Notice(Notice),
}

/// Most events one batch keeps; beyond it, events travel as their heads only. It bounds the
/// memory of a batch and the work a burst puts on each receiving gateway's decoder.
pub const BATCH_EVENTS_LEN_MAX: usize = 4_096;

/// Announcements gathered for one send.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Batch {
    heads: HashMap<ConvId, i64>,
    events: HashMap<ConvId, Vec<Arc<Event>>>,
    events_len: usize,
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
            Outbound::Event(event) => {
                self.add(Outbound::Head(event.conv_id.clone(), event.seq));
                if self.events_len >= BATCH_EVENTS_LEN_MAX {
                    return;
                }
                let kept = self.events.entry(event.conv_id.clone()).or_default();
                // Commits of one conversation are announced in seq order, so this is nearly
                // always a push at the end; a repeated seq is kept once.
                if let Err(at) = kept.binary_search_by_key(&event.seq, |e| e.seq) {
                    kept.insert(at, event);
                    self.events_len += 1;
                }
            }
            Outbound::Notice(notice) => self.notices.push(notice),
        }
    }

    /// The events kept of one conversation, in seq order.
    pub fn events(&self, conv_id: &ConvId) -> &[Arc<Event>] {
        self.events.get(conv_id).map_or(&[], Vec::as_slice)
    }

    /// Events kept in the whole batch.
    pub fn events_len(&self) -> usize {
        self.events_len
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
    use chrono::DateTime;
    use parley_domain::{DeviceId, EventKind, UserId};

    fn event(c: &str, seq: i64) -> Arc<Event> {
        let at = DateTime::from_timestamp(1_700_000_000, 0).expect("valid time");
        let user = UserId::from_trusted("u".into());
        Arc::new(Event::membership(
            &conv(c),
            seq,
            EventKind::Join,
            &user,
            &user,
            at,
        ))
    }

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

    #[test]
    fn events_are_kept_in_seq_order_and_raise_the_head() {
        let mut batch = Batch::new();
        for (c, seq) in [("a", 2), ("b", 1), ("a", 4), ("a", 3), ("a", 3)] {
            batch.add(Outbound::Event(event(c, seq)));
        }
        batch.add(Outbound::Head(conv("a"), 5));
        let seqs = |c| {
            batch
                .events(&conv(c))
                .iter()
                .map(|e| e.seq)
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs("a"), vec![2, 3, 4]);
        assert_eq!(seqs("b"), vec![1]);
        assert_eq!(seqs("c"), Vec::<i64>::new());
        assert_eq!(batch.events_len(), 4);
        assert_eq!(
            batch.heads(),
            &HashMap::from([(conv("a"), 5), (conv("b"), 1)])
        );
        assert_eq!(
            batch.len(),
            2,
            "events travel with their conversation's head"
        );
    }

    #[test]
    fn events_beyond_the_bound_travel_as_their_heads_only() {
        let mut batch = Batch::new();
        let seq_max = BATCH_EVENTS_LEN_MAX as i64 + 10;
        for seq in 1..=seq_max {
            batch.add(Outbound::Event(event("a", seq)));
        }
        assert_eq!(batch.events_len(), BATCH_EVENTS_LEN_MAX);
        let kept = batch.events(&conv("a"));
        assert_eq!(
            kept.last().map(|e| e.seq),
            Some(BATCH_EVENTS_LEN_MAX as i64)
        );
        assert_eq!(batch.heads(), &HashMap::from([(conv("a"), seq_max)]));
    }
}
