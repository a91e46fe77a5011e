//! Offline notifications (docs/PUSH.md): a device's push registration, the VAPID key browsers
//! subscribe with, per-conversation levels and the user's privacy setting.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use parley_store::{NotifyLevel, PushTarget};
use parley_wire::{
    ErrorBody, NotificationLevel, NotificationSettings, PushRegistration, PushTargetInfo,
    VapidPublicKey,
};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::state::AppState;

/// The key is the deployment's, the same on every gateway.
#[utoipa::path(
    get,
    path = "/v1/push/vapid",
    tag = "notifications",
    security(("device_token" = [])),
    responses(
        (status = 200, description = "The VAPID public key (RFC 8292).", body = VapidPublicKey),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn vapid(
    State(state): State<AppState>,
    Device(_identity): Device,
) -> Result<Json<VapidPublicKey>, ApiError> {
    let key = state.push().vapid(&**state.store()).await?;
    Ok(Json(VapidPublicKey {
        public_key: key.public_key(),
    }))
}

fn target_info(target: &PushTarget) -> PushTargetInfo {
    let (app_id, pushkey) = match target {
        PushTarget::Gateway {
            app_id, pushkey, ..
        } => (Some(app_id.clone()), Some(pushkey.clone())),
        PushTarget::WebPush { .. } => (None, None),
    };
    PushTargetInfo {
        kind: target.kind().to_owned(),
        endpoint: target.endpoint().to_owned(),
        app_id,
        pushkey,
    }
}

/// The registration as a target, checked: a subscription's keys must be a real P-256 point and
/// a 16-byte secret, and its endpoint https (http only under `--push-allow-http`).
fn parse_registration(reg: PushRegistration, allow_http: bool) -> Result<PushTarget, ApiError> {
    let bad = |e: parley_push::PushError| ApiError::bad_request(e.to_string());
    match reg {
        PushRegistration {
            endpoint: Some(endpoint),
            keys: Some(keys),
            url: None,
            pushkey: None,
            app_id: None,
            ..
        } => {
            let sub = parley_push::WebPushSubscription {
                endpoint,
                p256dh: keys.p256dh,
                auth: keys.auth,
            };
            sub.validate(allow_http).map_err(bad)?;
            Ok(PushTarget::WebPush {
                endpoint: sub.endpoint,
                p256dh: sub.p256dh,
                auth: sub.auth,
            })
        }
        PushRegistration {
            endpoint: None,
            keys: None,
            url: Some(url),
            pushkey: Some(pushkey),
            app_id: Some(app_id),
            ..
        } => {
            let target = parley_push::GatewayTarget {
                url,
                pushkey,
                app_id,
            };
            target.validate(allow_http).map_err(bad)?;
            Ok(PushTarget::Gateway {
                url: target.url,
                pushkey: target.pushkey,
                app_id: target.app_id,
            })
        }
        _ => Err(ApiError::bad_request(
            "give either endpoint and keys (Web Push) or url, pushkey and app_id (push gateway)",
        )),
    }
}

/// Replaces any earlier registration of the device.
#[utoipa::path(
    put,
    path = "/v1/devices/me/push",
    tag = "notifications",
    security(("device_token" = [])),
    request_body = PushRegistration,
    responses(
        (status = 200, description = "The device's push target now.", body = PushTargetInfo),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown field, both or \
            neither kind of target, a bad URL, keys that are not a P-256 point and a 16-byte \
            secret.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn register(
    State(state): State<AppState>,
    Device(identity): Device,
    body: JsonBody,
) -> Result<Json<PushTargetInfo>, ApiError> {
    let reg: PushRegistration = body.parse()?;
    let target = parse_registration(reg, state.config().push.allow_http)?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let device = (&identity.user_id, &identity.device_id);
    state
        .store()
        .set_push_target(device, &target, now_ms)
        .await?;
    Ok(Json(target_info(&target)))
}

#[utoipa::path(
    get,
    path = "/v1/devices/me/push",
    tag = "notifications",
    security(("device_token" = [])),
    responses(
        (status = 200, description = "The device's push target.", body = PushTargetInfo),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: the device has no push target.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn get_registration(
    State(state): State<AppState>,
    Device(identity): Device,
) -> Result<Json<PushTargetInfo>, ApiError> {
    let device = (&identity.user_id, &identity.device_id);
    match state.store().push_target(device).await? {
        Some(target) => Ok(Json(target_info(&target))),
        None => Err(ApiError::NotFound("the device has no push target".into())),
    }
}

/// Deleting what is not there succeeds too: the device has no target afterwards either way.
#[utoipa::path(
    delete,
    path = "/v1/devices/me/push",
    tag = "notifications",
    security(("device_token" = [])),
    responses(
        (status = 204, description = "The device has no push target."),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn unregister(
    State(state): State<AppState>,
    Device(identity): Device,
) -> Result<StatusCode, ApiError> {
    let device = (&identity.user_id, &identity.device_id);
    state.store().delete_push_target(device).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller must be a member (ever) of the conversation, as for reading it.
async fn member_conv(
    state: &AppState,
    identity: &parley_store::DeviceIdentity,
    path: DeferredPath<ConvPath>,
) -> Result<parley_domain::ConvId, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    state
        .store()
        .get_conversation(&conv_id, &identity.user_id)
        .await?;
    Ok(conv_id)
}

#[utoipa::path(
    get,
    path = "/v1/conversations/{conv_id}/notifications",
    tag = "notifications",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    responses(
        (status = 200, description = "The caller's level of the conversation.",
            body = NotificationLevel),
        (status = 400, description = "`BAD_REQUEST`: an invalid id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: never a member, or no such conversation.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn get_level(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
) -> Result<Json<NotificationLevel>, ApiError> {
    let conv_id = member_conv(&state, &identity, path).await?;
    let level = state
        .store()
        .notify_level(&conv_id, &identity.user_id)
        .await?;
    Ok(Json(NotificationLevel {
        level: level.as_str().to_owned(),
    }))
}

#[utoipa::path(
    put,
    path = "/v1/conversations/{conv_id}/notifications",
    tag = "notifications",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    request_body = NotificationLevel,
    responses(
        (status = 200, description = "The caller's level of the conversation now.",
            body = NotificationLevel),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown field, an \
            invalid id, a level other than all, mentions and none.", body = ErrorBody),
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
pub async fn set_level(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<NotificationLevel>, ApiError> {
    let req: NotificationLevel = body.parse()?;
    let level = NotifyLevel::parse(&req.level)
        .ok_or_else(|| ApiError::bad_request("level must be all, mentions or none"))?;
    let conv_id = member_conv(&state, &identity, path).await?;
    state
        .store()
        .set_notify_level(&conv_id, &identity.user_id, level)
        .await?;
    Ok(Json(NotificationLevel {
        level: level.as_str().to_owned(),
    }))
}

#[utoipa::path(
    get,
    path = "/v1/me/notifications",
    tag = "notifications",
    security(("device_token" = [])),
    responses(
        (status = 200, description = "The caller's notification settings.",
            body = NotificationSettings),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn get_settings(
    State(state): State<AppState>,
    Device(identity): Device,
) -> Result<Json<NotificationSettings>, ApiError> {
    let privacy = state.store().push_privacy(&identity.user_id).await?;
    Ok(Json(NotificationSettings { privacy }))
}

#[utoipa::path(
    put,
    path = "/v1/me/notifications",
    tag = "notifications",
    security(("device_token" = [])),
    request_body = NotificationSettings,
    responses(
        (status = 200, description = "The caller's notification settings now.",
            body = NotificationSettings),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn set_settings(
    State(state): State<AppState>,
    Device(identity): Device,
    body: JsonBody,
) -> Result<Json<NotificationSettings>, ApiError> {
    let req: NotificationSettings = body.parse()?;
    state
        .store()
        .set_push_privacy(&identity.user_id, req.privacy)
        .await?;
    Ok(Json(req))
}
