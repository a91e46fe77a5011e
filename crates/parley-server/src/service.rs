//! The writes that produce log events, shared by the HTTP handlers and the WebSocket gateway.
//!
//! Each function calls the store and, only once the store has returned a committed event,
//! announces it on the bus (P7: nothing is pushed before commit). A replayed send commits
//! nothing and announces nothing. Keeping this in one place means no transport can announce
//! early or forget to announce.

use std::sync::Arc;

use parley_domain::{Body, ClientMsgId, ConvId, ConversationView, Event, UserId};
use parley_store::{DeviceIdentity, NewConversation, SendRequest};
use parley_wire::{RecallAck, SendAck};

use crate::error::ApiError;
use crate::state::AppState;

/// The result of a create request: the conversation as the creator sees it, and whether this
/// request created it (false when a direct chat of the pair already existed).
#[derive(Debug, Clone)]
pub struct Created {
    pub created: bool,
    pub conversation: ConversationView,
}

fn announce(state: &AppState, event: Event) {
    state.bus().announce(Arc::new(event));
}

/// Sends a message as `identity`: the sender always comes from the token, never the request.
pub async fn send(
    state: &AppState,
    identity: &DeviceIdentity,
    conv_id: ConvId,
    client_msg_id: ClientMsgId,
    body: Body,
) -> Result<SendAck, ApiError> {
    let req = SendRequest::new(
        conv_id,
        identity.user_id.clone(),
        identity.device_id.clone(),
        client_msg_id,
        body,
    );
    let outcome = state.store().send(&req).await?;
    if let Some(event) = outcome.event {
        announce(state, event);
    }
    Ok(SendAck {
        conv_id: outcome.conv_id.into_string(),
        seq: outcome.seq,
        message_id: outcome.message_id.to_string(),
        dup: outcome.dup,
        purged: outcome.purged,
    })
}

/// Creates a conversation, announces each join event it wrote, and reads it back as the
/// creator sees it.
pub async fn create_conversation(
    state: &AppState,
    req: &NewConversation,
) -> Result<Created, ApiError> {
    let created = state.store().create_conversation(req).await?;
    for event in created.events {
        announce(state, event);
    }
    let conversation = state
        .store()
        .get_conversation(&created.conv_id, &req.creator)
        .await?;
    Ok(Created {
        created: created.created,
        conversation,
    })
}

/// Adds `target` as `actor`; answers the seq of the join event.
pub async fn add_member(
    state: &AppState,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<i64, ApiError> {
    let change = state.store().add_member(conv_id, actor, target).await?;
    let seq = change.event.seq;
    announce(state, change.event);
    Ok(seq)
}

/// Removes `target` as `actor`, or lets `actor` leave when both are the same user; answers the
/// seq of the leave event.
pub async fn remove_member(
    state: &AppState,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<i64, ApiError> {
    let change = state.store().remove_member(conv_id, actor, target).await?;
    let seq = change.event.seq;
    announce(state, change.event);
    Ok(seq)
}

/// Recalls `target_seq` as the caller; a newly written recall event is announced and so
/// pushed like any event, a repeated recall only answers the existing one.
pub async fn recall(
    state: &AppState,
    identity: &DeviceIdentity,
    conv_id: &ConvId,
    target_seq: i64,
) -> Result<RecallAck, ApiError> {
    let outcome = state
        .store()
        .recall(conv_id, &identity.user_id, target_seq, chrono::Utc::now())
        .await?;
    if let Some(event) = outcome.event {
        announce(state, event);
    }
    Ok(RecallAck {
        seq: outcome.seq,
        target_seq: outcome.target_seq,
    })
}

/// Moves the caller's read position (P8) and tells the user's other devices on this gateway.
pub async fn mark_read(
    state: &AppState,
    identity: &DeviceIdentity,
    conv_id: &ConvId,
    seq: i64,
) -> Result<i64, ApiError> {
    if seq < 0 {
        return Err(ApiError::bad_request("seq must not be negative"));
    }
    let read_seq = state
        .store()
        .mark_read(conv_id, &identity.user_id, seq)
        .await?;
    let frame = crate::gateway::frames::read(conv_id.as_str(), read_seq);
    state.gateway().hub().for_each_of(&identity.user_id, |c| {
        if c.device_id != identity.device_id {
            c.push(frame.clone());
        }
    });
    Ok(read_seq)
}
