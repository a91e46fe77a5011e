//! A push service for tests: a real HTTP server on 127.0.0.1 that takes Web Push messages and
//! push-gateway notifications, checks them as a real service would, decrypts what it can and
//! records what arrived.
//!
//! It is both kinds of target at once: `POST /push/{name}` is the Web Push endpoint of each
//! subscription it handed out ([`TestPushService::subscribe`]), `POST /_matrix/push/v1/notify`
//! a Matrix push gateway. [`Mode`] makes it fail the way real services do.

mod handlers;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::SecretKey;
use rand::rngs::OsRng;
use rand::RngCore;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use url::Url;

use crate::{b64, WebPushSubscription};

/// The path of the push-gateway endpoint (Matrix Push Gateway API).
pub const GATEWAY_PATH: &str = "/_matrix/push/v1/notify";

/// The largest body a Web Push endpoint takes, in bytes: RFC 8030 §7.2's minimum, which is what
/// a sender can count on everywhere.
pub const BODY_BYTES_MAX: usize = 4096;

/// How the service answers, to test what the server does with each kind of failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Checks, records and answers 201 (Web Push) or 200 (gateway).
    #[default]
    Up,
    /// 503 to everything, an outage; attempts are counted, nothing is recorded.
    Down,
    /// 410 to every Web Push message and every gateway pushkey listed as rejected: the device
    /// unsubscribed.
    Gone,
    /// Waits this many milliseconds, then answers as `Up`: a service slower than the server's
    /// timeout.
    SlowMs(u64),
}

/// One message that arrived and passed every check.
#[derive(Clone, Debug)]
pub struct Received {
    /// The subscription's name for Web Push; the first device's pushkey for a gateway.
    pub name: String,
    /// The decrypted payload (Web Push) or the request body (gateway) as JSON; `Value::Null`
    /// when it is not JSON.
    pub payload: Value,
    /// The decrypted payload (Web Push) or the request body (gateway) as bytes.
    pub raw: Vec<u8>,
    /// The `TTL` header, in seconds; 0 for a gateway notification.
    pub ttl: u32,
    pub urgency: Option<String>,
    pub topic: Option<String>,
    /// The sender's VAPID public key (`k`); empty for a gateway notification.
    pub vapid_key: String,
    /// When it was recorded, to measure delivery latency.
    pub at: Instant,
}

/// The keys of one subscription, the browser's half of RFC 8291.
struct UaKeys {
    endpoint: String,
    private: SecretKey,
    auth: [u8; 16],
}

/// What the handlers and the test share.
struct Shared {
    subscriptions: Mutex<HashMap<String, UaKeys>>,
    received: Mutex<Vec<Received>>,
    mode: Mutex<Mode>,
    attempts: AtomicU64,
    /// Woken on every record, so `wait_for` does not poll.
    arrived: Notify,
}

impl Shared {
    fn record(&self, received: Received) {
        lock(&self.received).push(received);
        self.arrived.notify_waiters();
    }

    fn mode(&self) -> Mode {
        *lock(&self.mode)
    }
}

/// A running test push service; it stops when dropped or shut down.
pub struct TestPushService {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl TestPushService {
    /// Binds 127.0.0.1 on a free port and serves until dropped or [`shutdown`](Self::shutdown).
    pub async fn start() -> std::io::Result<TestPushService> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            subscriptions: Mutex::new(HashMap::new()),
            received: Mutex::new(Vec::new()),
            mode: Mutex::new(Mode::Up),
            attempts: AtomicU64::new(0),
            arrived: Notify::new(),
        });
        let app = Router::new()
            .route("/push/{name}", post(handlers::web_push))
            .route(GATEWAY_PATH, post(handlers::gateway))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            // The serve loop ends only when its task is aborted, by drop or shutdown; an accept
            // error is already retried inside it.
            let _ = axum::serve(listener, app).await;
        });
        Ok(TestPushService { addr, shared, task })
    }

    /// `http://127.0.0.1:PORT`, the origin of every endpoint it hands out.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The push-gateway URL, `{url}/_matrix/push/v1/notify`.
    pub fn gateway_url(&self) -> String {
        format!("{}{GATEWAY_PATH}", self.url())
    }

    /// A new subscription called `name`, endpoint `{url}/push/{name}`, as a browser would make
    /// it: its own P-256 key pair and auth secret, remembered here to decrypt what arrives.
    /// Subscribing a name again replaces its keys, as a browser's resubscription does.
    pub fn subscribe(&self, name: &str) -> WebPushSubscription {
        let private = SecretKey::random(&mut OsRng);
        let mut auth = [0u8; 16];
        OsRng.fill_bytes(&mut auth);
        let endpoint = endpoint_url(&self.url(), name);
        let subscription = WebPushSubscription {
            endpoint: endpoint.clone(),
            p256dh: b64::encode(private.public_key().to_encoded_point(false).as_bytes()),
            auth: b64::encode(&auth),
        };
        let keys = UaKeys {
            endpoint,
            private,
            auth,
        };
        lock(&self.shared.subscriptions).insert(name.to_owned(), keys);
        subscription
    }

    /// Forgets the subscription called `name`: its endpoint answers 404 from now on, as a real
    /// service does once a browser unsubscribed.
    pub fn unsubscribe(&self, name: &str) {
        lock(&self.shared.subscriptions).remove(name);
    }

    /// Everything recorded so far, in order of arrival.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.received).clone()
    }

    /// Waits until at least `n` messages were recorded or `timeout` passed, then answers what
    /// was recorded (fewer than `n` after a timeout).
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the count is read, so a record in between still wakes us.
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.received();
            }
        }
    }

    /// How the service answers from now on.
    pub fn set_mode(&self, mode: Mode) {
        *lock(&self.shared.mode) = mode;
    }

    /// Every POST that reached a handler, refused ones included.
    pub fn attempts(&self) -> u64 {
        self.shared.attempts.load(Ordering::Relaxed)
    }

    /// Stops serving: the port is closed and connections in flight are cut.
    pub fn shutdown(&self) {
        self.task.abort();
    }
}

impl Drop for TestPushService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl fmt::Debug for TestPushService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestPushService")
            .field("addr", &self.addr)
            .field("mode", &self.shared.mode())
            .field("attempts", &self.attempts())
            .finish_non_exhaustive()
    }
}

/// `{base}/push/{name}` with the name percent-encoded as one path segment, so any name routes
/// back to itself.
fn endpoint_url(base: &str, name: &str) -> String {
    match Url::parse(base) {
        Ok(mut url) => {
            if let Ok(mut segments) = url.path_segments_mut() {
                segments.clear().push("push").push(name);
            }
            url.into()
        }
        // The base is always our own `http://127.0.0.1:PORT`; this arm is never taken.
        Err(_) => format!("{base}/push/{name}"),
    }
}

/// A lock that outlives a panicking test thread: the data is a log, still worth reading.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
