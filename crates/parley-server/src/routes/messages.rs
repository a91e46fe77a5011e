//! Sending messages over HTTP; the write itself is `service::send`, shared with WebSocket.

use axum::extract::State;
use axum::Json;
use parley_domain::ids::BodyError;
use parley_domain::{Body, ClientMsgId};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::service::{self, SendAck};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendMessageRequest {
    client_msg_id: String,
    body: String,
}

/// An oversized message body answers 413 even when the request has other faults, because 413
/// outranks 400 (SPEC §6). So the loose JSON is checked before the strict parse.
pub fn check_body_size(request: &Value, body_bytes_max: usize) -> Result<(), ApiError> {
    match request.get("body") {
        Some(Value::String(s)) if s.len() > body_bytes_max => Err(ApiError::BodyTooLarge {
            len: s.len(),
            max: body_bytes_max,
        }),
        _ => Ok(()),
    }
}

/// A checked message body; an empty body is a bad request, an oversized one 413.
pub fn parse_body(raw: &str, body_bytes_max: usize) -> Result<Body, ApiError> {
    Body::parse(raw, body_bytes_max).map_err(|e| match e {
        BodyError::Empty => ApiError::bad_request(e.to_string()),
        BodyError::TooLarge { len, max } => ApiError::BodyTooLarge { len, max },
    })
}

/// `POST /v1/conversations/{conv_id}/messages`: the sender is the token's device, never a
/// field of the request (a `sender` field is an unknown field, so 400).
pub async fn send(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<SendAck>, ApiError> {
    let body_bytes_max = state.config().limits.body_bytes_max;
    check_body_size(body.value(), body_bytes_max)?;
    let conv_id = path.into_inner()?.conv_id()?;
    let req: SendMessageRequest = body.parse()?;
    let client_msg_id =
        ClientMsgId::parse(&req.client_msg_id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let message = parse_body(&req.body, body_bytes_max)?;
    let ack = service::send(&state, &identity, conv_id, client_msg_id, message).await?;
    Ok(Json(ack))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn oversized_body_outranks_other_faults() {
        // The second seed's teaching limit: "你好呀" is 9 bytes against a limit of 6.
        let req = json!({"body": "你好呀", "sender": "mallory"});
        assert_eq!(
            check_body_size(&req, 6).err().map(|e| e.code()),
            Some("BODY_TOO_LARGE")
        );
        assert!(check_body_size(&json!({"body": "你好"}), 6).is_ok());
        assert!(check_body_size(&json!({"body": 12}), 6).is_ok());
        assert!(check_body_size(&json!([1, 2]), 6).is_ok());
    }

    #[test]
    fn empty_bodies_are_bad_requests() {
        assert_eq!(
            parse_body("", 6).err().map(|e| e.code()),
            Some("BAD_REQUEST")
        );
        assert!(parse_body("你好", 6).is_ok());
    }
}
