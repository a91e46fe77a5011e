//! `GET /v1/admin/server`: what this node is (version, store, bus, gateway id) and every limit a
//! client can run into, as configured, so that `parley verify` and an operator read the
//! deployment's real settings instead of assuming the defaults.

use axum::extract::State;
use axum::Json;
use parley_domain::limits::{CREATE_MEMBERS_MAX, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use parley_domain::search::{SEARCH_LIMIT_DEFAULT, SEARCH_LIMIT_MAX};
use parley_wire::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Admin;
use crate::error::ApiError;
use crate::rate_limit::{LimitKind, ADMIN_KEY};
use crate::state::AppState;

/// The node and its limits.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerInfo {
    /// The server's version (its crate version).
    version: String,
    /// `postgres` or `sqlite`.
    store: String,
    /// `local` (one node), `postgres` or `nats`.
    bus: String,
    /// This node's id in the gateways and routes tables.
    gateway_id: String,
    limits: ServerLimits,
    push: PushBacklogInfo,
    search: SearchIndexInfo,
}

/// How the search index follows the log (docs/SEARCH.md).
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchIndexInfo {
    /// `in_transaction`: each message is indexed by a trigger in its own transaction; `off`:
    /// the trigger is switched off and new messages are not findable; null when the store did
    /// not answer.
    indexing: Option<String>,
    /// Committed messages not yet findable: 0 while indexing in the transaction; null when the
    /// store did not answer.
    lag_events: Option<i64>,
    /// Hits per page when the request names no `limit`.
    page_len_default: u32,
    /// Hits per page at most; a larger `limit` is clamped.
    page_len_max: u32,
}

/// Offline notifications waiting in the store (docs/PUSH.md), shared by every gateway.
#[derive(Debug, Serialize, ToSchema)]
pub struct PushBacklogInfo {
    /// Committed messages not yet expanded into notifications; null when the store did not
    /// answer.
    outbox_len: Option<i64>,
    /// Notifications owed to devices, due or waiting out the coalescing interval; null when
    /// the store did not answer.
    pending_len: Option<i64>,
}

/// Every named limit a client can hit, in the units its name ends with.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerLimits {
    /// Largest message body, in UTF-8 bytes (413 `BODY_TOO_LARGE`).
    body_bytes_max: usize,
    /// Largest request body, in bytes (413 `REQUEST_TOO_LARGE`).
    request_bytes_max: usize,
    /// Events per page when the request names no `limit`.
    page_len_default: u32,
    /// Events per page at most; a larger `limit` is clamped.
    page_len_max: u32,
    /// Members named in one create request at most.
    create_members_max: usize,
    /// Recall window of new conversations that name none.
    recall_window_ms: i64,
    /// Member count from which a new group is delivered by pull.
    pull_threshold: u32,
    /// Retention of new conversations that name none; null keeps events forever.
    retention_ms: Option<i64>,
    /// Interval over which pull hints are coalesced per device.
    hint_interval_ms: u64,
    /// How long a purged message's request key stays answerable.
    tombstone_ttl_ms: u64,
    /// Interval between two retention purges.
    purge_interval_ms: u64,
    /// A WebSocket with no frame from the client for this long is closed.
    ws_idle_timeout_ms: u64,
    /// Frames queued per WebSocket before it counts as too slow (4008).
    ws_outbound_queue_len_max: usize,
    /// Requests per second per device; 0 means no limit.
    rate_limit_per_s: u32,
    /// Length of a gateway's lease.
    gateway_lease_ms: u64,
    header_timeout_ms: u64,
    body_timeout_ms: u64,
    keepalive_idle_ms: u64,
    write_stall_timeout_ms: u64,
    ws_handshake_timeout_ms: u64,
    ws_close_timeout_ms: u64,
    connections_max: usize,
    connections_per_address_max: usize,
    /// `idle_in_transaction_session_timeout` of the server's PostgreSQL connections (0: off);
    /// null on the embedded store.
    pg_idle_in_transaction_timeout_ms: Option<u64>,
    /// At most one notification per device and conversation per this interval.
    push_coalesce_ms: u64,
    /// How long a gateway's claim on notifications lasts.
    push_lease_ms: u64,
}

#[utoipa::path(
    get,
    path = "/v1/admin/server",
    tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The node's version, store, bus and limits.",
            body = ServerInfo),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a device token.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the admin endpoints' rate.",
            body = ErrorBody),
    )
)]
pub async fn describe(
    State(state): State<AppState>,
    _: Admin,
) -> Result<Json<ServerInfo>, ApiError> {
    state.rate_limiter().check(LimitKind::Admin, ADMIN_KEY)?;
    let config = state.config();
    let store = state.store().describe();
    let c = &config.connections;
    let backlog = state.store().push_backlog().await.ok();
    let search = state.store().search_status().await.ok();
    Ok(Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        store: store.kind.to_owned(),
        bus: state.bus().kind().to_owned(),
        gateway_id: config.gateway_id.clone(),
        limits: ServerLimits {
            body_bytes_max: config.limits.body_bytes_max,
            request_bytes_max: config.limits.request_bytes_max,
            page_len_default: PAGE_LIMIT_DEFAULT,
            page_len_max: PAGE_LIMIT_MAX,
            create_members_max: CREATE_MEMBERS_MAX,
            recall_window_ms: config.recall_window_ms,
            pull_threshold: config.pull_threshold,
            retention_ms: config.retention_ms,
            hint_interval_ms: config.hint_interval_ms,
            tombstone_ttl_ms: config.tombstone_ttl_ms,
            purge_interval_ms: config.purge_interval_ms,
            ws_idle_timeout_ms: config.idle_timeout_ms,
            ws_outbound_queue_len_max: config.outbound_queue_len_max,
            rate_limit_per_s: config.rate_limit_per_s,
            gateway_lease_ms: config.gateway_lease_ms,
            header_timeout_ms: c.header_timeout_ms,
            body_timeout_ms: c.body_timeout_ms,
            keepalive_idle_ms: c.keepalive_idle_ms,
            write_stall_timeout_ms: c.write_stall_timeout_ms,
            ws_handshake_timeout_ms: c.ws_handshake_timeout_ms,
            ws_close_timeout_ms: c.ws_close_timeout_ms,
            connections_max: c.connections_max,
            connections_per_address_max: c.connections_per_address_max,
            pg_idle_in_transaction_timeout_ms: store.idle_in_transaction_timeout_ms,
            push_coalesce_ms: config.push.coalesce_ms,
            push_lease_ms: config.push.lease_ms,
        },
        push: PushBacklogInfo {
            outbox_len: backlog.map(|b| b.outbox_len),
            pending_len: backlog.map(|b| b.pending_len),
        },
        search: SearchIndexInfo {
            indexing: search.map(|s| if s.indexing { "in_transaction" } else { "off" }.to_owned()),
            lag_events: search.map(|s| s.lag_events),
            page_len_default: SEARCH_LIMIT_DEFAULT,
            page_len_max: SEARCH_LIMIT_MAX,
        },
    }))
}
