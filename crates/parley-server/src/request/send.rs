//! A message to send: `POST /v1/conversations/{conv_id}/messages` or a `send` frame.

use std::time::Instant;

use parley_domain::{Body, ClientMsgId, ConvId};
use parley_store::DeviceIdentity;
use parley_wire::SendAck;
use serde::Deserialize;
use tracing::Instrument;

use super::fields;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::metrics::SendOutcome;
use crate::path::{ConvPath, DeferredPath};
use crate::rate_limit::LimitKind;
use crate::service;
use crate::state::AppState;

/// A checked send. The sender is not part of it: it is always the token's device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessage {
    pub conv_id: ConvId,
    pub client_msg_id: ClientMsgId,
    pub body: Body,
}

/// The HTTP body; a `sender` field is an unknown field, so 400.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendBody {
    /// The request key: 1 to 128 characters; a retry sends the same key.
    #[schema(min_length = 1, max_length = 128)]
    client_msg_id: String,
    /// The message: not empty, without U+0000, at most `--max-body-bytes` UTF-8 bytes.
    body: String,
}

impl SendMessage {
    /// The fields that follow the conversation, in order: the request key, then the body.
    pub fn new(
        conv_id: ConvId,
        client_msg_id: &str,
        body: &str,
        body_bytes_max: usize,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            conv_id,
            client_msg_id: fields::client_msg_id(client_msg_id)?,
            body: fields::body(body, body_bytes_max)?,
        })
    }

    /// An oversized body first (413), then the path, the strict parse and the fields (400).
    pub fn from_http(
        path: DeferredPath<ConvPath>,
        body: &JsonBody,
        body_bytes_max: usize,
    ) -> Result<Self, ApiError> {
        fields::body_size(body.value(), body_bytes_max)?;
        let conv_id = path.into_inner()?.conv_id()?;
        let req: SendBody = body.parse()?;
        Self::new(conv_id, &req.client_msg_id, &req.body, body_bytes_max)
    }

    /// Takes a token of the device's send budget (`RATE_LIMITED` without one: nothing is
    /// written), then sends. Counts the outcome and, for an ack, the time it took; the span
    /// names the conversation, user and device of the send (never its body).
    pub async fn run(self, state: &AppState, device: &DeviceIdentity) -> Result<SendAck, ApiError> {
        let span = tracing::info_span!(
            "send",
            conv_id = %self.conv_id,
            user = %device.user_id,
            device = %device.device_id,
        );
        let start = Instant::now();
        let sent = async {
            state.rate_limiter().check_device(LimitKind::Send, device)?;
            service::send(state, device, self.conv_id, self.client_msg_id, self.body).await
        }
        .instrument(span)
        .await;
        let metrics = state.metrics();
        match &sent {
            Ok(ack) => {
                metrics.send_acked(start.elapsed());
                metrics.send(if ack.dup {
                    SendOutcome::Replayed
                } else {
                    SendOutcome::Written
                });
            }
            Err(e) => metrics.send(SendOutcome::of_error(e)),
        }
        sent
    }
}
