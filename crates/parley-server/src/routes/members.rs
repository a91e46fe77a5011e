//! Membership changes, through the service layer. Joins and leaves are log events; role changes
//! are not events (they change no visibility) and are announced as notices.

use axum::extract::State;
use axum::Json;
use parley_domain::{Role, UserId};
use serde::{Deserialize, Serialize};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{self, ConvMemberPath, ConvPath, DeferredPath};
use crate::service;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddMemberRequest {
    user_id: String,
}

/// The seq of the join or leave event a change wrote.
#[derive(Debug, Serialize)]
pub struct ChangeSeq {
    seq: i64,
}

/// `POST /v1/conversations/{conv_id}/members`
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
pub async fn remove(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvMemberPath>,
) -> Result<Json<ChangeSeq>, ApiError> {
    let (conv_id, target) = path.into_inner()?.ids()?;
    let seq = service::remove_member(&state, &conv_id, &identity.user_id, &target).await?;
    Ok(Json(ChangeSeq { seq }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetRoleRequest {
    role: Role,
}

#[derive(Debug, Serialize)]
pub struct RoleSet {
    user_id: UserId,
    role: Role,
}

/// `PUT /v1/conversations/{conv_id}/members/{user_id}`: the owner makes a member an admin or
/// a plain member. Ownership only passes when the owner leaves, so `owner` is not a value here.
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
