//! The in-process bus of a single node.

use std::sync::Arc;

use parley_domain::Event;
use tokio::sync::broadcast;

use crate::{Announcement, Committed, EventBus, Notice, Subscription};

/// Announcements buffered per subscriber before the slowest one starts losing them.
pub const LOCAL_BUS_QUEUE_LEN_MAX: usize = 65_536;

#[derive(Clone)]
pub struct LocalBus {
    tx: broadcast::Sender<Announcement>,
}

impl LocalBus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(LOCAL_BUS_QUEUE_LEN_MAX);
        Self { tx }
    }

    /// Delivers an announcement made elsewhere (e.g. by another gateway, without payload) to this
    /// node's subscribers, so a bus between nodes can reuse the in-process fanout.
    pub fn publish(&self, announcement: Announcement) {
        // No subscriber is not an error: nobody is online.
        let _ = self.tx.send(announcement);
    }
}

impl Default for LocalBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus for LocalBus {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn announce(&self, event: Arc<Event>) {
        self.publish(Announcement::Committed(Committed {
            conv_id: event.conv_id.clone(),
            head: event.seq,
            event: Some(event),
        }));
    }

    fn notify(&self, notice: Notice) {
        self.publish(Announcement::Notice(notice));
    }

    fn subscribe(&self) -> Subscription {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_domain::{ConvId, DeviceId, EventKind, UserId};

    fn event(seq: i64) -> Arc<Event> {
        Arc::new(Event {
            conv_id: ConvId::from_trusted("c-1".into()),
            seq,
            kind: EventKind::Msg,
            created_at: chrono::Utc::now(),
            message_id: None,
            sender_user: None,
            sender_device: None,
            client_msg_id: None,
            body: None,
            recalled: false,
            subject_user: None,
            target_seq: None,
            rel: None,
            mls: None,
        })
    }

    #[test]
    fn events_and_notices_reach_every_subscriber_in_the_order_announced() {
        let bus = LocalBus::new();
        let (mut first, mut second) = (bus.subscribe(), bus.subscribe());
        let sent = event(7);
        bus.announce(sent.clone());
        let revoked = Notice::DeviceRevoked {
            user_id: UserId::from_trusted("u".into()),
            device_id: DeviceId::from_trusted("d".into()),
        };
        bus.notify(revoked.clone());
        for sub in [&mut first, &mut second] {
            let a = sub.try_recv().expect("the event");
            let c = a.committed().expect("a committed event first");
            assert_eq!((c.conv_id.as_str(), c.head), ("c-1", 7));
            assert!(c.event.as_ref().is_some_and(|e| Arc::ptr_eq(e, &sent)));
            let n = sub.try_recv().expect("the notice");
            assert_eq!(n.notice(), Some(&revoked));
            assert!(sub.try_recv().is_err(), "nothing else");
        }
    }
}
