//! Counters of the PostgreSQL bus, for metrics and tests.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the bus. Every field only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgBusStats {
    /// Announcements (heads and notices) queued for other gateways.
    pub queued: u64,
    /// Announcements not queued because the queue was full or the bus had stopped.
    pub dropped: u64,
    /// `pg_notify` statements sent, one per batch.
    pub batches: u64,
    /// Notification payloads sent (a batch is split when it exceeds the payload limit).
    pub notifications_sent: u64,
    /// `[conv_id, head]` pairs sent, after coalescing.
    pub heads_sent: u64,
    /// Coalesced heads lost because their notification could not be sent.
    pub heads_lost: u64,
    /// Notices sent.
    pub notices_sent: u64,
    /// Notices lost because their notification could not be sent.
    pub notices_lost: u64,
    /// Notifications of other gateways received.
    pub notifications_received: u64,
    /// Notices of other gateways received and delivered.
    pub notices_received: u64,
    /// Notices of a kind this version does not know, skipped.
    pub notices_unknown: u64,
    /// This gateway's own notifications that came back and were ignored.
    pub own_ignored: u64,
    /// Notifications on the channel that were not valid payloads.
    pub malformed: u64,
    /// Times the listener connected again after losing its connection.
    pub listen_reconnects: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub queued: AtomicU64,
    pub dropped: AtomicU64,
    pub batches: AtomicU64,
    pub notifications_sent: AtomicU64,
    pub heads_sent: AtomicU64,
    pub heads_lost: AtomicU64,
    pub notices_sent: AtomicU64,
    pub notices_lost: AtomicU64,
    pub notifications_received: AtomicU64,
    pub notices_received: AtomicU64,
    pub notices_unknown: AtomicU64,
    pub own_ignored: AtomicU64,
    pub malformed: AtomicU64,
    pub listen_reconnects: AtomicU64,
}

/// Adds `by` and answers the new total.
pub(super) fn bump(counter: &AtomicU64, by: u64) -> u64 {
    counter.fetch_add(by, Ordering::Relaxed) + by
}

impl Counters {
    pub fn snapshot(&self) -> PgBusStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PgBusStats {
            queued: get(&self.queued),
            dropped: get(&self.dropped),
            batches: get(&self.batches),
            notifications_sent: get(&self.notifications_sent),
            heads_sent: get(&self.heads_sent),
            heads_lost: get(&self.heads_lost),
            notices_sent: get(&self.notices_sent),
            notices_lost: get(&self.notices_lost),
            notifications_received: get(&self.notifications_received),
            notices_received: get(&self.notices_received),
            notices_unknown: get(&self.notices_unknown),
            own_ignored: get(&self.own_ignored),
            malformed: get(&self.malformed),
            listen_reconnects: get(&self.listen_reconnects),
        }
    }
}
