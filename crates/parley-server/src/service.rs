//! The writes and their side effects, shared by the HTTP handlers and the WebSocket gateway.
//!
//! Each function calls the store and, only once the store has returned a committed outcome,
//! announces it on the bus (P7: nothing is pushed before commit): a new event, or a notice of a
//! side effect that is not an event (a read position that moved, a revoked device token, a
//! changed role). Every gateway, this one included, learns of it from the bus only, so a
//! user's devices are told the same whichever gateway they are connected to. A replayed send
//! commits nothing and announces nothing. Keeping this in one place means no transport can
//! announce early or forget to announce.

use std::sync::Arc;

use parley_bus::Notice;
use parley_domain::{
    Body, ClientMsgId, ConvId, ConversationView, DeviceId, Event, Role, SendRelations, UserId,
};
use parley_store::token::new_device_token;
use parley_store::{DeviceIdentity, EditRequest, NewConversation, ReactRequest, SendRequest};
use parley_wire::{EditAck, ReactionAck, RecallAck, SendAck};

use crate::error::ApiError;
use crate::state::AppState;

/// The result of a create request: the conversation as the creator sees it, and whether this
/// request created it (false when a direct chat of the pair already existed).
#[derive(Debug, Clone)]
pub struct Created {
    pub created: bool,
    pub conversation: ConversationView,
}

pub(crate) fn announce(state: &AppState, event: Event) {
    // Before the ack: the event window answers no fetch without this event from now on.
    state.gateway().window().note(&event.conv_id, event.seq);
    if event.kind == parley_domain::EventKind::Msg {
        // The message is committed: its outbox row is there for the notification worker.
        state.push().wake();
    }
    state.bus().announce(Arc::new(event));
}

/// Sends a message as `identity`: the sender always comes from the token, never the request.
pub async fn send(
    state: &AppState,
    identity: &DeviceIdentity,
    conv_id: ConvId,
    client_msg_id: ClientMsgId,
    body: Body,
    relations: SendRelations,
) -> Result<SendAck, ApiError> {
    state
        .encrypted()
        .refuse_plaintext(state.store().as_ref(), &conv_id, &identity.user_id)
        .await?;
    let req = SendRequest::related(
        conv_id,
        identity.user_id.clone(),
        identity.device_id.clone(),
        client_msg_id,
        body,
        relations,
    );
    let outcome = state.store().send(&req).await?;
    tracing::debug!(seq = outcome.seq, dup = outcome.dup, "send committed");
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

/// Edits the caller's message (docs/RELATIONS.md); a new edit event is announced and pushed
/// like any event, a retry only answers the first.
pub async fn edit(state: &AppState, req: &EditRequest) -> Result<EditAck, ApiError> {
    let outcome = state.store().edit(req).await?;
    if let Some(event) = outcome.event {
        announce(state, event);
    }
    Ok(EditAck {
        conv_id: outcome.conv_id.into_string(),
        seq: outcome.seq,
        message_id: outcome.message_id.to_string(),
        target_seq: outcome.target_seq,
        dup: outcome.dup,
    })
}

/// Adds or takes back the caller's reaction; an event is announced only when one was written.
pub async fn react(state: &AppState, req: &ReactRequest) -> Result<ReactionAck, ApiError> {
    let outcome = state.store().react(req).await?;
    let changed = outcome.event.is_some();
    if let Some(event) = outcome.event {
        announce(state, event);
    }
    Ok(ReactionAck {
        conv_id: req.conv_id.as_str().to_owned(),
        target_seq: req.target_seq,
        key: req.key.as_str().to_owned(),
        seq: outcome.seq,
        changed,
    })
}

/// Moves the caller's read position (P8) and tells the user's other devices, on every gateway.
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
    state.bus().notify(Notice::ReadMoved {
        user_id: identity.user_id.clone(),
        conv_id: conv_id.clone(),
        read_seq,
        origin_device: identity.device_id.clone(),
    });
    Ok(read_seq)
}

/// Sets `target`'s role as `actor`; answers the role now held.
pub async fn set_role(
    state: &AppState,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
    role: Role,
) -> Result<Role, ApiError> {
    let role = state.store().set_role(conv_id, actor, target, role).await?;
    state.bus().notify(Notice::RoleChanged {
        conv_id: conv_id.clone(),
        user_id: target.clone(),
        role,
    });
    Ok(role)
}

/// Issues a fresh token for the device and answers it; only its hash is stored. Storing it
/// replaces the device's previous token, so the connections of that token close on every
/// gateway (4003).
pub async fn issue_device_token(
    state: &AppState,
    user_id: &UserId,
    device_id: &DeviceId,
) -> Result<String, ApiError> {
    let (token, token_hash) = new_device_token();
    state
        .store()
        .issue_device_token(user_id, device_id, &token_hash)
        .await?;
    announce_revoked(state, user_id, device_id);
    Ok(token)
}

/// Revokes the device's token; its connections close on every gateway (4003).
pub async fn revoke_device(
    state: &AppState,
    user_id: &UserId,
    device_id: &DeviceId,
) -> Result<(), ApiError> {
    state.store().revoke_device(user_id, device_id).await?;
    announce_revoked(state, user_id, device_id);
    Ok(())
}

fn announce_revoked(state: &AppState, user_id: &UserId, device_id: &DeviceId) {
    state.bus().notify(Notice::DeviceRevoked {
        user_id: user_id.clone(),
        device_id: device_id.clone(),
    });
}
