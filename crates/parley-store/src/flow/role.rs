//! Setting a member's role (admin or member); only the owner may, and never of the owner.

use parley_domain::decide::membership::{check_new_role, check_set_role};
use parley_domain::{ConvId, Role, UserId};

use super::membership::{begin_change, MembershipTx};
use super::WriteTx;
use crate::backend::Backend;
use crate::error::StoreError;

pub(crate) async fn set_role<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
    role: Role,
) -> Result<Role, StoreError> {
    check_new_role(role)?;
    let (mut tx, locked, parties) = begin_change(backend, conv_id, actor, target).await?;
    check_set_role(locked.kind, parties, role)?;
    tx.set_open_role(conv_id, target, role).await?;
    tx.mark_changed(conv_id).await?;
    tx.commit_or_unknown().await?;
    Ok(role)
}
