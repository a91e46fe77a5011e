//! Liveness and readiness probes for orchestrators; neither needs a token.

use axum::extract::State;
use axum::Json;
use parley_wire::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::state::AppState;

/// The answer of a probe.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeStatus {
    /// `ok` for `/healthz`, `ready` for `/readyz`.
    #[schema(example = "ok")]
    status: &'static str,
}

/// The process is up and serving HTTP; says nothing about the store.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    responses((status = 200, description = "The process serves HTTP.", body = ProbeStatus))
)]
pub async fn healthz() -> Json<ProbeStatus> {
    Json(ProbeStatus { status: "ok" })
}

/// The store answers, so requests can be served; 503 `UNAVAILABLE` otherwise, which takes the
/// node out of a load balancer until the store is back.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "The store answers.", body = ProbeStatus),
        (status = 503, description = "`UNAVAILABLE`: the store does not answer.", body = ErrorBody),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<ProbeStatus>, ApiError> {
    state.store().ping().await?;
    Ok(Json(ProbeStatus { status: "ready" }))
}
