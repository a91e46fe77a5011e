//! Operator endpoints: users and device tokens. They take the admin token, never a device's.
//! Each call spends a token of the admin endpoints' rate limit once it parsed, like a send.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use parley_domain::{DeviceId, UserId};
use parley_wire::ErrorBody;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::accounts::Password;
use crate::auth::Admin;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{self, DeferredPath, UserDevicePath, UserPath};
use crate::rate_limit::{LimitKind, ADMIN_KEY};
use crate::request::fields;
use crate::service;
use crate::state::AppState;

/// Takes a token of the admin endpoints' bucket, or answers `RATE_LIMITED`.
fn admin_budget(state: &AppState) -> Result<(), ApiError> {
    state.rate_limiter().check(LimitKind::Admin, ADMIN_KEY)
}

/// Not `Debug`: it may hold a password.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    /// 1 to 64 of `A-Z a-z 0-9 . _ - @`, not `.` or `..`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    user_id: String,
    /// Any text without U+0000.
    display_name: Option<String>,
    /// The user's password, 8 to 1024 bytes of UTF-8, for `POST /v1/auth/login`. Absent: the
    /// user has none and gets device tokens only from this API.
    #[schema(format = Password, min_length = 8, max_length = 1024)]
    password: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserCreated {
    user_id: UserId,
    display_name: Option<String>,
}

/// `POST /v1/admin/users`: 201, or 409 `ALREADY_EXISTS` for a taken id.
#[utoipa::path(
    post,
    path = "/v1/admin/users",
    tag = "admin",
    security(("admin_token" = [])),
    request_body = CreateUserRequest,
    responses(
        (status = 201, description = "The user was created.", body = UserCreated),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id or text, a password outside 8 to 1024 bytes.",
            body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a device token.", body = ErrorBody),
        (status = 409, description = "`ALREADY_EXISTS`: the id is taken.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the admin endpoints' rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer, or the server \
            is too busy hashing passwords.", body = ErrorBody),
    )
)]
pub async fn create_user(
    State(state): State<AppState>,
    _: Admin,
    body: JsonBody,
) -> Result<(StatusCode, Json<UserCreated>), ApiError> {
    let req: CreateUserRequest = body.parse()?;
    let user_id = path::user_id(&req.user_id)?;
    if let Some(name) = &req.display_name {
        fields::text("display_name", name)?;
    }
    let password = req
        .password
        .map(|p| Password::parse("password", p))
        .transpose()?;
    admin_budget(&state)?;
    let display_name = req.display_name.as_deref();
    let user = match password {
        Some(password) => {
            let hash = state.hasher().hash(&password).await?;
            state
                .store()
                .create_user_with_password(&user_id, display_name, &hash)
                .await?
        }
        None => state.store().create_user(&user_id, display_name).await?,
    };
    Ok((
        StatusCode::CREATED,
        Json(UserCreated {
            user_id: user.user_id,
            display_name: user.display_name,
        }),
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueDeviceRequest {
    /// 1 to 64 of `A-Z a-z 0-9 . _ - @`, not `.` or `..`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    device_id: String,
}

/// The only answer that ever carries a device token; it is not logged.
#[derive(Serialize, ToSchema)]
pub struct DeviceIssued {
    user_id: UserId,
    device_id: DeviceId,
    token: String,
}

/// `POST /v1/admin/users/{user_id}/devices`: a fresh token for the device. Only its hash is
/// stored, and storing it replaces (so revokes) the device's previous token.
#[utoipa::path(
    post,
    path = "/v1/admin/users/{user_id}/devices",
    tag = "admin",
    security(("admin_token" = [])),
    params(("user_id" = String, Path, pattern = "^[A-Za-z0-9._@-]{1,64}$", description = "The user that owns the device.")),
    request_body = IssueDeviceRequest,
    responses(
        (status = 201, description = "A fresh token; the device's previous one is revoked.",
            body = DeviceIssued),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a device token.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such user.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the admin endpoints' rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn issue_device(
    State(state): State<AppState>,
    _: Admin,
    path: DeferredPath<UserPath>,
    body: JsonBody,
) -> Result<(StatusCode, Json<DeviceIssued>), ApiError> {
    let user_id = path.into_inner()?.user_id()?;
    let req: IssueDeviceRequest = body.parse()?;
    let device_id = path::device_id(&req.device_id)?;
    admin_budget(&state)?;
    // The old token stops working; so do its open connections, on every gateway.
    let token = service::issue_device_token(&state, &user_id, &device_id).await?;
    Ok((
        StatusCode::CREATED,
        Json(DeviceIssued {
            user_id,
            device_id,
            token,
        }),
    ))
}

/// `DELETE /v1/admin/users/{user_id}/devices/{device_id}`: the token stops working on the next
/// request, because device authentication is never cached, and its open connections close.
#[utoipa::path(
    delete,
    path = "/v1/admin/users/{user_id}/devices/{device_id}",
    tag = "admin",
    security(("admin_token" = [])),
    params(
        ("user_id" = String, Path, pattern = "^[A-Za-z0-9._@-]{1,64}$", description = "The user that owns the device."),
        ("device_id" = String, Path, pattern = "^[A-Za-z0-9._@-]{1,64}$", description = "The device whose token is revoked."),
    ),
    responses(
        (status = 204, description = "The token is revoked."),
        (status = 400, description = "`BAD_REQUEST`: an invalid id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a device token.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such user or device.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the admin endpoints' rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn revoke_device(
    State(state): State<AppState>,
    _: Admin,
    path: DeferredPath<UserDevicePath>,
) -> Result<StatusCode, ApiError> {
    let (user_id, device_id) = path.into_inner()?.ids()?;
    admin_budget(&state)?;
    service::revoke_device(&state, &user_id, &device_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Not `Debug`: it holds a password.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPasswordRequest {
    /// The new password, 8 to 1024 bytes of UTF-8.
    #[schema(format = Password, min_length = 8, max_length = 1024)]
    password: String,
}

/// `PUT /v1/admin/users/{user_id}/password`: sets or replaces the user's password. The user's
/// device tokens stay valid.
#[utoipa::path(
    put,
    path = "/v1/admin/users/{user_id}/password",
    tag = "admin",
    security(("admin_token" = [])),
    params(("user_id" = String, Path, pattern = "^[A-Za-z0-9._@-]{1,64}$", description = "The user whose password is set.")),
    request_body = SetPasswordRequest,
    responses(
        (status = 204, description = "The password is set."),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, a password outside 8 to 1024 bytes.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: no valid token.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: a device token.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such user.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: over the admin endpoints' rate.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer, or the server \
            is too busy hashing passwords.", body = ErrorBody),
    )
)]
pub async fn set_password(
    State(state): State<AppState>,
    _: Admin,
    path: DeferredPath<UserPath>,
    body: JsonBody,
) -> Result<StatusCode, ApiError> {
    let user_id = path.into_inner()?.user_id()?;
    let req: SetPasswordRequest = body.parse()?;
    let password = Password::parse("password", req.password)?;
    admin_budget(&state)?;
    let hash = state.hasher().hash(&password).await?;
    state.store().set_password_hash(&user_id, &hash).await?;
    Ok(StatusCode::NO_CONTENT)
}
