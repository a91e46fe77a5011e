//! The recall transaction (SPEC §4): under the conversation's lock, check the actor's open
//! period, the target, its sender and the window; append the `recall` event at `next_seq` and
//! erase the target's body in the same transaction, so no committed state ever holds a recall
//! whose message still has its body. The target keeps its request hash, so an identical retry
//! of the original send is still `dup`.

use chrono::{DateTime, Utc};
use parley_domain::decide::recall::{check_actor, decide, RecallDecision, RecallTarget};
use parley_domain::decide::{LogCounter, Slot};
use parley_domain::{ConvId, Event, Rejection, UserId};

use super::{ReadTx, StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::RecallOutcome;
use crate::{rows, sql};

/// A recall to append: `actor` recalls their message at `target_seq`.
pub(crate) struct NewRecall<'a> {
    pub conv_id: &'a ConvId,
    pub slot: Slot,
    pub actor: &'a UserId,
    pub target_seq: i64,
}

/// The conversation as a recall reads it under its lock.
pub(crate) struct RecallLock {
    pub counter: LogCounter,
    pub recall_window_ms: i64,
}

pub(crate) trait RecallTx: WriteTx {
    /// Locks conversation `$1` for this transaction and reads `next_seq`, `msg_count` and
    /// `recall_window_ms`.
    const LOCK_FOR_RECALL_SQL: &'static str;

    /// Locks the conversation and reads it; `None` when it does not exist.
    fn lock_for_recall(&mut self, conv_id: &ConvId) -> impl StoreFuture<Option<RecallLock>> {
        sql::conversation_row(
            self,
            Self::LOCK_FOR_RECALL_SQL,
            conv_id.as_str(),
            rows::recall_lock,
        )
    }
    /// The event at `seq`, if stored.
    fn recall_target(
        &mut self,
        conv_id: &ConvId,
        seq: i64,
    ) -> impl StoreFuture<Option<RecallTarget>> {
        sql::recall_target(self, conv_id, seq)
    }
    /// The seq of the recall of the message at `target_seq`.
    fn existing_recall(
        &mut self,
        conv_id: &ConvId,
        target_seq: i64,
    ) -> impl StoreFuture<Option<i64>> {
        sql::existing_recall(self, conv_id, target_seq)
    }
    /// Appends the recall, erases the target's body (marking it recalled), advances the
    /// counter and stamps the conversation changed. Answers the event's `created_at`.
    fn append_recall(&mut self, recall: &NewRecall<'_>) -> impl StoreFuture<DateTime<Utc>>;
}

pub(crate) async fn recall<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    actor: &UserId,
    target_seq: i64,
    now: DateTime<Utc>,
) -> Result<RecallOutcome, StoreError> {
    let mut tx = backend.begin_write().await?;
    let locked = tx.lock_for_recall(conv_id).await?;
    // An unknown conversation answers like one the actor never joined (P10), after the same
    // statements.
    let periods = tx.periods(conv_id, actor).await?;
    let Some(mut locked) = locked else {
        return Err(Rejection::NotMember.into());
    };
    check_actor(&periods)?;
    let target = tx.recall_target(conv_id, target_seq).await?;
    let window_ms = locked.recall_window_ms;
    match decide(&periods, actor, target_seq, target.as_ref(), window_ms, now)? {
        RecallDecision::Write => {}
        RecallDecision::AlreadyRecalled => {
            let existing = tx.existing_recall(conv_id, target_seq).await?;
            let existing = existing.ok_or_else(|| {
                StoreError::Unavailable("a recalled message has no recall event".into())
            })?;
            return Ok(RecallOutcome {
                event: None,
                seq: existing,
                target_seq,
            });
        }
    }
    // A recall is no msg: it carries the msg count so far as its ordinal.
    let recall = NewRecall {
        conv_id,
        slot: locked.counter.take_event(),
        actor,
        target_seq,
    };
    let at = tx.append_recall(&recall).await?;
    super::relate::forget_recalled(&mut tx, conv_id, target_seq).await?;
    tx.commit_or_unknown().await?;
    let seq = recall.slot.seq;
    Ok(RecallOutcome {
        event: Some(Event::recall(conv_id, seq, actor, target_seq, at)),
        seq,
        target_seq,
    })
}
