//! The JSON frames of SPEC §7 and the close codes the server ends a connection with.
//!
//! Both directions decode and encode, so a test can play either side. Unknown fields are
//! ignored and an unknown server frame type decodes as [`ServerFrame::Unknown`], because the
//! contract lets the server add fields and frames without breaking existing clients.

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ClientError;
use crate::types::Event;

/// Close code: a newer connection of the same device took over (after a `kicked` frame).
pub const CLOSE_KICKED: u16 = 4001;
/// Close code: the device's token was revoked or re-issued.
pub const CLOSE_REVOKED: u16 = 4003;
/// Close code: the client read too slowly and the server's outbound queue filled up.
pub const CLOSE_TOO_SLOW: u16 = 4008;
/// Close code: the server is shutting down.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// A client → server frame: a request the server answers with an `ack`, `error` or `pong`
/// carrying the same `req_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientFrame {
    pub req_id: String,
    #[serde(flatten)]
    pub request: Request,
}

/// What a [`ClientFrame`] asks for; the variant name is the frame's `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Request {
    /// Answered like `POST …/messages`: a [`crate::SendAck`].
    Send {
        conv_id: String,
        client_msg_id: String,
        body: String,
    },
    /// Answered like `POST …/read`: a [`crate::ReadAck`].
    Read { conv_id: String, seq: i64 },
    /// Answered like `GET …/events?after=`: a [`crate::EventsPage`].
    Sync {
        conv_id: String,
        after: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<i64>,
    },
    /// Answered by a `pong`; also counts as activity against the server's idle timeout.
    Ping,
}

impl ClientFrame {
    pub fn to_json(&self) -> String {
        // A struct of strings and integers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A server → client frame; the variant name is the frame's `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerFrame {
    /// The answer to a request: the same fields as the HTTP answer, kept undecoded until the
    /// request it answers says which type they have.
    Ack {
        #[serde(default, deserialize_with = "req_id_text")]
        req_id: Option<String>,
        #[serde(flatten)]
        fields: Map<String, Value>,
    },
    /// A refused request, with the HTTP error code; `req_id` is absent when the frame that
    /// caused it had none (e.g. malformed JSON).
    Error {
        #[serde(default, deserialize_with = "req_id_text")]
        req_id: Option<String>,
        code: String,
        #[serde(default)]
        message: String,
    },
    /// A committed event, full payload.
    Event { event: Event },
    /// New events exist up to `head` (pull conversations); fetch them.
    Hint { conv_id: String, head: i64 },
    /// The user's read position moved on another device.
    Read { conv_id: String, read_seq: i64 },
    /// A newer connection of this device took over; close code 4001 follows.
    Kicked,
    Pong {
        #[serde(default, deserialize_with = "req_id_text")]
        req_id: Option<String>,
    },
    /// A frame type this SDK does not know yet.
    #[serde(other)]
    Unknown,
}

impl ServerFrame {
    /// Decodes one text frame. The error names the position only, never the content.
    pub fn parse(text: &str) -> Result<Self, ClientError> {
        serde_json::from_str(text).map_err(|e| bad_frame(&e))
    }
}

/// Decodes the fields of an `ack` as the answer type of the request it answers.
pub fn decode_ack<T: DeserializeOwned>(fields: Value) -> Result<T, ClientError> {
    serde_json::from_value(fields).map_err(|e| bad_frame(&e))
}

/// A decoding error reduced to its category and position: serde's own message may quote the
/// offending value, which can be a message body.
fn bad_frame(e: &serde_json::Error) -> ClientError {
    ClientError::BadFrame {
        reason: format!(
            "{:?} error at line {} column {}",
            e.classify(),
            e.line(),
            e.column()
        ),
    }
}

/// Reads a `req_id` echoed as a string or a number (or null) as text, so matching answers to
/// requests does not depend on how the server chose to echo it.
fn req_id_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventKind, EventsPage, ReadAck, SendAck};
    use serde_json::json;

    fn encode(req_id: &str, request: Request) -> Value {
        let frame = ClientFrame {
            req_id: req_id.into(),
            request,
        };
        serde_json::from_str(&frame.to_json()).unwrap()
    }

    #[test]
    fn client_frames_encode_as_the_spec_writes_them() {
        let send = Request::Send {
            conv_id: "c".into(),
            client_msg_id: "m-1".into(),
            body: "hi".into(),
        };
        assert_eq!(
            encode("r1", send),
            json!({"type": "send", "req_id": "r1", "conv_id": "c", "client_msg_id": "m-1",
                   "body": "hi"})
        );
        let read = Request::Read {
            conv_id: "c".into(),
            seq: 4,
        };
        assert_eq!(
            encode("r2", read),
            json!({"type": "read", "req_id": "r2", "conv_id": "c", "seq": 4})
        );
        let sync = Request::Sync {
            conv_id: "c".into(),
            after: 3,
            limit: None,
            epoch: Some(1),
        };
        assert_eq!(
            encode("r3", sync),
            json!({"type": "sync", "req_id": "r3", "conv_id": "c", "after": 3, "epoch": 1})
        );
        assert_eq!(
            encode("r4", Request::Ping),
            json!({"type": "ping", "req_id": "r4"})
        );
    }

    #[test]
    fn client_frames_decode_back() {
        let text = r#"{"type":"sync","req_id":"r","conv_id":"c","after":0,"limit":10}"#;
        let frame: ClientFrame = serde_json::from_str(text).unwrap();
        assert_eq!(
            frame.request,
            Request::Sync {
                conv_id: "c".into(),
                after: 0,
                limit: Some(10),
                epoch: None
            }
        );
        let frame: ClientFrame = serde_json::from_str(r#"{"type":"ping","req_id":"p"}"#).unwrap();
        assert_eq!((frame.req_id.as_str(), frame.request), ("p", Request::Ping));
    }

    #[test]
    fn acks_decode_as_the_answer_of_their_request() {
        let ServerFrame::Ack { req_id, fields } = ServerFrame::parse(
            r#"{"type":"ack","req_id":"r1","conv_id":"c","seq":3,"message_id":"m","dup":true}"#,
        )
        .unwrap() else {
            panic!("not an ack")
        };
        assert_eq!(req_id.as_deref(), Some("r1"));
        let ack: SendAck = decode_ack(Value::Object(fields)).unwrap();
        assert_eq!((ack.seq, ack.dup), (3, true));

        let ServerFrame::Ack { fields, .. } =
            ServerFrame::parse(r#"{"type":"ack","req_id":7,"read_seq":5}"#).unwrap()
        else {
            panic!("not an ack")
        };
        let ack: ReadAck = decode_ack(Value::Object(fields)).unwrap();
        assert_eq!(ack.read_seq, 5);

        let ServerFrame::Ack { fields, .. } = ServerFrame::parse(
            r#"{"type":"ack","req_id":"r3","events":[],"head":9,"min_seq":1,"epoch":2,
                "through_seq":9,"truncated":false,"next_before":null}"#,
        )
        .unwrap() else {
            panic!("not an ack")
        };
        let page: EventsPage = decode_ack(Value::Object(fields)).unwrap();
        assert_eq!((page.head, page.epoch, page.through_seq), (9, 2, 9));
    }

    #[test]
    fn server_frames_decode_and_tolerate_unknown_fields() {
        let cases = [
            (
                r#"{"type":"error","req_id":null,"code":"BAD_REQUEST","message":"x","at":1}"#,
                ServerFrame::Error {
                    req_id: None,
                    code: "BAD_REQUEST".into(),
                    message: "x".into(),
                },
            ),
            (
                r#"{"type":"error","req_id":"r9","code":"NOT_MEMBER"}"#,
                ServerFrame::Error {
                    req_id: Some("r9".into()),
                    code: "NOT_MEMBER".into(),
                    message: String::new(),
                },
            ),
            (
                r#"{"type":"hint","conv_id":"g","head":120,"coalesced":4}"#,
                ServerFrame::Hint {
                    conv_id: "g".into(),
                    head: 120,
                },
            ),
            (
                r#"{"type":"read","conv_id":"c","read_seq":8}"#,
                ServerFrame::Read {
                    conv_id: "c".into(),
                    read_seq: 8,
                },
            ),
            (r#"{"type":"kicked","by":"x"}"#, ServerFrame::Kicked),
            (
                r#"{"type":"pong","req_id":"p1"}"#,
                ServerFrame::Pong {
                    req_id: Some("p1".into()),
                },
            ),
            (r#"{"type":"presence","user":"ana"}"#, ServerFrame::Unknown),
        ];
        for (text, expected) in cases {
            assert_eq!(ServerFrame::parse(text).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn pushed_events_carry_the_full_payload() {
        let frame = ServerFrame::parse(
            r#"{"type":"event","event":{"conv_id":"c","seq":3,"kind":"msg",
                "created_at":"2024-01-01T00:00:00Z","message_id":"m","sender_user":"ana",
                "sender_device":"d1","client_msg_id":"x","body":"hi","extra":true}}"#,
        )
        .unwrap();
        let ServerFrame::Event { event } = frame else {
            panic!("not an event")
        };
        assert_eq!((event.seq, event.kind), (3, EventKind::Msg));
        assert_eq!(event.body.as_deref(), Some("hi"));
    }

    #[test]
    fn decoding_errors_do_not_quote_the_frame() {
        let secret = "very private words";
        let text = format!(r#"{{"type":"event","event":{{"conv_id":"c","seq":"{secret}"}}}}"#);
        let e = ServerFrame::parse(&text).unwrap_err();
        assert!(matches!(e, ClientError::BadFrame { .. }));
        assert!(!e.to_string().contains("private"), "{e}");
        assert!(ServerFrame::parse("not json").is_err());
    }
}
