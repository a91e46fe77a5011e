//! Accounts with passwords: login, logout, self-registration and the user's own password
//! change (issue 13). A login issues a device token exactly like the admin device endpoint,
//! so everything after it is the device authentication that already exists.
//!
//! Every password check passes the throttle first (`accounts::throttle`): a user id or client
//! address over its failures is answered 429 `RATE_LIMITED` before argon2 runs. Passwords and
//! tokens are never logged: the request span records only the method, the path and, once
//! authenticated, the user and device.

use std::net::IpAddr;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use parley_domain::{DeviceId, UserId};
use parley_wire::ErrorBody;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::accounts::Password;
use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::listener::ClientAddress;
use crate::path;
use crate::request::fields;
use crate::service;
use crate::state::AppState;

/// Prefix of the device ids a login or registration generates when the client names none.
pub const GENERATED_DEVICE_PREFIX: &str = "web-";

/// The client address of the request's connection, when the listener recorded one.
pub struct Peer(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ClientAddress>()
                .map(|address| address.0),
        ))
    }
}

/// The device id of the request, or a fresh random one.
fn device_or_generated(raw: Option<&str>) -> Result<DeviceId, ApiError> {
    match raw {
        Some(raw) => path::device_id(raw),
        None => path::device_id(&format!(
            "{GENERATED_DEVICE_PREFIX}{}",
            uuid::Uuid::new_v4().simple()
        )),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// 1 to 64 of `A-Z a-z 0-9 . _ - @`, not `.` or `..`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    user_id: String,
    /// 8 to 1024 bytes of UTF-8.
    #[schema(format = Password, min_length = 8, max_length = 1024)]
    password: String,
    /// The device to issue the token for; re-issuing revokes its previous token. Absent: a
    /// fresh id `web-<32 hex digits>`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    device_id: Option<String>,
}

/// A new device token and whom it belongs to; it is not logged.
#[derive(Serialize, ToSchema)]
pub struct Session {
    user_id: UserId,
    device_id: DeviceId,
    token: String,
}

/// Issues a token for the device and answers the session.
async fn session(
    state: &AppState,
    user_id: UserId,
    device_id: DeviceId,
) -> Result<Session, ApiError> {
    let token = service::issue_device_token(state, &user_id, &device_id).await?;
    Ok(Session {
        user_id,
        device_id,
        token,
    })
}

/// `POST /v1/auth/login`: a new device token for the user's password.
#[utoipa::path(
    post,
    path = "/v1/auth/login",
    tag = "accounts",
    request_body = LoginRequest,
    responses(
        (status = 200, description = "A fresh device token; a named device's previous token \
            is revoked and its connections closed.", body = Session),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, a password outside 8 to 1024 bytes.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: an unknown user, a wrong password or \
            a user without a password, one answer for all three.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: too many failed password checks for \
            this user or from this address; `Retry-After` says when to try again.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer, or the server \
            is too busy hashing passwords.", body = ErrorBody),
    )
)]
pub async fn login(
    State(state): State<AppState>,
    Peer(address): Peer,
    body: JsonBody,
) -> Result<Json<Session>, ApiError> {
    let req: LoginRequest = body.parse()?;
    let user_id = path::user_id(&req.user_id)?;
    let password = Password::parse("password", req.password)?;
    let device_id = device_or_generated(req.device_id.as_deref())?;
    if !checked_password(&state, &user_id, address, Some(&password)).await? {
        return Err(ApiError::BadCredentials);
    }
    Ok(Json(session(&state, user_id, device_id).await?))
}

/// Whether `password` is the user's, under the login throttle: a throttled user or address is
/// refused before argon2 runs, a wrong (or absent) password counts as a failure, and a right
/// one clears the user's count. An unknown user runs a verification too (`Hasher::verify`).
async fn checked_password(
    state: &AppState,
    user_id: &UserId,
    address: Option<IpAddr>,
    password: Option<&Password>,
) -> Result<bool, ApiError> {
    let throttle = state.login_throttle();
    throttle.check(user_id, address)?;
    let matches = match password {
        Some(password) => {
            let stored = state.store().password_hash(user_id).await?;
            state.hasher().verify(password, stored).await?
        }
        None => false,
    };
    if matches {
        throttle.succeed(user_id);
    } else {
        throttle.fail(user_id, address);
    }
    Ok(matches)
}

/// `POST /v1/auth/logout`: revokes the caller's own token and closes the device's connections.
#[utoipa::path(
    post,
    path = "/v1/auth/logout",
    tag = "accounts",
    security(("device_token" = [])),
    responses(
        (status = 204, description = "The token is revoked."),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn logout(
    State(state): State<AppState>,
    Device(identity): Device,
) -> Result<StatusCode, ApiError> {
    service::revoke_device(&state, &identity.user_id, &identity.device_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// 1 to 64 of `A-Z a-z 0-9 . _ - @`, not `.` or `..`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    user_id: String,
    /// 8 to 1024 bytes of UTF-8.
    #[schema(format = Password, min_length = 8, max_length = 1024)]
    password: String,
    /// Any text without U+0000.
    display_name: Option<String>,
    /// The device of the first token. Absent: a fresh id `web-<32 hex digits>`.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    device_id: Option<String>,
}

/// `POST /v1/auth/register`: anyone creates an account and gets its first device token, when
/// the server runs with `--open-registration`.
#[utoipa::path(
    post,
    path = "/v1/auth/register",
    tag = "accounts",
    request_body = RegisterRequest,
    responses(
        (status = 201, description = "The user was created with its first device token.",
            body = Session),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id or text, a password outside 8 to 1024 bytes.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: registration is closed (the server runs \
            without `--open-registration`); answered before the body is read.",
            body = ErrorBody),
        (status = 409, description = "`ALREADY_EXISTS`: the user id is taken.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer, or the server \
            is too busy hashing passwords.", body = ErrorBody),
    )
)]
pub async fn register(
    State(state): State<AppState>,
    body: Result<JsonBody, ApiError>,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    // A closed registration says so whatever was sent: it has nothing else to tell.
    if !state.config().open_registration {
        return Err(ApiError::Forbidden("registration is closed".into()));
    }
    let req: RegisterRequest = body?.parse()?;
    let user_id = path::user_id(&req.user_id)?;
    let password = Password::parse("password", req.password)?;
    if let Some(name) = &req.display_name {
        fields::text("display_name", name)?;
    }
    let device_id = device_or_generated(req.device_id.as_deref())?;
    let hash = state.hasher().hash(&password).await?;
    state
        .store()
        .create_user_with_password(&user_id, req.display_name.as_deref(), &hash)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(session(&state, user_id, device_id).await?),
    ))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordRequest {
    /// The password now in force.
    #[schema(format = Password)]
    current_password: String,
    /// The new password: 8 to 1024 bytes of UTF-8.
    #[schema(format = Password, min_length = 8, max_length = 1024)]
    password: String,
}

/// `PUT /v1/auth/password`: the caller changes their own password. Device tokens stay valid.
#[utoipa::path(
    put,
    path = "/v1/auth/password",
    tag = "accounts",
    security(("device_token" = [])),
    request_body = ChangePasswordRequest,
    responses(
        (status = 204, description = "The password is changed."),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, a password outside 8 to 1024 bytes.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: `current_password` is wrong (or the user \
            has no password); the token stays valid.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 429, description = "`RATE_LIMITED`: too many failed password checks for \
            this user or from this address; `Retry-After` says when to try again.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer, or the server \
            is too busy hashing passwords.", body = ErrorBody),
    )
)]
pub async fn change_password(
    State(state): State<AppState>,
    Device(identity): Device,
    Peer(address): Peer,
    body: JsonBody,
) -> Result<StatusCode, ApiError> {
    let req: ChangePasswordRequest = body.parse()?;
    let new = Password::parse("password", req.password)?;
    let user_id = identity.user_id;
    // A current password outside the rule cannot be the stored one, but it still counts as a
    // failed check, so the length rule gives a guesser no free answers.
    let current = Password::parse("current_password", req.current_password).ok();
    if !checked_password(&state, &user_id, address, current.as_ref()).await? {
        return Err(ApiError::Forbidden("current_password is wrong".into()));
    }
    let hash = state.hasher().hash(&new).await?;
    state.store().set_password_hash(&user_id, &hash).await?;
    Ok(StatusCode::NO_CONTENT)
}
