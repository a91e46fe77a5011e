//! A message to send: `POST /v1/conversations/{conv_id}/messages` or a `send` frame.

use std::time::Instant;

use parley_domain::{Body, ClientMsgId, ConvId, SendRelations};
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
    /// A reply, a thread, mentions (docs/RELATIONS.md); empty for a plain message.
    pub relations: SendRelations,
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
    /// The seq of the message this one replies to: a message of this conversation the sender
    /// may see, not recalled (docs/RELATIONS.md).
    #[serde(default)]
    #[schema(minimum = 1)]
    reply_to: Option<i64>,
    /// The seq of the root of the thread this message replies in; a reply in a thread cannot
    /// root one.
    #[serde(default)]
    #[schema(minimum = 1)]
    thread_root: Option<i64>,
    /// Users to mention beside the body's `@user` words; only current members other than the
    /// sender are kept.
    #[serde(default)]
    #[schema(max_items = 64)]
    mentions: Option<Vec<String>>,
    /// Media ids the sender uploaded (`POST /v1/media`), each once; with any, `body` may be
    /// empty (docs/MEDIA.md).
    #[serde(default)]
    #[schema(max_items = 10)]
    attachments: Option<Vec<String>>,
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
            relations: SendRelations::default(),
        })
    }

    /// A send that may carry attachments, whose body may then be empty; the attachments are
    /// checked after the body.
    pub fn parse(
        conv_id: ConvId,
        client_msg_id: &str,
        body: &str,
        body_bytes_max: usize,
        attachments: Option<&[String]>,
    ) -> Result<Self, ApiError> {
        let attachments = attachments.unwrap_or_default();
        if attachments.is_empty() {
            return Self::new(conv_id, client_msg_id, body, body_bytes_max);
        }
        let client_msg_id = fields::client_msg_id(client_msg_id)?;
        let body = fields::caption(body, body_bytes_max)?;
        let relations = SendRelations {
            attachments: fields::attachments(attachments)?,
            ..SendRelations::default()
        };
        Ok(Self {
            conv_id,
            client_msg_id,
            body,
            relations,
        })
    }

    /// The send with its relations, parsed after its other fields.
    pub fn with_relations(
        mut self,
        reply_to: Option<i64>,
        thread_root: Option<i64>,
        mentions: Option<&[String]>,
    ) -> Result<Self, ApiError> {
        let attachments = std::mem::take(&mut self.relations.attachments);
        self.relations = fields::relations(reply_to, thread_root, mentions)?;
        self.relations.attachments = attachments;
        Ok(self)
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
        Self::parse(
            conv_id,
            &req.client_msg_id,
            &req.body,
            body_bytes_max,
            req.attachments.as_deref(),
        )?
        .with_relations(req.reply_to, req.thread_root, req.mentions.as_deref())
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
            service::send(
                state,
                device,
                self.conv_id,
                self.client_msg_id,
                self.body,
                self.relations,
            )
            .await
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
