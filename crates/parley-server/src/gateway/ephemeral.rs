//! Ephemeral frames of SPEC §7: typing and presence. Neither is in the log nor acked; both
//! reach other gateways as notices on the bus (`Notice::Typing`, `Notice::Presence`), naming
//! the users whose connections get the frame, and `notices.rs` pushes them on every gateway.
//!
//! Typing: a device's `typing` frame is checked against the store (one bounded statement: the
//! typist's open period, the mode, and the other current members with a route) and relayed to
//! those members' devices, not to the typist's own. At most one frame per device and
//! conversation is relayed per `TYPING_INTERVAL_MS`; later ones inside the interval are dropped
//! without an answer, and the receivers show the frame for `TYPING_EXPIRES_MS`, longer than the
//! interval, so a typist who keeps typing stays shown. In a `pull` conversation (SPEC §8, large
//! groups) typing is accepted and dropped: relaying it would cost one frame per online member
//! per burst of keystrokes, the per-member cost pull mode exists to avoid.
//!
//! Presence: a user is online while at least one of their devices has a route (SPEC §7
//! ownership). After a claim that replaced no route of the device, the user's route count
//! tells whether it was their first; after a release of the device's own route, `mark_seen`
//! writes `last_seen` and tells whether it was their last. Either then reads the user's online
//! co-members of direct conversations and push groups (one bounded statement; pull groups are
//! left out for the same reason as typing) and announces to them. This work runs off the
//! connection's path, in `PRESENCE_WORKERS` tasks fed by bounded queues, each user always on
//! the same worker so that their online and offline changes keep their order. A full queue
//! drops the change (logged): presence is best effort, and a client reads the truth with
//! `GET /v1/presence` after it connects. Routes reaped after a gateway's lease expired produce
//! offline presence too, through the same queue (`lease.rs`).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use parley_bus::{EventBus, Notice, NOTICE_RECIPIENTS_LEN_MAX};
use parley_domain::{ConvId, DeliveryMode, DeviceId, Rejection, UserId};
use parley_store::{DeviceIdentity, Store, StoreError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::state::AppState;

/// How long a receiver shows a typing frame (`expires_ms` of the frame).
pub const TYPING_EXPIRES_MS: u64 = 5_000;
/// At most one typing frame per device and conversation is relayed per interval.
pub const TYPING_INTERVAL_MS: u64 = 1_000;
/// Most (device, conversation) pairs whose last relay is remembered; past it, a frame of a new
/// pair is dropped until old pairs expire.
const TYPING_SLOTS_MAX: usize = 100_000;
/// Most members a typing frame reaches: push groups stay below the pull threshold, but a mode
/// chosen at creation can keep a larger group in push.
const TYPING_RECIPIENTS_MAX: u32 = 2_000;
/// Most users told of one user's presence change.
const PRESENCE_PEERS_MAX: u32 = 10_000;
/// Tasks applying presence changes; each user's changes go to one of them.
const PRESENCE_WORKERS: usize = 2;
/// Presence changes queued per worker before new ones are dropped.
const PRESENCE_QUEUE_LEN_MAX: usize = 4_096;

type TypingKey = (UserId, DeviceId, ConvId);

/// When each (device, conversation) last had a typing frame let through.
#[derive(Default)]
pub struct TypingLimiter {
    slots: Mutex<HashMap<TypingKey, Instant>>,
}

impl TypingLimiter {
    /// Takes the pair's slot for this interval: false when a frame of the pair was let through
    /// within `TYPING_INTERVAL_MS`, or no slot is free. Taken before the store is asked, so
    /// concurrent frames of one pair are not relayed twice.
    fn take(&self, key: &TypingKey, now: Instant) -> bool {
        let interval = Duration::from_millis(TYPING_INTERVAL_MS);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = slots.get(key) {
            if now.duration_since(*last) < interval {
                return false;
            }
        } else if slots.len() >= TYPING_SLOTS_MAX {
            slots.retain(|_, last| now.duration_since(*last) < interval);
            if slots.len() >= TYPING_SLOTS_MAX {
                return false;
            }
        }
        slots.insert(key.clone(), now);
        true
    }

    /// Gives the slot back: the frame was refused, so it relayed nothing.
    fn give_back(&self, key: &TypingKey) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// A `typing` frame of `device` in `conv_id`: `Ok` whether relayed or dropped, `NOT_MEMBER`
/// when the device's user is not a current member or the conversation does not exist (P10).
pub async fn typing(
    state: &AppState,
    device: &DeviceIdentity,
    conv_id: ConvId,
) -> Result<(), ApiError> {
    let limiter = state.gateway().typing();
    let key = (
        device.user_id.clone(),
        device.device_id.clone(),
        conv_id.clone(),
    );
    if !limiter.take(&key, Instant::now()) {
        return Ok(());
    }
    let targets = state
        .store()
        .typing_targets(&conv_id, &device.user_id, TYPING_RECIPIENTS_MAX)
        .await;
    let targets = match targets {
        Ok(Some(t)) => t,
        Ok(None) => {
            limiter.give_back(&key);
            return Err(StoreError::Rejected(Rejection::NotMember).into());
        }
        Err(e) => {
            limiter.give_back(&key);
            return Err(e.into());
        }
    };
    if targets.mode == DeliveryMode::Pull {
        return Ok(());
    }
    for recipients in targets.online_others.chunks(NOTICE_RECIPIENTS_LEN_MAX) {
        state.bus().notify(Notice::Typing {
            conv_id: conv_id.clone(),
            user_id: device.user_id.clone(),
            recipients: recipients.to_vec(),
        });
    }
    Ok(())
}

/// A change of one user's routes, to be turned into presence.
#[derive(Debug)]
enum Change {
    /// A device of the user claimed a route that no connection of it held.
    Connected(UserId),
    /// A route of the user was removed (released by its own connection, or reaped).
    Disconnected(UserId),
}

impl Change {
    fn user(&self) -> &UserId {
        match self {
            Self::Connected(u) | Self::Disconnected(u) => u,
        }
    }
}

/// The queues of the presence workers, and their receiving ends until they start.
pub struct PresenceQueue {
    shards: Vec<mpsc::Sender<Change>>,
    pending: Mutex<Vec<mpsc::Receiver<Change>>>,
    hasher: RandomState,
}

impl Default for PresenceQueue {
    fn default() -> Self {
        let (shards, pending) = (0..PRESENCE_WORKERS)
            .map(|_| mpsc::channel(PRESENCE_QUEUE_LEN_MAX))
            .unzip();
        Self {
            shards,
            pending: Mutex::new(pending),
            hasher: RandomState::new(),
        }
    }
}

impl PresenceQueue {
    /// A device of `user` claimed a route that replaced none of its own.
    pub fn connected(&self, user: &UserId) {
        self.enqueue(Change::Connected(user.clone()));
    }

    /// A route of `user` was removed.
    pub fn disconnected(&self, user: &UserId) {
        self.enqueue(Change::Disconnected(user.clone()));
    }

    fn enqueue(&self, change: Change) {
        let shard = self.hasher.hash_one(change.user().as_str()) as usize % self.shards.len();
        if self.shards[shard].try_send(change).is_err() {
            tracing::debug!("presence queue full or stopped; a presence change is dropped");
        }
    }

    /// Starts the workers; they stop when `stop` is cancelled. A second call starts nothing.
    pub fn start(&self, store: Arc<dyn Store>, bus: Arc<dyn EventBus>, stop: CancellationToken) {
        let pending =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        for rx in pending {
            tokio::spawn(run_worker(rx, store.clone(), bus.clone(), stop.clone()));
        }
    }
}

async fn run_worker(
    mut rx: mpsc::Receiver<Change>,
    store: Arc<dyn Store>,
    bus: Arc<dyn EventBus>,
    stop: CancellationToken,
) {
    loop {
        let change = tokio::select! {
            _ = stop.cancelled() => return,
            change = rx.recv() => change,
        };
        let Some(change) = change else { return };
        if let Err(e) = apply(store.as_ref(), bus.as_ref(), &change).await {
            tracing::warn!(error = %e, "a presence change was not announced");
        }
    }
}

async fn apply(store: &dyn Store, bus: &dyn EventBus, change: &Change) -> Result<(), StoreError> {
    match change {
        Change::Connected(user) => {
            // Two devices connecting at once may each see the other's route and neither
            // announce: best effort, repaired by `GET /v1/presence`.
            if store.user_routes(user).await? == 1 {
                announce(store, bus, user, true, None).await?;
            }
        }
        Change::Disconnected(user) => {
            if let Some(seen) = store.mark_seen(user).await? {
                if seen.routes_left == 0 {
                    announce(store, bus, user, false, Some(seen.last_seen)).await?;
                }
            }
        }
    }
    Ok(())
}

async fn announce(
    store: &dyn Store,
    bus: &dyn EventBus,
    user: &UserId,
    online: bool,
    last_seen: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), StoreError> {
    let peers = store.presence_peers(user, PRESENCE_PEERS_MAX).await?;
    for recipients in peers.chunks(NOTICE_RECIPIENTS_LEN_MAX) {
        bus.notify(Notice::Presence {
            user_id: user.clone(),
            online,
            last_seen,
            recipients: recipients.to_vec(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(conv: &str) -> TypingKey {
        (
            UserId::parse("ana").expect("id"),
            DeviceId::parse("phone").expect("id"),
            ConvId::parse(conv).expect("id"),
        )
    }

    #[test]
    fn one_typing_frame_per_pair_and_interval() {
        let limiter = TypingLimiter::default();
        let start = Instant::now();
        assert!(limiter.take(&key("c"), start));
        assert!(!limiter.take(&key("c"), start + Duration::from_millis(999)));
        assert!(limiter.take(&key("d"), start + Duration::from_millis(10)));
        assert!(limiter.take(&key("c"), start + Duration::from_millis(TYPING_INTERVAL_MS)));
        limiter.give_back(&key("d"));
        assert!(limiter.take(&key("d"), start + Duration::from_millis(20)));
    }
}
