//! The MLS Delivery Service (docs/E2EE.md, RFC 9750 §5): one transaction under the
//! conversation's lock appends a member's MLS message, and for a Commit the joins and leaves it
//! declares and its Welcome, and advances the epoch. The epoch check runs under the lock, so of
//! two Commits for one epoch exactly one is written and the other learns its seq: every member
//! applies the same sequence of Commits.

use chrono::{DateTime, Utc};
use parley_domain::decide::membership::{
    check_add, check_remove, mode_after_join, owner_after_leave,
};
use parley_domain::decide::send::{decide, SendDecision};
use parley_domain::decide::Slot;
use parley_domain::event::{MlsFields, WelcomeDevice};
use parley_domain::{ConvId, ConvKind, Event, EventKind, Rejection, Role, UserId};
use uuid::Uuid;

use super::membership::{Locked, MemberChange, MembershipTx};
use super::{StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::mls_types::{MlsOutcome, MlsRequest};
use crate::query::Sql;
use crate::query::{Arg, SqlRow};
use crate::sql;

/// An MLS event to append at `slot`.
pub(crate) struct NewMlsEvent<'a> {
    pub conv_id: &'a ConvId,
    pub slot: Slot,
    pub kind: EventKind,
    pub sender_user: &'a UserId,
    pub sender_device: &'a str,
    /// The request key and fingerprint: the posted message has them, a Welcome has none.
    pub client_msg_id: Option<&'a str>,
    pub request_hash: Option<&'a str>,
    pub message_id: Uuid,
    pub mls_epoch: i64,
    pub mls_message: &'a str,
    /// A Welcome's devices, as a JSON array.
    pub mls_devices: Option<&'a str>,
    /// The conversation's epoch after this event.
    pub epoch_after: i64,
}

/// The backend's part: the event row and the conversation's counter, epoch and change stamp.
pub(crate) trait MlsTx: MembershipTx {
    /// Appends `event`, advances the counter past it, sets the conversation's epoch to
    /// `epoch_after` and stamps it changed. Answers the event's `created_at`.
    fn append_mls_event(&mut self, event: &NewMlsEvent<'_>) -> impl StoreFuture<DateTime<Utc>>;
}

/// The Commit that ended epoch `$2`.
const COMMIT_OF_EPOCH_SQL: &str = "SELECT seq FROM events
   WHERE conv_id = $1 AND kind = 'mls_commit' AND mls_epoch = $2";
const LAST_COMMIT_SQL: &str = "SELECT COALESCE(max(seq), 0) AS seq FROM events
   WHERE conv_id = $1 AND kind = 'mls_commit'";
/// What a replayed request needs to answer as it did the first time.
const POSTED_SQL: &str = "SELECT kind, mls_epoch FROM events WHERE conv_id = $1 AND seq = $2";
const WELCOME_OF_EPOCH_SQL: &str = "SELECT seq FROM events
   WHERE conv_id = $1 AND kind = 'mls_welcome' AND mls_epoch = $2";

async fn opt_seq(
    tx: &mut impl Sql,
    statement: &'static str,
    conv: &str,
    epoch: i64,
) -> Result<Option<i64>, StoreError> {
    let args = [Arg::Text(conv), Arg::Int(epoch)];
    tx.fetch_optional(statement, &args)
        .await?
        .map(|r| r.int("seq"))
        .transpose()
}

/// The refusal of a message made in `sent_in` while the conversation is at `epoch`.
async fn epoch_conflict(
    tx: &mut impl Sql,
    conv: &str,
    sent_in: i64,
    epoch: i64,
) -> Result<StoreError, StoreError> {
    let winning_seq = if sent_in < epoch {
        opt_seq(tx, COMMIT_OF_EPOCH_SQL, conv, sent_in).await?
    } else {
        None
    };
    let winning_seq = match winning_seq {
        Some(seq) => seq,
        None => {
            let row = tx
                .fetch_optional(LAST_COMMIT_SQL, &[Arg::Text(conv)])
                .await?;
            row.map(|r| r.int("seq")).transpose()?.unwrap_or(0)
        }
    };
    Ok(Rejection::EpochConflict {
        sent_in,
        epoch,
        winning_seq,
    }
    .into())
}

/// The answer of a request whose key was already written.
async fn replayed(
    tx: &mut impl Sql,
    req: &MlsRequest,
    (seq, message_id, purged): (i64, Uuid, bool),
    current_epoch: i64,
) -> Result<MlsOutcome, StoreError> {
    let conv = req.conv_id.as_str();
    let posted = tx
        .fetch_optional(POSTED_SQL, &[Arg::Text(conv), Arg::Int(seq)])
        .await?;
    let (epoch, welcome_seq) = match posted {
        Some(row) if !purged && row.str("kind")? == "mls_commit" => {
            let made_in = row.int("mls_epoch")?;
            let welcome = opt_seq(tx, WELCOME_OF_EPOCH_SQL, conv, made_in + 1).await?;
            (made_in + 1, welcome)
        }
        Some(row) if !purged => (row.int("mls_epoch")?, None),
        _ => (current_epoch, None),
    };
    Ok(MlsOutcome {
        conv_id: req.conv_id.clone(),
        seq,
        message_id,
        dup: true,
        epoch,
        welcome_seq,
        events: Vec::new(),
    })
}

pub(crate) async fn post_mls<B: Backend>(
    backend: &B,
    req: &MlsRequest,
) -> Result<MlsOutcome, StoreError> {
    let conv = req.conv_id.as_str();
    let mut tx = backend.begin_write().await?;
    let locked = tx.lock_for_change(&req.conv_id).await?;
    let check = sql::key_check_of(
        &mut tx,
        conv,
        req.sender_user.as_str(),
        req.client_msg_id.as_str(),
    )
    .await?;
    let Some(mut locked) = locked else {
        return Err(Rejection::NotMember.into());
    };
    // The epoch was read with the lock: no Commit can move it before this transaction ends.
    let current_epoch = locked.mls_epoch;
    match decide(&check, None, &req.request_hash)? {
        SendDecision::Write => {}
        SendDecision::Replay {
            seq,
            message_id,
            purged,
        } => {
            let epoch = current_epoch.unwrap_or(0);
            return replayed(&mut tx, req, (seq, message_id, purged), epoch).await;
        }
        SendDecision::ReplayOfEarlier { .. } => {
            unreachable!("a lone MLS write has no earlier request")
        }
    }
    let (Some(epoch), ConvKind::Encrypted) = (current_epoch, locked.kind) else {
        return Err(Rejection::NotEncrypted.into());
    };
    if req.epoch != epoch && !backend.breaks().mls_any_epoch() {
        return Err(epoch_conflict(&mut tx, conv, req.epoch, epoch).await?);
    }
    let is_commit = req.kind == EventKind::MlsCommit;
    let epoch_after = if is_commit { epoch + 1 } else { epoch };
    let message_id = Uuid::new_v4();
    let slot = locked.counter.take_event();
    let posted = NewMlsEvent {
        conv_id: &req.conv_id,
        slot,
        kind: req.kind,
        sender_user: &req.sender_user,
        sender_device: req.sender_device.as_str(),
        client_msg_id: Some(req.client_msg_id.as_str()),
        request_hash: Some(req.request_hash.as_str()),
        message_id,
        mls_epoch: req.epoch,
        mls_message: &req.message,
        mls_devices: None,
        epoch_after,
    };
    let at = tx.append_mls_event(&posted).await?;
    let mut events = vec![Event {
        message_id: Some(message_id),
        sender_device: Some(req.sender_device.as_str().to_owned()),
        client_msg_id: Some(req.client_msg_id.as_str().to_owned()),
        ..Event::mls(
            &req.conv_id,
            slot.seq,
            req.kind,
            &req.sender_user,
            at,
            MlsFields {
                mls_epoch: req.epoch,
                mls_message: Some(req.message.clone()),
                mls_devices: Vec::new(),
            },
        )
    }];
    for user in &req.remove_users {
        events.push(remove(&mut tx, &mut locked, req, user).await?);
    }
    for user in &req.add_users {
        events.push(add(&mut tx, &mut locked, req, user).await?);
    }
    let mut welcome_seq = None;
    if let Some((message, devices)) = &req.welcome {
        check_welcome_devices(&mut tx, req, devices).await?;
        let devices_json = serde_json::to_string(devices)
            .map_err(|e| StoreError::Unavailable(format!("welcome devices: {e}")))?;
        let slot = locked.counter.take_event();
        let welcome = NewMlsEvent {
            conv_id: &req.conv_id,
            slot,
            kind: EventKind::MlsWelcome,
            sender_user: &req.sender_user,
            sender_device: req.sender_device.as_str(),
            client_msg_id: None,
            request_hash: None,
            message_id: Uuid::new_v4(),
            mls_epoch: epoch_after,
            mls_message: message,
            mls_devices: Some(&devices_json),
            epoch_after,
        };
        let at = tx.append_mls_event(&welcome).await?;
        welcome_seq = Some(slot.seq);
        events.push(Event {
            message_id: Some(welcome.message_id),
            sender_device: Some(req.sender_device.as_str().to_owned()),
            ..Event::mls(
                &req.conv_id,
                slot.seq,
                EventKind::MlsWelcome,
                &req.sender_user,
                at,
                MlsFields {
                    mls_epoch: epoch_after,
                    mls_message: Some(message.clone()),
                    mls_devices: devices.clone(),
                },
            )
        });
    }
    tx.commit_or_unknown().await?;
    Ok(MlsOutcome {
        conv_id: req.conv_id.clone(),
        seq: slot.seq,
        message_id,
        dup: false,
        epoch: epoch_after,
        welcome_seq,
        events,
    })
}

/// A user a Commit adds: the same rules as an add to a group (an owner or admin adds a user who
/// is not a member), then a join at the next seq.
async fn add<T: MlsTx>(
    tx: &mut T,
    locked: &mut Locked,
    req: &MlsRequest,
    user: &UserId,
) -> Result<Event, StoreError> {
    let parties = tx.parties(&req.conv_id, &req.sender_user, user).await?;
    check_add(ConvKind::Group, parties)?;
    locked.member_count += 1;
    let mode = mode_after_join(
        locked.delivery_mode,
        locked.pull_threshold,
        locked.member_count,
    );
    let join = MemberChange {
        conv_id: &req.conv_id,
        slot: locked.counter.take_event(),
        actor: &req.sender_user,
        target: user,
    };
    let at = tx.append_join(&join, mode != locked.delivery_mode).await?;
    locked.delivery_mode = mode;
    Ok(Event::membership(
        &req.conv_id,
        join.slot.seq,
        EventKind::Join,
        &req.sender_user,
        user,
        at,
    ))
}

/// A user a Commit removes: the rules of a removal from a group, never the committer (a member
/// leaves by a proposal that another member commits, RFC 9420 §12.1.3).
async fn remove<T: MlsTx>(
    tx: &mut T,
    locked: &mut Locked,
    req: &MlsRequest,
    user: &UserId,
) -> Result<Event, StoreError> {
    if *user == req.sender_user {
        return Err(
            Rejection::BadRequest("a Commit cannot remove its own committer".into()).into(),
        );
    }
    let parties = tx.parties(&req.conv_id, &req.sender_user, user).await?;
    let role = check_remove(ConvKind::Group, false, parties)?;
    let leave = MemberChange {
        conv_id: &req.conv_id,
        slot: locked.counter.take_event(),
        actor: &req.sender_user,
        target: user,
    };
    let at = tx.append_leave(&leave).await?;
    locked.member_count = locked.member_count.saturating_sub(1);
    if role == Role::Owner {
        let remaining = tx.remaining_members(&req.conv_id, user).await?;
        if let Some(owner) = owner_after_leave(user, role, &remaining) {
            tx.set_open_role(&req.conv_id, &owner, Role::Owner).await?;
        }
    }
    Ok(Event::membership(
        &req.conv_id,
        leave.slot.seq,
        EventKind::Leave,
        &req.sender_user,
        user,
        at,
    ))
}

/// A Welcome goes only to devices of members (after the Commit's joins and leaves), so it
/// cannot be used to show anything to an outsider. Users the Commit added are members; any
/// other is read once, however many of their devices the Welcome names.
async fn check_welcome_devices<T: MlsTx>(
    tx: &mut T,
    req: &MlsRequest,
    devices: &[WelcomeDevice],
) -> Result<(), StoreError> {
    let mut users: Vec<&str> = devices.iter().map(|d| d.user_id.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    for user in users {
        if req.add_users.iter().any(|u| u.as_str() == user) {
            continue;
        }
        let user = UserId::from_trusted(user.to_owned());
        let parties = tx.parties(&req.conv_id, &req.sender_user, &user).await?;
        if parties.target_role.is_none() {
            return Err(Rejection::BadRequest(format!(
                "the Welcome names a device of {user}, who is not a member after the Commit"
            ))
            .into());
        }
    }
    Ok(())
}

const IS_ENCRYPTED_SQL: &str =
    "SELECT CAST(CASE WHEN mls_epoch IS NULL THEN 0 ELSE 1 END AS BIGINT) AS encrypted
       FROM conversations WHERE conv_id = $1";

pub(crate) async fn is_encrypted<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
) -> Result<Option<bool>, StoreError> {
    let mut conn = backend.connection().await?;
    let row = conn
        .fetch_optional(IS_ENCRYPTED_SQL, &[Arg::Text(conv_id.as_str())])
        .await?;
    row.map(|r| Ok(r.int("encrypted")? != 0)).transpose()
}
