//! Liveness and readiness probes for orchestrators; neither needs a token.

use axum::extract::State;
use axum::Json;
use parley_wire::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::gateway::lease::LeaseState;
use crate::state::AppState;

/// The answer of a probe.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeStatus {
    /// `ok` for `/healthz`, `ready` for `/readyz`.
    #[schema(example = "ok")]
    status: &'static str,
    /// `/readyz` only: `ok`, or `degraded` while the bus between gateways is disconnected;
    /// the node still serves its own devices then, so it stays ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "ok")]
    bus: Option<&'static str>,
    /// `/readyz` only: `ok` while this gateway holds its lease. Once its renewals failed, or
    /// it ran out by the gateway's own clock, the lease is `expired`: the gateway refuses
    /// WebSockets and `/readyz` answers 503 `LEASE_EXPIRED` until a renewal succeeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "ok")]
    lease: Option<&'static str>,
}

/// The process is up and serving HTTP; says nothing about the store.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    responses((status = 200, description = "The process serves HTTP.", body = ProbeStatus))
)]
pub async fn healthz() -> Json<ProbeStatus> {
    Json(ProbeStatus {
        status: "ok",
        bus: None,
        lease: None,
    })
}

/// The store answers and the gateway holds its lease, so requests can be served; 503
/// otherwise, which takes the node out of a load balancer until both are back. A disconnected
/// bus is reported as `"bus": "degraded"` with 200: this node's own devices are still served,
/// and other gateways' pushes are repaired from the log when the bus is back.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "The store answers and the lease is held (`lease` is \
            `ok`); `bus` says whether the bus between gateways is `ok` or `degraded`.",
            body = ProbeStatus),
        (status = 503, description = "`UNAVAILABLE`: the store does not answer. \
            `LEASE_EXPIRED`: the gateway's lease is expired (its renewals failed).",
            body = ErrorBody),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<ProbeStatus>, ApiError> {
    state.store().ping().await?;
    let lease = state.gateway().lease().state();
    if lease == LeaseState::Expired {
        return Err(ApiError::LeaseExpired);
    }
    let bus = if state.bus().degraded() {
        "degraded"
    } else {
        "ok"
    };
    Ok(Json(ProbeStatus {
        status: "ready",
        bus: Some(bus),
        lease: Some(lease.as_str()),
    }))
}
