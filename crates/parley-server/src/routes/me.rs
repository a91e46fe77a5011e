//! `GET /v1/me`: the user and device the caller's token belongs to, so a client that holds only
//! a token learns who it is (e.g. to tell its own messages from others').

use axum::Json;
use parley_wire::{ErrorBody, Identity};

use crate::auth::Device;

/// Authenticated like every device endpoint: a missing, unknown or revoked token is 401.
#[utoipa::path(
    get,
    path = "/v1/me",
    tag = "conversations",
    security(("device_token" = [])),
    responses(
        (status = 200, description = "The token's user and device.", body = Identity),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn me(Device(identity): Device) -> Json<Identity> {
    Json(Identity {
        user_id: identity.user_id.as_str().to_owned(),
        device_id: identity.device_id.as_str().to_owned(),
    })
}
