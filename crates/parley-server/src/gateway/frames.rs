//! The frames of SPEC §7 as the server writes them, on the shapes of `parley_wire::frame`,
//! and the client frame as the server reads it.

use axum::extract::ws::{Message, Utf8Bytes};
use chrono::{DateTime, SecondsFormat, Utc};
use parley_domain::Event;
use parley_wire::ServerFrame;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// A frame from the client, its `req_id` kept as sent so the answer echoes it unchanged.
/// Unknown fields are refused like on HTTP.
pub type ClientFrame = parley_wire::ClientFrame<Value>;

/// A frame the server writes: `req_id`s as the client sent them, events as the store returned
/// them.
type Outgoing<'a> = ServerFrame<Value, &'a Event>;

/// The `req_id` of a frame that failed to parse, so the error still reaches the right request.
pub fn req_id_of(value: &Value) -> Value {
    value.get("req_id").cloned().unwrap_or(Value::Null)
}

fn encode(frame: &Outgoing<'_>) -> Result<Message, serde_json::Error> {
    Ok(Message::Text(Utf8Bytes::from(serde_json::to_string(
        frame,
    )?)))
}

fn text(frame: &Outgoing<'_>) -> Message {
    // Strings, integers and JSON values always serialise; an empty frame would be ignored.
    encode(frame).unwrap_or_else(|_| Message::Text(Utf8Bytes::default()))
}

/// `{type:"ack", req_id, …fields}`: `fields` is the JSON object of the HTTP answer.
pub fn ack(req_id: Value, fields: Value) -> Message {
    let fields = match fields {
        Value::Object(map) => map,
        other => {
            let mut map = Map::new();
            map.insert("result".into(), other);
            map
        }
    };
    text(&ServerFrame::Ack { req_id, fields })
}

/// `{type:"ack", req_id, …fields}` written straight from an answer whose JSON is an object:
/// the fields go to the frame's text as they are serialised, with no `Value` tree between
/// (an events page is hundreds of events). Fails for an answer that is not an object.
fn direct_ack<T: Serialize>(req_id: &Value, answer: &T) -> Result<Message, serde_json::Error> {
    #[derive(Serialize)]
    #[serde(tag = "type", rename = "ack")]
    struct Ack<'a, T> {
        req_id: &'a Value,
        #[serde(flatten)]
        fields: &'a T,
    }
    let text = serde_json::to_string(&Ack {
        req_id,
        fields: answer,
    })?;
    Ok(Message::Text(Utf8Bytes::from(text)))
}

/// The answer to a request: its `ack`, or its `error`. An answer that cannot be encoded is
/// `UNAVAILABLE`, like any failure before a write.
pub fn reply<T: Serialize>(req_id: Value, answer: Result<T, ApiError>) -> Message {
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return error(req_id, &e),
    };
    if let Ok(message) = direct_ack(&req_id, &answer) {
        return message;
    }
    // Not an object: `ack` puts it under `result`.
    match serde_json::to_value(&answer) {
        Ok(fields) => ack(req_id, fields),
        Err(e) => error(
            req_id,
            &ApiError::Unavailable {
                detail: format!("encoding failed: {e}"),
            },
        ),
    }
}

pub fn error(req_id: Value, err: &ApiError) -> Message {
    text(&ServerFrame::Error {
        req_id,
        code: err.code().to_owned(),
        message: err.to_string(),
        retry_after_ms: err.retry_after_ms(),
        epoch: err.conflict().map(|(epoch, _)| epoch),
        winning_seq: err.conflict().map(|(_, seq)| seq),
    })
}

pub fn pong(req_id: Value) -> Message {
    text(&ServerFrame::Pong { req_id })
}

pub fn read(conv_id: &str, read_seq: i64) -> Message {
    text(&ServerFrame::Read {
        conv_id: conv_id.to_owned(),
        read_seq,
    })
}

/// `{type:"hint", conv_id, head}`: events up to `head` exist in a pull conversation; the device
/// fetches them itself (SPEC §8).
pub fn hint(conv_id: &str, head: i64) -> Message {
    text(&ServerFrame::Hint {
        conv_id: conv_id.to_owned(),
        head,
    })
}

/// `{type:"typing", conv_id, user_id, expires_ms}`: `user_id` is typing (ephemeral, SPEC §7).
pub fn typing(conv_id: &str, user_id: &str, expires_ms: u64) -> Message {
    text(&ServerFrame::Typing {
        conv_id: conv_id.to_owned(),
        user_id: user_id.to_owned(),
        expires_ms,
    })
}

/// `{type:"presence", user_id, online, last_seen?}`, `last_seen` in RFC 3339 UTC with the
/// stores' microseconds, like every time of the API.
pub fn presence(user_id: &str, online: bool, last_seen: Option<DateTime<Utc>>) -> Message {
    text(&ServerFrame::Presence {
        user_id: user_id.to_owned(),
        online,
        last_seen: last_seen.map(rfc3339),
    })
}

/// A time as the API writes it: RFC 3339, UTC, six fractional digits.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub fn kicked() -> Message {
    text(&ServerFrame::Kicked)
}

/// `{type:"event", event}`, serialised once and shared by every recipient.
pub fn event(event: &Event) -> Option<Message> {
    encode(&ServerFrame::Event { event }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use parley_domain::{ConvId, EventKind, UserId};
    use parley_wire::Request;
    use serde_json::json;

    fn json_of(message: &Message) -> Value {
        let Message::Text(t) = message else {
            panic!("not text: {message:?}")
        };
        serde_json::from_str(t.as_str()).expect("json")
    }

    #[test]
    fn frames_parse_strictly() {
        let f: ClientFrame = serde_json::from_str(
            r#"{"type":"send","req_id":1,"conv_id":"c","client_msg_id":"m","body":"x"}"#,
        )
        .expect("send frame");
        assert!(matches!(f.request, Request::Send { .. }));
        let unknown =
            serde_json::from_str::<ClientFrame>(r#"{"type":"ping","req_id":1,"extra":true}"#);
        assert!(unknown.is_err(), "unknown field accepted");
        let kind = serde_json::from_str::<ClientFrame>(r#"{"type":"dance","req_id":1}"#);
        assert!(kind.is_err(), "unknown type accepted");
        let v: Value = serde_json::from_str(r#"{"type":"dance","req_id":"r7"}"#).expect("json");
        assert_eq!(req_id_of(&v), json!("r7"));
    }

    #[test]
    fn ack_carries_type_and_req_id() {
        let v = json_of(&ack(json!(5), json!({"seq": 3})));
        assert_eq!(v, json!({"type": "ack", "req_id": 5, "seq": 3}));
        let v = json_of(&reply(json!("r"), Ok(parley_wire::ReadAck { read_seq: 4 })));
        assert_eq!(v, json!({"type": "ack", "req_id": "r", "read_seq": 4}));
        let v = json_of(&reply::<()>(json!("r"), Err(ApiError::NotMember)));
        assert_eq!(
            v,
            json!({"type": "error", "req_id": "r", "code": "NOT_MEMBER",
                   "message": "not a member of this conversation"})
        );
    }

    /// A page written straight into its ack is the JSON the `Value` path gave, and an answer
    /// that is not an object still goes under `result`.
    #[test]
    fn acks_written_directly_are_the_json_of_the_value_path() {
        let at = Utc
            .with_ymd_and_hms(2024, 1, 2, 3, 4, 5)
            .single()
            .expect("a time");
        let join = Event::membership(
            &ConvId::from_trusted("c-1".into()),
            1,
            EventKind::Join,
            &UserId::from_trusted("ana".into()),
            &UserId::from_trusted("ana".into()),
            at,
        );
        let page = parley_wire::EventsPage {
            events: vec![join],
            head: 9,
            min_seq: 1,
            epoch: 0,
            through_seq: 1,
            truncated: false,
            next_before: None,
        };
        let direct = json_of(&reply(json!({"k": [1]}), Ok(page.clone())));
        let via_value = json_of(&ack(
            json!({"k": [1]}),
            serde_json::to_value(&page).expect("a page encodes"),
        ));
        assert_eq!(direct, via_value);
        assert_eq!(direct["events"][0]["subject_user"], json!("ana"));
        assert_eq!(direct["next_before"], Value::Null);
        let scalar = json_of(&reply(json!(2), Ok(7)));
        assert_eq!(scalar, json!({"type": "ack", "req_id": 2, "result": 7}));
    }

    #[test]
    fn pushes_have_the_fields_of_the_spec() {
        assert_eq!(
            json_of(&read("c", 8)),
            json!({"type": "read", "conv_id": "c", "read_seq": 8})
        );
        assert_eq!(
            json_of(&hint("g", 120)),
            json!({"type": "hint", "conv_id": "g", "head": 120})
        );
        assert_eq!(json_of(&kicked()), json!({"type": "kicked"}));
        assert_eq!(
            json_of(&pong(Value::Null)),
            json!({"type": "pong", "req_id": null})
        );
        let bad = error(Value::Null, &ApiError::bad_request("malformed JSON"));
        assert_eq!(
            json_of(&bad),
            json!({"type": "error", "req_id": null, "code": "BAD_REQUEST",
                   "message": "malformed JSON"})
        );
    }

    /// The server writes its domain event; the SDK reads the wire's. Both must be the same JSON.
    #[test]
    fn pushed_events_read_back_as_the_wire_event_unchanged() {
        let at = Utc
            .with_ymd_and_hms(2024, 1, 2, 3, 4, 5)
            .single()
            .expect("a time");
        let msg = Event {
            conv_id: ConvId::from_trusted("c-1".into()),
            seq: 3,
            kind: EventKind::Msg,
            created_at: at,
            message_id: Some(uuid::Uuid::nil()),
            sender_user: Some(UserId::from_trusted("ana".into())),
            sender_device: Some("d1".into()),
            client_msg_id: Some("m-1".into()),
            body: Some("hi".into()),
            recalled: false,
            subject_user: None,
            target_seq: None,
            rel: None,
            mls: None,
        };
        let recalled = Event {
            body: None,
            recalled: true,
            ..msg.clone()
        };
        let join = Event {
            seq: 4,
            kind: EventKind::Join,
            message_id: None,
            sender_user: None,
            sender_device: None,
            client_msg_id: None,
            body: None,
            subject_user: Some(UserId::from_trusted("ben".into())),
            ..msg.clone()
        };
        for event in [msg, recalled, join] {
            let written = json_of(&super::event(&event).expect("encodes"));
            let read: parley_wire::ServerFrame =
                serde_json::from_value(written.clone()).expect("the SDK reads it");
            assert_eq!(serde_json::to_value(&read).expect("encodes"), written);
        }
    }
}
