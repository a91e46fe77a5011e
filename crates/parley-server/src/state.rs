//! The state every handler shares: the store, the bus, the configuration, the rate limits and
//! the metrics.

use std::sync::Arc;
use std::time::Duration;

use parley_bus::EventBus;
use parley_store::token::hash_token;
use parley_store::Store;

use crate::accounts::hasher::PASSWORD_HASHES_IN_FLIGHT_MAX;
use crate::accounts::{Hasher, LoginThrottle};
use crate::config::{ServerConfig, HINT_INTERVAL_MS_MAX};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::rate_limit::RateLimiter;

/// Cheap to clone: every field is shared, so axum hands one copy to each request.
#[derive(Clone)]
pub struct AppState {
    store: Arc<dyn Store>,
    bus: Arc<dyn EventBus>,
    config: Arc<ServerConfig>,
    /// Hash of the admin token, computed once so each admin request compares two digests of
    /// equal length in constant time. `None` when no admin token is configured.
    admin_token_hash: Option<Arc<str>>,
    gateway: Arc<Gateway>,
    rate_limiter: Arc<RateLimiter>,
    metrics: Arc<Metrics>,
    hasher: Arc<Hasher>,
    login_throttle: Arc<LoginThrottle>,
    /// Attachments; `None` on a server started without media storage (uploads answer 503).
    pub(crate) media: Option<Arc<crate::media::Media>>,
    push: Arc<crate::push::Push>,
    /// Searches this node runs at once; more wait, up to `SEARCH_QUEUE_WAIT_MS_MAX`.
    searches: Arc<tokio::sync::Semaphore>,
    /// Which conversations are end-to-end encrypted, for the send path (docs/E2EE.md).
    encrypted: Arc<crate::encrypted::EncryptedConvs>,
}

/// Searches one node runs at once. A search costs the store far more than a read of the log, so
/// a flood of them must not take every pooled connection from sends and reads.
pub const SEARCHES_IN_FLIGHT_MAX: usize = 8;
/// How long a search waits for its turn before it is answered 503 `UNAVAILABLE`.
pub const SEARCH_QUEUE_WAIT_MS_MAX: u64 = 5_000;

impl AppState {
    pub fn new(store: Arc<dyn Store>, bus: Arc<dyn EventBus>, config: ServerConfig) -> Self {
        let admin_token_hash = if config.admin_token.is_empty() {
            None
        } else {
            Some(Arc::from(hash_token(&config.admin_token)))
        };
        let hint_interval =
            Duration::from_millis(config.hint_interval_ms.clamp(1, HINT_INTERVAL_MS_MAX));
        let metrics = Arc::new(Metrics::new());
        store.observe(metrics.store_observer());
        let gateway = Arc::new(Gateway::new(
            config.gateway_id.clone(),
            config.gateway_lease_ms,
            hint_interval,
            metrics.clone(),
        ));
        let rate_limiter = Arc::new(RateLimiter::new(config.rate_limit_per_s).counted(&metrics));
        let hasher = Arc::new(Hasher::new(
            PASSWORD_HASHES_IN_FLIGHT_MAX,
            metrics.password_verifications.clone(),
        ));
        let login_throttle = Arc::new(LoginThrottle::new(
            &config.login,
            metrics.rate_limited("login"),
        ));
        Self {
            hasher,
            login_throttle,
            metrics,
            gateway,
            rate_limiter,
            store,
            bus,
            config: Arc::new(config),
            admin_token_hash,
            media: None,
            push: Arc::new(crate::push::Push::new()),
            searches: Arc::new(tokio::sync::Semaphore::new(SEARCHES_IN_FLIGHT_MAX)),
            encrypted: Arc::default(),
        }
    }

    /// A turn to run a search: waits while `SEARCHES_IN_FLIGHT_MAX` run, at most
    /// `SEARCH_QUEUE_WAIT_MS_MAX`, then answers 503 `UNAVAILABLE`.
    pub async fn search_turn(
        &self,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, crate::error::ApiError> {
        let busy = || crate::error::ApiError::Unavailable {
            detail: "too many searches are running; retry later".into(),
        };
        let wait = Duration::from_millis(SEARCH_QUEUE_WAIT_MS_MAX);
        match tokio::time::timeout(wait, self.searches.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(busy()),
        }
    }

    /// The state with media storage (docs/MEDIA.md).
    pub fn with_media(mut self, backend: parley_media::MediaBackend) -> Self {
        self.media = Some(Arc::new(crate::media::Media::new(backend)));
        self
    }

    /// The media storage, or 503 on a server without one.
    pub fn media(&self) -> Result<&crate::media::Media, crate::error::ApiError> {
        self.media
            .as_deref()
            .ok_or_else(|| crate::error::ApiError::Unavailable {
                detail: "this server was started without media storage".into(),
            })
    }

    /// The offline notifications' VAPID key and worker wake-up.
    pub fn push(&self) -> &Arc<crate::push::Push> {
        &self.push
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Which conversations are end-to-end encrypted (`encrypted.rs`).
    pub fn encrypted(&self) -> &crate::encrypted::EncryptedConvs {
        &self.encrypted
    }

    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.bus
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The buckets of `RATE_LIMIT_PER_S`, shared by HTTP and WebSocket.
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.rate_limiter
    }

    /// This server's metrics (`GET /metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The bounded pool that runs argon2.
    pub fn hasher(&self) -> &Hasher {
        &self.hasher
    }

    /// The throttle of failed password checks.
    pub fn login_throttle(&self) -> &LoginThrottle {
        &self.login_throttle
    }

    pub(crate) fn admin_token_hash(&self) -> Option<&str> {
        self.admin_token_hash.as_deref()
    }
}
