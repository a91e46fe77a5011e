//! `GET /metrics`: the server's metrics in the text exposition format (`metrics.rs`). On the
//! main listener only the admin token may read them; on the metrics listener anyone may.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use parley_wire::ErrorBody;

use crate::auth::{bearer_from_headers, is_admin_token};
use crate::error::ApiError;
use crate::metrics;
use crate::state::AppState;

/// On the main listener: the admin token, or 401 for anyone else, a device token included
/// (metrics are the operator's, and a 403 would confirm that a device token is valid).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "meta",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The metrics in the OpenMetrics text format (docs/METRICS.md).",
            body = String, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        (status = 401, description = "`UNAUTHENTICATED`: no token, or any token but the admin \
            token.", body = ErrorBody),
    )
)]
pub async fn admin_only(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match bearer_from_headers(&headers) {
        Some(token) if is_admin_token(&state, token) => scrape(&state),
        _ => ApiError::Unauthenticated.into_response(),
    }
}

/// On the metrics listener, which an operator binds to a private address.
pub async fn open(State(state): State<AppState>) -> Response {
    scrape(&state)
}

fn scrape(state: &AppState) -> Response {
    (
        [(CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.metrics().encode(),
    )
        .into_response()
}
