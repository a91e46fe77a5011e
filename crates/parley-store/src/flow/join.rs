//! Adding a member: a join event at the next seq and a new period; a group whose mode the
//! member count decides switches to pull at the join that reaches its threshold.

use parley_domain::decide::membership::{check_add, mode_after_join};
use parley_domain::{ConvId, Event, EventKind, UserId};

use super::membership::{begin_change, MemberChange, MembershipTx};
use super::WriteTx;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::MembershipChange;

pub(crate) async fn add_member<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<MembershipChange, StoreError> {
    let (mut tx, mut locked, parties) = begin_change(backend, conv_id, actor, target).await?;
    check_add(locked.kind, parties)?;
    let mode = mode_after_join(
        locked.delivery_mode,
        locked.pull_threshold,
        locked.member_count + 1,
    );
    let join = MemberChange {
        conv_id,
        slot: locked.counter.take_event(),
        actor,
        target,
    };
    let at = tx.append_join(&join, mode != locked.delivery_mode).await?;
    tx.commit_or_unknown().await?;
    Ok(MembershipChange {
        event: Event::membership(conv_id, join.slot.seq, EventKind::Join, actor, target, at),
    })
}
