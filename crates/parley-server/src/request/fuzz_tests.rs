//! Fuzz targets for the request layer, as property tests on stable Rust: WebSocket frames
//! (any text, and frames made near the rules' edges) and the numbers of paths and queries.
//! No input panics a parser; a frame is decided as the same fields are over HTTP; a number is
//! accepted exactly when it is written as JSON writes a whole number. Cases per target come
//! from `PROPTEST_CASES` (the test script sets it; `scripts/fuzz.sh` runs longer).

use proptest::prelude::*;
use serde_json::{json, Value};

use super::fields;
use super::frame::{parse, FrameRequest};
use super::SendMessage;
use crate::error::ApiError;

/// Body limit of the fuzzed frames: small, so generated bodies fall on both sides of it.
const BODY_BYTES_MAX: usize = 16;

/// Ids and texts near the rules' edges.
fn near_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._:-]{0,20}",
        "\\.{1,2}",
        "[a-z\\x00-\\x1f\\u{e9}\\u{1f600}/ ]{0,20}",
        any::<String>(),
    ]
}

/// JSON values a field might be given instead of the expected one.
fn any_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        near_text().prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// A frame of any documented type with fields that are right, wrong or missing, and
/// sometimes one more.
fn near_frame() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        Just("send"),
        Just("read"),
        Just("sync"),
        Just("ping"),
        Just("other")
    ];
    let field = prop_oneof![
        Just("conv_id"),
        Just("client_msg_id"),
        Just("body"),
        Just("seq"),
        Just("after"),
        Just("limit"),
        Just("epoch"),
        Just("req_id"),
        Just("sender"),
    ];
    (kind, prop::collection::vec((field, any_json()), 0..6)).prop_map(|(kind, fields)| {
        let mut frame = serde_json::Map::new();
        frame.insert("type".into(), kind.into());
        for (name, value) in fields {
            frame.insert(name.into(), value);
        }
        Value::Object(frame).to_string()
    })
}

/// The decision of the HTTP path for the same send fields: the body's size on the loose JSON
/// first, then the conversation id, then the fields.
fn http_send(conv_id: &str, client_msg_id: &str, body: &str) -> Result<SendMessage, ApiError> {
    fields::body_size(&json!({ "body": body }), BODY_BYTES_MAX)?;
    SendMessage::new(
        fields::conv_id(conv_id)?,
        client_msg_id,
        body,
        BODY_BYTES_MAX,
    )
}

fn code<T>(decided: &Result<T, ApiError>) -> Option<&'static str> {
    decided.as_ref().err().map(ApiError::code)
}

proptest! {
    #[test]
    fn fuzz_frames_of_any_text(text in any::<String>()) {
        let (_, decided) = parse(&text, BODY_BYTES_MAX);
        // Text that is not a JSON object with a known type is never a request.
        if let Ok(request) = decided {
            let value: Value = serde_json::from_str(&text).expect("an accepted frame is JSON");
            prop_assert!(value.is_object(), "{request:?}");
        }
    }

    #[test]
    fn fuzz_frames_near_the_rules(text in near_frame()) {
        let (req_id, decided) = parse(&text, BODY_BYTES_MAX);
        let value: Value = serde_json::from_str(&text).expect("generated JSON");
        // The request id is echoed as sent, whatever else is wrong with the frame.
        prop_assert_eq!(&req_id, value.get("req_id").unwrap_or(&Value::Null));
        match decided {
            Ok(FrameRequest::Send(send)) => {
                prop_assert!(send.body.as_str().len() <= BODY_BYTES_MAX);
                prop_assert!(!send.body.as_str().contains('\0'));
            }
            Ok(FrameRequest::Sync(sync)) => {
                prop_assert!(sync.after >= 0 && sync.epoch.is_none_or(|e| e >= 0));
                prop_assert!(sync.limit >= 1);
            }
            Ok(FrameRequest::Edit(edit)) => {
                prop_assert!(edit.body.as_str().len() <= BODY_BYTES_MAX);
                prop_assert!(edit.target_seq >= 1);
            }
            Ok(FrameRequest::React(react)) => prop_assert!(react.target_seq >= 1),
            Ok(FrameRequest::Search(search)) => {
                prop_assert!(search.limit >= 1 && search.query.term_count() <= 16);
            }
            Ok(FrameRequest::Mls(post)) => prop_assert!(post.post.epoch >= 0),
            Ok(FrameRequest::Read(_) | FrameRequest::Ping | FrameRequest::Typing(_)) => {}
            Err(e) => prop_assert!(
                matches!(e.status().as_u16(), 400 | 413),
                "a frame refused with {}", e.status()
            ),
        }
    }

    #[test]
    fn fuzz_sends_are_decided_alike_on_both_transports(
        conv_id in near_text(),
        client_msg_id in near_text(),
        body in near_text(),
    ) {
        let frame = json!({
            "type": "send",
            "req_id": "r",
            "conv_id": conv_id,
            "client_msg_id": client_msg_id,
            "body": body,
        });
        let (_, over_ws) = parse(&frame.to_string(), BODY_BYTES_MAX);
        let over_http = http_send(&conv_id, &client_msg_id, &body);
        prop_assert_eq!(code(&over_ws), code(&over_http));
        if let (Ok(FrameRequest::Send(ws)), Ok(http)) = (over_ws, over_http) {
            prop_assert_eq!(ws, http);
        }
    }

    #[test]
    fn fuzz_sync_cursors_are_decided_alike_on_both_transports(after in any::<i64>(), epoch in any::<i64>()) {
        let frame = json!({ "type": "sync", "req_id": "r", "conv_id": "c", "after": after, "epoch": epoch });
        let (_, over_ws) = parse(&frame.to_string(), BODY_BYTES_MAX);
        let over_http = fields::cursor("after", &after.to_string())
            .and_then(|_| fields::cursor("epoch", &epoch.to_string()));
        prop_assert_eq!(over_ws.is_ok(), over_http.is_ok());
    }

    #[test]
    fn fuzz_numbers_in_paths_and_queries(raw in prop_oneof![
        "[-+0-9 ]{0,22}",
        any::<i64>().prop_map(|n| n.to_string()),
        any::<String>(),
    ]) {
        let canonical = raw
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0 && n.to_string() == raw);
        prop_assert_eq!(fields::seq(&raw).ok(), canonical);
        prop_assert_eq!(fields::cursor("after", &raw).ok(), canonical);
        match fields::limit(&raw) {
            Ok(limit) => prop_assert!(canonical.is_some_and(|n| n >= 1) && limit >= 1),
            Err(_) => prop_assert!(canonical.is_none_or(|n| n < 1)),
        }
    }
}
