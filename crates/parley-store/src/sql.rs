//! Statements whose text runs unchanged on PostgreSQL and on SQLite, each with its binds and
//! its decoding, written once over the query interface (`query.rs`). The flows' traits use
//! them as their primitives' default bodies, so a backend writes only what differs.

use chrono::{DateTime, Utc};
use parley_domain::decide::membership::Parties;
use parley_domain::decide::recall::RecallTarget;
use parley_domain::decide::send::KeyCheck;
use parley_domain::membership::CurrentMember;
use parley_domain::{ConvId, Event, MemberView, Period, Role, UserId};

use crate::error::StoreError;
use crate::query::{Arg, Sql, SqlRow};
use crate::read::{LogBounds, MemberRow};
use crate::rows;
use crate::types::{DeviceIdentity, SendRequest};

/// The text of [`SEND_KEY_CHECK_SQL`], as a literal for statements that extend it
/// (`sqlite/send_batch.rs`).
macro_rules! send_key_check_sql {
    () => {
        "SELECT 'event' AS src, seq, message_id, request_hash FROM events
   WHERE conv_id = $1 AND sender_user = $2 AND client_msg_id = $3
 UNION ALL
 SELECT 'tombstone', seq, message_id, request_hash FROM idem_tombstones
   WHERE conv_id = $1 AND sender_user = $2 AND client_msg_id = $3
 UNION ALL
 SELECT 'member', NULL, NULL, NULL FROM membership_periods
   WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL"
    };
}
pub(crate) use send_key_check_sql;

/// Steps 2–4 of a send in one round trip: the request key in the log and in the tombstones,
/// and the sender's open period. `$1` conv_id, `$2` sender_user, `$3` client_msg_id.
pub const SEND_KEY_CHECK_SQL: &str = send_key_check_sql!();

pub(crate) async fn key_check(
    tx: &mut impl Sql,
    req: &SendRequest,
) -> Result<KeyCheck, StoreError> {
    key_check_of(
        tx,
        req.conv_id.as_str(),
        req.sender_user.as_str(),
        req.client_msg_id.as_str(),
    )
    .await
}

/// The key check of any request keyed like a send (an edit shares the sends' keys).
pub(crate) async fn key_check_of(
    tx: &mut impl Sql,
    conv_id: &str,
    sender_user: &str,
    client_msg_id: &str,
) -> Result<KeyCheck, StoreError> {
    let args = [
        Arg::Text(conv_id),
        Arg::Text(sender_user),
        Arg::Text(client_msg_id),
    ];
    let found = tx.fetch_all(SEND_KEY_CHECK_SQL, &args).await?;
    let mut check = KeyCheck::default();
    for row in &found {
        check.record(rows::key_check(row)?);
    }
    Ok(check)
}

/// The range read of the log, ascending: one primary-key range scan (`04-history-uses-pk`
/// explains exactly this text). `$1` conv_id, `$2`–`$3` the seqs, `$4` how many.
pub const EVENTS_RANGE_ASC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at, \
     reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments, mls_epoch, mls_message, mls_devices \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq ASC LIMIT $4";
/// The range read of the log, descending (history pages).
pub const EVENTS_RANGE_DESC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at, \
     reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments, mls_epoch, mls_message, mls_devices \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq DESC LIMIT $4";

/// A thread's events in a seq range: the root (`$5`) and the replies in it.
pub const THREAD_RANGE_ASC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at, \
     reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments, mls_epoch, mls_message, mls_devices \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 AND (thread_root = $5 OR seq = $5) \
     ORDER BY seq ASC LIMIT $4";
pub const THREAD_RANGE_DESC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at, \
     reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments, mls_epoch, mls_message, mls_devices \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 AND (thread_root = $5 OR seq = $5) \
     ORDER BY seq DESC LIMIT $4";

/// The events of the thread of `root` in one seq range, at most `limit`.
pub(crate) async fn thread_range(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    root: i64,
    (lo, hi): (i64, i64),
    descending: bool,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let sql = if descending {
        THREAD_RANGE_DESC_SQL
    } else {
        THREAD_RANGE_ASC_SQL
    };
    let args = [
        Arg::Text(conv_id.as_str()),
        Arg::Int(lo),
        Arg::Int(hi),
        Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
        Arg::Int(root),
    ];
    let found = tx.fetch_all(sql, &args).await?;
    rows::all(&found, |r| rows::event(conv_id, r))
}

/// Events of one seq range by primary key, ascending or descending, at most `limit`.
pub(crate) async fn range(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    (lo, hi): (i64, i64),
    descending: bool,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let sql = if descending {
        EVENTS_RANGE_DESC_SQL
    } else {
        EVENTS_RANGE_ASC_SQL
    };
    let args = [
        Arg::Text(conv_id.as_str()),
        Arg::Int(lo),
        Arg::Int(hi),
        Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
    ];
    let found = tx.fetch_all(sql, &args).await?;
    rows::all(&found, |r| rows::event(conv_id, r))
}

/// The row `sql` reads of conversation `$1`, decoded; `None` when there is no such
/// conversation (or, for a statement that skips locked rows, when another holds its lock).
pub(crate) async fn conversation_row<T: Sql, R>(
    tx: &mut T,
    sql: &'static str,
    conv_id: &str,
    decode: impl FnOnce(&T::Row) -> Result<R, StoreError> + Send,
) -> Result<Option<R>, StoreError> {
    let found = tx.fetch_optional(sql, &[Arg::Text(conv_id)]).await?;
    found.as_ref().map(decode).transpose()
}

const PERIODS_SQL: &str = "SELECT from_seq, to_seq FROM membership_periods
   WHERE conv_id = $1 AND user_id = $2 ORDER BY from_seq";

/// A user's membership periods of a conversation, ascending.
pub(crate) async fn periods(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    user: &UserId,
) -> Result<Vec<Period>, StoreError> {
    let args = [Arg::Text(conv_id.as_str()), Arg::Text(user.as_str())];
    let found = tx.fetch_all(PERIODS_SQL, &args).await?;
    rows::all(&found, rows::period)
}

const LOG_BOUNDS_SQL: &str =
    "SELECT next_seq, min_seq, epoch FROM conversations WHERE conv_id = $1";

pub(crate) async fn log_bounds(
    tx: &mut impl Sql,
    conv_id: &ConvId,
) -> Result<Option<LogBounds>, StoreError> {
    conversation_row(tx, LOG_BOUNDS_SQL, conv_id.as_str(), |r| {
        Ok(LogBounds {
            next_seq: r.int("next_seq")?,
            min_seq: r.int("min_seq")?,
            epoch: r.int("epoch")?,
        })
    })
    .await
}

/// The threshold is a 32-bit integer in PostgreSQL; the cast reads it alike on both.
const MEMBER_ROW_SQL: &str = "SELECT next_seq, delivery_mode,
   CAST(pull_threshold AS BIGINT) AS pull_threshold FROM conversations WHERE conv_id = $1";

pub(crate) async fn member_row(
    tx: &mut impl Sql,
    conv_id: &ConvId,
) -> Result<Option<MemberRow>, StoreError> {
    conversation_row(tx, MEMBER_ROW_SQL, conv_id.as_str(), |r| {
        Ok(MemberRow {
            next_seq: r.int("next_seq")?,
            delivery_mode: rows::delivery_mode(r.str("delivery_mode")?)?,
            pull_threshold: rows::threshold(r.opt_int("pull_threshold")?),
        })
    })
    .await
}

const OPEN_PERIODS_SQL: &str =
    "SELECT user_id, from_seq FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL";

/// The current members with the first seq of their open period.
pub(crate) async fn open_periods(
    tx: &mut impl Sql,
    conv_id: &ConvId,
) -> Result<Vec<(UserId, i64)>, StoreError> {
    let found = tx
        .fetch_all(OPEN_PERIODS_SQL, &[Arg::Text(conv_id.as_str())])
        .await?;
    rows::all(&found, |r| {
        Ok((
            UserId::from_trusted(r.string("user_id")?),
            r.int("from_seq")?,
        ))
    })
}

const MEMBER_LIST_SQL: &str = "SELECT user_id, role FROM membership_periods
   WHERE conv_id = $1 AND to_seq IS NULL ORDER BY from_seq";

/// The current members with their roles, earliest first.
pub(crate) async fn member_list(
    tx: &mut impl Sql,
    conv_id: &str,
) -> Result<Vec<MemberView>, StoreError> {
    let found = tx.fetch_all(MEMBER_LIST_SQL, &[Arg::Text(conv_id)]).await?;
    rows::all(&found, rows::member_view)
}

const PARTIES_SQL: &str = "SELECT
   (SELECT role FROM membership_periods
     WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL) AS actor_role,
   EXISTS (SELECT 1 FROM users WHERE user_id = $3) AS target_exists,
   (SELECT role FROM membership_periods
     WHERE conv_id = $1 AND user_id = $3 AND to_seq IS NULL) AS target_role";

/// The actor's and the target's open periods and whether the target is a user, in one round
/// trip.
pub(crate) async fn parties(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<Parties, StoreError> {
    let args = [
        Arg::Text(conv_id.as_str()),
        Arg::Text(actor.as_str()),
        Arg::Text(target.as_str()),
    ];
    let found = tx.fetch_optional(PARTIES_SQL, &args).await?;
    let row = found.ok_or_else(|| StoreError::Unavailable("no row from a scalar select".into()))?;
    let role = |column: &str| row.opt_str(column)?.map(rows::role).transpose();
    Ok(Parties {
        actor_role: role("actor_role")?,
        target_exists: row.flag("target_exists")?,
        target_role: role("target_role")?,
    })
}

const REMAINING_MEMBERS_SQL: &str = "SELECT user_id, role, from_seq
   FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL AND user_id <> $2";

/// The current members but the leaver.
pub(crate) async fn remaining_members(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    leaver: &UserId,
) -> Result<Vec<CurrentMember<UserId>>, StoreError> {
    let args = [Arg::Text(conv_id.as_str()), Arg::Text(leaver.as_str())];
    let found = tx.fetch_all(REMAINING_MEMBERS_SQL, &args).await?;
    rows::all(&found, |r| {
        Ok(CurrentMember {
            user: UserId::from_trusted(r.string("user_id")?),
            role: rows::role(r.str("role")?)?,
            from_seq: r.int("from_seq")?,
        })
    })
}

const SET_OPEN_ROLE_SQL: &str =
    "UPDATE membership_periods SET role = $3 WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL";

/// Sets the role of `user`'s open period.
pub(crate) async fn set_open_role(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    user: &UserId,
    role: Role,
) -> Result<(), StoreError> {
    let args = [
        Arg::Text(conv_id.as_str()),
        Arg::Text(user.as_str()),
        Arg::Text(role.as_str()),
    ];
    tx.execute(SET_OPEN_ROLE_SQL, &args).await?;
    Ok(())
}

const RECALL_TARGET_SQL: &str = "SELECT kind, sender_user, created_at, recalled_at
   FROM events WHERE conv_id = $1 AND seq = $2";

/// The event at `seq` as a recall sees it.
pub(crate) async fn recall_target(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    seq: i64,
) -> Result<Option<RecallTarget>, StoreError> {
    let args = [Arg::Text(conv_id.as_str()), Arg::Int(seq)];
    let found = tx.fetch_optional(RECALL_TARGET_SQL, &args).await?;
    found
        .map(|r| {
            Ok(RecallTarget {
                kind: rows::event_kind(r.str("kind")?)?,
                sender: r.opt_string("sender_user")?.map(UserId::from_trusted),
                created_at: r.time("created_at")?,
                recalled: !r.is_null("recalled_at")?,
            })
        })
        .transpose()
}

/// A recall follows its target, so the search starts there.
const EXISTING_RECALL_SQL: &str = "SELECT seq FROM events
  WHERE conv_id = $1 AND seq > $2 AND kind = 'recall' AND target_seq = $2
  ORDER BY seq LIMIT 1";

/// The seq of the recall of the message at `target_seq`.
pub(crate) async fn existing_recall(
    tx: &mut impl Sql,
    conv_id: &ConvId,
    target_seq: i64,
) -> Result<Option<i64>, StoreError> {
    let args = [Arg::Text(conv_id.as_str()), Arg::Int(target_seq)];
    let found = tx.fetch_optional(EXISTING_RECALL_SQL, &args).await?;
    found.map(|r| r.int("seq")).transpose()
}

const OLDEST_EVENTS_SQL: &str =
    "SELECT seq, created_at FROM events WHERE conv_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3";

/// The first events from `min_seq`, at most `len_max`: what a purge may cut.
pub(crate) async fn oldest_events(
    tx: &mut impl Sql,
    conv_id: &str,
    min_seq: i64,
    len_max: usize,
) -> Result<Vec<(i64, DateTime<Utc>)>, StoreError> {
    let args = [
        Arg::Text(conv_id),
        Arg::Int(min_seq),
        Arg::Int(i64::try_from(len_max).unwrap_or(i64::MAX)),
    ];
    let found = tx.fetch_all(OLDEST_EVENTS_SQL, &args).await?;
    rows::all(&found, |r| Ok((r.int("seq")?, r.time("created_at")?)))
}

const RELEASE_ROUTE_SQL: &str =
    "DELETE FROM routes WHERE user_id = $1 AND device_id = $2 AND conn_id = $3";

/// The device's route whichever connection it names: the test break `cleanup-without-cad`
/// only (`breaks.rs`).
const RELEASE_ANY_ROUTE_SQL: &str = "DELETE FROM routes WHERE user_id = $1 AND device_id = $2";

/// Deletes the device's route only where it still names the connection (P9); true when
/// deleted. Under the test break `cleanup-without-cad` it deletes the route whatever it names.
pub(crate) async fn release_route(
    tx: &mut impl Sql,
    (user_id, device_id): (&UserId, &parley_domain::DeviceId),
    conn_id: &str,
    breaks: crate::breaks::Breaks,
) -> Result<bool, StoreError> {
    let args = [
        Arg::Text(user_id.as_str()),
        Arg::Text(device_id.as_str()),
        Arg::Text(conn_id),
    ];
    if breaks.cleanup_without_cad() {
        return Ok(tx.execute(RELEASE_ANY_ROUTE_SQL, &args[..2]).await? == 1);
    }
    Ok(tx.execute(RELEASE_ROUTE_SQL, &args).await? == 1)
}

const AUTHENTICATE_SQL: &str =
    "SELECT user_id, device_id FROM devices WHERE token_hash = $1 AND revoked_at IS NULL";

/// The live device of a token hash.
pub(crate) async fn device_of_token(
    tx: &mut impl Sql,
    token_hash: &str,
) -> Result<Option<DeviceIdentity>, StoreError> {
    let found = tx
        .fetch_optional(AUTHENTICATE_SQL, &[Arg::Text(token_hash)])
        .await?;
    found.as_ref().map(rows::device_identity).transpose()
}

const PASSWORD_HASH_SQL: &str = "SELECT password_hash FROM users WHERE user_id = $1";

/// The user's password hash; `None` for an unknown user and for a user without a password.
pub(crate) async fn password_hash_of(
    tx: &mut impl Sql,
    user_id: &UserId,
) -> Result<Option<String>, StoreError> {
    let found = tx
        .fetch_optional(PASSWORD_HASH_SQL, &[Arg::Text(user_id.as_str())])
        .await?;
    match found {
        Some(row) => row.opt_string("password_hash"),
        None => Ok(None),
    }
}
