//! Events, pages and feed entries for the unit tests of the cursor, the realtime cursors and
//! the sync state.

use crate::types::{ConvKind, Conversation, DeliveryMode, Event, EventKind, EventsPage, Identity};
use crate::ws::{Delivery, Incoming};

/// A message from ben at `seq` of conversation `c`.
pub(crate) fn event(seq: i64) -> Event {
    Event {
        conv_id: "c".into(),
        seq,
        kind: EventKind::Msg,
        created_at: "2024-01-01T00:00:00Z".into(),
        message_id: Some(format!("m{seq}")),
        sender_user: Some("ben".into()),
        sender_device: Some("d1".into()),
        client_msg_id: Some(format!("c{seq}")),
        body: Some("hi".into()),
        recalled: false,
        subject_user: None,
        target_seq: None,
        ..Event::default()
    }
}

/// `event` delivered by a realtime session of ana's device d1: someone else's.
pub(crate) fn pushed(event: Event) -> Delivery {
    let me = Identity {
        user_id: "ana".into(),
        device_id: "d1".into(),
    };
    Delivery::Event(Incoming::new(event, &me))
}

/// An events-after page of epoch 1 with `min_seq` 1.
pub(crate) fn page(seqs: &[i64], through_seq: i64, head: i64) -> EventsPage {
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

/// A feed entry of group `conv_id`, epoch 1 with `min_seq` 1.
pub(crate) fn conversation(conv_id: &str, head: i64, read_seq: i64, unread: i64) -> Conversation {
    Conversation {
        conv_id: conv_id.into(),
        kind: ConvKind::Group,
        title: None,
        delivery_mode: DeliveryMode::Push,
        head,
        min_seq: 1,
        epoch: 1,
        read_seq,
        unread,
        mentions: 0,
        members: None,
        recall_window_ms: 120_000,
        retention_ms: None,
        last_event: None,
    }
}

pub(crate) fn seqs(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}
