//! WebSocket frames of SPEC §7: what clients send, and the frames the server builds.

use axum::extract::ws::{Message, Utf8Bytes};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;

/// A frame from the client. Unknown fields are refused like on HTTP.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientFrame {
    Send {
        req_id: Value,
        conv_id: String,
        client_msg_id: String,
        body: String,
    },
    Read {
        req_id: Value,
        conv_id: String,
        seq: i64,
    },
    Sync {
        req_id: Value,
        conv_id: String,
        after: i64,
        limit: Option<u32>,
        epoch: Option<i64>,
    },
    Ping {
        req_id: Value,
    },
}

/// The `req_id` of a frame that failed to parse, so the error still reaches the right request.
pub fn req_id_of(value: &Value) -> Value {
    value.get("req_id").cloned().unwrap_or(Value::Null)
}

fn text(value: Value) -> Message {
    Message::Text(Utf8Bytes::from(value.to_string()))
}

/// `{type:"ack", req_id, …fields}`: `fields` is the JSON object of the HTTP answer.
pub fn ack(req_id: Value, fields: Value) -> Message {
    let mut frame = match fields {
        Value::Object(map) => map,
        other => {
            let mut map = serde_json::Map::new();
            map.insert("result".into(), other);
            map
        }
    };
    frame.insert("type".into(), json!("ack"));
    frame.insert("req_id".into(), req_id);
    text(Value::Object(frame))
}

pub fn error(req_id: Value, err: &ApiError) -> Message {
    text(
        json!({ "type": "error", "req_id": req_id, "code": err.code(), "message": err.to_string() }),
    )
}

pub fn pong(req_id: Value) -> Message {
    text(json!({ "type": "pong", "req_id": req_id }))
}

pub fn read(conv_id: &str, read_seq: i64) -> Message {
    text(json!({ "type": "read", "conv_id": conv_id, "read_seq": read_seq }))
}

/// `{type:"hint", conv_id, head}`: events up to `head` exist in a pull conversation; the device
/// fetches them itself (SPEC §8).
pub fn hint(conv_id: &str, head: i64) -> Message {
    text(json!({ "type": "hint", "conv_id": conv_id, "head": head }))
}

pub fn kicked() -> Message {
    text(json!({ "type": "kicked" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_strictly() {
        let f: ClientFrame = serde_json::from_str(
            r#"{"type":"send","req_id":1,"conv_id":"c","client_msg_id":"m","body":"x"}"#,
        )
        .expect("send frame");
        assert!(matches!(f, ClientFrame::Send { .. }));
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
        let Message::Text(t) = ack(json!(5), json!({"seq": 3})) else {
            panic!("not text")
        };
        let v: Value = serde_json::from_str(t.as_str()).expect("json");
        assert_eq!(v, json!({"type": "ack", "req_id": 5, "seq": 3}));
    }
}
