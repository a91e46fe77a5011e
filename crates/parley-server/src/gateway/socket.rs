//! `GET /v1/ws`: authentication, the upgrade, and the life of one connection.
//!
//! Each connection has a reader (this task), a writer task that drains a bounded queue into
//! one flush per batch, and a close signal that anyone (a newer connection of the device, a
//! revocation, a full queue, shutdown) can raise. Requests run concurrently up to a bound, and
//! their answers go through the same queue as pushes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use parley_bus::Notice;
use parley_store::token::hash_token;
use parley_store::{DeviceIdentity, Route};
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};
use tracing::Instrument;

use super::hub::{CloseReason, ConnHandle};
use super::out_queue::{self, OutReceiver};
use super::{frames, origin};
use crate::auth::{authenticate_device, bearer_from_headers, subprotocol_token, WS_SUBPROTOCOL};
use crate::error::ApiError;
use crate::metrics::SendOutcome;
use crate::request::{frame, FrameRequest};
use crate::state::AppState;

/// Requests of one connection processed at once; past it the reader waits.
const INFLIGHT_REQUESTS_MAX: usize = 64;
/// Frames written before one flush.
const WRITE_BATCH_FRAMES_MAX: usize = 256;
/// How long in-flight requests may finish after a close was asked for.
const INFLIGHT_DRAIN_MS: u64 = 5_000;
/// Read buffer per connection, resident from the first frame read: idle connections stay small
/// (SPEC §7 measured 137 KiB with the default against 8.8 KiB with 4 KiB). Client frames are
/// small; a larger one makes the buffer grow to its length, read in as few calls.
const READ_BUFFER_BYTES: usize = 1024;
/// Frames are encoded into the write buffer and written out once it passes this length, or at
/// the flush that ends a batch; its capacity stays with the connection, so it is kept well
/// below the default of 128 KiB.
const WRITE_BUFFER_BYTES: usize = 16 * 1024;
/// Longest `req_id` written into a frame's log span: the client chooses it, and a long one would
/// repeat in every log line of the request.
const LOGGED_REQ_ID_CHARS_MAX: usize = 64;

/// The WebSocket upgrade of SPEC §7; the frames it carries are not part of the document.
#[utoipa::path(
    get,
    path = "/v1/ws",
    tag = "realtime",
    security(("device_token" = []), ()),
    description = "The WebSocket of SPEC §7. The device token comes in the `Authorization` \
        header; a browser, which cannot set that header, offers the subprotocols \
        `parley, parley.token.<token>` in `Sec-WebSocket-Protocol` instead (the server selects \
        `parley`, never echoing the token), or as a last resort the `access_token` query \
        parameter. The token is never logged.",
    params(("access_token" = Option<String>, Query,
        description = "The device token, for clients that can set neither `Authorization` nor \
            a subprotocol; never logged.")),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol (SPEC §7)."),
        (status = 400, description = "`BAD_REQUEST`: not a WebSocket upgrade request.",
            body = parley_wire::ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token in the header, \
            a `parley.token.` subprotocol or `access_token`.", body = parley_wire::ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a browser `Origin` that is not allowed.",
            body = parley_wire::ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer, or the handshake \
            took too long. `LEASE_EXPIRED`: this gateway does not hold its lease (its renewals \
            failed); connect to another gateway.", body = parley_wire::ErrorBody),
    )
)]
pub async fn upgrade(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // The handshake includes authentication, a store read: a store that does not answer
    // must not keep upgrade requests, and their sockets, waiting without end.
    let limit = Duration::from_millis(state.config().connections.ws_handshake_timeout_ms);
    match tokio::time::timeout(limit, accept(&state, &headers, query, ws)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => e.into_response(),
        Err(_) => ApiError::Unavailable {
            detail: format!("WebSocket handshake took over {} ms", limit.as_millis()),
        }
        .into_response(),
    }
}

async fn accept(
    state: &AppState,
    headers: &HeaderMap,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    // A gateway without its lease claims no route: any live gateway may reap its routes.
    // Checked first, so a refused client costs no store read.
    if !state.gateway().lease().is_held() {
        return Err(ApiError::LeaseExpired);
    }
    // The token comes from the header; for browsers from a `parley.token.` subprotocol entry
    // or the `access_token` query parameter. None of them is ever logged.
    let from_query = query
        .ok()
        .and_then(|Query(q)| q.get("access_token").cloned());
    let token = bearer_from_headers(headers)
        .or_else(|| subprotocol_token(headers))
        .map(str::to_owned)
        .or(from_query)
        .ok_or(ApiError::Unauthenticated)?;
    let device = authenticate_device(state, &token).await?.0;
    let token_hash = hash_token(&token);
    check_origin(state, headers)?;
    let ws = ws.map_err(|e| ApiError::bad_request(format!("not a WebSocket upgrade: {e}")))?;
    let frame_bytes_max = state.config().limits.request_bytes_max;
    let state = state.clone();
    // A browser that offered subprotocols refuses an answer that selects none of them; the
    // token entry is never selected, so the token is not echoed.
    Ok(ws
        .protocols([WS_SUBPROTOCOL])
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_message_size(frame_bytes_max)
        .max_frame_size(frame_bytes_max)
        .on_upgrade(move |socket| drive(state, device, token_hash, socket)))
}

/// Browsers send `Origin`; native clients do not. A browser page is accepted from the server's
/// own origin or an origin in the allow-list (`*` allows any), compared by scheme, host and
/// port (`origin.rs`).
fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if origin::is_allowed(origin, host, &state.config().ws_allowed_origins) {
        return Ok(());
    }
    Err(ApiError::Forbidden("origin not allowed".into()))
}

/// The connection's future, in its span. Built outside any async fn: an async fn keeps room
/// for its arguments beside its locals, so every async layer here would hold the connection's
/// state once more for the connection's whole life.
fn drive(
    state: AppState,
    device: DeviceIdentity,
    token_hash: String,
    socket: WebSocket,
) -> impl std::future::Future<Output = ()> {
    let conn_id = uuid::Uuid::new_v4().to_string();
    // Every log line of the connection, its frames' included, names the user and device;
    // never the token.
    let span = tracing::info_span!(
        "ws",
        user = %device.user_id,
        device = %device.device_id,
        conn_id = %conn_id,
    );
    let (sink, stream) = socket.split();
    serve_connection(state, device, token_hash, sink, stream, conn_id).instrument(span)
}

/// One connection from its registration to its route's release. Resident for the life of the
/// connection, so what runs once (claiming the route, the close handshake, the release) runs
/// in futures of its own, boxed, which take no room here while the connection is open.
async fn serve_connection(
    state: AppState,
    device: DeviceIdentity,
    token_hash: String,
    sink: SplitSink<WebSocket, Message>,
    mut stream: SplitStream<WebSocket>,
    conn_id: String,
) {
    let gateway = state.gateway().clone();
    let Some(_guard) = gateway.enter() else {
        return;
    };
    let _open = OpenGuard::new(state.metrics().open("websocket"));
    let (out_tx, out_rx) = out_queue::channel(state.config().outbound_queue_len_max);
    let (close_tx, close_rx) = watch::channel(None);
    let handle = Arc::new(ConnHandle::new(
        conn_id,
        device.device_id.clone(),
        token_hash,
        out_tx,
        close_tx,
    ));
    gateway.hub().register(&device.user_id, handle.clone());
    Box::pin(claim_route(&state, &device, &handle)).await;

    let (finish_tx, finish_rx) = oneshot::channel();
    let close_limit = Duration::from_millis(state.config().connections.ws_close_timeout_ms);
    let writer = tokio::spawn(write_loop(sink, out_rx, finish_rx, close_limit));
    let reason = read_loop(&state, &device, &handle, &mut stream, close_rx).await;
    state.metrics().ws_closed(reason.as_str());
    tracing::debug!(reason = reason.as_str(), "websocket closing");
    let _ = finish_tx.send(reason);
    let handshake = tokio::time::timeout(close_limit, close_handshake(writer, &mut stream, reason));
    let _ = Box::pin(handshake).await;

    gateway.hub().unregister(&device.user_id, &handle.conn_id);
    Box::pin(release_route(&state, &device, &handle.conn_id)).await;
}

/// Chapter 05: the device's route names this connection; the connection it replaced is
/// closed.
async fn claim_route(state: &AppState, device: &DeviceIdentity, handle: &ConnHandle) {
    let gateway = state.gateway();
    let metrics = state.metrics();
    let route = Route {
        user_id: device.user_id.clone(),
        device_id: device.device_id.clone(),
        gateway_id: gateway.id().to_owned(),
        conn_id: handle.conn_id.clone(),
    };
    let claimed = state.store().claim_route(&route).await;
    if claimed.is_ok() {
        metrics.route_claims.inc();
        handle.mark_route_claimed();
    }
    if let Ok(None) = &claimed {
        // No connection of this device held the route: the user may have just come online.
        gateway.presence().connected(&device.user_id);
    }
    match claimed {
        Ok(Some(prev)) if prev.conn_id != handle.conn_id => {
            metrics.route_kicks.inc();
            if prev.gateway_id == route.gateway_id {
                // On this gateway the hub already kicked it at registration.
                gateway
                    .hub()
                    .close_conn(&device.user_id, &prev.conn_id, CloseReason::Kicked);
            } else {
                // The gateway that holds it closes exactly that connection (4001) when the
                // notice reaches it; its cleanup then leaves this route alone (P9).
                state.bus().notify(Notice::RouteTaken {
                    user_id: prev.user_id,
                    device_id: prev.device_id,
                    gateway_id: prev.gateway_id,
                    conn_id: prev.conn_id,
                });
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "route claim failed; the connection serves without it")
        }
    }
}

/// P9: only this connection's own route is removed, never a newer one's.
async fn release_route(state: &AppState, device: &DeviceIdentity, conn_id: &str) {
    let gateway = state.gateway();
    match state
        .store()
        .release_route(&device.user_id, &device.device_id, conn_id)
        .await
    {
        // The device's route is gone: the user may have gone offline, and is last seen now.
        Ok(true) => gateway.presence().disconnected(&device.user_id),
        // A newer connection of the device holds the route: the user stays online.
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "route release failed"),
    }
}

async fn read_loop(
    state: &AppState,
    device: &DeviceIdentity,
    handle: &Arc<ConnHandle>,
    stream: &mut SplitStream<WebSocket>,
    mut close_rx: watch::Receiver<Option<CloseReason>>,
) -> CloseReason {
    let idle = Duration::from_millis(state.config().idle_timeout_ms.max(1));
    let mut idle_deadline = Instant::now() + idle;
    let mut ping_every = tokio::time::interval_at(Instant::now() + idle / 2, idle / 2);
    let mut inflight = JoinSet::new();
    let reason = loop {
        tokio::select! {
            biased;
            _ = close_rx.changed() => break close_rx.borrow().unwrap_or(CloseReason::Shutdown),
            _ = sleep_until(idle_deadline) => break CloseReason::Idle,
            Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
            _ = ping_every.tick() => {
                handle.push(Message::Ping(Default::default()));
            }
            msg = stream.next(), if inflight.len() < INFLIGHT_REQUESTS_MAX => {
                // Any frame, protocol pongs included, counts as activity.
                idle_deadline = Instant::now() + idle;
                match msg {
                    None | Some(Ok(Message::Close(_))) => break CloseReason::Gone,
                    Some(Err(e)) => {
                        let text = e.to_string();
                        let too_large = text.contains("too long") || text.contains("too big") || text.contains("Space limit");
                        break if too_large { CloseReason::TooLarge } else { CloseReason::Gone };
                    }
                    Some(Ok(Message::Text(t))) => on_text(state, device, handle, t.as_str(), &mut inflight),
                    Some(Ok(Message::Binary(_))) => {
                        handle.push(frames::error(Value::Null, &ApiError::bad_request("frames are JSON text")));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                }
            }
        }
    };
    // Let accepted requests finish, so their acks precede the close frame.
    let drain = async { while inflight.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(Duration::from_millis(INFLIGHT_DRAIN_MS), drain).await;
    reason
}

fn on_text(
    state: &AppState,
    device: &DeviceIdentity,
    handle: &Arc<ConnHandle>,
    text: &str,
    inflight: &mut JoinSet<()>,
) {
    let (req_id, request) = frame::parse(text, state.config().limits.body_bytes_max);
    let request = match request {
        Ok(FrameRequest::Ping) => {
            handle.push(frames::pong(req_id));
            return;
        }
        Ok(request) => request,
        Err(e) => {
            if frame::is_send(text) {
                state.metrics().send(SendOutcome::Invalid);
            }
            handle.push(frames::error(req_id, &e));
            return;
        }
    };
    let (state, device, handle) = (state.clone(), device.clone(), handle.clone());
    let span = tracing::info_span!(
        "frame",
        req_id = %logged_req_id(&req_id),
        kind = request.kind()
    );
    inflight.spawn(
        async move {
            if let Some(frame) = answer(&state, &device, req_id, request).await {
                handle.push(frame);
            }
        }
        .instrument(span),
    );
}

/// The `req_id` as the log shows it: as sent, or its first `LOGGED_REQ_ID_CHARS_MAX`
/// characters followed by `…`.
fn logged_req_id(req_id: &Value) -> String {
    let text = req_id.to_string();
    match text.char_indices().nth(LOGGED_REQ_ID_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Runs one request the way HTTP runs it, and answers with its `ack` or `error`; an accepted
/// typing frame has no answer.
async fn answer(
    state: &AppState,
    device: &DeviceIdentity,
    req_id: Value,
    request: FrameRequest,
) -> Option<Message> {
    Some(match request {
        FrameRequest::Ping => frames::pong(req_id),
        FrameRequest::Send(send) => frames::reply(req_id, send.run(state, device).await),
        FrameRequest::Read(read) => frames::reply(req_id, read.run(state, device).await),
        FrameRequest::Sync(sync) => frames::reply(req_id, sync.run(state, device).await),
        FrameRequest::Edit(edit) => frames::reply(req_id, edit.run(state, device).await),
        FrameRequest::React(react) => frames::reply(req_id, react.run(state, device).await),
        FrameRequest::Search(search) => frames::reply(req_id, search.run(state, device).await),
        FrameRequest::Mls(post) => frames::reply(req_id, post.run(state, device).await),
        FrameRequest::Typing(conv_id) => {
            match super::ephemeral::typing(state, device, conv_id).await {
                Ok(()) => return None,
                Err(e) => frames::error(req_id, &e),
            }
        }
    })
}

/// Holds one place in an open connections gauge for as long as it lives.
struct OpenGuard(Gauge);

impl OpenGuard {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Waits while the writer delivers the close frame, reading and dropping what the client
/// still sends until its own close frame ends the stream. Bytes left unread in the socket
/// would make the kernel answer the close with a reset, and a reset destroys what the client
/// has not read yet, the close frame included: a slow reader would see 1006, not the code.
async fn close_handshake(
    writer: tokio::task::JoinHandle<()>,
    stream: &mut SplitStream<WebSocket>,
    reason: CloseReason,
) {
    tokio::pin!(writer);
    let mut written = false;
    // `Gone` means the stream already ended or broke: there is nothing left to read.
    let mut reading = reason != CloseReason::Gone;
    while reading || !written {
        tokio::select! {
            _ = &mut writer, if !written => written = true,
            msg = stream.next(), if reading => {
                reading = matches!(msg, Some(Ok(_)));
            }
        }
    }
}

async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut out_rx: OutReceiver,
    mut finish_rx: oneshot::Receiver<CloseReason>,
    close_limit: Duration,
) {
    let reason = loop {
        tokio::select! {
            biased;
            reason = &mut finish_rx => break reason.unwrap_or(CloseReason::Shutdown),
            frame = out_rx.recv() => {
                let Some(frame) = frame else { break CloseReason::Gone };
                let write = async {
                    sink.feed(frame).await?;
                    for _ in 0..WRITE_BATCH_FRAMES_MAX {
                        match out_rx.try_recv() {
                            Ok(f) => sink.feed(f).await?,
                            Err(_) => break,
                        }
                    }
                    sink.flush().await
                };
                tokio::select! {
                    written = write => if written.is_err() { return },
                    // A writer stuck on a client that does not read is interrupted by the close.
                    reason = &mut finish_rx => break reason.unwrap_or(CloseReason::Shutdown),
                }
            }
        }
    };
    let finish = async {
        if reason.drains_queue() {
            while let Ok(f) = out_rx.try_recv() {
                sink.feed(f).await?;
            }
        }
        if reason == CloseReason::Kicked {
            sink.feed(frames::kicked()).await?;
        }
        if reason != CloseReason::Gone {
            let frame = CloseFrame {
                code: reason.code(),
                reason: "".into(),
            };
            sink.feed(Message::Close(Some(frame))).await?;
        }
        sink.flush().await
    };
    // The close frame waits behind whatever the client has not read yet; past the bound the
    // connection is dropped without it.
    let _ = tokio::time::timeout(close_limit, finish).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_req_id_is_cut_in_the_log() {
        assert_eq!(logged_req_id(&serde_json::json!(7)), "7");
        assert_eq!(logged_req_id(&serde_json::json!("a")), "\"a\"");
        let long = logged_req_id(&serde_json::json!("é".repeat(500)));
        assert_eq!(long.chars().count(), LOGGED_REQ_ID_CHARS_MAX + 1);
        assert!(long.ends_with('…'));
    }
}
