//! Sending messages over HTTP; the request is `request::SendMessage`, shared with WebSocket.

use axum::extract::State;
use axum::Json;
use parley_wire::{ErrorBody, SendAck};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::metrics::SendOutcome;
use crate::path::{ConvPath, DeferredPath};
use crate::request::send::SendBody;
use crate::request::SendMessage;
use crate::state::AppState;

/// `POST /v1/conversations/{conv_id}/messages`: the sender is the token's device, never a
/// field of the request.
#[utoipa::path(
    post,
    path = "/v1/conversations/{conv_id}/messages",
    tag = "conversations",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    request_body = SendBody,
    responses(
        (status = 200, description = "Committed (or, `dup`, committed before under this key).",
            body = SendAck),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id or key, an empty body.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: no open membership, or no such \
            conversation; `NOT_FOUND`: `reply_to` or `thread_root` names no message the \
            sender may see.", body = ErrorBody),
        (status = 409, description = "`IDEMPOTENCY_MISMATCH`: the key was used for another \
            request; `RECALLED`: `reply_to` or `thread_root` names a recalled message; \
            `ENCRYPTED_CONVERSATION`: plaintext into an encrypted conversation.",
            body = ErrorBody),
        (status = 413, description = "`BODY_TOO_LARGE` (the message body) or \
            `REQUEST_TOO_LARGE` (the request).", body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the device's send rate; nothing was \
            written.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn send(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<SendAck>, ApiError> {
    let req = SendMessage::from_http(path, &body, state.config().limits.body_bytes_max)
        .inspect_err(|_| state.metrics().send(SendOutcome::Invalid))?;
    Ok(Json(req.run(&state, &identity).await?))
}
