//! Recalling a message: `POST /v1/conversations/{conv_id}/events/{seq}/recall` (SPEC §4).

use axum::extract::State;
use axum::Json;
use parley_wire::{ErrorBody, RecallAck};

use crate::auth::Device;
use crate::error::ApiError;
use crate::path::{ConvSeqPath, DeferredPath};
use crate::request::Recall;
use crate::state::AppState;

/// Answers `{seq, target_seq}`; see `request::Recall`.
#[utoipa::path(
    post,
    path = "/v1/conversations/{conv_id}/events/{seq}/recall",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("seq" = i64, Path, minimum = 0, description = "The message's seq, written as JSON \
            writes an integer."),
    ),
    responses(
        (status = 200, description = "The recall (the same one when recalled before).",
            body = RecallAck),
        (status = 400, description = "`BAD_REQUEST`: an invalid id or seq.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`NOT_SENDER`: someone else's message.", body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (no open membership, no such conversation) \
            or `NOT_FOUND` (no such visible message).", body = ErrorBody),
        (status = 409, description = "`RECALL_WINDOW_EXPIRED`: past the recall window.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn recall(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvSeqPath>,
) -> Result<Json<RecallAck>, ApiError> {
    let req = Recall::from_http(path)?;
    Ok(Json(req.run(&state, &identity).await?))
}
