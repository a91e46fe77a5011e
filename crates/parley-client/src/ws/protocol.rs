//! What the app-facing session (`session.rs`) and the background driver (`driver.rs`)
//! exchange: commands from the handles to the driver, deliveries from the driver to the app,
//! and the state both reach. Both sides import this module and neither imports the other's
//! internals, so the session depends on the driver and never the reverse.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::{oneshot, Notify};
use url::Url;

use crate::error::ClientError;
use crate::types::{Event, EventKind, Identity};
use crate::ws::cursor::Cursors;
use crate::ws::frames::Request;

/// What the session hands the app, in order. Events of one conversation come in strictly
/// increasing seq order and never twice, whether they were pushed or fetched to fill a gap.
/// New kinds of delivery may be added, so a `match` on it ends with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
// Nearly every delivery is an event: boxing it would add an allocation per event and change
// the public shape (`Delivery::Event(event)`) for the rare small variants' sake.
#[allow(clippy::large_enum_variant)]
pub enum Delivery {
    /// An event of a tracked conversation, with whether the caller sent it.
    Event(Incoming),
    /// The user's read position moved on another device. While the app is far behind in
    /// taking deliveries, several moves in one conversation come as one, the latest.
    Read { conv_id: String, read_seq: i64 },
    /// Events between the app's cursor and the conversation's `min_seq` were purged; the
    /// events that follow start at `min_seq`.
    Truncated { conv_id: String },
    /// The conversation's log was rebuilt: the app's copy is void and the conversation is
    /// delivered again from its start in the new `epoch`.
    EpochChanged { conv_id: String, epoch: i64 },
    /// `user_id`, another member of `conv_id`, is typing: show it for `expires_ms`
    /// milliseconds unless another arrives. Ephemeral: dropped while the app is far behind.
    Typing {
        conv_id: String,
        user_id: String,
        expires_ms: u64,
    },
    /// `user_id`, who shares a direct conversation or a push group with the caller, came
    /// online or went offline (`last_seen`, RFC 3339 UTC). While the app is far behind, several
    /// changes of one user come as one, the latest.
    Presence {
        user_id: String,
        online: bool,
        last_seen: Option<String>,
    },
    /// A newer connection of this device took over; the session has stopped.
    Kicked,
    /// The device's token was revoked or re-issued; the session has stopped.
    Revoked,
    /// The session stopped after `reconnect_attempts_max` failed reconnect attempts.
    Unreachable,
    /// The connection was lost; the session is reconnecting, with backoff, until
    /// [`Delivery::Reconnected`]. Requests made meanwhile wait for the new connection (within
    /// their retry budget), and nothing is pushed. Several losses in a row while the app is not
    /// reading come as one, with the latest reason.
    Disconnected { reason: String },
    /// A new connection replaced a lost one; catch-up events of tracked conversations follow.
    /// An app keeping a [`crate::SyncState`] calls [`crate::Client::catch_up`] now: conversations it
    /// does not track may have changed too.
    Reconnected,
}

/// An event as the session delivers it: the event itself (the fields and methods of [`Event`]
/// are reached through it, e.g. `incoming.seq` or `incoming.text()`) and whether it is the
/// caller's own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Incoming {
    pub event: Event,
    /// The caller's user sent it (a message or a recall) or made the change (a join or leave),
    /// from this device or another of its devices.
    pub own: bool,
    /// This very device sent it: an app that shows a message from its send ack already has it.
    pub own_device: bool,
}

impl Incoming {
    /// `event` as delivered to `me`.
    pub fn new(event: Event, me: &Identity) -> Self {
        let own = event.is_from(&me.user_id);
        let own_device = own && event.sender_device.as_deref() == Some(me.device_id.as_str());
        Self {
            event,
            own,
            own_device,
        }
    }

    /// A message or recall the caller's user sent: what
    /// [`crate::RealtimeOptions::skip_own_messages`] leaves out.
    pub fn is_own_message(&self) -> bool {
        self.own && matches!(self.event.kind, EventKind::Msg | EventKind::Recall)
    }

    pub fn into_event(self) -> Event {
        self.event
    }
}

impl Deref for Incoming {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.event
    }
}

impl From<Incoming> for Event {
    fn from(incoming: Incoming) -> Self {
        incoming.event
    }
}

/// Why a session stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// [`crate::RealtimeHandle::close`], or every handle was dropped.
    Closed,
    Kicked,
    Revoked,
    Unreachable,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Closed => "closed by the app",
            Self::Kicked => "replaced by a newer connection of this device",
            Self::Revoked => "the device token was revoked",
            Self::Unreachable => "the server stayed unreachable",
        })
    }
}

pub(crate) type Reply = oneshot::Sender<Result<Value, ClientError>>;

pub(crate) enum Command {
    /// A request to write with a fresh `req_id`; its answer goes to `reply`.
    Request { request: Request, reply: Reply },
    /// A frame nothing answers when it is accepted (`typing`): written with a fresh `req_id`
    /// and forgotten, so a refusal finds no request waiting and is dropped.
    Fire(Request),
    /// Drop the connection and come back at once.
    Reconnect,
}

/// State the app's handles and the background task both reach.
pub(crate) struct Shared {
    cursors: Mutex<Cursors>,
    /// Woken when a conversation became stale and should be caught up soon.
    pub(crate) wake: Notify,
    stopped: Mutex<Option<StopReason>>,
    /// A connection is open: set by the driver when one opens, cleared when it is lost.
    connected: AtomicBool,
    /// The user and device of the session's token.
    pub(crate) identity: Identity,
    /// The base URL of the gateway the session is (or was last) connected to.
    gateway: Mutex<Url>,
}

impl Shared {
    /// The state of a session whose first connection is open.
    pub(crate) fn new(identity: Identity, gateway: Url) -> Self {
        Self {
            cursors: Mutex::default(),
            wake: Notify::new(),
            stopped: Mutex::new(None),
            connected: AtomicBool::new(true),
            identity,
            gateway: Mutex::new(gateway),
        }
    }

    pub(crate) fn gateway(&self) -> Url {
        self.gateway
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_gateway(&self, gateway: Url) {
        *self.gateway.lock().unwrap_or_else(PoisonError::into_inner) = gateway;
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
    }

    /// The cursors; a panic elsewhere while they were held leaves them consistent (every
    /// change is a single assignment), so a poisoned lock is still used.
    pub(crate) fn cursors(&self) -> MutexGuard<'_, Cursors> {
        self.cursors.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_stopped(&self, reason: StopReason) {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
    }
}
