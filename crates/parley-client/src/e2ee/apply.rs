//! Reading an encrypted conversation: its events after the device's cursor, applied strictly
//! in seq order, since the server's order is the one order of Commits every member applies.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures::StreamExt as _;
use parley_wire::{DeviceRef, MlsAck};

use super::mls::{Changes, Incoming};
use super::{Content, Decrypted, E2ee, E2eeError, Inner, Result};
use crate::error::code;
use crate::types::{Event, EventKind};

/// Why a message sent after this device left its group cannot be read.
const REMOVED: &str = "this device was removed from the group";

impl E2ee {
    /// Applies every event after the conversation's cursor, saving the key store after each
    /// one that changed it and once more at the end for the cursor.
    pub(super) async fn apply_new(&self, inner: &mut Inner, conv_id: &str) -> Result<()> {
        let cursor = inner.meta.conv(conv_id).cursor;
        let mut pages = std::pin::pin!(self.client.event_pages(conv_id, cursor));
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                // A user removed from the conversation reads no further; the Commit that
                // removed this device came before that and was applied.
                Err(e)
                    if e.code() == Some(code::NOT_MEMBER)
                        && inner.device.has_group(conv_id.as_bytes())? =>
                {
                    break
                }
                Err(e) => return Err(e.into()),
            };
            for event in &page.events {
                if event.seq <= inner.meta.conv(conv_id).cursor {
                    continue;
                }
                let changed = apply_event(inner, conv_id, event)?;
                inner.meta.conv(conv_id).cursor = event.seq;
                if changed {
                    inner.save()?;
                }
            }
            let state = inner.meta.conv(conv_id);
            if page.through_seq > state.cursor {
                state.cursor = page.through_seq;
            }
            inner.save()?;
        }
        Ok(())
    }
}

fn is_me(inner: &Inner, event: &Event) -> bool {
    let me = inner.device.me();
    event.sender_user.as_deref() == Some(me.user_id.as_str())
        && event.sender_device.as_deref() == Some(me.device_id.as_str())
}

fn item(event: &Event, content: Content) -> Decrypted {
    Decrypted {
        seq: event.seq,
        sender_user: event.sender_user.clone().unwrap_or_default(),
        sender_device: event.sender_device.clone().unwrap_or_default(),
        content,
    }
}

fn undecryptable(event: &Event, reason: impl Into<String>) -> Decrypted {
    item(
        event,
        Content::Undecryptable {
            reason: reason.into(),
        },
    )
}

fn members_changed(event: &Event, changes: Changes) -> Option<Decrypted> {
    if changes.added.is_empty() && changes.removed.is_empty() {
        return None;
    }
    Some(item(
        event,
        Content::MembersChanged {
            added: changes.added,
            removed: changes.removed,
        },
    ))
}

fn message_bytes(event: &Event) -> Result<Vec<u8>> {
    let text = event
        .mls_message
        .as_deref()
        .ok_or_else(|| E2eeError::decode("an MLS event", "it carries no message"))?;
    BASE64
        .decode(text)
        .map_err(|e| E2eeError::decode("an MLS event's message", e))
}

/// Applies one event; answers whether the device's state changed.
fn apply_event(inner: &mut Inner, conv_id: &str, event: &Event) -> Result<bool> {
    let group = conv_id.as_bytes();
    let active = inner.device.is_active(group)?;
    let result = match event.kind {
        EventKind::MlsWelcome if !active => welcome(inner, event)?,
        EventKind::MlsCommit if active => commit(inner, conv_id, event)?,
        EventKind::MlsApplication if is_me(inner, event) => own_message(inner, conv_id, event),
        EventKind::MlsApplication if active => application(inner, group, event),
        // Messages after this device's removal, which it is no longer entitled to read.
        EventKind::MlsApplication if inner.device.has_group(group)? => {
            Some(undecryptable(event, REMOVED))
        }
        EventKind::MlsProposal if active && !is_me(inner, event) => {
            if let Err(e) = message_bytes(event).and_then(|m| inner.device.process(group, &m)) {
                tracing::warn!(conv_id, seq = event.seq, "an MLS proposal was refused: {e}");
            }
            return Ok(true);
        }
        // Joins and leaves follow the Commits; anything else is not for this device (a Welcome
        // for others, history from before it joined).
        _ => return Ok(false),
    };
    if let Some(item) = result {
        inner.meta.conv(conv_id).inbox.push(item);
    }
    Ok(true)
}

/// A Welcome: joins when it names this device (only the named devices get its message).
fn welcome(inner: &mut Inner, event: &Event) -> Result<Option<Decrypted>> {
    let me = inner.device.me().clone();
    if event.mls_message.is_none() || !event.mls_devices.contains(&me) {
        return Ok(None);
    }
    let joined = message_bytes(event).and_then(|w| inner.device.join(&w));
    Ok(Some(match joined {
        Ok(_) => item(event, Content::Joined),
        Err(e) => undecryptable(event, format!("cannot join from the Welcome: {e}")),
    }))
}

/// A Commit: one for an epoch this device has left is already applied (its own, or from
/// before it joined); one for the current epoch is applied now.
fn commit(inner: &mut Inner, conv_id: &str, event: &Event) -> Result<Option<Decrypted>> {
    let group = conv_id.as_bytes();
    let epoch = inner.device.epoch(group)?;
    let made_in_i64 = event.mls_epoch.unwrap_or(-1);
    let Ok(made_in) = u64::try_from(made_in_i64) else {
        return Ok(Some(undecryptable(event, "a Commit without its epoch")));
    };
    if made_in < epoch {
        return Ok(None);
    }
    if made_in > epoch {
        return Ok(Some(undecryptable(
            event,
            format!(
                "a Commit of epoch {made_in} while the group is at {epoch}: a Commit is missing"
            ),
        )));
    }
    let pending = inner.meta.conv(conv_id).pending.clone();
    let own_pending = pending
        .as_ref()
        .filter(|p| Some(&p.post.client_msg_id) == event.client_msg_id.as_ref());
    if is_me(inner, event) {
        let Some(_) = own_pending else {
            return Ok(Some(undecryptable(
                event,
                "this device's own Commit, which it no longer holds",
            )));
        };
        // The answer to this device's own Commit was lost: the log says it won.
        let merged = inner.device.merge_pending(group);
        record_landed(inner, conv_id, event, made_in_i64 + 1);
        inner.meta.conv(conv_id).pending = None;
        return Ok(match merged {
            Ok(changes) => members_changed(event, changes),
            Err(e) => Some(undecryptable(
                event,
                format!("cannot merge this device's own Commit: {e}"),
            )),
        });
    }
    // Another member's Commit won this epoch: this device's own, if any, lost.
    if inner.device.has_pending_commit(group)? {
        inner.device.clear_pending(group)?;
    }
    if pending.is_some_and(|p| p.post.kind == parley_wire::MlsKind::Commit) {
        inner.meta.conv(conv_id).pending = None;
    }
    let processed = message_bytes(event).and_then(|m| inner.device.process(group, &m));
    Ok(match processed {
        Ok(Incoming::Commit { changes, .. }) => members_changed(event, changes),
        Ok(other) => Some(undecryptable(
            event,
            format!("a Commit event holding {other:?}"),
        )),
        Err(e) => Some(undecryptable(
            event,
            format!("cannot apply the Commit: {e}"),
        )),
    })
}

/// This device's own message: its plaintext was kept when it was sent.
fn own_message(inner: &mut Inner, conv_id: &str, event: &Event) -> Option<Decrypted> {
    let client_msg_id = event.client_msg_id.clone().unwrap_or_default();
    let epoch = event.mls_epoch.unwrap_or_default();
    record_landed(inner, conv_id, event, epoch);
    let state = inner.meta.conv(conv_id);
    if state
        .pending
        .as_ref()
        .is_some_and(|p| p.post.client_msg_id == client_msg_id)
    {
        state.pending = None;
    }
    Some(match state.sent.remove(&client_msg_id) {
        Some(text) => item(event, Content::Text(text)),
        None => undecryptable(
            event,
            "this device's own message, whose text it no longer holds",
        ),
    })
}

/// Another member's message, decrypted; the sender MLS authenticated must be the device the
/// server says posted it.
fn application(inner: &mut Inner, group: &[u8], event: &Event) -> Option<Decrypted> {
    let processed = message_bytes(event).and_then(|m| inner.device.process(group, &m));
    Some(match processed {
        Ok(Incoming::Application { sender, plaintext }) => {
            let posted_by = DeviceRef {
                user_id: event.sender_user.clone().unwrap_or_default(),
                device_id: event.sender_device.clone().unwrap_or_default(),
            };
            if sender != posted_by {
                undecryptable(
                    event,
                    "signed by another device than the one that posted it",
                )
            } else {
                match String::from_utf8(plaintext) {
                    Ok(text) => item(event, Content::Text(text)),
                    Err(_) => undecryptable(event, "the plaintext is not UTF-8"),
                }
            }
        }
        Ok(other) => undecryptable(event, format!("an application event holding {other:?}")),
        Err(e) => undecryptable(event, format!("cannot decrypt: {e}")),
    })
}

/// Notes where a write of this device landed, for a write whose answer was lost.
fn record_landed(inner: &mut Inner, conv_id: &str, event: &Event, epoch_after: i64) {
    let Some(client_msg_id) = event.client_msg_id.clone() else {
        return;
    };
    let ack = MlsAck {
        conv_id: conv_id.to_owned(),
        seq: event.seq,
        message_id: event.message_id.clone().unwrap_or_default(),
        dup: true,
        epoch: epoch_after,
        welcome_seq: None,
    };
    inner
        .landed
        .insert((conv_id.to_owned(), client_msg_id), ack);
}
