//! Settings of a realtime session, each with the reason for its default.

use crate::http::REQUEST_TIMEOUT_MS_DEFAULT;
use crate::retry::RetryPolicy;

/// Pause between application pings: a third of the server's default idle timeout (60 s), so
/// two pings may be lost before the server gives up on the connection.
pub const PING_INTERVAL_MS_DEFAULT: u64 = 20_000;
/// Silence after which the connection is taken for dead and replaced: two ping intervals and
/// a margin, since every ping is answered by a pong.
pub const SILENCE_MAX_MS_DEFAULT: u64 = 45_000;
/// Longest wait for the WebSocket upgrade to complete.
pub const HANDSHAKE_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// First pause before reconnecting: short, since a server shutting down (1001) usually has a
/// peer ready to take the connection.
pub const RECONNECT_BACKOFF_FIRST_MS_DEFAULT: u64 = 200;
/// Longest pause between two reconnect attempts: a device is back within 5 s of the server's
/// return (so a send waiting in the default 20 s retry budget rides out a 10 s restart), while
/// the jitter spreads thousands of devices over the upper half of that pause.
pub const RECONNECT_BACKOFF_MAX_MS_DEFAULT: u64 = 5_000;
/// Deliveries buffered for the app. The session never waits for room in it: when it is full,
/// events are left on the server (their conversations are fetched from the cursor once the app
/// has taken half the queue) and notices are held, coalesced, so the socket is still read and
/// answers to requests still arrive.
pub const DELIVERY_QUEUE_LEN_MAX_DEFAULT: usize = 1_024;
/// Requests the app may queue while the session is busy or reconnecting.
pub const COMMAND_QUEUE_LEN_MAX_DEFAULT: usize = 256;
/// Requests written and not yet answered; beyond this the session waits for answers.
pub const REQUESTS_IN_FLIGHT_MAX_DEFAULT: usize = 256;
/// Events asked for per events-after call while filling a gap: the server's maximum.
pub const GAP_FILL_PAGE_LEN_DEFAULT: u32 = 500;

/// How a [`crate::Realtime`] session behaves. Every bound is finite except the number of
/// reconnect attempts, which is unlimited by default because a device should come back
/// whenever the server does; the pause between attempts is bounded either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealtimeOptions {
    pub ping_interval_ms: u64,
    pub silence_max_ms: u64,
    pub handshake_timeout_ms: u64,
    /// Longest wait for the answer to one request attempt, queueing included.
    pub answer_timeout_ms: u64,
    pub reconnect_backoff_first_ms: u64,
    pub reconnect_backoff_max_ms: u64,
    /// Failed reconnect attempts in a row, over all gateways, after which the session stops
    /// with [`crate::Delivery::Unreachable`]; `None`: never stop trying.
    pub reconnect_attempts_max: Option<u32>,
    pub delivery_queue_len_max: usize,
    pub command_queue_len_max: usize,
    pub requests_in_flight_max: usize,
    pub gap_fill_page_len: u32,
    /// Resends of `send` and `mark_read` after a dropped connection, a missing answer or an
    /// unknown outcome, within one time budget (20 s by default, see [`crate::retry`]); both
    /// are idempotent, so resending is safe.
    pub retry: RetryPolicy,
    /// When a push arrives for a conversation that is not tracked, fetch its whole visible log
    /// first. Off: tracking starts just before the pushed event. See "New conversations" in the
    /// [module documentation](crate::ws).
    pub auto_track_full: bool,
    /// Leave out the messages and recalls the caller's own user sent (from any of its
    /// devices): for a bot, which must not answer itself. Their seqs still move the cursor.
    /// A chat app that shows the user's messages from their other devices keeps this off and
    /// reads [`crate::Incoming::own`] instead; so does an app that feeds deliveries to a
    /// [`crate::SyncState`], whose logs would otherwise miss those events.
    pub skip_own_messages: bool,
    /// Base URLs of the gateways of one deployment (e.g. `http://10.0.0.1:8080`), all serving
    /// the same database. Empty (the default): the client's own base URL, which may be a load
    /// balancer's. With several, the session starts at a random one, moves to the next when a
    /// connection fails or a gateway goes away (1001, refused, dropped), and makes its own HTTP
    /// calls through the gateway its socket is on. See "Several gateways" in the
    /// [module documentation](crate::ws).
    pub gateways: Vec<String>,
}

impl RealtimeOptions {
    /// These options with the ring of gateway base URLs `base_urls` (see
    /// [`RealtimeOptions::gateways`]).
    pub fn with_gateways<I, S>(mut self, base_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.gateways = base_urls.into_iter().map(Into::into).collect();
        self
    }
}

impl Default for RealtimeOptions {
    fn default() -> Self {
        Self {
            ping_interval_ms: PING_INTERVAL_MS_DEFAULT,
            silence_max_ms: SILENCE_MAX_MS_DEFAULT,
            handshake_timeout_ms: HANDSHAKE_TIMEOUT_MS_DEFAULT,
            answer_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            reconnect_backoff_first_ms: RECONNECT_BACKOFF_FIRST_MS_DEFAULT,
            reconnect_backoff_max_ms: RECONNECT_BACKOFF_MAX_MS_DEFAULT,
            reconnect_attempts_max: None,
            delivery_queue_len_max: DELIVERY_QUEUE_LEN_MAX_DEFAULT,
            command_queue_len_max: COMMAND_QUEUE_LEN_MAX_DEFAULT,
            requests_in_flight_max: REQUESTS_IN_FLIGHT_MAX_DEFAULT,
            gap_fill_page_len: GAP_FILL_PAGE_LEN_DEFAULT,
            retry: RetryPolicy::default(),
            auto_track_full: false,
            skip_own_messages: false,
            gateways: Vec::new(),
        }
    }
}
