//! Offline notifications (docs/PUSH.md): push targets, levels, and the three steps of the work
//! that follows the log.
//!
//! 1. A trigger writes one `push_outbox` row in the transaction of each message, so the work
//!    exists exactly when the message committed.
//! 2. `expand` turns outbox rows into `push_pending` rows, one per device owed a notification
//!    and conversation: a burst coalesces into the row's latest seq, and a seq at or below the
//!    last one sent to that device (`push_sent`) is never queued again.
//! 3. `claim` leases due rows to one gateway; `report` applies what the push service answered,
//!    only while the lease is still the reporter's, so a gateway that stalled past its lease
//!    cannot undo the work of the one that took over.

use parley_domain::{ConvId, DeviceId, UserId};

use super::{ReadTx, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::push_types::*;
use crate::query::{Arg, Sql, SqlRow};

/// The backend's statements that differ: PostgreSQL skips rows another gateway holds, SQLite's
/// write transaction already holds the database's one write lock.
pub(crate) trait PushTx: Sql {
    /// At most `$1` outbox rows, oldest conversations first, locked against other expanders.
    const OUTBOX_BATCH_SQL: &'static str;
    /// Leases at most `$4` due rows to `$1` until `$2 + $3` (`$2` is now), answering their keys.
    const CLAIM_SQL: &'static str;
    /// Answers `locked` 1 when this transaction may expand: one expander at a time, since two
    /// would upsert the same devices' rows in different orders and deadlock each other.
    const EXPAND_LOCK_SQL: &'static str;
}

const UPSERT_TARGET_SQL: &str = "INSERT INTO push_targets (user_id, device_id, kind, endpoint,
     p256dh, auth, pushkey, app_id, created_at_ms)
   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
   ON CONFLICT (user_id, device_id) DO UPDATE SET kind = EXCLUDED.kind,
     endpoint = EXCLUDED.endpoint, p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth,
     pushkey = EXCLUDED.pushkey, app_id = EXCLUDED.app_id, created_at_ms = EXCLUDED.created_at_ms";
const TARGET_SQL: &str = "SELECT kind, endpoint, p256dh, auth, pushkey, app_id
   FROM push_targets WHERE user_id = $1 AND device_id = $2";
const DELETE_TARGET_SQL: &str = "DELETE FROM push_targets WHERE user_id = $1 AND device_id = $2";
const DELETE_DEVICE_PENDING_SQL: &str =
    "DELETE FROM push_pending WHERE user_id = $1 AND device_id = $2";
const DELETE_DEVICE_SENT_SQL: &str = "DELETE FROM push_sent WHERE user_id = $1 AND device_id = $2";

/// Sets the device's push target, replacing any earlier one.
pub(crate) async fn set_target<B: Backend>(
    backend: &B,
    (user_id, device_id): (&UserId, &DeviceId),
    target: &PushTarget,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (p256dh, auth, pushkey, app_id) = match target {
        PushTarget::WebPush { p256dh, auth, .. } => (Some(p256dh), Some(auth), None, None),
        PushTarget::Gateway {
            pushkey, app_id, ..
        } => (None, None, Some(pushkey), Some(app_id)),
    };
    let mut tx = backend.begin_write().await?;
    let args = [
        Arg::Text(user_id.as_str()),
        Arg::Text(device_id.as_str()),
        Arg::Text(target.kind()),
        Arg::Text(target.endpoint()),
        Arg::OptText(p256dh.map(String::as_str)),
        Arg::OptText(auth.map(String::as_str)),
        Arg::OptText(pushkey.map(String::as_str)),
        Arg::OptText(app_id.map(String::as_str)),
        Arg::Int(now_ms),
    ];
    tx.execute(UPSERT_TARGET_SQL, &args).await?;
    tx.commit_or_unknown().await
}

/// The device's push target.
pub(crate) async fn target<B: Backend>(
    backend: &B,
    (user_id, device_id): (&UserId, &DeviceId),
) -> Result<Option<PushTarget>, StoreError> {
    let mut tx = backend.begin_read().await?;
    let args = [Arg::Text(user_id.as_str()), Arg::Text(device_id.as_str())];
    let row = tx.fetch_optional(TARGET_SQL, &args).await?;
    tx.finish().await?;
    row.as_ref().map(target_of).transpose()
}

fn target_of(row: &impl SqlRow) -> Result<PushTarget, StoreError> {
    let endpoint = row.string("endpoint")?;
    let text = |column: &str| -> Result<String, StoreError> {
        Ok(row.opt_string(column)?.unwrap_or_default())
    };
    match row.str("kind")? {
        "webpush" => Ok(PushTarget::WebPush {
            endpoint,
            p256dh: text("p256dh")?,
            auth: text("auth")?,
        }),
        "gateway" => Ok(PushTarget::Gateway {
            url: endpoint,
            pushkey: text("pushkey")?,
            app_id: text("app_id")?,
        }),
        other => Err(StoreError::Unavailable(format!("push target kind {other}"))),
    }
}

/// Deletes the device's push target and everything queued for it; true when it had one.
pub(crate) async fn delete_target<B: Backend>(
    backend: &B,
    (user_id, device_id): (&UserId, &DeviceId),
) -> Result<bool, StoreError> {
    let mut tx = backend.begin_write().await?;
    let args = [Arg::Text(user_id.as_str()), Arg::Text(device_id.as_str())];
    let deleted = tx.execute(DELETE_TARGET_SQL, &args).await?;
    tx.execute(DELETE_DEVICE_PENDING_SQL, &args).await?;
    tx.execute(DELETE_DEVICE_SENT_SQL, &args).await?;
    tx.commit_or_unknown().await?;
    Ok(deleted > 0)
}

const UPSERT_LEVEL_SQL: &str = "INSERT INTO notify_levels (conv_id, user_id, level)
   VALUES ($1, $2, $3) ON CONFLICT (conv_id, user_id) DO UPDATE SET level = EXCLUDED.level";
const DELETE_LEVEL_SQL: &str = "DELETE FROM notify_levels WHERE conv_id = $1 AND user_id = $2";
const LEVEL_SQL: &str = "SELECT level FROM notify_levels WHERE conv_id = $1 AND user_id = $2";

/// Sets the member's level of the conversation; `All` is kept as no row.
pub(crate) async fn set_level<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    user_id: &UserId,
    level: NotifyLevel,
) -> Result<(), StoreError> {
    let mut tx = backend.begin_write().await?;
    let key = [Arg::Text(conv_id.as_str()), Arg::Text(user_id.as_str())];
    if level == NotifyLevel::All {
        tx.execute(DELETE_LEVEL_SQL, &key).await?;
    } else {
        let args = [key[0], key[1], Arg::Text(level.as_str())];
        tx.execute(UPSERT_LEVEL_SQL, &args).await?;
    }
    tx.commit_or_unknown().await
}

/// The member's level of the conversation.
pub(crate) async fn level<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    user_id: &UserId,
) -> Result<NotifyLevel, StoreError> {
    let mut tx = backend.begin_read().await?;
    let args = [Arg::Text(conv_id.as_str()), Arg::Text(user_id.as_str())];
    let row = tx.fetch_optional(LEVEL_SQL, &args).await?;
    tx.finish().await?;
    match row {
        None => Ok(NotifyLevel::All),
        Some(row) => {
            let text = row.str("level")?;
            NotifyLevel::parse(text)
                .ok_or_else(|| StoreError::Unavailable(format!("notification level {text}")))
        }
    }
}

const UPSERT_PRIVACY_SQL: &str = "INSERT INTO push_prefs (user_id, privacy) VALUES ($1, $2)
   ON CONFLICT (user_id) DO UPDATE SET privacy = EXCLUDED.privacy";
const PRIVACY_SQL: &str = "SELECT privacy FROM push_prefs WHERE user_id = $1";

/// Sets whether the user's notifications leave out sender and preview.
pub(crate) async fn set_privacy<B: Backend>(
    backend: &B,
    user_id: &UserId,
    privacy: bool,
) -> Result<(), StoreError> {
    let mut tx = backend.begin_write().await?;
    let args = [Arg::Text(user_id.as_str()), Arg::Int(i64::from(privacy))];
    tx.execute(UPSERT_PRIVACY_SQL, &args).await?;
    tx.commit_or_unknown().await
}

/// Whether the user's notifications leave out sender and preview.
pub(crate) async fn privacy<B: Backend>(backend: &B, user_id: &UserId) -> Result<bool, StoreError> {
    let mut tx = backend.begin_read().await?;
    let row = tx
        .fetch_optional(PRIVACY_SQL, &[Arg::Text(user_id.as_str())])
        .await?;
    tx.finish().await?;
    Ok(row.map(|r| r.int("privacy")).transpose()?.unwrap_or(0) != 0)
}

/// Queues the message `($1, $2)` for every device of a member who may read it, is not its
/// sender, has a push target and a level that lets it through (`$3` now, `$4` the coalescing
/// interval). A device's next notification of a conversation waits until the interval after its
/// last one has passed; a row already queued takes the newer seq and keeps its due time.
const EXPAND_SQL: &str = "INSERT INTO push_pending (user_id, device_id, conv_id, seq, due_ms,
     attempts)
   SELECT t.user_id, t.device_id, e.conv_id, e.seq,
          CASE WHEN s.sent_at_ms IS NOT NULL AND s.sent_at_ms + $4 > $3
               THEN s.sent_at_ms + $4 ELSE $3 END, 0
     FROM events e
     JOIN conversations c ON c.conv_id = e.conv_id
     JOIN membership_periods m ON m.conv_id = e.conv_id AND m.from_seq <= e.seq
          AND (m.to_seq IS NULL OR m.to_seq >= e.seq)
     JOIN push_targets t ON t.user_id = m.user_id
     LEFT JOIN notify_levels l ON l.conv_id = e.conv_id AND l.user_id = t.user_id
     LEFT JOIN push_sent s ON s.user_id = t.user_id AND s.device_id = t.device_id
          AND s.conv_id = e.conv_id
    WHERE e.conv_id = $1 AND e.seq = $2 AND e.kind = 'msg' AND e.recalled_at IS NULL
      AND e.seq >= c.min_seq
      AND t.user_id <> e.sender_user
      AND (s.seq IS NULL OR s.seq < e.seq)
      AND (l.level IS NULL OR l.level = 'all' OR (l.level = 'mentions' AND (
           EXISTS (SELECT 1 FROM mentions mn
                    WHERE mn.conv_id = e.conv_id AND mn.seq = e.seq AND mn.user_id = t.user_id)
           OR EXISTS (SELECT 1 FROM events r
                    WHERE r.conv_id = e.conv_id AND r.seq = e.reply_to
                      AND r.sender_user = t.user_id))))
   ON CONFLICT (user_id, device_id, conv_id) DO UPDATE SET seq = CASE
     WHEN EXCLUDED.seq > push_pending.seq THEN EXCLUDED.seq ELSE push_pending.seq END";
const DELETE_OUTBOX_SQL: &str = "DELETE FROM push_outbox WHERE conv_id = $1 AND seq = $2";

/// Expands at most `batch_len_max` outbox rows into notifications owed; answers how many rows.
pub(crate) async fn expand<B: Backend>(
    backend: &B,
    now_ms: i64,
    coalesce_ms: i64,
    batch_len_max: u32,
) -> Result<u64, StoreError> {
    let mut tx = backend.begin_write().await?;
    let lock = tx.fetch_optional(B::Tx::EXPAND_LOCK_SQL, &[]).await?;
    if lock.map(|r| r.int("locked")).transpose()?.unwrap_or(0) == 0 {
        tx.commit_or_unknown().await?;
        return Ok(0);
    }
    let rows = tx
        .fetch_all(
            B::Tx::OUTBOX_BATCH_SQL,
            &[Arg::Int(i64::from(batch_len_max))],
        )
        .await?;
    let mut expanded = 0;
    for row in &rows {
        let conv_id = row.string("conv_id")?;
        let seq = row.int("seq")?;
        let args = [
            Arg::Text(&conv_id),
            Arg::Int(seq),
            Arg::Int(now_ms),
            Arg::Int(coalesce_ms),
        ];
        tx.execute(EXPAND_SQL, &args).await?;
        tx.execute(DELETE_OUTBOX_SQL, &args[..2]).await?;
        expanded += 1;
    }
    tx.commit_or_unknown().await?;
    Ok(expanded)
}

/// A claimed row whose device lost its target or its token since it was queued.
const DELETE_ORPHAN_SQL: &str = "DELETE FROM push_pending
   WHERE user_id = $1 AND device_id = $2 AND conv_id = $3 AND lease_owner = $4";
/// Everything one claimed row needs to be sent or dropped, read in the claim's transaction by
/// its key: every join is then a primary-key lookup, whatever the planner knows of the tables.
const CLAIMED_SQL: &str = "SELECT p.user_id, p.device_id, p.conv_id, p.seq, p.attempts,
     t.kind, t.endpoint, t.p256dh, t.auth, t.pushkey, t.app_id,
     e.sender_user, e.message_id, e.created_at,
     CAST(CASE WHEN e.seq IS NOT NULL AND e.kind = 'msg' AND e.recalled_at IS NULL
               AND e.seq >= c.min_seq THEN 1 ELSE 0 END AS BIGINT) AS present,
     COALESCE((SELECT ed.body FROM events ed
                WHERE ed.conv_id = p.conv_id AND ed.kind = 'edit' AND ed.target_seq = p.seq
                ORDER BY ed.seq DESC LIMIT 1), e.body) AS body,
     CAST(CASE WHEN EXISTS (SELECT 1 FROM mentions mn WHERE mn.conv_id = p.conv_id
               AND mn.seq = p.seq AND mn.user_id = p.user_id) THEN 1 ELSE 0 END AS BIGINT)
       AS mentioned,
     CAST(CASE WHEN EXISTS (SELECT 1 FROM events r WHERE r.conv_id = p.conv_id
               AND r.seq = e.reply_to AND r.sender_user = p.user_id) THEN 1 ELSE 0 END AS BIGINT)
       AS replied,
     CAST(COALESCE((SELECT rm.read_seq FROM read_marks rm
                     WHERE rm.conv_id = p.conv_id AND rm.user_id = p.user_id), 0) AS BIGINT)
       AS read_seq,
     CAST(CASE WHEN EXISTS (SELECT 1 FROM routes ro WHERE ro.user_id = p.user_id
               AND ro.device_id = p.device_id) THEN 1 ELSE 0 END AS BIGINT) AS online,
     CAST(COALESCE((SELECT pp.privacy FROM push_prefs pp WHERE pp.user_id = p.user_id), 0)
       AS BIGINT) AS privacy,
     c.title,
     CAST(CASE WHEN t.kind IS NOT NULL AND EXISTS (SELECT 1 FROM devices d
               WHERE d.user_id = p.user_id AND d.device_id = p.device_id
                 AND d.revoked_at IS NULL) THEN 1 ELSE 0 END AS BIGINT) AS live
   FROM push_pending p
   LEFT JOIN push_targets t ON t.user_id = p.user_id AND t.device_id = p.device_id
   LEFT JOIN conversations c ON c.conv_id = p.conv_id
   LEFT JOIN events e ON e.conv_id = p.conv_id AND e.seq = p.seq
  WHERE p.user_id = $1 AND p.device_id = $2 AND p.conv_id = $3 AND p.lease_owner = $4";

/// Leases at most `batch_len_max` due notifications to `lease` for `lease_ms`, answering each
/// with what it is about as of now.
pub(crate) async fn claim<B: Backend>(
    backend: &B,
    lease: &str,
    now_ms: i64,
    lease_ms: i64,
    batch_len_max: u32,
) -> Result<Vec<PushJob>, StoreError> {
    let mut tx = backend.begin_write().await?;
    let args = [
        Arg::Text(lease),
        Arg::Int(now_ms),
        Arg::Int(lease_ms),
        Arg::Int(i64::from(batch_len_max)),
    ];
    let claimed = tx.fetch_all(B::Tx::CLAIM_SQL, &args).await?;
    let mut jobs = Vec::with_capacity(claimed.len());
    for key in &claimed {
        let (user, device, conv) = (
            key.string("user_id")?,
            key.string("device_id")?,
            key.string("conv_id")?,
        );
        let key_args = [
            Arg::Text(&user),
            Arg::Text(&device),
            Arg::Text(&conv),
            Arg::Text(lease),
        ];
        let Some(row) = tx.fetch_optional(CLAIMED_SQL, &key_args).await? else {
            continue;
        };
        if row.int("live")? == 0 {
            tx.execute(DELETE_ORPHAN_SQL, &key_args).await?;
            continue;
        }
        jobs.push(job_of(&row, lease)?);
    }
    tx.commit_or_unknown().await?;
    if backend.breaks().push_ignores_read() {
        // The test break `push-ignores-read`: every notification looks unread.
        for job in &mut jobs {
            job.read_seq = 0;
        }
    }
    Ok(jobs)
}

fn job_of(row: &impl SqlRow, lease: &str) -> Result<PushJob, StoreError> {
    let present = row.int("present")? != 0;
    let message = if present {
        let reason = if row.int("mentioned")? != 0 {
            NotifyReason::Mention
        } else if row.int("replied")? != 0 {
            NotifyReason::Reply
        } else {
            NotifyReason::Message
        };
        Some(PushMessage {
            sender: UserId::from_trusted(row.opt_string("sender_user")?.unwrap_or_default()),
            body: row.opt_string("body")?,
            message_id: row.opt_uuid("message_id")?,
            committed_at: row.time("created_at")?,
            reason,
        })
    } else {
        None
    };
    Ok(PushJob {
        user_id: UserId::from_trusted(row.string("user_id")?),
        device_id: DeviceId::from_trusted(row.string("device_id")?),
        conv_id: ConvId::from_trusted(row.string("conv_id")?),
        seq: row.int("seq")?,
        attempts: row.int("attempts")?,
        lease: lease.to_owned(),
        target: target_of(row)?,
        message,
        read_seq: row.int("read_seq")?,
        online: row.int("online")? != 0,
        privacy: row.int("privacy")? != 0,
        title: row.opt_string("title")?,
    })
}

const UPSERT_SENT_SQL: &str = "INSERT INTO push_sent (user_id, device_id, conv_id, seq,
     sent_at_ms) VALUES ($1, $2, $3, $4, $5)
   ON CONFLICT (user_id, device_id, conv_id) DO UPDATE SET seq = CASE
     WHEN EXCLUDED.seq > push_sent.seq THEN EXCLUDED.seq ELSE push_sent.seq END,
     sent_at_ms = EXCLUDED.sent_at_ms";
/// Done with the claimed row unless a newer message was queued onto it meanwhile.
const DONE_SQL: &str = "DELETE FROM push_pending WHERE user_id = $1 AND device_id = $2
     AND conv_id = $3 AND seq <= $4 AND lease_owner = $5";
/// Hands the row back, due at `$4`; `$6` adds to its failed attempts.
const RELEASE_SQL: &str = "UPDATE push_pending SET lease_owner = NULL, lease_until_ms = NULL,
     due_ms = $4, attempts = CASE WHEN $6 = 0 THEN 0 ELSE attempts + $6 END
   WHERE user_id = $1 AND device_id = $2 AND conv_id = $3 AND lease_owner = $5";
const DELETE_GONE_TARGET_SQL: &str = "DELETE FROM push_targets
   WHERE user_id = $1 AND device_id = $2 AND endpoint = $3";

/// Applies the outcomes of claimed notifications in one transaction. A row whose lease is no
/// longer the reporter's is left to the gateway that holds it now; a sent seq is recorded
/// whatever the lease, since the push service has it.
pub(crate) async fn report<B: Backend>(
    backend: &B,
    outcomes: &[PushOutcome],
    now_ms: i64,
    coalesce_ms: i64,
) -> Result<(), StoreError> {
    let mut tx = backend.begin_write().await?;
    for PushOutcome { job, result } in outcomes {
        let user = job.user_id.as_str();
        let device = job.device_id.as_str();
        let conv = job.conv_id.as_str();
        let lease = job.lease.as_str();
        let (due_ms, failed) = match *result {
            PushResult::Sent { at_ms } => {
                let args = [
                    Arg::Text(user),
                    Arg::Text(device),
                    Arg::Text(conv),
                    Arg::Int(job.seq),
                    Arg::Int(at_ms),
                ];
                tx.execute(UPSERT_SENT_SQL, &args).await?;
                (at_ms.saturating_add(coalesce_ms), 0)
            }
            PushResult::Dropped => (now_ms, 0),
            PushResult::Retry { due_ms } => (due_ms, 1),
            PushResult::Gone => {
                let args = [
                    Arg::Text(user),
                    Arg::Text(device),
                    Arg::Text(job.target.endpoint()),
                ];
                if tx.execute(DELETE_GONE_TARGET_SQL, &args).await? > 0 {
                    tx.execute(DELETE_DEVICE_PENDING_SQL, &args[..2]).await?;
                    tx.execute(DELETE_DEVICE_SENT_SQL, &args[..2]).await?;
                    continue;
                }
                // A new target replaced the gone one: what is queued goes there instead.
                (now_ms, 0)
            }
        };
        // Only a send or a drop is done with the row; a retry, and a gone endpoint whose target
        // was replaced meanwhile, hand it back.
        if matches!(result, PushResult::Sent { .. } | PushResult::Dropped) {
            let args = [
                Arg::Text(user),
                Arg::Text(device),
                Arg::Text(conv),
                Arg::Int(job.seq),
                Arg::Text(lease),
            ];
            if tx.execute(DONE_SQL, &args).await? > 0 {
                continue;
            }
        }
        let args = [
            Arg::Text(user),
            Arg::Text(device),
            Arg::Text(conv),
            Arg::Int(due_ms),
            Arg::Text(lease),
            Arg::Int(failed),
        ];
        tx.execute(RELEASE_SQL, &args).await?;
    }
    tx.commit_or_unknown().await
}

const BACKLOG_SQL: &str = "SELECT CAST((SELECT COUNT(*) FROM push_outbox) AS BIGINT) AS outbox,
     CAST((SELECT COUNT(*) FROM push_pending) AS BIGINT) AS pending";

/// How much notification work waits.
pub(crate) async fn backlog<B: Backend>(backend: &B) -> Result<PushBacklog, StoreError> {
    let mut tx = backend.begin_read().await?;
    let row = tx.fetch_optional(BACKLOG_SQL, &[]).await?;
    tx.finish().await?;
    Ok(match row {
        Some(row) => PushBacklog {
            outbox_len: row.int("outbox")?,
            pending_len: row.int("pending")?,
        },
        None => PushBacklog::default(),
    })
}
