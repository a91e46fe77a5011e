//! `GET /v1/presence?users=a,b`: whether each asked user is online and when they were last
//! seen, for the users the caller shares a conversation with now (and the caller itself). A
//! client calls it after connecting to fill its view; `presence` frames keep it current.

use axum::extract::State;
use axum::Json;
use parley_wire::{ErrorBody, PresenceList, UserPresence};

use crate::auth::Device;
use crate::error::ApiError;
use crate::gateway::frames::rfc3339;
use crate::query::{self, QueryPairs};
use crate::state::AppState;

/// Unknown users and users who share no open conversation with the caller are left out alike
/// (P10): nothing tells them apart. A former co-member is a stranger again once either left,
/// as for `presence` frames.
#[utoipa::path(
    get,
    path = "/v1/presence",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("users" = String, Query,
            description = "Comma-separated user ids, 1 to 100 (a repeated id counts once)."),
    ),
    responses(
        (status = 200, description = "The presence of the asked users the caller may see.",
            body = PresenceList),
        (status = 400, description = "`BAD_REQUEST`: `users` missing, an invalid id, more \
            than 100 ids, or another query parameter.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Device(identity): Device,
    pairs: QueryPairs,
) -> Result<Json<PresenceList>, ApiError> {
    let users = query::presence_users(&pairs.into_inner()?)?;
    let found = state.store().presence_of(&identity.user_id, &users).await?;
    Ok(Json(PresenceList {
        presence: found
            .into_iter()
            .map(|p| UserPresence {
                user_id: p.user_id.as_str().to_owned(),
                online: p.online,
                // While online, the last disconnect of one of several devices says nothing.
                last_seen: (!p.online).then_some(p.last_seen).flatten().map(rfc3339),
            })
            .collect(),
    }))
}
