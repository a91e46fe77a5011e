//! What the membership changes share (join, leave and remove, set role): the primitives of
//! their transactions and the lock every one of them starts with. Each allocates its seq from
//! the counter messages use (P4) and opens or closes a period (P3).

use chrono::{DateTime, Utc};
use parley_domain::decide::membership::Parties;
use parley_domain::decide::{LogCounter, Slot};
use parley_domain::membership::CurrentMember;
use parley_domain::{ConvId, ConvKind, DeliveryMode, Rejection, Role, UserId};

use super::{StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::{rows, sql};

/// A join or a leave to append: `actor` adds or removes `target` (themselves when they leave).
pub(crate) struct MemberChange<'a> {
    pub conv_id: &'a ConvId,
    pub slot: Slot,
    pub actor: &'a UserId,
    pub target: &'a UserId,
}

/// The conversation as a membership change reads it under its lock.
pub(crate) struct Locked {
    pub kind: ConvKind,
    pub counter: LogCounter,
    pub member_count: usize,
    pub delivery_mode: DeliveryMode,
    /// The stored member count at which this group becomes pull.
    pub pull_threshold: Option<u32>,
    /// The MLS epoch of an encrypted conversation (docs/E2EE.md); `None` for a plain one.
    pub mls_epoch: Option<i64>,
}

pub(crate) trait MembershipTx: WriteTx {
    /// Locks conversation `$1` for this transaction and reads `kind`, `next_seq`,
    /// `msg_count`, `member_count`, `delivery_mode`, `pull_threshold` and `mls_epoch` (integers as
    /// 64 bits).
    const LOCK_FOR_CHANGE_SQL: &'static str;

    /// Locks the conversation and reads it; `None` when it does not exist.
    fn lock_for_change(&mut self, conv_id: &ConvId) -> impl StoreFuture<Option<Locked>> {
        sql::conversation_row(
            self,
            Self::LOCK_FOR_CHANGE_SQL,
            conv_id.as_str(),
            rows::locked,
        )
    }
    /// The actor's and the target's open periods and whether the target is a user, read after
    /// the lock.
    fn parties(
        &mut self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> impl StoreFuture<Parties> {
        sql::parties(self, conv_id, actor, target)
    }
    /// Appends the join, opens the target's period at its seq as a member, advances the
    /// counter, counts one member more and switches the conversation to pull when `to_pull`.
    /// Answers the event's `created_at`.
    fn append_join(
        &mut self,
        join: &MemberChange<'_>,
        to_pull: bool,
    ) -> impl StoreFuture<DateTime<Utc>>;
    /// Appends the leave (or removal), closes the target's period at its seq (so the leaver
    /// sees their own leave and nothing after), advances the counter and counts one member
    /// fewer. Answers the event's `created_at`.
    fn append_leave(&mut self, leave: &MemberChange<'_>) -> impl StoreFuture<DateTime<Utc>>;
    /// The current members other than `leaver`, with their roles and the start of their period.
    fn remaining_members(
        &mut self,
        conv_id: &ConvId,
        leaver: &UserId,
    ) -> impl StoreFuture<Vec<CurrentMember<UserId>>> {
        sql::remaining_members(self, conv_id, leaver)
    }
    /// Sets the role of `user`'s open period.
    fn set_open_role(
        &mut self,
        conv_id: &ConvId,
        user: &UserId,
        role: Role,
    ) -> impl StoreFuture<()> {
        sql::set_open_role(self, conv_id, user, role)
    }
    /// Stamps the conversation as changed for the sync feed (roles show in its member list).
    fn mark_changed(&mut self, conv_id: &ConvId) -> impl StoreFuture<()>;
}

/// Starts a membership change: a write transaction, the conversation locked and the parties
/// read. An unknown conversation answers like one the actor is no member of (P10), once the
/// parties are read as for a conversation that exists, so no sooner.
pub(super) async fn begin_change<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<(B::Tx, Locked, Parties), StoreError> {
    let mut tx = backend.begin_write().await?;
    let locked = tx.lock_for_change(conv_id).await?;
    let parties = tx.parties(conv_id, actor, target).await?;
    let locked = locked.ok_or(Rejection::NotMember)?;
    Ok((tx, locked, parties))
}
