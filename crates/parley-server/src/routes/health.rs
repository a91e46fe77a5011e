//! Liveness and readiness probes for orchestrators; neither needs a token.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

/// The process is up and serving HTTP; says nothing about the store.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The store answers, so requests can be served; 503 `UNAVAILABLE` otherwise, which takes the
/// node out of a load balancer until the store is back.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.store().ping().await?;
    Ok(Json(json!({ "status": "ready" })))
}
