//! A leave (`actor == target`) or a removal: a leave event at the next seq closes the target's
//! period; when the owner leaves, the group passes to the earliest-joined remaining admin, else
//! member (SPEC §4).

use parley_domain::decide::membership::{check_remove, owner_after_leave};
use parley_domain::{ConvId, Event, EventKind, Role, UserId};

use super::membership::{begin_change, MemberChange, MembershipTx};
use super::WriteTx;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::MembershipChange;

pub(crate) async fn remove_member<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<MembershipChange, StoreError> {
    let (mut tx, mut locked, parties) = begin_change(backend, conv_id, actor, target).await?;
    let target_role = check_remove(locked.kind, actor == target, parties)?;
    let leave = MemberChange {
        conv_id,
        slot: locked.counter.take_event(),
        actor,
        target,
    };
    let at = tx.append_leave(&leave).await?;
    // Only an owner's leave hands anything over, so only then are the others read.
    if target_role == Role::Owner {
        let remaining = tx.remaining_members(conv_id, target).await?;
        if let Some(owner) = owner_after_leave(target, target_role, &remaining) {
            tx.set_open_role(conv_id, &owner, Role::Owner).await?;
        }
    }
    tx.commit_or_unknown().await?;
    Ok(MembershipChange {
        event: Event::membership(conv_id, leave.slot.seq, EventKind::Leave, actor, target, at),
    })
}
