//! A WebSocket text frame turned into a request of this layer.

use parley_domain::ConvId;
use parley_wire::Request;
use serde_json::Value;

use super::{
    fields, EditMessage, MarkRead, React, SearchFields, SearchMessages, SendMessage, SyncAfter,
};
use crate::error::ApiError;
use crate::gateway::frames::{req_id_of, ClientFrame};

/// What one frame asks for, checked like the same request over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameRequest {
    Ping,
    Send(SendMessage),
    Read(MarkRead),
    Sync(SyncAfter),
    Edit(EditMessage),
    React(React),
    Search(SearchMessages),
    Mls(Box<super::mls::PostMls>),
    /// Ephemeral: relayed, or refused with `NOT_MEMBER`; never acked.
    Typing(ConvId),
}

/// Parses one text frame: malformed JSON, then an oversized message body (413 outranks 400),
/// then the strict parse (unknown fields refused), then the fields. Answers the `req_id` to
/// answer with (`null` when the frame had none) beside the request or its refusal.
pub fn parse(text: &str, body_bytes_max: usize) -> (Value, Result<FrameRequest, ApiError>) {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => return (Value::Null, Err(ApiError::bad_request("malformed JSON"))),
    };
    let req_id = req_id_of(&value);
    (req_id, checked(value, body_bytes_max))
}

impl FrameRequest {
    /// The frame's type, for the frame's log span.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Send(_) => "send",
            Self::Read(_) => "read",
            Self::Sync(_) => "sync",
            Self::Edit(_) => "edit",
            Self::React(_) => "react",
            Self::Search(_) => "search",
            Self::Mls(_) => "mls",
            Self::Typing(_) => "typing",
        }
    }
}

/// Whether a refused frame was a send, so the refusal counts as an invalid send. Only refused
/// frames are parsed again.
pub fn is_send(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("send"))
}

fn checked(value: Value, body_bytes_max: usize) -> Result<FrameRequest, ApiError> {
    if value.get("type").and_then(Value::as_str) == Some("send") {
        fields::body_size(&value, body_bytes_max)?;
    }
    let frame = ClientFrame::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("bad frame: {e}")))?;
    Ok(match frame.request {
        Request::Ping => FrameRequest::Ping,
        Request::Send {
            conv_id,
            client_msg_id,
            body,
            reply_to,
            thread_root,
            mentions,
            attachments,
        } => FrameRequest::Send(
            SendMessage::parse(
                fields::conv_id(&conv_id)?,
                &client_msg_id,
                &body,
                body_bytes_max,
                attachments.as_deref(),
            )?
            .with_relations(reply_to, thread_root, mentions.as_deref())?,
        ),
        Request::Edit {
            conv_id,
            seq,
            client_msg_id,
            body,
        } => FrameRequest::Edit(EditMessage::new(
            fields::conv_id(&conv_id)?,
            seq,
            &client_msg_id,
            &body,
            body_bytes_max,
        )?),
        Request::React {
            conv_id,
            seq,
            key,
            remove,
        } => FrameRequest::React(React::new(fields::conv_id(&conv_id)?, seq, &key, !remove)?),
        Request::Read { conv_id, seq } => FrameRequest::Read(MarkRead {
            conv_id: fields::conv_id(&conv_id)?,
            seq,
        }),
        Request::Sync {
            conv_id,
            after,
            limit,
            epoch,
        } => FrameRequest::Sync(SyncAfter::from_frame(&conv_id, after, limit, epoch)?),
        Request::Typing { conv_id } => FrameRequest::Typing(fields::conv_id(&conv_id)?),
        Request::Mls {
            conv_id,
            client_msg_id,
            kind,
            epoch,
            message,
            welcome,
            add_users,
            remove_users,
        } => FrameRequest::Mls(Box::new(super::mls::PostMls::new(
            fields::conv_id(&conv_id)?,
            parley_wire::MlsPost {
                client_msg_id,
                kind,
                epoch,
                message,
                welcome,
                add_users,
                remove_users,
            },
        )?)),
        Request::Search {
            q,
            conv_id,
            from,
            limit,
            cursor,
            order,
        } => FrameRequest::Search(SearchMessages::parse(SearchFields {
            q: Some(&q),
            conv_id: conv_id.as_deref(),
            from: from.as_deref(),
            limit: limit.map(i64::from),
            cursor: cursor.as_deref(),
            order: order.as_deref(),
        })?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_domain::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
    use serde_json::json;

    fn code_of(text: &str, body_bytes_max: usize) -> (Value, Option<&'static str>) {
        let (req_id, parsed) = parse(text, body_bytes_max);
        (req_id, parsed.err().map(|e| e.code()))
    }

    #[test]
    fn frames_become_the_requests_of_http() {
        let (req_id, send) = parse(
            r#"{"type":"send","req_id":"s","conv_id":"c-1","client_msg_id":"m","body":"hi"}"#,
            16,
        );
        assert_eq!(req_id, json!("s"));
        let expected = SendMessage::new(fields::conv_id("c-1").expect("id"), "m", "hi", 16);
        assert_eq!(send.ok(), expected.ok().map(FrameRequest::Send));
        let (_, sync) = parse(
            r#"{"type":"sync","req_id":1,"conv_id":"c-1","after":3}"#,
            16,
        );
        let Ok(FrameRequest::Sync(sync)) = sync else {
            panic!("not a sync: {sync:?}")
        };
        assert_eq!(
            (sync.after, sync.epoch, sync.limit),
            (3, None, PAGE_LIMIT_DEFAULT)
        );
        let (_, read) = parse(r#"{"type":"read","req_id":1,"conv_id":"c-1","seq":4}"#, 16);
        assert!(matches!(
            read,
            Ok(FrameRequest::Read(MarkRead { seq: 4, .. }))
        ));
        let (req_id, ping) = parse(r#"{"type":"ping","req_id":9}"#, 16);
        assert_eq!((req_id, ping.ok()), (json!(9), Some(FrameRequest::Ping)));
        let (req_id, typing) = parse(r#"{"type":"typing","conv_id":"c-1"}"#, 16);
        assert_eq!(req_id, Value::Null);
        assert_eq!(
            typing.ok(),
            Some(FrameRequest::Typing(fields::conv_id("c-1").expect("id")))
        );
        let (req_id, typing) = parse(r#"{"type":"typing","req_id":"t","conv_id":"a b"}"#, 16);
        assert_eq!(
            (req_id, typing.err().map(|e| e.code())),
            (json!("t"), Some("BAD_REQUEST"))
        );
    }

    #[test]
    fn sync_numbers_follow_the_query_rules() {
        let sync = |fields: &str| {
            let text = format!(r#"{{"type":"sync","req_id":1,"conv_id":"c",{fields}}}"#);
            match parse(&text, 16).1 {
                Ok(FrameRequest::Sync(s)) => Ok((s.after, s.epoch, s.limit)),
                Ok(other) => panic!("not a sync: {other:?}"),
                Err(e) => Err(e.code()),
            }
        };
        assert_eq!(sync(r#""after":-5"#), Err("BAD_REQUEST"));
        assert_eq!(sync(r#""after":0,"epoch":-1"#), Err("BAD_REQUEST"));
        assert_eq!(sync(r#""after":0,"limit":-1"#), Err("BAD_REQUEST"));
        assert_eq!(sync(r#""after":0,"limit":0"#), Err("BAD_REQUEST"));
        assert_eq!(sync(r#""after":0.5"#), Err("BAD_REQUEST"));
        assert_eq!(
            sync(r#""after":0,"limit":4294967296"#),
            Ok((0, None, PAGE_LIMIT_MAX))
        );
        assert_eq!(
            sync(r#""after":7,"epoch":0"#),
            Ok((7, Some(0), PAGE_LIMIT_DEFAULT))
        );
    }

    #[test]
    fn refusals_keep_the_order_of_the_spec() {
        assert_eq!(code_of("{not json", 16), (Value::Null, Some("BAD_REQUEST")));
        // An oversized body outranks the unknown field and the bad id beside it.
        let text = r#"{"type":"send","req_id":2,"conv_id":"a b","client_msg_id":"m",
                       "body":"far too long a body","sender_user":"u-ben"}"#;
        assert_eq!(code_of(text, 16), (json!(2), Some("BODY_TOO_LARGE")));
        let text = r#"{"type":"send","req_id":3,"conv_id":"a b","client_msg_id":"m",
                       "body":"b","sender_user":"u-ben"}"#;
        assert_eq!(code_of(text, 16), (json!(3), Some("BAD_REQUEST")));
        let text = r#"{"type":"send","req_id":4,"conv_id":"c","client_msg_id":"m","body":""}"#;
        assert_eq!(code_of(text, 16), (json!(4), Some("BAD_REQUEST")));
        let text = r#"{"type":"sync","req_id":5,"conv_id":"c","after":0,"limit":0}"#;
        assert_eq!(code_of(text, 16), (json!(5), Some("BAD_REQUEST")));
        let text =
            r#"{"type":"send","req_id":6,"conv_id":"c","client_msg_id":"m","body":"a\u0000"}"#;
        assert_eq!(code_of(text, 16), (json!(6), Some("BAD_REQUEST")));
        let text = r#"{"type":"send","req_id":7,"conv_id":"..","client_msg_id":"m","body":"a"}"#;
        assert_eq!(code_of(text, 16), (json!(7), Some("BAD_REQUEST")));
        assert_eq!(
            code_of(r#"{"type":"dance","req_id":"r7"}"#, 16),
            (json!("r7"), Some("BAD_REQUEST"))
        );
    }
}
