//! End-to-end encrypted conversations over HTTP (docs/E2EE.md): the MLS write and the
//! KeyPackage directory. The requests are in `request::mls`.

use axum::extract::State;
use axum::Json;
use parley_wire::{
    ClaimedKeyPackages, ErrorBody, KeyPackageCount, KeyPackageUpload, MlsAck, MlsPost,
};

use crate::auth::Device;
use crate::body::MlsJsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath, UserPath};
use crate::rate_limit::LimitKind;
use crate::request::mls::{claimed, count, key_package_batch, PostMls};
use crate::state::AppState;

/// `POST /v1/conversations/{conv_id}/mls`: a member's MLS message, ordered by the conversation's
/// log. The Delivery Service rule: it must be made in the conversation's current epoch.
#[utoipa::path(
    post,
    path = "/v1/conversations/{conv_id}/mls",
    tag = "e2ee",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
    ),
    request_body = MlsPost,
    responses(
        (status = 200, description = "The message's seq and the epoch after it (or, `dup`, \
            the answer of the request first committed under this key).", body = MlsAck),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, a message that is not base64 of 1 byte to 512 KiB, a Welcome or membership \
            change on anything but a commit, a Commit removing its committer.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a Commit adding or removing users by a \
            member who may not.", body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (no open membership, no such conversation) \
            or `NOT_FOUND` (a user to add does not exist, or to remove is not a member).",
            body = ErrorBody),
        (status = 409, description = "`EPOCH_CONFLICT` (made in another epoch; the error \
            object carries `epoch` and `winning_seq`), `NOT_ENCRYPTED`, `ALREADY_MEMBER`, \
            `IDEMPOTENCY_MISMATCH`.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: over 1 MiB.", body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the device's send rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn post(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    MlsJsonBody(body): MlsJsonBody,
) -> Result<Json<MlsAck>, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    let req = PostMls::new(conv_id, body.parse()?)?;
    Ok(Json(req.run(&state, &identity).await?))
}

/// `POST /v1/devices/me/key-packages`: publishes KeyPackages of the calling device.
#[utoipa::path(
    post,
    path = "/v1/devices/me/key-packages",
    tag = "e2ee",
    security(("device_token" = [])),
    request_body = KeyPackageUpload,
    responses(
        (status = 200, description = "What the device now holds.", body = KeyPackageCount),
        (status = 400, description = "`BAD_REQUEST`: none given, more than 100, or one that is \
            not base64 of 1 byte to 16 KiB.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 409, description = "`LIMIT_REACHED`: the device would hold more than 1,000 \
            unclaimed packages; nothing was stored.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`.", body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`.", body = ErrorBody),
    )
)]
pub async fn publish(
    State(state): State<AppState>,
    Device(identity): Device,
    MlsJsonBody(body): MlsJsonBody,
) -> Result<Json<KeyPackageCount>, ApiError> {
    let upload: KeyPackageUpload = body.parse()?;
    let batch = key_package_batch(&identity, upload)?;
    state
        .rate_limiter()
        .check_device(LimitKind::Send, &identity)?;
    let stock = state.store().publish_key_packages(&batch).await?;
    Ok(Json(count(stock)))
}

/// `GET /v1/devices/me/key-packages`: what the calling device holds in the directory.
#[utoipa::path(
    get,
    path = "/v1/devices/me/key-packages",
    tag = "e2ee",
    security(("device_token" = [])),
    responses(
        (status = 200, description = "Unclaimed packages and the last-resort one.",
            body = KeyPackageCount),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`.", body = ErrorBody),
    )
)]
pub async fn stock(
    State(state): State<AppState>,
    Device(identity): Device,
) -> Result<Json<KeyPackageCount>, ApiError> {
    let stock = state
        .store()
        .key_package_stock(&identity.user_id, &identity.device_id)
        .await?;
    Ok(Json(count(stock)))
}

/// `POST /v1/users/{user_id}/key-packages/claim`: one KeyPackage per device of the user, each
/// ordinary package handed out once.
#[utoipa::path(
    post,
    path = "/v1/users/{user_id}/key-packages/claim",
    tag = "e2ee",
    security(("device_token" = [])),
    params(("user_id" = String, Path, description = "The user whose devices to add.")),
    responses(
        (status = 200, description = "A package per live device that has one.",
            body = ClaimedKeyPackages),
        (status = 400, description = "`BAD_REQUEST`: an invalid user id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such user.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`.", body = ErrorBody),
    )
)]
pub async fn claim(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<UserPath>,
) -> Result<Json<ClaimedKeyPackages>, ApiError> {
    let user = path.into_inner()?.user_id()?;
    // A claim uses up packages: it spends the send budget, so one device cannot drain another's
    // stock faster than it may send.
    state
        .rate_limiter()
        .check_device(LimitKind::Send, &identity)?;
    let packages = state.store().claim_key_packages(&user).await?;
    Ok(Json(claimed(&user, packages)))
}
