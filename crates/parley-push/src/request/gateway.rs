//! A Matrix push-gateway request (`POST /_matrix/push/v1/notify`) and its answer.

use serde_json::{json, Map, Value};

use crate::request::PreparedPush;
use crate::{GatewayTarget, PushError};

/// What a gateway notification says about one message.
///
/// With `sender` and `body` both `None` it is the `event_id_only` form of the Matrix spec: the
/// gateway (and Apple or Google behind it) learns ids and counts, and the app fetches the message
/// itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayNotification {
    pub event_id: String,
    /// The conversation, in the gateway's vocabulary a room.
    pub room_id: String,
    pub sender: Option<String>,
    pub body: Option<String>,
    /// The recipient's unread count, the app's badge.
    pub unread: i64,
    /// High priority wakes the device; low may wait for it to wake.
    pub prio_high: bool,
    /// The message's seq in its conversation, so the app can sync from there.
    pub seq: i64,
}

/// The request that hands `notification` to the gateway of `target`. Its `sender` goes out only
/// when given; `type` and `content` only with a body.
pub fn gateway(
    target: &GatewayTarget,
    notification: &GatewayNotification,
) -> Result<PreparedPush, PushError> {
    let mut fields = Map::new();
    fields.insert("event_id".into(), json!(notification.event_id));
    fields.insert("room_id".into(), json!(notification.room_id));
    if let Some(sender) = &notification.sender {
        fields.insert("sender".into(), json!(sender));
    }
    if let Some(body) = &notification.body {
        fields.insert("type".into(), json!("m.room.message"));
        fields.insert("content".into(), json!({ "body": body }));
    }
    fields.insert("counts".into(), json!({ "unread": notification.unread }));
    let prio = if notification.prio_high {
        "high"
    } else {
        "low"
    };
    fields.insert("prio".into(), json!(prio));
    fields.insert("seq".into(), json!(notification.seq));
    fields.insert(
        "devices".into(),
        json!([{ "app_id": target.app_id, "pushkey": target.pushkey, "data": {} }]),
    );
    let body = serde_json::to_vec(&json!({ "notification": Value::Object(fields) }))
        .map_err(|e| PushError::Target(format!("notification does not serialise: {e}")))?;
    Ok(PreparedPush {
        url: target.url.clone(),
        headers: vec![("Content-Type", "application/json".to_owned())],
        body,
    })
}

/// Whether a gateway's answer lists `pushkey` under `rejected`: the gateway says the app
/// uninstalled or the token expired, and the server should drop the target. An answer that is
/// not JSON rejects nothing.
pub fn gateway_rejected(body: &[u8], pushkey: &str) -> bool {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    answer
        .get("rejected")
        .and_then(Value::as_array)
        .is_some_and(|keys| keys.iter().any(|k| k.as_str() == Some(pushkey)))
}
