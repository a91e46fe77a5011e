//! Creating a conversation: its row and one join per initial member in the given order, the
//! creator first at seq 1 (P4), in one transaction.

use std::iter;

use chrono::{DateTime, Utc};
use parley_domain::decide::membership::{
    initial_delivery, initial_role, new_conv_id, InitialDelivery,
};
use parley_domain::decide::LogCounter;
use parley_domain::{ConvId, ConvKind, Event, EventKind, Rejection, Role, UserId};

use super::{StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::query::{Arg, SqlRow};
use crate::rows;
use crate::types::{CreatedConversation, NewConversation};

/// A new conversation: its row and its initial members.
pub(crate) struct NewRow<'a> {
    pub conv_id: &'a ConvId,
    pub req: &'a NewConversation,
    pub delivery: InitialDelivery,
    /// The seq after the initial joins.
    pub next_seq: i64,
    /// Creator first, with their roles; member `i` joins at seq `i + 1`.
    pub members: &'a [(&'a UserId, Role)],
}

pub(crate) trait CreateTx: WriteTx {
    /// Counts the users among the ids of `$1` (`Arg::Texts`).
    const COUNT_USERS_SQL: &'static str;

    /// How many of `users` exist.
    fn count_users(&mut self, users: &[&UserId]) -> impl StoreFuture<usize> {
        let ids: Vec<String> = users.iter().map(|u| u.as_str().to_owned()).collect();
        async move {
            let found = self
                .fetch_optional(Self::COUNT_USERS_SQL, &[Arg::Texts(&ids)])
                .await?;
            let known = found.map(|r| r.int("known")).transpose()?.unwrap_or(0);
            rows::count(known)
        }
    }
    /// Inserts the conversation unless its id is taken (a concurrent create of the same id
    /// waits on the unique key and then sees it taken). Answers its `created_at`, `None` when
    /// the id was taken.
    fn insert_conversation(&mut self, row: &NewRow<'_>) -> impl StoreFuture<Option<DateTime<Utc>>>;
    /// The joins of the initial members, sent by the creator at `created_at`, and their
    /// periods with their roles.
    fn insert_initial_members(
        &mut self,
        row: &NewRow<'_>,
        created_at: DateTime<Utc>,
    ) -> impl StoreFuture<()>;
}

pub(crate) async fn create_conversation<B: Backend>(
    backend: &B,
    req: &NewConversation,
) -> Result<CreatedConversation, StoreError> {
    let conv_id = new_conv_id(req.kind, &req.creator, &req.members, req.conv_id.as_ref())?;
    let members: Vec<(&UserId, Role)> = iter::once(&req.creator)
        .chain(&req.members)
        .enumerate()
        .map(|(i, user)| (user, initial_role(req.kind, i)))
        .collect();
    let users: Vec<&UserId> = members.iter().map(|(user, _)| *user).collect();

    let mut tx = backend.begin_write().await?;
    if tx.count_users(&users).await? != users.len() {
        return Err(Rejection::NotFound("no such user").into());
    }
    let mut counter = LogCounter::new(1, 0);
    let seqs: Vec<i64> = members.iter().map(|_| counter.take_event().seq).collect();
    let row = NewRow {
        conv_id: &conv_id,
        req,
        delivery: initial_delivery(
            req.kind,
            req.delivery_mode,
            members.len(),
            req.pull_threshold,
        ),
        next_seq: counter.next_seq(),
        members: &members,
    };
    let Some(created_at) = tx.insert_conversation(&row).await? else {
        return match req.kind {
            // Asking again for a pair's direct chat returns the one that exists.
            ConvKind::Direct => Ok(CreatedConversation {
                conv_id,
                created: false,
                events: Vec::new(),
            }),
            ConvKind::Group | ConvKind::Encrypted => {
                Err(Rejection::AlreadyExists("conversation").into())
            }
        };
    };
    tx.insert_initial_members(&row, created_at).await?;
    tx.commit_or_unknown().await?;

    let events = users
        .iter()
        .zip(seqs)
        .map(|(user, seq)| {
            Event::membership(
                &conv_id,
                seq,
                EventKind::Join,
                &req.creator,
                user,
                created_at,
            )
        })
        .collect();
    Ok(CreatedConversation {
        conv_id,
        created: true,
        events,
    })
}
