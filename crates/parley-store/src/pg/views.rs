//! The view primitives (`views.rs`) on PostgreSQL, in a fixed number of statements however
//! many conversations are asked for.
//!
//! Unread counts cost O(1) per conversation: every event row carries `msg_ordinal`, the number
//! of msg events up to it, so the msg events in a seq range are the difference of two ordinals,
//! less the recalled ones in the range (a partial index holds only those). Own messages need no
//! subtraction: a send moves the sender's read position to it in the same transaction, so no
//! own message lies above `read_seq`.

use std::collections::HashMap;

use parley_domain::{ConvId, Event, EventKind, UserId};
use sqlx::Row;

use super::PgTx;
use crate::error::StoreError;
use crate::rows;

use crate::views::{Counted, Planned, ViewTx};

/// The probed events of every view, by (conversation, seq), with their ordinals.
type Probed = HashMap<(String, i64), (i64, Event)>;

impl ViewTx for PgTx<'_> {
    const CONVERSATION_ROWS_SQL: &'static str =
        "SELECT conv_id, CASE WHEN mls_epoch IS NULL THEN kind ELSE 'encrypted' END AS kind,
                title, delivery_mode, next_seq, min_seq, epoch, recall_window_ms, retention_ms
         FROM conversations WHERE conv_id = ANY($1)";
    const VIEWER_PERIODS_SQL: &'static str =
        "SELECT conv_id, from_seq, to_seq FROM membership_periods WHERE user_id = $1 AND conv_id = ANY($2)";
    const MENTION_COUNTS_SQL: &'static str = "SELECT m.conv_id, count(*) AS n FROM mentions m
           LEFT JOIN read_marks r ON r.conv_id = m.conv_id AND r.user_id = $1
          WHERE m.user_id = $1 AND m.conv_id = ANY($2) AND m.seq > COALESCE(r.read_seq, 0)
          GROUP BY m.conv_id";
    const READ_MARKS_SQL: &'static str =
        "SELECT conv_id, read_seq FROM read_marks WHERE user_id = $1 AND conv_id = ANY($2)";

    /// Two statements for all views: the events at both ends of every unread range and at
    /// every last visible seq, by primary key with their ordinals; and the recalled messages in
    /// the unread ranges (rare: a partial index holds only them).
    async fn count_unread(
        &mut self,
        _viewer: &UserId,
        planned: &[Planned<'_>],
    ) -> Result<Vec<Counted>, StoreError> {
        let probed = probe(self, planned).await?;
        let recalled = recalled_in_unread(self, planned).await?;
        planned
            .iter()
            .enumerate()
            .map(|(i, view)| {
                let conv = view.conv.conv_id.as_str();
                // msg events up to and including `seq`; `seq` below min_seq is read off the
                // event at min_seq (its own ordinal, less itself when it is a msg).
                let ordinal = |seq: i64| -> Option<i64> {
                    let min_seq = view.conv.min_seq;
                    if seq < min_seq {
                        let (ord, ev) = probed.get(&(conv.to_owned(), min_seq))?;
                        return Some(ord - i64::from(ev.kind == EventKind::Msg));
                    }
                    probed.get(&(conv.to_owned(), seq)).map(|(ord, _)| *ord)
                };
                let mut unread = 0;
                for (lo, hi) in &view.plan.unread_ranges {
                    let (Some(a), Some(b)) = (ordinal(lo - 1), ordinal(*hi)) else {
                        return Err(StoreError::Unavailable(
                            "a seq inside [min_seq, head] has no event".into(),
                        ));
                    };
                    unread += b - a;
                }
                unread -= recalled.get(&(i as i32)).copied().unwrap_or(0);
                let last_event = view
                    .plan
                    .last_seq
                    .and_then(|s| probed.get(&(conv.to_owned(), s)))
                    .map(|(_, e)| e.clone());
                Ok(Counted { unread, last_event })
            })
            .collect()
    }
}

/// Both ends of every unread range and the last visible event, by primary key.
async fn probe(tx: &mut PgTx<'_>, planned: &[Planned<'_>]) -> Result<Probed, StoreError> {
    let (mut convs, mut seqs): (Vec<&str>, Vec<i64>) = (Vec::new(), Vec::new());
    for view in planned {
        let (conv, min_seq) = (view.conv.conv_id.as_str(), view.conv.min_seq);
        for (lo, hi) in &view.plan.unread_ranges {
            for s in [(lo - 1).max(min_seq), *hi] {
                convs.push(conv);
                seqs.push(s);
            }
        }
        if let Some(s) = view.plan.last_seq {
            convs.push(conv);
            seqs.push(s);
        }
    }
    let found = sqlx::query(
        "SELECT e.conv_id, e.seq, e.kind, e.created_at, e.message_id, e.sender_user, e.sender_device,
                e.client_msg_id, e.body, e.subject_user, e.target_seq, e.recalled_at, e.msg_ordinal,
                e.reply_to, e.thread_root, e.mentions, e.reaction_key, e.edited_at,
                e.thread_replies, e.thread_latest_seq, e.attachments, e.mls_epoch, e.mls_message, e.mls_devices
         FROM UNNEST($1::text[], $2::bigint[]) AS t(c, s)
         JOIN events e ON e.conv_id = t.c AND e.seq = t.s",
    )
    .bind(&convs)
    .bind(&seqs)
    .fetch_all(&mut **tx)
    .await?;
    let mut probed = HashMap::with_capacity(found.len());
    for r in &found {
        let conv_id: String = r.try_get("conv_id")?;
        let event = rows::event(&ConvId::from_trusted(conv_id.clone()), r)?;
        probed.insert((conv_id, event.seq), (r.try_get("msg_ordinal")?, event));
    }
    Ok(probed)
}

/// The recalled messages in each view's unread ranges, by view.
async fn recalled_in_unread(
    tx: &mut PgTx<'_>,
    planned: &[Planned<'_>],
) -> Result<HashMap<i32, i64>, StoreError> {
    let (mut rc, mut rlo, mut rhi, mut ri): (Vec<&str>, Vec<i64>, Vec<i64>, Vec<i32>) =
        Default::default();
    for (i, view) in planned.iter().enumerate() {
        for (lo, hi) in &view.plan.unread_ranges {
            rc.push(&view.conv.conv_id);
            rlo.push(*lo);
            rhi.push(*hi);
            ri.push(i as i32);
        }
    }
    let mut recalled = HashMap::new();
    if rc.is_empty() {
        return Ok(recalled);
    }
    let found = sqlx::query(
        "SELECT t.i, count(*) AS n FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::int[]) AS t(c, lo, hi, i)
         JOIN events e ON e.conv_id = t.c AND e.seq BETWEEN t.lo AND t.hi
                      AND e.recalled_at IS NOT NULL AND e.kind = 'msg'
         GROUP BY t.i",
    )
    .bind(&rc)
    .bind(&rlo)
    .bind(&rhi)
    .bind(&ri)
    .fetch_all(&mut **tx)
    .await?;
    for r in &found {
        recalled.insert(r.try_get("i")?, r.try_get("n")?);
    }
    Ok(recalled)
}

impl crate::flow::media::MediaTx for PgTx<'_> {
    const LOCK_BLOB_SQL: &'static str =
        "SELECT sha256 FROM media_blobs WHERE sha256 = $1 FOR UPDATE";
    const LOCK_UPLOADER_SQL: &'static str =
        "SELECT user_id FROM users WHERE user_id = $1 FOR UPDATE";
}

impl crate::flow::push::PushTx for PgTx<'_> {
    const OUTBOX_BATCH_SQL: &'static str = "SELECT conv_id, seq FROM push_outbox
       ORDER BY conv_id, seq LIMIT $1 FOR UPDATE SKIP LOCKED";
    const CLAIM_SQL: &'static str = "UPDATE push_pending p SET lease_owner = $1,
         lease_until_ms = $2 + $3
       FROM (SELECT user_id, device_id, conv_id FROM push_pending
              WHERE due_ms <= $2 AND (lease_until_ms IS NULL OR lease_until_ms < $2)
              ORDER BY due_ms LIMIT $4 FOR UPDATE SKIP LOCKED) c
      WHERE p.user_id = c.user_id AND p.device_id = c.device_id AND p.conv_id = c.conv_id
      RETURNING p.user_id, p.device_id, p.conv_id";
    const EXPAND_LOCK_SQL: &'static str =
        "SELECT CAST(CASE WHEN pg_try_advisory_xact_lock(7031420014) THEN 1 ELSE 0 END AS BIGINT) AS locked";
}
