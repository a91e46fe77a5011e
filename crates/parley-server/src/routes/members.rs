//! Membership changes, through the service layer. Joins and leaves are log events; role changes
//! are not events (they change no visibility) and are announced as notices.

use axum::extract::State;
use axum::Json;
use parley_domain::{Role, UserId};
use parley_wire::ErrorBody;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{self, ConvMemberPath, ConvPath, DeferredPath};
use crate::service;
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemberRequest {
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    user_id: String,
}

/// The seq of the join or leave event a change wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeSeq {
    seq: i64,
}

/// `POST /v1/conversations/{conv_id}/members`
#[utoipa::path(
    post,
    path = "/v1/conversations/{conv_id}/members",
    tag = "conversations",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    request_body = AddMemberRequest,
    responses(
        (status = 200, description = "The seq of the join event.", body = ChangeSeq),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, a direct chat.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: the caller is no owner or admin.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (the caller) or `NOT_FOUND` (no such user).",
            body = ErrorBody),
        (status = 409, description = "`ALREADY_MEMBER`: the user is a member; \
            `ENCRYPTED_CONVERSATION`: members of an encrypted conversation join by a Commit \
            (docs/E2EE.md).", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn add(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<ChangeSeq>, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    let req: AddMemberRequest = body.parse()?;
    let target = path::user_id(&req.user_id)?;
    let seq = service::add_member(&state, &conv_id, &identity.user_id, &target).await?;
    Ok(Json(ChangeSeq { seq }))
}

/// `DELETE /v1/conversations/{conv_id}/members/{user_id}`: leave when the target is the
/// caller, otherwise remove as owner or admin.
#[utoipa::path(
    delete,
    path = "/v1/conversations/{conv_id}/members/{user_id}",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("user_id" = String, Path, pattern = "^[A-Za-z0-9._@-]{1,64}$", description = "The member to remove; the caller to leave."),
    ),
    responses(
        (status = 200, description = "The seq of the leave event.", body = ChangeSeq),
        (status = 400, description = "`BAD_REQUEST`: an invalid id, a direct chat.",
            body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: the caller may not remove that member.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (the caller) or `NOT_FOUND` (the target is \
            no member).", body = ErrorBody),
        (status = 409, description = "`ENCRYPTED_CONVERSATION`: members of an encrypted \
            conversation leave by a Commit (docs/E2EE.md).", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn remove(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvMemberPath>,
) -> Result<Json<ChangeSeq>, ApiError> {
    let (conv_id, target) = path.into_inner()?.ids()?;
    let seq = service::remove_member(&state, &conv_id, &identity.user_id, &target).await?;
    Ok(Json(ChangeSeq { seq }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetRoleRequest {
    /// `admin` or `member`; ownership passes only when the owner leaves.
    role: Role,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RoleSet {
    user_id: UserId,
    role: Role,
}

/// `PUT /v1/conversations/{conv_id}/members/{user_id}`: the owner makes a member an admin or
/// a plain member. Ownership only passes when the owner leaves, so `owner` is not a value here.
#[utoipa::path(
    put,
    path = "/v1/conversations/{conv_id}/members/{user_id}",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("user_id" = String, Path, pattern = "^[A-Za-z0-9._@-]{1,64}$", description = "The member whose role is set."),
    ),
    request_body = SetRoleRequest,
    responses(
        (status = 200, description = "The member's role now.", body = RoleSet),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, `owner`.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: the caller is not the owner.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER` (the caller) or `NOT_FOUND` (the target is \
            no member).", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn set_role(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvMemberPath>,
    body: JsonBody,
) -> Result<Json<RoleSet>, ApiError> {
    let (conv_id, target) = path.into_inner()?.ids()?;
    let req: SetRoleRequest = body.parse()?;
    if req.role == Role::Owner {
        return Err(ApiError::bad_request(
            "role must be \"admin\" or \"member\"",
        ));
    }
    let role = service::set_role(&state, &conv_id, &identity.user_id, &target, req.role).await?;
    Ok(Json(RoleSet {
        user_id: target,
        role,
    }))
}
