//! Settings of one server process that the handlers consult on every request.

use std::fmt;

use parley_domain::limits::{PULL_THRESHOLD_DEFAULT, RECALL_WINDOW_MS_DEFAULT};
use parley_domain::Limits;

pub use crate::accounts::LoginLimits;

/// What a deployment decides: request limits, the admin secret and the defaults that new
/// conversations take when the create request leaves them out.
#[derive(Clone)]
pub struct ServerConfig {
    /// Largest message body and largest request body, in bytes (SPEC §6).
    pub limits: Limits,
    /// Secret of the admin endpoints. It is compared in constant time; an empty token disables
    /// the admin endpoints instead of matching an empty bearer.
    pub admin_token: String,
    /// Recall window of new conversations that do not name their own.
    pub recall_window_ms: i64,
    /// Member count from which a new group is delivered by pull.
    pub pull_threshold: u32,
    /// Retention of new conversations that do not name their own; `None` keeps events forever.
    pub retention_ms: Option<i64>,
    /// This node's id in the gateways and routes tables.
    pub gateway_id: String,
    /// Length of the gateway's lease, renewed every third of it (`gateway::lease`).
    pub gateway_lease_ms: u64,
    /// A WebSocket with no frame from the client for this long is closed.
    pub idle_timeout_ms: u64,
    /// Browser origins allowed to open WebSockets besides the server's own; `*` allows any.
    pub ws_allowed_origins: Vec<String>,
    /// Frames queued per connection before it counts as too slow and is closed (4008).
    pub outbound_queue_len_max: usize,
    /// Interval between two runs of the retention purge.
    pub purge_interval_ms: u64,
    /// How long the request key of a purged message stays answerable (SPEC §4: at least as
    /// long as a client may retry).
    pub tombstone_ttl_ms: u64,
    /// Hints of a pull conversation are coalesced per device over this interval (SPEC §8: at
    /// most `HINT_INTERVAL_MS_MAX`).
    pub hint_interval_ms: u64,

    // Abuse limits.
    /// Requests per second per device (`rate_limit.rs`: sends, and calls of the admin
    /// endpoints); 0 turns limiting off, the default.
    pub rate_limit_per_s: u32,
    /// Time limits and caps of client connections.
    pub connections: ConnectionLimits,

    // Accounts.
    /// Whether anyone may create an account (`POST /v1/auth/register`); off by default.
    pub open_registration: bool,
    /// The throttle of failed password checks (`accounts::throttle`).
    pub login: LoginLimits,

    // Attachments (docs/MEDIA.md).
    pub media: MediaLimits,

    // Offline notifications (docs/PUSH.md).
    pub push: crate::push::PushConfig,
}

/// The bounds of uploads and of the media sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaLimits {
    /// Largest upload, in bytes (`--max-media-bytes`).
    pub bytes_max: u64,
    /// Most bytes one user's uploads may hold together (`--media-quota-bytes`); `None` is no
    /// quota.
    pub quota_bytes: Option<u64>,
    /// An upload no message names is deleted this long after it was last uploaded
    /// (`--media-grace-ms`).
    pub grace_ms: u64,
    /// How long a signed media URL stays good.
    pub url_ttl_ms: u64,
    /// An upload with no byte of its body for this long is given up (408): a slow client may
    /// take minutes over a large file, but a silent one holds a task and a part file for
    /// nothing.
    pub chunk_idle_ms: u64,
}

/// Default idle limit of an upload's body.
pub const MEDIA_CHUNK_IDLE_MS_DEFAULT: u64 = 15_000;

/// Default grace of an upload no message names: a day, time enough to send it.
pub const MEDIA_GRACE_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;
/// Default life of a signed media URL: five minutes, enough to load a page's images.
pub const MEDIA_URL_TTL_MS_DEFAULT: u64 = 5 * 60 * 1000;

impl Default for MediaLimits {
    fn default() -> Self {
        Self {
            bytes_max: parley_media::MEDIA_BYTES_MAX_DEFAULT,
            quota_bytes: None,
            grace_ms: MEDIA_GRACE_MS_DEFAULT,
            url_ttl_ms: MEDIA_URL_TTL_MS_DEFAULT,
            chunk_idle_ms: MEDIA_CHUNK_IDLE_MS_DEFAULT,
        }
    }
}

/// How long a client connection may take at each stage, and how many may be open. Each limit
/// bounds what one client can hold without doing useful work: a slow or silent peer is closed
/// instead of keeping a task, a socket and an open file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A request head must arrive in full within this time: counted from the accept for a
    /// connection's first request, from the first byte for later ones.
    pub header_timeout_ms: u64,
    /// A request body must arrive in full within this time of its head.
    pub body_timeout_ms: u64,
    /// The body of an upload (`POST /v1/media`) must arrive in full within this time: files
    /// are larger than requests, and the upload also stops after `MediaLimits::chunk_idle_ms`
    /// without a byte (docs/MEDIA.md).
    pub media_body_timeout_ms: u64,
    /// A keep-alive connection with no request started for this long is closed.
    pub keepalive_idle_ms: u64,
    /// A write to the client's socket that cannot make progress for this long (the client
    /// stopped reading, and the socket's buffers are full) ends the connection.
    pub write_stall_timeout_ms: u64,
    /// From a WebSocket upgrade request to the upgrade answered: authentication included.
    pub ws_handshake_timeout_ms: u64,
    /// How long closing a WebSocket may take: the close frame's way past frames queued in
    /// front of it, and the wait for the client's own close frame.
    pub ws_close_timeout_ms: u64,
    /// Open connections of the process, HTTP and WebSocket together; the open-file limit can
    /// lower it (see `listener::open_files`).
    pub connections_max: usize,
    /// Open connections from one client address.
    pub connections_per_address_max: usize,
}

/// Default limit for a request head to arrive.
pub const HEADER_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Default limit for a request body to arrive.
pub const BODY_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default limit for an upload's body to arrive: ten minutes, 25 MiB at about 43 KB/s.
pub const MEDIA_BODY_TIMEOUT_MS_DEFAULT: u64 = 600_000;
/// Default idle time of a keep-alive connection between requests.
pub const KEEPALIVE_IDLE_MS_DEFAULT: u64 = 60_000;
/// Default limit on a write that makes no progress: longer than the WebSocket close timeout,
/// so a stalled WebSocket reader still gets its 4008 close first.
pub const WRITE_STALL_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default limit from a WebSocket upgrade request to its answer.
pub const WS_HANDSHAKE_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Default bound on closing a WebSocket.
pub const WS_CLOSE_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default cap on open connections of the process.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;
/// Default cap on open connections from one client address.
pub const CONNECTIONS_PER_ADDRESS_MAX_DEFAULT: usize = 1_000;

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_timeout_ms: HEADER_TIMEOUT_MS_DEFAULT,
            body_timeout_ms: BODY_TIMEOUT_MS_DEFAULT,
            media_body_timeout_ms: MEDIA_BODY_TIMEOUT_MS_DEFAULT,
            keepalive_idle_ms: KEEPALIVE_IDLE_MS_DEFAULT,
            write_stall_timeout_ms: WRITE_STALL_TIMEOUT_MS_DEFAULT,
            ws_handshake_timeout_ms: WS_HANDSHAKE_TIMEOUT_MS_DEFAULT,
            ws_close_timeout_ms: WS_CLOSE_TIMEOUT_MS_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            connections_per_address_max: CONNECTIONS_PER_ADDRESS_MAX_DEFAULT,
        }
    }
}

/// Default WebSocket idle timeout (SPEC §6).
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Default outbound queue per connection.
pub const OUTBOUND_QUEUE_LEN_MAX_DEFAULT: usize = 1_024;
/// Default interval between two retention purges: one minute (SPEC §6).
pub const PURGE_INTERVAL_MS_DEFAULT: u64 = 60_000;
/// Default life of a tombstone: seven days (SPEC §6).
pub const TOMBSTONE_TTL_MS_DEFAULT: u64 = 7 * 24 * 60 * 60 * 1000;
/// Default coalescing interval of pull hints (SPEC §8).
pub const HINT_INTERVAL_MS_DEFAULT: u64 = 100;
/// Longest coalescing interval of pull hints the specification allows (SPEC §8).
pub const HINT_INTERVAL_MS_MAX: u64 = 250;

pub use crate::gateway::lease::{GATEWAY_LEASE_MS_DEFAULT, GATEWAY_LEASE_MS_MIN};

/// A gateway id for a node that was given none.
pub fn generated_gateway_id() -> String {
    format!("gw-{}", uuid::Uuid::new_v4().simple())
}

impl Default for ServerConfig {
    /// Domain defaults and no admin token, so a default server never opens its admin endpoints.
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            admin_token: String::new(),
            recall_window_ms: RECALL_WINDOW_MS_DEFAULT,
            pull_threshold: PULL_THRESHOLD_DEFAULT,
            retention_ms: None,
            gateway_id: generated_gateway_id(),
            gateway_lease_ms: GATEWAY_LEASE_MS_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            ws_allowed_origins: Vec::new(),
            outbound_queue_len_max: OUTBOUND_QUEUE_LEN_MAX_DEFAULT,
            purge_interval_ms: PURGE_INTERVAL_MS_DEFAULT,
            tombstone_ttl_ms: TOMBSTONE_TTL_MS_DEFAULT,
            hint_interval_ms: HINT_INTERVAL_MS_DEFAULT,
            rate_limit_per_s: 0,
            connections: ConnectionLimits::default(),
            open_registration: false,
            login: LoginLimits::default(),
            media: MediaLimits::default(),
            push: crate::push::PushConfig::default(),
        }
    }
}

impl fmt::Debug for ServerConfig {
    /// Leaves the admin token out, so the configuration can be logged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("limits", &self.limits)
            .field("admin_token", &"<redacted>")
            .field("recall_window_ms", &self.recall_window_ms)
            .field("pull_threshold", &self.pull_threshold)
            .field("retention_ms", &self.retention_ms)
            .field("gateway_id", &self.gateway_id)
            .field("gateway_lease_ms", &self.gateway_lease_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("ws_allowed_origins", &self.ws_allowed_origins)
            .field("outbound_queue_len_max", &self.outbound_queue_len_max)
            .field("purge_interval_ms", &self.purge_interval_ms)
            .field("tombstone_ttl_ms", &self.tombstone_ttl_ms)
            .field("hint_interval_ms", &self.hint_interval_ms)
            .field("rate_limit_per_s", &self.rate_limit_per_s)
            .field("connections", &self.connections)
            .field("open_registration", &self.open_registration)
            .field("login", &self.login)
            .field("media", &self.media)
            .field("push", &self.push)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_admin_token() {
        let config = ServerConfig {
            admin_token: "s3cret-admin".into(),
            ..ServerConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret-admin"));
        assert!(shown.contains("<redacted>"));
    }
}
