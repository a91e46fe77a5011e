//! The writes that name an earlier message (docs/RELATIONS.md), each one transaction under the
//! conversation's lock like a send: a send with a reply, a thread or mentions; an edit; a
//! reaction added or taken back. Each appends one event at `next_seq` and keeps the derived
//! state a read folds into the target (its body and `edited_at`, its reaction rows, its thread
//! summary, the mention rows) in the same transaction, so no committed state ever has one
//! without the other. Recall and retention take that state away again (`forget_recalled`,
//! `forget_purged`).

use chrono::{DateTime, Utc};
use parley_domain::decide::relate::{
    check_edit, check_send_targets, decide_react, ReactDecision, ReactionState, TargetMessage,
};
use parley_domain::decide::send::{decide, SendDecision};
use parley_domain::decide::Slot;
use parley_domain::{ConvId, Event, EventKind, Period, Rejection, Relations, UserId};
use uuid::Uuid;

use super::send::{NewMessage, SendTx};
use super::{ReadTx, StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::query::{Arg, Sql, SqlRow};
use crate::rows;
use crate::sql;
use crate::types::{
    EditOutcome, EditRequest, ReactOutcome, ReactRequest, SendOutcome, SendRequest,
};

/// An `edit`, `react` or `unreact` event to append.
pub(crate) struct NewRelationEvent<'a> {
    pub conv_id: &'a ConvId,
    pub slot: Slot,
    pub kind: EventKind,
    pub actor: &'a UserId,
    /// An edit's device, request key, fingerprint and id (it is keyed like a send).
    pub device: Option<&'a str>,
    pub client_msg_id: Option<&'a str>,
    pub request_hash: Option<&'a str>,
    pub message_id: Option<Uuid>,
    /// An edit's new body.
    pub body: Option<&'a str>,
    pub target_seq: i64,
    /// A reaction's key.
    pub reaction_key: Option<&'a str>,
}

/// The backend's part: the event row, the counter and the conversation's change stamp.
pub(crate) trait RelateTx: SendTx {
    /// Appends `event`, advances the counter past it and stamps the conversation changed.
    /// Answers the event's `created_at`.
    fn append_relation_event(
        &mut self,
        event: &NewRelationEvent<'_>,
    ) -> impl StoreFuture<DateTime<Utc>>;
}

const RELATION_TARGET_SQL: &str = "SELECT kind, sender_user, recalled_at, thread_root
   FROM events WHERE conv_id = $1 AND seq = $2";

/// The periods a relation's target is checked against: the actor's, or under the test break
/// `no-target-visibility` one period over the whole log, so every target looks visible.
fn target_periods(periods: &[Period], breaks: Breaks) -> Vec<Period> {
    if breaks.no_target_visibility() {
        return vec![Period {
            from_seq: 1,
            to_seq: None,
        }];
    }
    periods.to_vec()
}

/// The event at `seq` as a relation sees it.
async fn relation_target(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    seq: i64,
) -> Result<Option<TargetMessage>, StoreError> {
    let args = [Arg::Text(conv_id.as_str()), Arg::Int(seq)];
    let found = tx.fetch_optional(RELATION_TARGET_SQL, &args).await?;
    found
        .map(|r| {
            Ok(TargetMessage {
                kind: rows::event_kind(r.str("kind")?)?,
                sender: r.opt_string("sender_user")?.map(UserId::from_trusted),
                recalled: !r.is_null("recalled_at")?,
                thread_root: r.opt_int("thread_root")?,
            })
        })
        .transpose()
}

async fn opt_target(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    seq: Option<i64>,
) -> Result<Option<TargetMessage>, StoreError> {
    match seq {
        Some(seq) => relation_target(tx, conv_id, seq).await,
        None => Ok(None),
    }
}

/// A mention is kept for a current member only: who is not one cannot read the message.
const INSERT_MENTION_SQL: &str = "INSERT INTO mentions (conv_id, user_id, seq)
   SELECT $1, $2, $3 WHERE EXISTS (
     SELECT 1 FROM membership_periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL)";
const SET_MESSAGE_RELATIONS_SQL: &str =
    "UPDATE events SET reply_to = $3, thread_root = $4, mentions = $5, attachments = $6
      WHERE conv_id = $1 AND seq = $2";
const THREAD_REPLY_SQL: &str =
    "UPDATE events SET thread_replies = thread_replies + 1, thread_latest_seq = $3
      WHERE conv_id = $1 AND seq = $2";

/// A send with a reply, a thread or mentions: the send transaction of `flow::send` with the
/// targets checked after the key (a retry is answered from its key first, as every send) and
/// the relations written beside the message. Plain sends never come here: they keep the
/// batched path.
pub(crate) async fn send_related<B: Backend>(
    backend: &B,
    req: &SendRequest,
) -> Result<SendOutcome, StoreError> {
    let mut tx = backend.begin_write().await?;
    let counter = tx.lock_for_send(&req.conv_id, backend.breaks()).await?;
    let check = tx.key_check(req).await?;
    let Some(mut counter) = counter else {
        return Err(Rejection::NotMember.into());
    };
    match decide(&check, None, &req.request_hash)? {
        SendDecision::Write => {}
        SendDecision::Replay {
            seq,
            message_id,
            purged,
        } => return Ok(req.replayed(seq, message_id, purged)),
        SendDecision::ReplayOfEarlier { .. } => {
            unreachable!("a lone send has no earlier request")
        }
    }
    let rel = &req.relations;
    let periods = tx.periods(&req.conv_id, &req.sender_user).await?;
    let reply_target = opt_target(&mut tx, &req.conv_id, rel.reply_to).await?;
    let thread_target = opt_target(&mut tx, &req.conv_id, rel.thread_root).await?;
    check_send_targets(
        &target_periods(&periods, backend.breaks()),
        rel,
        reply_target.as_ref(),
        thread_target.as_ref(),
    )?;
    let attachments =
        super::media::senders_media(&mut tx, &req.sender_user, &rel.attachments).await?;
    let slot = counter.take_msg();
    let message_id = Uuid::new_v4();
    let msg = NewMessage {
        req,
        slot,
        message_id,
    };
    let created_at = tx.insert_message(&msg).await?;
    let conv = req.conv_id.as_str();
    let mut mentioned = Vec::new();
    for user in rel.mentions.iter().filter(|u| **u != req.sender_user) {
        let args = [
            Arg::Text(conv),
            Arg::Text(user.as_str()),
            Arg::Int(slot.seq),
        ];
        if tx.execute(INSERT_MENTION_SQL, &args).await? > 0 {
            mentioned.push(user.clone());
        }
    }
    let mentions_json = (!mentioned.is_empty())
        .then(|| serde_json::to_string(&mentioned))
        .transpose()
        .map_err(|e| StoreError::Unavailable(format!("mentions: {e}")))?;
    let attachments_json = (!attachments.is_empty())
        .then(|| serde_json::to_string(&attachments))
        .transpose()
        .map_err(|e| StoreError::Unavailable(format!("attachments: {e}")))?;
    let args = [
        Arg::Text(conv),
        Arg::Int(slot.seq),
        Arg::OptInt(rel.reply_to),
        Arg::OptInt(rel.thread_root),
        Arg::OptText(mentions_json.as_deref()),
        Arg::OptText(attachments_json.as_deref()),
    ];
    tx.execute(SET_MESSAGE_RELATIONS_SQL, &args).await?;
    super::media::attach(
        &mut tx,
        conv,
        slot.seq,
        &attachments,
        created_at.timestamp_millis(),
    )
    .await?;
    if let Some(root) = rel.thread_root {
        let args = [Arg::Text(conv), Arg::Int(root), Arg::Int(slot.seq)];
        tx.execute(THREAD_REPLY_SQL, &args).await?;
    }
    tx.commit_or_unknown().await?;
    let mut outcome = req.committed(slot.seq, message_id, created_at);
    if let Some(event) = outcome.event.as_mut() {
        event.rel = Relations {
            reply_to: rel.reply_to,
            thread_root: rel.thread_root,
            mentions: mentioned,
            attachments,
            ..Relations::default()
        }
        .boxed();
    }
    Ok(outcome)
}

/// The edited message takes the new body and the edit's time.
const APPLY_EDIT_SQL: &str = "UPDATE events SET body = $3,
     edited_at = (SELECT e.created_at FROM events e WHERE e.conv_id = $1 AND e.seq = $4)
   WHERE conv_id = $1 AND seq = $2";

/// An edit: keyed and fingerprinted like a send (a retry answers the first edit with `dup`),
/// then the author's open period, the target (a visible `msg` of the author, not recalled);
/// appends the `edit` event and gives the target its new body in the same transaction.
pub(crate) async fn edit<B: Backend>(
    backend: &B,
    req: &EditRequest,
) -> Result<EditOutcome, StoreError> {
    let mut tx = backend.begin_write().await?;
    let counter = tx.lock_for_send(&req.conv_id, backend.breaks()).await?;
    let check = sql::key_check_of(
        &mut tx,
        req.conv_id.as_str(),
        req.sender_user.as_str(),
        req.client_msg_id.as_str(),
    )
    .await?;
    let Some(mut counter) = counter else {
        return Err(Rejection::NotMember.into());
    };
    let answer = |seq, message_id, dup, event| EditOutcome {
        conv_id: req.conv_id.clone(),
        seq,
        message_id,
        target_seq: req.target_seq,
        dup,
        event,
    };
    match decide(&check, None, &req.request_hash)? {
        SendDecision::Write => {}
        SendDecision::Replay {
            seq, message_id, ..
        } => return Ok(answer(seq, message_id, true, None)),
        SendDecision::ReplayOfEarlier { .. } => {
            unreachable!("an edit has no earlier request")
        }
    }
    let periods = tx.periods(&req.conv_id, &req.sender_user).await?;
    let target = relation_target(&mut tx, &req.conv_id, req.target_seq).await?;
    check_edit(
        &target_periods(&periods, backend.breaks()),
        &req.sender_user,
        req.target_seq,
        target.as_ref(),
    )?;
    let slot = counter.take_event();
    let message_id = Uuid::new_v4();
    let new = NewRelationEvent {
        conv_id: &req.conv_id,
        slot,
        kind: EventKind::Edit,
        actor: &req.sender_user,
        device: Some(req.sender_device.as_str()),
        client_msg_id: Some(req.client_msg_id.as_str()),
        request_hash: Some(req.request_hash.as_str()),
        message_id: Some(message_id),
        body: Some(req.body.as_str()),
        target_seq: req.target_seq,
        reaction_key: None,
    };
    let at = tx.append_relation_event(&new).await?;
    let args = [
        Arg::Text(req.conv_id.as_str()),
        Arg::Int(req.target_seq),
        Arg::Text(req.body.as_str()),
        Arg::Int(slot.seq),
    ];
    tx.execute(APPLY_EDIT_SQL, &args).await?;
    tx.commit_or_unknown().await?;
    let mut event = Event::edit(
        &req.conv_id,
        slot.seq,
        &req.sender_user,
        req.target_seq,
        req.body.as_str(),
        at,
    );
    event.sender_device = Some(req.sender_device.as_str().to_owned());
    event.client_msg_id = Some(req.client_msg_id.as_str().to_owned());
    event.message_id = Some(message_id);
    Ok(answer(slot.seq, message_id, false, Some(event)))
}

const REACTION_STATE_SQL: &str = "SELECT
     (SELECT r.seq FROM reactions r WHERE r.conv_id = $1 AND r.target_seq = $2
         AND r.reaction_key = $3 AND r.user_id = $4) AS mine,
     (SELECT count(*) FROM reactions r WHERE r.conv_id = $1 AND r.target_seq = $2
         AND r.reaction_key = $3) AS key_count,
     (SELECT count(DISTINCT r.reaction_key) FROM reactions r WHERE r.conv_id = $1
         AND r.target_seq = $2) AS keys";
const INSERT_REACTION_SQL: &str =
    "INSERT INTO reactions (conv_id, target_seq, reaction_key, user_id, seq)
     VALUES ($1, $2, $3, $4, $5)";
const DELETE_REACTION_SQL: &str = "DELETE FROM reactions
   WHERE conv_id = $1 AND target_seq = $2 AND reaction_key = $3 AND user_id = $4";

/// A reaction added or taken back: one per user and key, so a repeated `PUT` or `DELETE`
/// changes nothing and writes no event.
pub(crate) async fn react<B: Backend>(
    backend: &B,
    req: &ReactRequest,
) -> Result<ReactOutcome, StoreError> {
    let mut tx = backend.begin_write().await?;
    let counter = tx.lock_for_send(&req.conv_id, backend.breaks()).await?;
    let periods = tx.periods(&req.conv_id, &req.user).await?;
    let Some(mut counter) = counter else {
        return Err(Rejection::NotMember.into());
    };
    parley_domain::decide::relate::check_actor(&periods)?;
    let target = relation_target(&mut tx, &req.conv_id, req.target_seq).await?;
    let (conv, key, user) = (req.conv_id.as_str(), req.key.as_str(), req.user.as_str());
    let args = [
        Arg::Text(conv),
        Arg::Int(req.target_seq),
        Arg::Text(key),
        Arg::Text(user),
    ];
    let row = tx.fetch_optional(REACTION_STATE_SQL, &args).await?;
    let state = match row {
        Some(r) => ReactionState {
            mine: r.opt_int("mine")?,
            key_present: r.int("key_count")? > 0,
            keys: r.int("keys")?,
        },
        None => ReactionState::default(),
    };
    let visible = target_periods(&periods, backend.breaks());
    match decide_react(&visible, req.target_seq, target.as_ref(), state, req.added)? {
        ReactDecision::Unchanged(seq) => return Ok(ReactOutcome { seq, event: None }),
        ReactDecision::Write => {}
    }
    let slot = counter.take_event();
    let kind = if req.added {
        EventKind::React
    } else {
        EventKind::Unreact
    };
    let new = NewRelationEvent {
        conv_id: &req.conv_id,
        slot,
        kind,
        actor: &req.user,
        device: None,
        client_msg_id: None,
        request_hash: None,
        message_id: None,
        body: None,
        target_seq: req.target_seq,
        reaction_key: Some(key),
    };
    let at = tx.append_relation_event(&new).await?;
    if req.added {
        let args = [
            Arg::Text(conv),
            Arg::Int(req.target_seq),
            Arg::Text(key),
            Arg::Text(user),
            Arg::Int(slot.seq),
        ];
        tx.execute(INSERT_REACTION_SQL, &args).await?;
    } else {
        tx.execute(DELETE_REACTION_SQL, &args).await?;
    }
    tx.commit_or_unknown().await?;
    let event = Event::reaction(
        &req.conv_id,
        slot.seq,
        &req.user,
        req.target_seq,
        key,
        req.added,
        at,
    );
    Ok(ReactOutcome {
        seq: Some(slot.seq),
        event: Some(event),
    })
}

const ERASE_EDITS_SQL: &str = "UPDATE events SET body = NULL
   WHERE conv_id = $1 AND kind = 'edit' AND target_seq = $2";
const DELETE_REACTIONS_OF_SQL: &str =
    "DELETE FROM reactions WHERE conv_id = $1 AND target_seq = $2";
const DELETE_MENTIONS_AT_SQL: &str = "DELETE FROM mentions WHERE conv_id = $1 AND seq = $2";
const RECALLED_REPLY_SQL: &str = "UPDATE events SET thread_replies = thread_replies - 1
   WHERE conv_id = $1 AND thread_replies > 0
     AND seq = (SELECT r.thread_root FROM events r WHERE r.conv_id = $1 AND r.seq = $2)";

/// What a recall takes from the recalled message beside its body, in the recall's
/// transaction: the bodies of its edits, its reactions, its mentions, and its place in its
/// thread's reply count.
pub(crate) async fn forget_recalled<T: WriteTx>(
    tx: &mut T,
    conv_id: &ConvId,
    target_seq: i64,
) -> Result<(), StoreError> {
    let args = [Arg::Text(conv_id.as_str()), Arg::Int(target_seq)];
    tx.execute(ERASE_EDITS_SQL, &args).await?;
    tx.execute(DELETE_REACTIONS_OF_SQL, &args).await?;
    tx.execute(DELETE_MENTIONS_AT_SQL, &args).await?;
    tx.execute(RECALLED_REPLY_SQL, &args).await?;
    super::media::forget_recalled(tx, conv_id.as_str(), target_seq).await?;
    Ok(())
}

const ERASE_PURGED_EDITS_SQL: &str = "UPDATE events SET body = NULL
   WHERE conv_id = $1 AND kind = 'edit' AND target_seq <= $2 AND body IS NOT NULL";
const DELETE_PURGED_REACTIONS_SQL: &str =
    "DELETE FROM reactions WHERE conv_id = $1 AND target_seq <= $2";
const DELETE_PURGED_MENTIONS_SQL: &str = "DELETE FROM mentions WHERE conv_id = $1 AND seq <= $2";

/// What a purge through `through_seq` takes beside the events: the bodies of later edits of
/// purged messages (the edit events keep their seqs, P1), the reactions to purged messages
/// and the mentions of purged messages.
pub(crate) async fn forget_purged<T: ReadTx>(
    tx: &mut T,
    conv_id: &str,
    through_seq: i64,
) -> Result<(), StoreError> {
    let args = [Arg::Text(conv_id), Arg::Int(through_seq)];
    tx.execute(ERASE_PURGED_EDITS_SQL, &args).await?;
    tx.execute(DELETE_PURGED_REACTIONS_SQL, &args).await?;
    tx.execute(DELETE_PURGED_MENTIONS_SQL, &args).await?;
    super::media::forget_purged(tx, conv_id, through_seq).await?;
    Ok(())
}
