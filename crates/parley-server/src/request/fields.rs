//! One parse function per request field, shared by HTTP and WebSocket: each turns what a
//! transport carried into the domain's type, or into the 400 (or 413) to answer.
//!
//! Numbers follow one rule on both transports. A frame carries JSON integers; a path or query
//! carries text, which must be written as JSON writes an integer (`whole_number`: digits, no
//! sign, no leading zero), so `+3` and `03` are refused rather than read as 3. Then each field
//! has the same range whatever carried it: cursors and epochs zero or more (`non_negative`),
//! page sizes one or more, clamped to the maximum (`page_size`).

use parley_domain::ids::{storable_text, BodyError};
use parley_domain::limits::page_limit;
use parley_domain::media::ATTACHMENTS_PER_MESSAGE_MAX;
use parley_domain::relations::MENTIONS_LEN_MAX;
use parley_domain::{
    Body, ClientMsgId, ConvId, DeviceId, IdError, MediaId, ReactionKey, SendRelations, UserId,
};
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

/// A checked message body; an empty body or one with U+0000 is a bad request, an oversized one
/// 413.
pub fn body(raw: &str, body_bytes_max: usize) -> Result<Body, ApiError> {
    Body::parse(raw, body_bytes_max).map_err(|e| match e {
        BodyError::Empty | BodyError::Unstorable(_) => ApiError::bad_request(e.to_string()),
        BodyError::TooLarge { len, max } => ApiError::BodyTooLarge { len, max },
    })
}

/// The text of a message with attachments: as [`body`], but it may be empty.
pub fn caption(raw: &str, body_bytes_max: usize) -> Result<Body, ApiError> {
    Body::caption(raw, body_bytes_max).map_err(|e| match e {
        BodyError::Empty | BodyError::Unstorable(_) => ApiError::bad_request(e.to_string()),
        BodyError::TooLarge { len, max } => ApiError::BodyTooLarge { len, max },
    })
}

/// The media ids of a send: each a media id, each once, at most
/// `ATTACHMENTS_PER_MESSAGE_MAX`.
pub fn attachments(raw: &[String]) -> Result<Vec<MediaId>, ApiError> {
    if raw.len() > ATTACHMENTS_PER_MESSAGE_MAX {
        return Err(ApiError::bad_request(format!(
            "`attachments` names at most {ATTACHMENTS_PER_MESSAGE_MAX} media"
        )));
    }
    let mut out: Vec<MediaId> = Vec::with_capacity(raw.len());
    for id in raw {
        let Some(id) = MediaId::parse(id) else {
            return Err(ApiError::bad_request(
                "`attachments` holds a string that is not a media id",
            ));
        };
        if out.contains(&id) {
            return Err(ApiError::bad_request(
                "`attachments` names a media id twice",
            ));
        }
        out.push(id);
    }
    Ok(out)
}

/// A free text the store keeps as written, such as a title or a display name: anything the
/// stores can hold (no U+0000).
pub fn text(what: &'static str, raw: &str) -> Result<(), ApiError> {
    storable_text(what, raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// A whole number `name` written as text, the way JSON writes an integer: decimal digits
/// without a sign or a leading zero, at most `i64::MAX`.
pub fn whole_number(name: &str, raw: &str) -> Result<i64, ApiError> {
    let canonical = !raw.is_empty()
        && raw.bytes().all(|b| b.is_ascii_digit())
        && (raw == "0" || !raw.starts_with('0'));
    match raw.parse::<i64>() {
        Ok(n) if canonical => Ok(n),
        _ => Err(ApiError::bad_request(format!(
            "`{name}` must be a whole number of zero or more, written without a sign or \
             leading zeros"
        ))),
    }
}

/// A cursor or epoch named `name`, whichever transport carried it: zero or more.
pub fn non_negative(name: &str, n: i64) -> Result<i64, ApiError> {
    if n < 0 {
        return Err(ApiError::bad_request(format!(
            "`{name}` must be a whole number of zero or more"
        )));
    }
    Ok(n)
}

/// A cursor or epoch named `name`, written as text.
pub fn cursor(name: &str, raw: &str) -> Result<i64, ApiError> {
    non_negative(name, whole_number(name, raw)?)
}

/// A page size, whichever transport carried it: at least 1; sizes above the maximum are
/// clamped, not refused (SPEC §5); none takes the default.
pub fn page_size(limit: Option<i64>) -> Result<u32, ApiError> {
    match limit {
        Some(n) if n < 1 => Err(ApiError::bad_request(
            "`limit` must be a whole number of 1 or more",
        )),
        Some(n) => Ok(page_limit(Some(u32::try_from(n).unwrap_or(u32::MAX)))),
        None => Ok(page_limit(None)),
    }
}

/// A page size written as text.
pub fn limit(raw: &str) -> Result<u32, ApiError> {
    page_size(Some(whole_number("limit", raw)?))
}

/// The relations of a send (docs/RELATIONS.md): each seq 1 or more; each mentioned id a user
/// id, at most `MENTIONS_LEN_MAX` of them.
pub fn relations(
    reply_to: Option<i64>,
    thread_root: Option<i64>,
    mentions: Option<&[String]>,
) -> Result<SendRelations, ApiError> {
    let positive = |name: &str, seq: Option<i64>| match seq {
        Some(s) if s < 1 => Err(ApiError::bad_request(format!(
            "`{name}` must be the seq of a message, 1 or more"
        ))),
        other => Ok(other),
    };
    let mentions = mentions.unwrap_or_default();
    if mentions.len() > MENTIONS_LEN_MAX {
        return Err(ApiError::bad_request(format!(
            "`mentions` names at most {MENTIONS_LEN_MAX} users"
        )));
    }
    Ok(SendRelations {
        reply_to: positive("reply_to", reply_to)?,
        thread_root: positive("thread_root", thread_root)?,
        mentions: mentions
            .iter()
            .map(|m| user_id(m))
            .collect::<Result<_, _>>()?,
        attachments: Vec::new(),
    })
}

/// A reaction key: one emoji or a short token.
pub fn reaction_key(raw: &str) -> Result<ReactionKey, ApiError> {
    ReactionKey::parse(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The seq of an event, written as text in a path.
pub fn seq(raw: &str) -> Result<i64, ApiError> {
    whole_number("seq", raw)
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
    fn numbers_are_written_as_json_writes_integers() {
        assert_eq!(cursor("after", "0").ok(), Some(0));
        assert_eq!(seq("12").ok(), Some(12));
        assert_eq!(
            whole_number("after", "9223372036854775807").ok(),
            Some(i64::MAX)
        );
        for bad in [
            "",
            "-1",
            "+3",
            "03",
            "00",
            " 3",
            "3 ",
            "1e2",
            "3.0",
            "twelve",
            "9223372036854775808",
        ] {
            assert_eq!(
                code(whole_number("after", bad)),
                Some("BAD_REQUEST"),
                "{bad}"
            );
            assert_eq!(code(seq(bad)), Some("BAD_REQUEST"), "{bad}");
        }
    }

    #[test]
    fn ranges_are_the_same_on_both_transports() {
        assert_eq!(non_negative("after", 0).ok(), Some(0));
        assert_eq!(code(non_negative("after", -5)), Some("BAD_REQUEST"));
        assert_eq!(limit("10").ok(), Some(10));
        assert_eq!(page_size(Some(10)).ok(), Some(10));
        assert_eq!(limit("4294967296").ok(), Some(PAGE_LIMIT_MAX));
        assert_eq!(page_size(Some(4_294_967_296)).ok(), Some(PAGE_LIMIT_MAX));
        assert_eq!(page_size(None).ok(), Some(PAGE_LIMIT_DEFAULT));
        assert_eq!(code(limit("0")), Some("BAD_REQUEST"));
        assert_eq!(code(page_size(Some(0))), Some("BAD_REQUEST"));
        assert_eq!(code(page_size(Some(-1))), Some("BAD_REQUEST"));
    }

    #[test]
    fn zero_characters_are_bad_requests() {
        assert_eq!(code(body("a\0", 16)), Some("BAD_REQUEST"));
        assert_eq!(code(text("title", "a\0")), Some("BAD_REQUEST"));
        assert!(text("title", "a b").is_ok());
        assert_eq!(code(conv_id("..")), Some("BAD_REQUEST"));
        assert_eq!(code(user_id(".")), Some("BAD_REQUEST"));
    }
}
