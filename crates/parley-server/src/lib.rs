//! Parley's HTTP edge: `app(state)` builds the router of SPEC §6 and `run` serves it until a
//! shutdown signal.
//!
//! Requests are checked in the order of SPEC §6's precedence: authentication (401), size
//! limits (413), parsing (400), and only then the store, which answers membership (404), roles
//! (403) and conflicts (409). A request refused at the edge never reaches the store, so it
//! writes nothing.

pub mod accounts;
pub mod auth;
pub mod body;
pub mod config;
pub mod encrypted;
pub mod error;
pub mod gateway;
pub mod listener;
pub mod media;
pub mod metrics;
pub mod openapi;
pub mod path;
pub mod push;
pub mod query;
pub mod rate_limit;
pub mod request;
pub mod retention;
mod routes;
pub mod service;
pub mod state;

#[cfg(test)]
mod router_tests;

use std::future::Future;

use axum::extract::Request;
use axum::Router;
use tower_http::trace::TraceLayer;

pub use config::ServerConfig;
pub use error::ApiError;
pub use state::AppState;

/// The router with its state and request tracing. Spans record the method, the path (which
/// names the conversation) and, once authenticated, the user and device; never the query
/// string, which may carry a token (the WebSocket `access_token`), nor a header or a body.
pub fn app(state: AppState) -> Router {
    let trace = TraceLayer::new_for_http().make_span_with(|req: &Request| {
        tracing::info_span!(
            "http",
            method = %req.method(),
            path = %req.uri().path(),
            user = tracing::field::Empty,
            device = tracing::field::Empty,
        )
    });
    routes::router().layer(trace).with_state(state)
}

/// The router of the metrics listener (`--metrics-listen`): `GET /metrics` without a token,
/// for a scraper on a private address, and JSON errors for anything else.
pub fn metrics_app(state: AppState) -> Router {
    routes::metrics_router().with_state(state)
}

/// Serves `metrics_app(state)` on `listener` until `shutdown` completes.
pub async fn run_metrics(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves `app(state)` on `listener` until `shutdown` completes, then lets in-flight requests
/// finish, closes WebSockets with 1001 and releases the gateway's lease. Every connection runs under the time limits and
/// caps of `ServerConfig::connections` (see `listener`).
pub async fn run(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let gateway = state.gateway().clone();
    // The first renewal comes before the first connection, so no route is claimed for a
    // gateway the store does not know (a reaper would take it at once).
    gateway.lease().renew(&**state.store(), gateway.id()).await;
    let background = tokio_util::sync::CancellationToken::new();
    gateway.start(
        state.store().clone(),
        state.bus().clone(),
        background.clone(),
    );
    tokio::spawn(retention::run(
        state.store().clone(),
        gateway.window().clone(),
        state.metrics().clone(),
        std::time::Duration::from_millis(state.config().purge_interval_ms),
        std::time::Duration::from_millis(state.config().tombstone_ttl_ms),
        background.clone(),
    ));
    if let Some(media) = state.media.clone() {
        tokio::spawn(media::sweep::run(
            state.store().clone(),
            media.backend().clone(),
            std::time::Duration::from_millis(state.config().media.grace_ms),
            std::time::Duration::from_millis(state.config().purge_interval_ms),
            background.clone(),
        ));
    }
    tokio::spawn(push::worker::run(
        state.store().clone(),
        state.push().clone(),
        state.config().push.clone(),
        state.metrics().clone(),
        gateway.id().to_owned(),
        background.clone(),
    ));
    let closing = gateway.clone();
    let shutdown = async move {
        shutdown.await;
        closing.begin_shutdown();
    };
    let limits = state.config().connections.clone();
    let drain = std::time::Duration::from_millis(SHUTDOWN_DRAIN_MS);
    let open = state.metrics().open("http");
    let store = state.store().clone();
    listener::serve(listener, app(state), &limits, open, shutdown, drain).await;
    gateway.wait_closed(drain).await;
    background.cancel();
    // Every connection closed (or the drain's time ran out): the lease and the routes left
    // are released together, so the routes converge without waiting for the lease to expire.
    gateway.release_lease(&*store).await;
    Ok(())
}

/// How long shutdown waits for requests in progress, and then for WebSocket connections, to
/// be answered and closed.
const SHUTDOWN_DRAIN_MS: u64 = 10_000;
