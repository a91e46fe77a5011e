//! Who is calling: a device by its bearer token, or the operator by the admin token.
//!
//! Authentication runs before anything else reads the request, so a caller without a valid token
//! learns nothing else about it (401 comes first in SPEC §6's precedence). Device tokens are
//! checked against the store on every request, without caching, so a revoked token stops
//! working on the very next request.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use parley_store::token::hash_token;
use parley_store::DeviceIdentity;

use crate::error::ApiError;
use crate::state::AppState;

/// Scheme of the `Authorization` header; compared without regard to case (RFC 9110).
const BEARER_SCHEME: &str = "Bearer";

/// The authenticated device of a request.
#[derive(Debug, Clone)]
pub struct Device(pub DeviceIdentity);

/// Proof that a request carried the admin token.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

/// The token of an `Authorization: Bearer <token>` header; `None` when the header is missing,
/// not text, of another scheme or empty.
pub fn bearer_token(parts: &Parts) -> Option<&str> {
    bearer_from_headers(&parts.headers)
}

/// The bearer token of a header map; see `bearer_token`.
pub fn bearer_from_headers(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case(BEARER_SCHEME) {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// The WebSocket subprotocol a browser offers, and the server selects, for Parley's frames.
pub const WS_SUBPROTOCOL: &str = "parley";
/// Prefix of the subprotocol entry that carries a browser's device token: a page cannot set
/// `Authorization` on a WebSocket, and a token in the URL would reach access logs and history,
/// so it offers `["parley", "parley.token.<token>"]` instead. The server never echoes it.
pub const WS_TOKEN_SUBPROTOCOL_PREFIX: &str = "parley.token.";

/// The token of a `parley.token.<token>` entry of `Sec-WebSocket-Protocol` (a comma-separated
/// list, possibly over several header lines); `None` when there is none or it is empty.
pub fn subprotocol_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.trim().strip_prefix(WS_TOKEN_SUBPROTOCOL_PREFIX))
        .find(|t| !t.is_empty())
}

/// Looks a device token up in the store. Unknown and revoked tokens are one answer.
pub async fn authenticate_device(state: &AppState, token: &str) -> Result<Device, ApiError> {
    match state.store().authenticate(&hash_token(token)).await? {
        Some(identity) => Ok(Device(identity)),
        None => Err(ApiError::Unauthenticated),
    }
}

/// Compares two byte strings in time that depends only on their lengths. Callers pass digests
/// of equal length, so the time reveals nothing about the secret.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn is_admin_token(state: &AppState, token: &str) -> bool {
    state
        .admin_token_hash()
        .is_some_and(|expected| constant_time_eq(hash_token(token).as_bytes(), expected.as_bytes()))
}

impl FromRequestParts<AppState> for Device {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer_token(parts).ok_or(ApiError::Unauthenticated)?;
        let device = authenticate_device(state, token).await?;
        // The request's span (`app`) names who made it from here on; never the token.
        let span = tracing::Span::current();
        span.record("user", tracing::field::display(&device.0.user_id));
        span.record("device", tracing::field::display(&device.0.device_id));
        Ok(device)
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    /// The admin token passes. A live device token is known but not allowed here (403); any
    /// other token is unknown (401).
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer_token(parts).ok_or(ApiError::Unauthenticated)?;
        if is_admin_token(state, token) {
            return Ok(Admin);
        }
        match authenticate_device(state, token).await {
            Ok(_) => Err(ApiError::Forbidden(
                "device tokens may not use admin endpoints".into(),
            )),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts_with(header: Option<&str>) -> Parts {
        let mut builder = Request::builder().uri("/");
        if let Some(h) = header {
            builder = builder.header(AUTHORIZATION, h);
        }
        builder.body(()).expect("a valid request").into_parts().0
    }

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        assert_eq!(
            bearer_token(&parts_with(Some("Bearer pd_abc"))),
            Some("pd_abc")
        );
        assert_eq!(
            bearer_token(&parts_with(Some("bearer pd_abc"))),
            Some("pd_abc")
        );
        assert_eq!(bearer_token(&parts_with(Some("Basic pd_abc"))), None);
        assert_eq!(bearer_token(&parts_with(Some("Bearer "))), None);
        assert_eq!(bearer_token(&parts_with(Some("pd_abc"))), None);
        assert_eq!(bearer_token(&parts_with(None)), None);
    }

    #[test]
    fn subprotocol_tokens_are_read_from_the_offer() {
        let headers = |values: &[&str]| {
            let mut h = axum::http::HeaderMap::new();
            for v in values {
                h.append(
                    axum::http::header::SEC_WEBSOCKET_PROTOCOL,
                    v.parse().expect("a header value"),
                );
            }
            h
        };
        let h = headers(&["parley, parley.token.pd_abc"]);
        assert_eq!(subprotocol_token(&h), Some("pd_abc"));
        let h = headers(&["parley", "parley.token.pd_x"]);
        assert_eq!(subprotocol_token(&h), Some("pd_x"));
        assert_eq!(subprotocol_token(&headers(&["parley"])), None);
        assert_eq!(subprotocol_token(&headers(&["parley.token."])), None);
        assert_eq!(subprotocol_token(&headers(&["token.pd_abc"])), None);
        assert_eq!(subprotocol_token(&headers(&[])), None);
    }

    #[test]
    fn constant_time_eq_compares_contents_and_lengths() {
        assert!(constant_time_eq(b"abcd", b"abcd"));
        assert!(!constant_time_eq(b"abcd", b"abce"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
