//! The connections this gateway holds, by user, and the one way to reach or close them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use axum::extract::ws::Message;
use parley_domain::{DeviceId, UserId};
use parley_wire::close::{CLOSE_GOING_AWAY, CLOSE_KICKED, CLOSE_REVOKED, CLOSE_TOO_SLOW};
use tokio::sync::watch;

use super::out_queue::{OutSender, TrySendError};

/// Why a connection is being closed, and the close code the client sees (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// A newer connection of the same device took over.
    Kicked,
    /// The device's token was revoked or re-issued.
    Revoked,
    /// The outbound queue filled: the client reads too slowly and must resync.
    TooSlow,
    /// The server is shutting down.
    Shutdown,
    /// No frame arrived within the idle timeout.
    Idle,
    /// A frame exceeded the size limit.
    TooLarge,
    /// The client went away or broke the protocol; no close frame is owed.
    Gone,
}

impl CloseReason {
    pub fn code(self) -> u16 {
        match self {
            Self::Kicked => CLOSE_KICKED,
            Self::Revoked => CLOSE_REVOKED,
            Self::TooSlow => CLOSE_TOO_SLOW,
            Self::Shutdown => CLOSE_GOING_AWAY,
            Self::Idle => 1000,
            Self::TooLarge => 1009,
            Self::Gone => 1000,
        }
    }

    /// The reason's label in `parley_ws_closed_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kicked => "kicked",
            Self::Revoked => "revoked",
            Self::TooSlow => "too_slow",
            Self::Shutdown => "shutdown",
            Self::Idle => "idle",
            Self::TooLarge => "too_large",
            Self::Gone => "gone",
        }
    }

    /// Whether frames already queued should still be written before the close frame.
    pub fn drains_queue(self) -> bool {
        matches!(
            self,
            Self::Shutdown | Self::Kicked | Self::Revoked | Self::Idle
        )
    }
}

/// One live connection as the rest of the gateway sees it.
pub struct ConnHandle {
    pub conn_id: String,
    pub device_id: DeviceId,
    /// Hash of the token the connection authenticated with, so that when the device's token
    /// is revoked or replaced, only the connections of a token that no longer works close.
    pub token_hash: String,
    /// Set once the device's route names this connection in the store: only then can a route
    /// naming another connection mean that this one was replaced.
    route_claimed: AtomicBool,
    tx: OutSender,
    close: watch::Sender<Option<CloseReason>>,
}

impl ConnHandle {
    pub fn new(
        conn_id: String,
        device_id: DeviceId,
        token_hash: String,
        tx: OutSender,
        close: watch::Sender<Option<CloseReason>>,
    ) -> Self {
        Self {
            conn_id,
            device_id,
            token_hash,
            route_claimed: AtomicBool::new(false),
            tx,
            close,
        }
    }

    /// Records that the device's route was claimed for this connection.
    pub fn mark_route_claimed(&self) {
        self.route_claimed.store(true, Ordering::Release);
    }

    /// Whether the device's route was claimed for this connection.
    pub fn route_claimed(&self) -> bool {
        self.route_claimed.load(Ordering::Acquire)
    }

    /// Queues a frame without waiting. A full queue closes the connection as too slow: one
    /// slow client never delays the others, and it repairs what it missed by sync.
    pub fn push(&self, frame: Message) -> bool {
        match self.tx.try_send(frame) {
            Ok(()) => true,
            Err(TrySendError::Full) => {
                self.close(CloseReason::TooSlow);
                false
            }
            Err(TrySendError::Closed) => false,
        }
    }

    /// Asks the connection to close; the first reason wins.
    pub fn close(&self, reason: CloseReason) {
        self.close.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }
}

/// Live connections by user. Critical sections are short and never await.
#[derive(Default)]
pub struct Hub {
    conns: Mutex<HashMap<UserId, Vec<std::sync::Arc<ConnHandle>>>>,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<UserId, Vec<std::sync::Arc<ConnHandle>>>> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.conns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a connection and kicks any older connection of the same device on this gateway.
    pub fn register(&self, user: &UserId, handle: std::sync::Arc<ConnHandle>) {
        let mut conns = self.lock();
        let list = conns.entry(user.clone()).or_default();
        list.retain(|old| {
            if old.device_id == handle.device_id {
                old.close(CloseReason::Kicked);
                false
            } else {
                true
            }
        });
        list.push(handle);
    }

    /// Removes a connection, only if it is still the one registered (P9 on this gateway).
    pub fn unregister(&self, user: &UserId, conn_id: &str) {
        let mut conns = self.lock();
        if let Some(list) = conns.get_mut(user) {
            list.retain(|c| c.conn_id != conn_id);
            if list.is_empty() {
                conns.remove(user);
            }
        }
    }

    /// Calls `f` for every connection of `user`.
    pub fn for_each_of(&self, user: &UserId, f: impl FnMut(&std::sync::Arc<ConnHandle>)) {
        if let Some(list) = self.lock().get(user) {
            list.iter().for_each(f);
        }
    }

    /// The connections of one device.
    pub fn connections_of_device(
        &self,
        user: &UserId,
        device: &DeviceId,
    ) -> Vec<std::sync::Arc<ConnHandle>> {
        let mut found = Vec::new();
        self.for_each_of(user, |c| {
            if &c.device_id == device {
                found.push(c.clone());
            }
        });
        found
    }

    /// Closes one connection by id, if this gateway holds it.
    pub fn close_conn(&self, user: &UserId, conn_id: &str, reason: CloseReason) {
        self.for_each_of(user, |c| {
            if c.conn_id == conn_id {
                c.close(reason);
            }
        });
    }

    pub fn close_all(&self, reason: CloseReason) {
        for list in self.lock().values() {
            list.iter().for_each(|c| c.close(reason));
        }
    }

    /// Every connection here, with its user.
    pub fn all_connections(&self) -> Vec<(UserId, std::sync::Arc<ConnHandle>)> {
        self.lock()
            .iter()
            .flat_map(|(user, list)| list.iter().map(move |c| (user.clone(), c.clone())))
            .collect()
    }

    /// Users with at least one connection here.
    pub fn online_users(&self) -> Vec<UserId> {
        self.lock().keys().cloned().collect()
    }

    pub fn online_user_count(&self) -> usize {
        self.lock().len()
    }

    pub fn is_online(&self, user: &UserId) -> bool {
        self.lock().contains_key(user)
    }
}
