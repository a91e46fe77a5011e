//! Offline notifications (docs/PUSH.md): devices without a live socket hear of new messages
//! through Web Push (RFC 8030/8291/8292) or a push gateway (the Matrix model).
//!
//! The work follows the committed log: the store's outbox holds one row per committed message
//! (written in the message's own transaction), `worker` expands it into notifications owed per
//! device, leases due ones, sends them through `deliver` and reports each outcome back. Any
//! gateway may do any of it; a lease that runs out passes its rows to another.

pub mod deliver;
pub mod payload;
pub mod worker;

use std::sync::Arc;

use parley_push::VapidKey;
use tokio::sync::{Notify, OnceCell};

use crate::error::ApiError;

/// The name of the VAPID key among the store's shared keys: one key for every gateway, so a
/// subscription made against one gateway's public key is good for all.
pub const VAPID_KEY_NAME: &str = "vapid-p256";

/// The settings of the notification worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfig {
    /// At most one notification per device and conversation per this interval
    /// (`--push-coalesce-ms`); a burst becomes one notification of its latest message.
    pub coalesce_ms: u64,
    /// Push endpoints may be `http://` (`--push-allow-http`): for tests and local push
    /// services only, since anything else would let a client make the server post anywhere.
    pub allow_http: bool,
    /// The contact the VAPID claims name (`--push-subject`), a `mailto:` or `https:` URL.
    pub subject: String,
    /// How long a gateway's claim on notifications lasts (`--push-lease-ms`): another gateway
    /// takes what a dead one claimed once this runs out. Longer than a send's timeout.
    pub lease_ms: u64,
}

/// Default coalescing interval: a few seconds, so a burst of messages rings once.
pub const PUSH_COALESCE_MS_DEFAULT: u64 = 3_000;
/// Default lease of claimed notifications: a minute, far past a send's 10-second timeout.
pub const PUSH_LEASE_MS_DEFAULT: u64 = 60_000;
/// Default VAPID contact.
pub const PUSH_SUBJECT_DEFAULT: &str = "mailto:postmaster@localhost";

impl Default for PushConfig {
    fn default() -> Self {
        Self {
            coalesce_ms: PUSH_COALESCE_MS_DEFAULT,
            allow_http: false,
            subject: PUSH_SUBJECT_DEFAULT.to_owned(),
            lease_ms: PUSH_LEASE_MS_DEFAULT,
        }
    }
}

/// What the routes and the worker share.
pub struct Push {
    vapid: OnceCell<Arc<VapidKey>>,
    wake: Notify,
    pub(crate) client: reqwest::Client,
}

impl Default for Push {
    fn default() -> Self {
        Self::new()
    }
}

impl Push {
    pub fn new() -> Self {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(deliver::PUSH_TIMEOUT_MS))
            .connect_timeout(std::time::Duration::from_millis(
                deliver::PUSH_CONNECT_TIMEOUT_MS,
            ))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            vapid: OnceCell::new(),
            wake: Notify::new(),
            client,
        }
    }

    /// Wakes the worker: a message committed here.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The deployment's VAPID key, made by whichever gateway asked first and kept in the store.
    pub async fn vapid(&self, store: &dyn parley_store::Store) -> Result<Arc<VapidKey>, ApiError> {
        let key = self
            .vapid
            .get_or_try_init(|| async {
                let candidate = VapidKey::generate().to_base64();
                let stored = store.shared_key(VAPID_KEY_NAME, &candidate).await?;
                let key = VapidKey::from_base64(&stored).map_err(|e| ApiError::Unavailable {
                    detail: format!("the stored VAPID key is unreadable: {e}"),
                })?;
                Ok::<_, ApiError>(Arc::new(key))
            })
            .await?;
        Ok(key.clone())
    }
}
