//! What the app-facing session (`session.rs`) and the background driver (`driver.rs`)
//! exchange: commands from the handles to the driver, deliveries from the driver to the app,
//! and the state both reach. Both sides import this module and neither imports the other's
//! internals, so the session depends on the driver and never the reverse.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::{oneshot, Notify};

use crate::error::ClientError;
use crate::types::Event;
use crate::ws::cursor::Cursors;
use crate::ws::frames::Request;

/// What the session hands the app, in order. Events of one conversation come in strictly
/// increasing seq order and never twice, whether they were pushed or fetched to fill a gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Event(Event),
    /// The user's read position moved on another device.
    Read {
        conv_id: String,
        read_seq: i64,
    },
    /// Events between the app's cursor and the conversation's `min_seq` were purged; the
    /// events that follow start at `min_seq`.
    Truncated {
        conv_id: String,
    },
    /// The conversation's log was rebuilt: the app's copy is void and the conversation is
    /// delivered again from its start in the new `epoch`.
    EpochChanged {
        conv_id: String,
        epoch: i64,
    },
    /// A newer connection of this device took over; the session has stopped.
    Kicked,
    /// The device's token was revoked or re-issued; the session has stopped.
    Revoked,
    /// The session stopped after `reconnect_attempts_max` failed reconnect attempts.
    Unreachable,
    /// A new connection replaced a lost one; catch-up events of tracked conversations follow.
    /// An app keeping a [`crate::SyncState`] calls [`crate::Client::catch_up`] now: conversations it
    /// does not track may have changed too.
    Reconnected,
}

/// Why a session stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Drop the connection and come back at once.
    Reconnect,
}

/// State the app's handles and the background task both reach.
#[derive(Default)]
pub(crate) struct Shared {
    cursors: Mutex<Cursors>,
    /// Woken when a conversation became stale and should be caught up soon.
    pub(crate) wake: Notify,
    stopped: Mutex<Option<StopReason>>,
}

impl Shared {
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
