//! The event bus: how committed events, and the other side effects of a write, reach every
//! gateway that may hold an interested device.
//!
//! An announcement is a hint, never the source of truth. It is made only after commit (P7), it
//! may be lost (a gateway repairs events by reading the log, a client by sync), and events may
//! be coalesced. The in-process bus carries the full event so a single node pushes without
//! reading the store again.
//!
//! Besides events the bus carries [`Notice`]s: a read position that moved, a device token that
//! was revoked, a role that changed. They are not in the log, so every gateway learns them from
//! the bus only; they are never coalesced.
//!
//! [`LocalBus`] is the bus of one node. With the `postgres` feature, [`pg::PgBus`] joins the
//! gateways of one PostgreSQL database; with the `nats` feature, [`nats::NatsBus`] joins many
//! gateways through a NATS server. The payload codec ([`codec`]), the coalescing of a
//! batch ([`coalesce`]) and the reconnect backoff ([`backoff`]) are transport-neutral, so a bus
//! over another transport reuses them.

pub mod backoff;
pub mod coalesce;
pub mod codec;
mod error;
#[cfg(test)]
mod fuzz_tests;
mod local;
#[cfg(feature = "nats")]
pub mod nats;
mod notice;
#[cfg(feature = "postgres")]
pub mod pg;

pub use error::BusError;
pub use local::LocalBus;
pub use notice::{Notice, NOTICE_RECIPIENTS_LEN_MAX};

use std::sync::Arc;

use parley_domain::{ConvId, Event};

/// One committed event, or the news that a conversation's head moved.
#[derive(Debug, Clone)]
pub struct Committed {
    pub conv_id: ConvId,
    /// The head after the announced commit.
    pub head: i64,
    /// The committed event, when the bus carries payloads; gateways read the log otherwise.
    pub event: Option<Arc<Event>>,
}

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Announcement {
    /// A conversation's log grew.
    Committed(Committed),
    /// A side effect of a write that is not in the log.
    Notice(Notice),
    /// The transport between gateways was down and is back: announcements of other gateways
    /// made meanwhile were lost, so every conversation a subscriber holds is read again from
    /// the log up to its head.
    Reconnected,
}

impl Announcement {
    /// The committed event or head, if this is one.
    pub fn committed(&self) -> Option<&Committed> {
        match self {
            Self::Committed(c) => Some(c),
            Self::Notice(_) | Self::Reconnected => None,
        }
    }

    /// The notice, if this is one.
    pub fn notice(&self) -> Option<&Notice> {
        match self {
            Self::Committed(_) | Self::Reconnected => None,
            Self::Notice(n) => Some(n),
        }
    }
}

/// A receiver of announcements. Lagging receivers lose announcements and must resync.
pub type Subscription = tokio::sync::broadcast::Receiver<Announcement>;

/// Announces what a write did, after it committed. Neither method blocks the write path:
/// implementations queue and drop (a lost announcement is repaired by sync), never wait.
/// Every subscriber, the announcing node's own included, receives what is announced.
pub trait EventBus: Send + Sync + 'static {
    /// A committed event.
    fn announce(&self, event: Arc<Event>);
    /// A side effect that is not an event.
    fn notify(&self, notice: Notice);
    fn subscribe(&self) -> Subscription;
    /// The transport between gateways: `local` (one node), `postgres` or `nats`, as the
    /// server reports it (`GET /v1/admin/server`); a test's stand-in says `unknown`.
    fn kind(&self) -> &'static str {
        "unknown"
    }
    /// True while announcements cannot reach other gateways (their transport is down); this
    /// node still serves its own devices. A bus of one node is never degraded.
    fn degraded(&self) -> bool {
        false
    }
}
