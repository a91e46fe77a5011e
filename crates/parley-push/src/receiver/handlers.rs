//! The two endpoints of the test push service and the checks a real service makes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::{lock, Mode, Received, Shared, BODY_BYTES_MAX};
use crate::{ece, vapid};

/// `POST /push/{name}`: a Web Push message (RFC 8030 §5) for the subscription `name`.
pub(super) async fn web_push(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.attempts.fetch_add(1, Ordering::Relaxed);
    match shared.mode() {
        Mode::Down => return refuse(StatusCode::SERVICE_UNAVAILABLE, "push service down"),
        Mode::Gone => return refuse(StatusCode::GONE, "subscription expired"),
        Mode::SlowMs(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Mode::Up => {}
    }
    match check_and_decrypt(&shared, &name, &headers, &body) {
        Ok(received) => {
            shared.record(received);
            StatusCode::CREATED.into_response()
        }
        Err((status, why)) => refuse(status, why),
    }
}

/// Every check of a real push service, in the order one would answer them.
fn check_and_decrypt(
    shared: &Shared,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Received, (StatusCode, &'static str)> {
    let subscriptions = lock(&shared.subscriptions);
    let keys = subscriptions
        .get(name)
        .ok_or((StatusCode::NOT_FOUND, "no such subscription"))?;
    let encoding = text(headers, header::CONTENT_ENCODING.as_str());
    if !encoding.is_some_and(|e| e.eq_ignore_ascii_case("aes128gcm")) {
        return Err((StatusCode::BAD_REQUEST, "Content-Encoding is not aes128gcm"));
    }
    // RFC 8030 §5.2: a message without TTL is refused with 400.
    let ttl = text(headers, "ttl")
        .and_then(|t| t.trim().parse::<u32>().ok())
        .ok_or((StatusCode::BAD_REQUEST, "TTL missing or not a number"))?;
    // RFC 8292 §4.2: 401 when the authentication is absent, 403 when it does not verify.
    let authorization = text(headers, header::AUTHORIZATION.as_str())
        .ok_or((StatusCode::UNAUTHORIZED, "no VAPID authorization"))?;
    let vapid_key = vapid::verify_authorization(authorization, &keys.endpoint, now_unix_s())
        .map_err(|_| (StatusCode::FORBIDDEN, "VAPID authorization does not verify"))?;
    if body.len() > BODY_BYTES_MAX {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, "body over 4096 bytes"));
    }
    let plaintext = ece::decrypt(body, &keys.private, &keys.auth)
        .map_err(|_| (StatusCode::BAD_REQUEST, "body does not decrypt"))?;
    Ok(Received {
        name: name.to_owned(),
        payload: serde_json::from_slice(&plaintext).unwrap_or(Value::Null),
        raw: plaintext,
        ttl,
        urgency: text(headers, "urgency").map(str::to_owned),
        topic: text(headers, "topic").map(str::to_owned),
        vapid_key,
        at: Instant::now(),
    })
}

/// `POST /_matrix/push/v1/notify`: a push-gateway notification.
pub(super) async fn gateway(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    shared.attempts.fetch_add(1, Ordering::Relaxed);
    let mode = shared.mode();
    match mode {
        Mode::Down => return refuse(StatusCode::SERVICE_UNAVAILABLE, "push gateway down"),
        Mode::SlowMs(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Mode::Up | Mode::Gone => {}
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "body is not JSON");
    };
    let Some(pushkey) = payload
        .pointer("/notification/devices/0/pushkey")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return refuse(StatusCode::BAD_REQUEST, "notification has no device");
    };
    // A gateway answers 200 either way; an uninstalled app shows as its pushkey rejected.
    if mode == Mode::Gone {
        return axum::Json(json!({ "rejected": [pushkey] })).into_response();
    }
    shared.record(Received {
        name: pushkey,
        payload,
        raw: body.to_vec(),
        ttl: 0,
        urgency: None,
        topic: None,
        vapid_key: String::new(),
        at: Instant::now(),
    });
    axum::Json(json!({ "rejected": [] })).into_response()
}

/// A refusal with its reason as text, for whoever reads the test's logs.
fn refuse(status: StatusCode, why: &'static str) -> Response {
    (status, why).into_response()
}

/// A header's value when it is present and visible ASCII.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The wall clock in Unix seconds, what VAPID expiries are written in.
fn now_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
