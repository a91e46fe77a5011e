//! One parse function per request field, shared by HTTP and WebSocket: each turns what a
//! transport carried into the domain's type, or into the 400 (or 413) to answer.
//!
//! Numbers differ by transport so far: a query string carries text, checked here by `cursor`
//! and `limit`; a frame carries JSON numbers, whose `after` and `epoch` are taken as sent and
//! whose `limit` only refuses 0 (`frame_limit`).

use parley_domain::ids::BodyError;
use parley_domain::limits::page_limit;
use parley_domain::{Body, ClientMsgId, ConvId, DeviceId, IdError, UserId};
use serde_json::Value;

use crate::error::ApiError;

fn bad_id(e: IdError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

pub fn conv_id(raw: &str) -> Result<ConvId, ApiError> {
    ConvId::parse(raw).map_err(bad_id)
}

/// A group id a client chose: the direct prefix is reserved.
pub fn group_conv_id(raw: &str) -> Result<ConvId, ApiError> {
    ConvId::parse_group(raw).map_err(bad_id)
}

pub fn user_id(raw: &str) -> Result<UserId, ApiError> {
    UserId::parse(raw).map_err(bad_id)
}

pub fn device_id(raw: &str) -> Result<DeviceId, ApiError> {
    DeviceId::parse(raw).map_err(bad_id)
}

pub fn client_msg_id(raw: &str) -> Result<ClientMsgId, ApiError> {
    ClientMsgId::parse(raw).map_err(bad_id)
}

/// An oversized message body answers 413 even when the request has other faults, because 413
/// outranks 400 (SPEC §6). So the loose JSON is checked before the strict parse.
pub fn body_size(request: &Value, body_bytes_max: usize) -> Result<(), ApiError> {
    match request.get("body") {
        Some(Value::String(s)) if s.len() > body_bytes_max => Err(ApiError::BodyTooLarge {
            len: s.len(),
            max: body_bytes_max,
        }),
        _ => Ok(()),
    }
}

/// A checked message body; an empty body is a bad request, an oversized one 413.
pub fn body(raw: &str, body_bytes_max: usize) -> Result<Body, ApiError> {
    Body::parse(raw, body_bytes_max).map_err(|e| match e {
        BodyError::Empty => ApiError::bad_request(e.to_string()),
        BodyError::TooLarge { len, max } => ApiError::BodyTooLarge { len, max },
    })
}

/// A cursor or epoch named `name`, written as text: a whole number, zero or more.
pub fn cursor(name: &str, raw: &str) -> Result<i64, ApiError> {
    match raw.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(ApiError::bad_request(format!(
            "`{name}` must be a whole number of zero or more"
        ))),
    }
}

/// A page size written as text: at least 1; sizes above the maximum are clamped, not refused
/// (SPEC §5).
pub fn limit(raw: &str) -> Result<u32, ApiError> {
    match raw.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(page_limit(Some(u32::try_from(n).unwrap_or(u32::MAX)))),
        _ => Err(ApiError::bad_request(
            "`limit` must be a whole number of 1 or more",
        )),
    }
}

/// The page size of a `sync` frame, already a JSON number of `u32`: 0 is refused, sizes above
/// the maximum are clamped, none takes the default.
pub fn frame_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    if limit == Some(0) {
        return Err(ApiError::bad_request("limit must be at least 1"));
    }
    Ok(page_limit(limit))
}

/// The seq of an event, written as text in a path.
pub fn seq(raw: &str) -> Result<i64, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::bad_request("seq must be an integer"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_domain::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
    use serde_json::json;

    fn code<T>(r: Result<T, ApiError>) -> Option<&'static str> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn oversized_body_outranks_other_faults() {
        // The second seed's teaching limit: "你好呀" is 9 bytes against a limit of 6.
        let req = json!({"body": "你好呀", "sender": "mallory"});
        assert_eq!(code(body_size(&req, 6)), Some("BODY_TOO_LARGE"));
        assert!(body_size(&json!({"body": "你好"}), 6).is_ok());
        assert!(body_size(&json!({"body": 12}), 6).is_ok());
        assert!(body_size(&json!([1, 2]), 6).is_ok());
    }

    #[test]
    fn empty_bodies_are_bad_requests() {
        assert_eq!(code(body("", 6)), Some("BAD_REQUEST"));
        assert_eq!(code(body("你好呀", 6)), Some("BODY_TOO_LARGE"));
        assert!(body("你好", 6).is_ok());
    }

    #[test]
    fn ids_are_bad_requests_when_malformed() {
        assert!(conv_id("dm:ana:ben").is_ok());
        assert_eq!(code(conv_id("a b")), Some("BAD_REQUEST"));
        assert_eq!(code(group_conv_id("dm:ana:ben")), Some("BAD_REQUEST"));
        assert_eq!(code(user_id("ana:x")), Some("BAD_REQUEST"));
        assert_eq!(code(device_id("")), Some("BAD_REQUEST"));
        assert_eq!(code(client_msg_id("")), Some("BAD_REQUEST"));
        assert_eq!(code(client_msg_id("a\u{7}")), Some("BAD_REQUEST"));
    }

    #[test]
    fn numbers_follow_the_rules_of_their_transport() {
        assert_eq!(cursor("after", "0").ok(), Some(0));
        assert_eq!(code(cursor("after", "-1")), Some("BAD_REQUEST"));
        assert_eq!(code(cursor("after", "")), Some("BAD_REQUEST"));
        assert_eq!(limit("10").ok(), Some(10));
        assert_eq!(limit("4294967296").ok(), Some(PAGE_LIMIT_MAX));
        assert_eq!(code(limit("0")), Some("BAD_REQUEST"));
        assert_eq!(frame_limit(None).ok(), Some(PAGE_LIMIT_DEFAULT));
        assert_eq!(frame_limit(Some(u32::MAX)).ok(), Some(PAGE_LIMIT_MAX));
        assert_eq!(code(frame_limit(Some(0))), Some("BAD_REQUEST"));
        assert_eq!(seq("12").ok(), Some(12));
        assert_eq!(code(seq("twelve")), Some("BAD_REQUEST"));
    }
}
