//! Edits and reactions over HTTP (docs/RELATIONS.md); the requests are `request::EditMessage`
//! and `request::React`, shared with WebSocket.

use axum::extract::State;
use axum::Json;
use parley_wire::{EditAck, ErrorBody, ReactionAck};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvSeqKeyPath, ConvSeqPath, DeferredPath};
use crate::request::relate::EditBody;
use crate::request::{EditMessage, React};
use crate::state::AppState;

/// `POST /v1/conversations/{conv_id}/events/{seq}/edit`: the author gives their message a new
/// body; keyed like a send.
#[utoipa::path(
    post,
    path = "/v1/conversations/{conv_id}/events/{seq}/edit",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("seq" = i64, Path, minimum = 0, description = "The message's seq, written as JSON \
            writes an integer."),
    ),
    request_body = EditBody,
    responses(
        (status = 200, description = "The edit event (or, `dup`, the one committed before \
            under this key).", body = EditAck),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, key or seq, an empty body.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`NOT_SENDER`: someone else's message.", body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (no open membership, no such conversation) \
            or `NOT_FOUND` (no such visible message).", body = ErrorBody),
        (status = 409, description = "`IDEMPOTENCY_MISMATCH`: the key was used for another \
            request; `RECALLED`: the message was recalled.", body = ErrorBody),
        (status = 413, description = "`BODY_TOO_LARGE` or `REQUEST_TOO_LARGE`.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the device's send rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn edit(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvSeqPath>,
    body: JsonBody,
) -> Result<Json<EditAck>, ApiError> {
    let req = EditMessage::from_http(path, &body, state.config().limits.body_bytes_max)?;
    Ok(Json(req.run(&state, &identity).await?))
}

/// `PUT /v1/conversations/{conv_id}/events/{seq}/reactions/{key}`: one reaction per user and
/// key; a repeated `PUT` changes nothing.
#[utoipa::path(
    put,
    path = "/v1/conversations/{conv_id}/events/{seq}/reactions/{key}",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("seq" = i64, Path, minimum = 0, description = "The message's seq."),
        ("key" = String, Path, description = "One emoji or a short token (at most 32 \
            characters and 64 bytes, no whitespace, control character or `/`), percent-encoded."),
    ),
    responses(
        (status = 200, description = "The reaction (`changed` false when it was there).",
            body = ReactionAck),
        (status = 400, description = "`BAD_REQUEST`: an invalid id, seq or key.",
            body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (no open membership, no such conversation) \
            or `NOT_FOUND` (no such visible message).", body = ErrorBody),
        (status = 409, description = "`RECALLED`: the message was recalled; `LIMIT_REACHED`: \
            the message has the most distinct keys.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the device's send rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`.", body = ErrorBody),
    )
)]
pub async fn react(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvSeqKeyPath>,
) -> Result<Json<ReactionAck>, ApiError> {
    let req = React::from_http(path, true)?;
    Ok(Json(req.run(&state, &identity).await?))
}

/// `DELETE /v1/conversations/{conv_id}/events/{seq}/reactions/{key}`: takes the caller's
/// reaction back; a repeated `DELETE` changes nothing.
#[utoipa::path(
    delete,
    path = "/v1/conversations/{conv_id}/events/{seq}/reactions/{key}",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("seq" = i64, Path, minimum = 0, description = "The message's seq."),
        ("key" = String, Path, description = "The reaction key, percent-encoded."),
    ),
    responses(
        (status = 200, description = "The reaction taken back (`changed` false when there was \
            none).", body = ReactionAck),
        (status = 400, description = "`BAD_REQUEST`: an invalid id, seq or key.",
            body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (no open membership, no such conversation) \
            or `NOT_FOUND` (no such visible message).", body = ErrorBody),
        (status = 409, description = "`RECALLED`: the message was recalled.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the device's send rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`.", body = ErrorBody),
    )
)]
pub async fn unreact(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvSeqKeyPath>,
) -> Result<Json<ReactionAck>, ApiError> {
    let req = React::from_http(path, false)?;
    Ok(Json(req.run(&state, &identity).await?))
}
