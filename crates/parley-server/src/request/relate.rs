//! Edits and reactions (docs/RELATIONS.md): `POST …/events/{seq}/edit`,
//! `PUT`/`DELETE …/events/{seq}/reactions/{key}`, or the `edit` and `react` frames.

use parley_domain::{Body, ClientMsgId, ConvId, ReactionKey};
use parley_store::{DeviceIdentity, EditRequest, ReactRequest};
use parley_wire::{EditAck, ReactionAck};
use serde::Deserialize;

use super::fields;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvSeqKeyPath, ConvSeqPath, DeferredPath};
use crate::rate_limit::LimitKind;
use crate::service;
use crate::state::AppState;

/// A checked edit of the caller's message at `target_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditMessage {
    pub conv_id: ConvId,
    pub target_seq: i64,
    pub client_msg_id: ClientMsgId,
    pub body: Body,
}

/// The HTTP body of an edit.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    /// The request key of the edit: a retry sends the same key. Edits share the keys of
    /// sends, so a key used for a message is a mismatch here.
    #[schema(min_length = 1, max_length = 128)]
    client_msg_id: String,
    /// The new body, under the rules of a message body.
    body: String,
}

impl EditMessage {
    pub fn new(
        conv_id: ConvId,
        target_seq: i64,
        client_msg_id: &str,
        body: &str,
        body_bytes_max: usize,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            conv_id,
            target_seq: positive_seq(target_seq)?,
            client_msg_id: fields::client_msg_id(client_msg_id)?,
            body: fields::body(body, body_bytes_max)?,
        })
    }

    /// An oversized body first (413), then the path, the strict parse and the fields (400).
    pub fn from_http(
        path: DeferredPath<ConvSeqPath>,
        body: &JsonBody,
        body_bytes_max: usize,
    ) -> Result<Self, ApiError> {
        fields::body_size(body.value(), body_bytes_max)?;
        let (conv_id, seq) = path.into_inner()?.ids()?;
        let req: EditBody = body.parse()?;
        Self::new(conv_id, seq, &req.client_msg_id, &req.body, body_bytes_max)
    }

    /// Spends a token of the device's send budget, like a send, then edits.
    pub async fn run(self, state: &AppState, device: &DeviceIdentity) -> Result<EditAck, ApiError> {
        state.rate_limiter().check_device(LimitKind::Send, device)?;
        let req = EditRequest::new(
            self.conv_id,
            device.user_id.clone(),
            device.device_id.clone(),
            self.client_msg_id,
            self.target_seq,
            self.body,
        );
        service::edit(state, &req).await
    }
}

/// A checked reaction: `added` for `PUT`, taken back for `DELETE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct React {
    pub conv_id: ConvId,
    pub target_seq: i64,
    pub key: ReactionKey,
    pub added: bool,
}

impl React {
    pub fn new(conv_id: ConvId, target_seq: i64, key: &str, added: bool) -> Result<Self, ApiError> {
        Ok(Self {
            conv_id,
            target_seq: positive_seq(target_seq)?,
            key: fields::reaction_key(key)?,
            added,
        })
    }

    pub fn from_http(path: DeferredPath<ConvSeqKeyPath>, added: bool) -> Result<Self, ApiError> {
        let path = path.into_inner()?;
        let (conv_id, seq) = path.ids()?;
        Self::new(conv_id, seq, &path.key, added)
    }

    /// Spends a token of the device's send budget, like a send, then reacts.
    pub async fn run(
        self,
        state: &AppState,
        device: &DeviceIdentity,
    ) -> Result<ReactionAck, ApiError> {
        state.rate_limiter().check_device(LimitKind::Send, device)?;
        let req = ReactRequest {
            conv_id: self.conv_id,
            user: device.user_id.clone(),
            target_seq: self.target_seq,
            key: self.key,
            added: self.added,
        };
        service::react(state, &req).await
    }
}

/// The seq of a message: 1 or more (no event has seq 0).
fn positive_seq(seq: i64) -> Result<i64, ApiError> {
    if seq < 1 {
        return Err(ApiError::bad_request(
            "`seq` must be the seq of a message, 1 or more",
        ));
    }
    Ok(seq)
}
