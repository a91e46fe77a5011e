//! `GET /v1/admin/gateways`: the registered gateways with their leases and route counts, so an
//! operator (or a benchmark) can watch routes converge after a gateway died (chapter 10).

use axum::extract::State;
use axum::Json;
use parley_wire::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Admin;
use crate::error::ApiError;
use crate::rate_limit::{LimitKind, ADMIN_KEY};
use crate::state::AppState;

/// One registered gateway.
#[derive(Debug, Serialize, ToSchema)]
pub struct GatewayInfo {
    gateway_id: String,
    /// Time left on the lease by the store's clock, in milliseconds; negative once expired
    /// (until a live gateway's reaper deletes the row).
    lease_expires_in_ms: i64,
    /// Device routes that name the gateway.
    routes: i64,
}

/// Every registered gateway, sorted by `gateway_id`.
#[derive(Debug, Serialize, ToSchema)]
pub struct GatewayList {
    gateways: Vec<GatewayInfo>,
}

#[utoipa::path(
    get,
    path = "/v1/admin/gateways",
    tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The registered gateways, sorted by id.", body = GatewayList),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a device token.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the admin endpoints' rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn list(State(state): State<AppState>, _: Admin) -> Result<Json<GatewayList>, ApiError> {
    state.rate_limiter().check(LimitKind::Admin, ADMIN_KEY)?;
    let leases = state.store().gateway_leases().await?;
    Ok(Json(GatewayList {
        gateways: leases
            .into_iter()
            .map(|l| GatewayInfo {
                gateway_id: l.gateway_id,
                lease_expires_in_ms: l.lease_expires_in_ms,
                routes: l.routes,
            })
            .collect(),
    }))
}
