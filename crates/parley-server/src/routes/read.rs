//! Marking a conversation read: `POST /v1/conversations/{conv_id}/read` with `{seq}`.

use axum::extract::State;
use axum::Json;
use parley_wire::{ErrorBody, ReadAck};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::request::read::ReadBody;
use crate::request::MarkRead;
use crate::state::AppState;

/// The answer is the resulting position: `max(read_seq, min(seq, head))` (P8).
#[utoipa::path(
    post,
    path = "/v1/conversations/{conv_id}/read",
    tag = "conversations",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    request_body = ReadBody,
    responses(
        (status = 200, description = "The read position now.", body = ReadAck),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, a negative seq.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: never a member, or no such conversation.",
            body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn mark(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<ReadAck>, ApiError> {
    let req = MarkRead::from_http(path, &body)?;
    Ok(Json(req.run(&state, &identity).await?))
}
