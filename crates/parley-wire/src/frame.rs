//! The WebSocket frames of SPEC §7: JSON text objects with a `type`.

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::answer::Event;

/// A client → server frame: a request the server answers with an `ack`, `error` or `pong`
/// carrying the same `req_id`. `Id` is how the `req_id` is held: the SDK writes text; the
/// server keeps whatever JSON the client chose, so it can echo it unchanged.
///
/// Unknown fields are refused, as on HTTP. A frame with neither a known `type` nor a `req_id`
/// is refused too; the server answers it with `req_id: null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFrame<Id = String> {
    pub req_id: Id,
    pub request: Request,
}

/// What a [`ClientFrame`] asks for; the variant name is the frame's `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// Answered like `POST …/messages`: a [`crate::SendAck`].
    Send {
        conv_id: String,
        client_msg_id: String,
        body: String,
        /// The message this one replies to (docs/RELATIONS.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<i64>,
        /// The thread root this message replies in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thread_root: Option<i64>,
        /// Users mentioned beside the body's `@user` words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mentions: Option<Vec<String>>,
        /// Media ids the sender uploaded (docs/MEDIA.md); with any, `body` may be empty.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attachments: Option<Vec<String>>,
    },
    /// Answered like `POST …/events/{seq}/edit`: a [`crate::EditAck`].
    Edit {
        conv_id: String,
        seq: i64,
        client_msg_id: String,
        body: String,
    },
    /// Answered like `PUT` (`remove` absent or false) or `DELETE …/events/{seq}/reactions/{key}`:
    /// a [`crate::ReactionAck`].
    React {
        conv_id: String,
        seq: i64,
        key: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        remove: bool,
    },
    /// Answered like `POST …/read`: a [`crate::ReadAck`].
    Read { conv_id: String, seq: i64 },
    /// Answered like `GET …/events?after=`: a [`crate::EventsPage`]. A `limit` above `u32`'s
    /// range reads as `u32::MAX`, since the server clamps page sizes anyway, as it does for
    /// the query's `limit`.
    Sync {
        conv_id: String,
        after: i64,
        #[serde(
            default,
            deserialize_with = "saturating_u32",
            skip_serializing_if = "Option::is_none"
        )]
        limit: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<i64>,
    },
    /// Answered like `GET /v1/search`: a [`crate::SearchResults`] (docs/SEARCH.md).
    Search {
        q: String,
        /// Only this conversation (as `in:` does).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conv_id: Option<String>,
        /// Only this sender (as `from:` does).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        #[serde(
            default,
            deserialize_with = "saturating_u32",
            skip_serializing_if = "Option::is_none"
        )]
        limit: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<String>,
        /// `newest` (the default) or `rank`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        order: Option<String>,
    },
    /// Answered like `POST …/mls`: a [`crate::MlsAck`] (docs/E2EE.md). A frame holds at most
    /// the server's frame limit, so a large Commit goes over HTTP.
    Mls {
        conv_id: String,
        client_msg_id: String,
        kind: crate::mls::MlsKind,
        epoch: i64,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        welcome: Option<crate::mls::WelcomeOut>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        add_users: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remove_users: Vec<String>,
    },
    /// Answered by a `pong`; also counts as activity against the server's idle timeout.
    Ping,
    /// The device's user is typing in `conv_id`: ephemeral, never in the log and never acked.
    /// Relayed as [`ServerFrame::Typing`] to the other members' online devices; answered only
    /// when refused (`NOT_MEMBER`, `BAD_REQUEST`). Its `req_id` is optional: a refusal echoes
    /// it, or `null` without one.
    Typing { conv_id: String },
}

impl<Id: Serialize> ClientFrame<Id> {
    pub fn to_json(&self) -> String {
        // A frame of strings, integers and a JSON `req_id` always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl<Id: DeserializeOwned> ClientFrame<Id> {
    /// Parses a frame the server already read as JSON (it looks at the loose value first, for
    /// the `req_id` of an error and for limits that outrank parse errors). The `req_id` is
    /// taken out and the rest must be exactly one request.
    pub fn from_value(value: Value) -> Result<Self, serde_json::Error> {
        let mut fields = match value {
            Value::Object(fields) => fields,
            other => {
                return Err(serde_json::Error::invalid_type(
                    unexpected(&other),
                    &"a frame object",
                ))
            }
        };
        let req_id = fields.remove("req_id");
        // A typing frame may come without a `req_id`, since nothing answers it when accepted.
        let req_id = match req_id {
            None if fields.get("type").and_then(Value::as_str) == Some("typing") => {
                Some(Value::Null)
            }
            other => other,
        };
        // A unit variant of an internally tagged enum ignores other fields, so a ping's are
        // refused here: it takes none but its `req_id`.
        if fields.len() > 1 && fields.get("type").and_then(Value::as_str) == Some("ping") {
            if let Some(extra) = fields.keys().find(|k| k.as_str() != "type") {
                return Err(serde_json::Error::unknown_field(extra, &["req_id"]));
            }
        }
        let request = Request::deserialize(Value::Object(fields))?;
        let req_id = req_id.ok_or_else(|| serde_json::Error::missing_field("req_id"))?;
        Ok(Self {
            req_id: Id::deserialize(req_id)?,
            request,
        })
    }
}

/// A JSON integer of zero or more, with values above `u32::MAX` read as `u32::MAX`.
fn saturating_u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
}

fn unexpected(value: &Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("a number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<Id: Serialize> Serialize for ClientFrame<Id> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The request's fields with the `req_id` beside them, in one object.
        #[derive(Serialize)]
        struct Flat<'a, Id> {
            req_id: &'a Id,
            #[serde(flatten)]
            request: &'a Request,
        }
        Flat {
            req_id: &self.req_id,
            request: &self.request,
        }
        .serialize(serializer)
    }
}

impl<'de, Id: DeserializeOwned> Deserialize<'de> for ClientFrame<Id> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::from_value(Value::deserialize(deserializer)?).map_err(D::Error::custom)
    }
}

/// A server → client frame; the variant name is the frame's `type`. `Id` is the echoed
/// `req_id` (the SDK reads it as text, a number as its digits, anything else as `None`), `E` the
/// pushed event (the SDK reads [`Event`]; the server writes its domain event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    bound(deserialize = "Id: EchoedReqId, E: Deserialize<'de>")
)]
pub enum ServerFrame<Id = Option<String>, E = Event> {
    /// The answer to a request: the same fields as the HTTP answer, kept undecoded until the
    /// caller, who knows which request it answers, decodes them (see [`crate::answer`]).
    Ack {
        #[serde(default, deserialize_with = "echoed")]
        req_id: Id,
        #[serde(flatten)]
        fields: Map<String, Value>,
    },
    /// A refused request, with the HTTP error code ([`crate::ErrorCode`]); `req_id` is null when
    /// the frame that caused it had none (e.g. malformed JSON). `retry_after_ms` comes with
    /// `RATE_LIMITED` only: how long until the device may ask again (HTTP's `Retry-After`, in
    /// milliseconds).
    Error {
        #[serde(default, deserialize_with = "echoed")]
        req_id: Id,
        code: String,
        #[serde(default)]
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        /// `EPOCH_CONFLICT` only (docs/E2EE.md): the conversation's current epoch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<i64>,
        /// `EPOCH_CONFLICT` only: the Commit that ended the refused message's epoch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        winning_seq: Option<i64>,
    },
    /// A committed event, full payload.
    Event { event: E },
    /// New events exist up to `head` (pull conversations); fetch them.
    Hint { conv_id: String, head: i64 },
    /// The user's read position moved on another device.
    Read { conv_id: String, read_seq: i64 },
    /// A newer connection of this device took over; close code 4001 follows.
    Kicked,
    /// `user_id` is typing in `conv_id` (ephemeral): show it for `expires_ms` milliseconds
    /// unless another typing frame of the same user and conversation renews it.
    Typing {
        conv_id: String,
        user_id: String,
        expires_ms: u64,
    },
    /// `user_id` came online (their first device connected) or went offline (their last device
    /// disconnected; `last_seen` is when, RFC 3339 UTC). Sent only to users who share a direct
    /// conversation or a `push` group with them.
    Presence {
        user_id: String,
        online: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_seen: Option<String>,
    },
    Pong {
        #[serde(default, deserialize_with = "echoed")]
        req_id: Id,
    },
    /// A frame type this version does not know yet.
    #[serde(other)]
    Unknown,
}

impl ServerFrame {
    /// Decodes one text frame as a client reads it. The error names the position only, never
    /// the content.
    pub fn parse(text: &str) -> Result<Self, FrameError> {
        serde_json::from_str(text).map_err(|e| FrameError::new(&e))
    }
}

/// How a `req_id` echoed in a server frame is read back.
pub trait EchoedReqId: Default {
    fn from_echo(value: Value) -> Self;
}

/// Text, so that matching answers to requests does not depend on how the server chose to echo
/// the id: a number is read as its digits, anything else as no id.
impl EchoedReqId for Option<String> {
    fn from_echo(value: Value) -> Self {
        match value {
            Value::String(s) => Some(s),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// As sent.
impl EchoedReqId for Value {
    fn from_echo(value: Value) -> Self {
        value
    }
}

fn echoed<'de, D: Deserializer<'de>, Id: EchoedReqId>(deserializer: D) -> Result<Id, D::Error> {
    Ok(Id::from_echo(
        Option::<Value>::deserialize(deserializer)?.unwrap_or(Value::Null),
    ))
}

/// A frame that does not have the documented shape. The reason is a category and a position:
/// the decoder's own message may quote the offending value, which can be a message body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode a WebSocket frame: {reason}")]
pub struct FrameError {
    pub reason: String,
}

impl FrameError {
    pub fn new(e: &serde_json::Error) -> Self {
        Self {
            reason: format!(
                "{:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::{EventKind, EventsPage, ReadAck, SendAck};
    use serde_json::json;

    fn encode<Id: Serialize>(frame: &ClientFrame<Id>) -> Value {
        serde_json::from_str(&frame.to_json()).expect("valid JSON")
    }

    fn frame(req_id: &str, request: Request) -> ClientFrame {
        ClientFrame {
            req_id: req_id.into(),
            request,
        }
    }

    #[test]
    fn client_frames_encode_as_the_spec_writes_them_and_decode_back() {
        let cases = [
            (
                frame(
                    "r1",
                    Request::Send {
                        conv_id: "c".into(),
                        client_msg_id: "m-1".into(),
                        body: "hi".into(),
                        reply_to: None,
                        thread_root: None,
                        mentions: None,
                        attachments: None,
                    },
                ),
                json!({"type": "send", "req_id": "r1", "conv_id": "c", "client_msg_id": "m-1",
                       "body": "hi"}),
            ),
            (
                frame(
                    "r2",
                    Request::Read {
                        conv_id: "c".into(),
                        seq: 4,
                    },
                ),
                json!({"type": "read", "req_id": "r2", "conv_id": "c", "seq": 4}),
            ),
            (
                frame(
                    "r3",
                    Request::Sync {
                        conv_id: "c".into(),
                        after: 3,
                        limit: None,
                        epoch: Some(1),
                    },
                ),
                json!({"type": "sync", "req_id": "r3", "conv_id": "c", "after": 3, "epoch": 1}),
            ),
            (
                frame(
                    "r4",
                    Request::Sync {
                        conv_id: "c".into(),
                        after: 0,
                        limit: Some(10),
                        epoch: None,
                    },
                ),
                json!({"type": "sync", "req_id": "r4", "conv_id": "c", "after": 0, "limit": 10}),
            ),
            (
                frame("r5", Request::Ping),
                json!({"type": "ping", "req_id": "r5"}),
            ),
            (
                frame(
                    "r6",
                    Request::Typing {
                        conv_id: "c".into(),
                    },
                ),
                json!({"type": "typing", "req_id": "r6", "conv_id": "c"}),
            ),
        ];
        for (frame, expected) in cases {
            assert_eq!(encode(&frame), expected);
            let back: ClientFrame = serde_json::from_str(&frame.to_json()).expect("decodes");
            assert_eq!(back, frame);
        }
    }

    #[test]
    fn sync_limits_beyond_u32_saturate() {
        let limit = |n: Value| {
            let text = json!({"type": "sync", "req_id": "r1", "conv_id": "c", "after": 0,
                              "limit": n})
            .to_string();
            match serde_json::from_str::<ClientFrame>(&text).map(|f| f.request) {
                Ok(Request::Sync { limit, .. }) => limit,
                other => panic!("not a sync: {other:?}"),
            }
        };
        assert_eq!(limit(json!(7)), Some(7));
        assert_eq!(limit(json!(4_294_967_296_u64)), Some(u32::MAX));
        assert_eq!(limit(json!(u64::MAX)), Some(u32::MAX));
        assert_eq!(limit(Value::Null), None);
    }

    #[test]
    fn the_server_keeps_any_req_id_as_sent() {
        for req_id in [json!(7), json!("r7"), json!({"n": 1}), Value::Null] {
            let text = json!({"type": "ping", "req_id": req_id}).to_string();
            let frame: ClientFrame<Value> = serde_json::from_str(&text).expect("decodes");
            assert_eq!(frame.req_id, req_id);
            assert_eq!(frame.request, Request::Ping);
        }
    }

    #[test]
    fn a_typing_frame_needs_no_req_id() {
        let text = json!({"type": "typing", "conv_id": "c"}).to_string();
        let frame: ClientFrame<Value> = serde_json::from_str(&text).expect("decodes");
        assert_eq!(frame.req_id, Value::Null);
        assert_eq!(
            frame.request,
            Request::Typing {
                conv_id: "c".into()
            }
        );
        let extra = json!({"type": "typing", "conv_id": "c", "user_id": "u"});
        assert!(ClientFrame::<Value>::from_value(extra).is_err());
    }

    #[test]
    fn client_frames_parse_strictly() {
        let parse = |v: Value| ClientFrame::<Value>::from_value(v).map(|f| f.request);
        for bad in [
            json!({"type": "ping", "req_id": 1, "extra": true}),
            json!({"type": "send", "req_id": 1, "conv_id": "c", "client_msg_id": "m",
                   "body": "b", "sender_user": "u-ben"}),
            json!({"type": "dance", "req_id": 1}),
            json!({"req_id": 1}),
            json!({"type": "ping"}),
            json!({"type": "read", "req_id": 1, "conv_id": "c"}),
            json!({"type": "read", "req_id": 1, "conv_id": "c", "seq": "4"}),
            json!({"type": "sync", "req_id": 1, "conv_id": "c", "after": 0, "limit": -1}),
            json!({"type": "sync", "req_id": 1, "conv_id": "c", "after": 0, "limit": 1.5}),
            json!({"type": "ping", "req_id": 1, "type2": "x"}),
            json!(["ping", 1]),
            json!("ping"),
        ] {
            assert!(parse(bad.clone()).is_err(), "accepted {bad}");
        }
        let missing = ClientFrame::<Value>::from_value(json!({"type": "ping"}));
        let message = missing.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("req_id"), "{message}");
    }

    #[test]
    fn server_frames_round_trip_with_echoed_ids() {
        let fields = |v: Value| match v {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        // Every field this variant leaves absent (the others are in `crate::answer`'s tests).
        let join: Event = serde_json::from_value(json!({"conv_id": "c", "seq": 2,
            "kind": "join", "created_at": "2024-01-01T00:00:00.000000Z", "subject_user": "ben"}))
        .expect("an event");
        assert_eq!(join.kind, EventKind::Join);
        let cases: Vec<(ServerFrame<Value>, Value)> = vec![
            (
                ServerFrame::Ack {
                    req_id: json!(5),
                    fields: fields(json!({"read_seq": 3})),
                },
                json!({"type": "ack", "req_id": 5, "read_seq": 3}),
            ),
            (
                ServerFrame::Error {
                    req_id: Value::Null,
                    code: "BAD_REQUEST".into(),
                    message: "malformed JSON".into(),
                    retry_after_ms: None,
                    epoch: None,
                    winning_seq: None,
                },
                json!({"type": "error", "req_id": null, "code": "BAD_REQUEST",
                       "message": "malformed JSON"}),
            ),
            (
                ServerFrame::Error {
                    req_id: json!("s1"),
                    code: "RATE_LIMITED".into(),
                    message: "slow down".into(),
                    retry_after_ms: Some(250),
                    epoch: None,
                    winning_seq: None,
                },
                json!({"type": "error", "req_id": "s1", "code": "RATE_LIMITED",
                       "message": "slow down", "retry_after_ms": 250}),
            ),
            (
                ServerFrame::Event { event: join },
                json!({"type": "event", "event": {"conv_id": "c", "seq": 2, "kind": "join",
                       "created_at": "2024-01-01T00:00:00.000000Z", "subject_user": "ben"}}),
            ),
            (
                ServerFrame::Hint {
                    conv_id: "g".into(),
                    head: 120,
                },
                json!({"type": "hint", "conv_id": "g", "head": 120}),
            ),
            (
                ServerFrame::Read {
                    conv_id: "c".into(),
                    read_seq: 8,
                },
                json!({"type": "read", "conv_id": "c", "read_seq": 8}),
            ),
            (ServerFrame::Kicked, json!({"type": "kicked"})),
            (
                ServerFrame::Typing {
                    conv_id: "c".into(),
                    user_id: "ana".into(),
                    expires_ms: 5000,
                },
                json!({"type": "typing", "conv_id": "c", "user_id": "ana", "expires_ms": 5000}),
            ),
            (
                ServerFrame::Presence {
                    user_id: "ana".into(),
                    online: false,
                    last_seen: Some("2024-01-01T00:00:00.000000Z".into()),
                },
                json!({"type": "presence", "user_id": "ana", "online": false,
                       "last_seen": "2024-01-01T00:00:00.000000Z"}),
            ),
            (
                ServerFrame::Pong {
                    req_id: json!("p1"),
                },
                json!({"type": "pong", "req_id": "p1"}),
            ),
        ];
        for (frame, expected) in cases {
            let text = serde_json::to_string(&frame).expect("encodes");
            let json: Value = serde_json::from_str(&text).expect("valid JSON");
            assert_eq!(json, expected);
            let back: ServerFrame<Value> = serde_json::from_str(&text).expect("decodes");
            assert_eq!(back, frame);
        }
    }

    #[test]
    fn clients_read_echoed_ids_as_text() {
        let cases = [
            (r#"{"type":"pong","req_id":"p1"}"#, Some("p1")),
            (r#"{"type":"pong","req_id":7}"#, Some("7")),
            (r#"{"type":"pong","req_id":null}"#, None),
            (r#"{"type":"pong"}"#, None),
            (r#"{"type":"pong","req_id":{"n":1}}"#, None),
        ];
        for (text, expected) in cases {
            let ServerFrame::Pong { req_id } = ServerFrame::parse(text).expect("decodes") else {
                panic!("not a pong: {text}")
            };
            assert_eq!(req_id.as_deref(), expected, "{text}");
        }
    }

    #[test]
    fn acks_decode_as_the_answer_of_their_request() {
        let ack_fields = |text: &str| match ServerFrame::parse(text) {
            Ok(ServerFrame::Ack { fields, .. }) => Value::Object(fields),
            other => panic!("not an ack: {other:?}"),
        };
        let send: SendAck = serde_json::from_value(ack_fields(
            r#"{"type":"ack","req_id":"r1","conv_id":"c","seq":3,"message_id":"m","dup":true}"#,
        ))
        .expect("a send ack");
        assert_eq!((send.seq, send.dup), (3, true));
        let read: ReadAck =
            serde_json::from_value(ack_fields(r#"{"type":"ack","req_id":7,"read_seq":5}"#))
                .expect("a read ack");
        assert_eq!(read.read_seq, 5);
        let page: EventsPage = serde_json::from_value(ack_fields(
            r#"{"type":"ack","req_id":"r3","events":[],"head":9,"min_seq":1,"epoch":2,
                "through_seq":9,"truncated":false,"next_before":null}"#,
        ))
        .expect("an events page");
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
                    retry_after_ms: None,
                    epoch: None,
                    winning_seq: None,
                },
            ),
            (
                r#"{"type":"error","req_id":"r9","code":"NOT_MEMBER"}"#,
                ServerFrame::Error {
                    req_id: Some("r9".into()),
                    code: "NOT_MEMBER".into(),
                    message: String::new(),
                    retry_after_ms: None,
                    epoch: None,
                    winning_seq: None,
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
            (r#"{"type":"receipt","user":"ana"}"#, ServerFrame::Unknown),
            (
                r#"{"type":"presence","user_id":"ana","online":true,"x":1}"#,
                ServerFrame::Presence {
                    user_id: "ana".into(),
                    online: true,
                    last_seen: None,
                },
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(ServerFrame::parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn pushed_events_carry_the_full_payload() {
        let frame = ServerFrame::parse(
            r#"{"type":"event","event":{"conv_id":"c","seq":3,"kind":"msg",
                "created_at":"2024-01-01T00:00:00Z","message_id":"m","sender_user":"ana",
                "sender_device":"d1","client_msg_id":"x","body":"hi","extra":true}}"#,
        );
        let Ok(ServerFrame::Event { event }) = frame else {
            panic!("not an event: {frame:?}")
        };
        assert_eq!((event.seq, event.kind), (3, EventKind::Msg));
        assert_eq!(event.body.as_deref(), Some("hi"));
    }

    #[test]
    fn decoding_errors_do_not_quote_the_frame() {
        let secret = "very private words";
        let text = format!(r#"{{"type":"event","event":{{"conv_id":"c","seq":"{secret}"}}}}"#);
        let e = ServerFrame::parse(&text).expect_err("refused");
        assert!(!e.to_string().contains("private"), "{e}");
        assert!(e.reason.starts_with("Data error"), "{e}");
        assert!(ServerFrame::parse("not json").is_err());
    }
}
