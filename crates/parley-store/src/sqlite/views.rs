//! The view primitives (`views.rs`) on SQLite: the asked conversations' rows, periods and read
//! marks in one statement each (the ids as one JSON array), then per view one primary-key range
//! count per unread range and one range read for the last event. Unread counts here grow with
//! the unread backlog (PostgreSQL's ordinals make them O(1)); at one node's scale that is cheap.

use parley_domain::UserId;

use super::Tx;
use crate::error::StoreError;
use crate::sql;

use crate::views::{Counted, Planned, ViewTx};

impl ViewTx for Tx<'_> {
    const CONVERSATION_ROWS_SQL: &'static str =
        "SELECT conv_id, CASE WHEN mls_epoch IS NULL THEN kind ELSE 'encrypted' END AS kind,
                title, delivery_mode, next_seq, min_seq, epoch, recall_window_ms, retention_ms
         FROM conversations WHERE conv_id IN (SELECT value FROM json_each($1))";
    const VIEWER_PERIODS_SQL: &'static str =
        "SELECT conv_id, from_seq, to_seq FROM membership_periods
         WHERE user_id = $1 AND conv_id IN (SELECT value FROM json_each($2))";
    const MENTION_COUNTS_SQL: &'static str = "SELECT m.conv_id, count(*) AS n FROM mentions m
           LEFT JOIN read_marks r ON r.conv_id = m.conv_id AND r.user_id = $1
          WHERE m.user_id = $1 AND m.conv_id IN (SELECT value FROM json_each($2))
            AND m.seq > COALESCE(r.read_seq, 0)
          GROUP BY m.conv_id";
    const READ_MARKS_SQL: &'static str = "SELECT conv_id, read_seq FROM read_marks
         WHERE user_id = $1 AND conv_id IN (SELECT value FROM json_each($2))";

    /// Visible msg events of others after `read_seq`, not recalled (SPEC §5).
    async fn count_unread(
        &mut self,
        viewer: &UserId,
        planned: &[Planned<'_>],
    ) -> Result<Vec<Counted>, StoreError> {
        let mut counted = Vec::with_capacity(planned.len());
        for view in planned {
            let conv = view.conv.conv_id.as_str();
            let mut unread = 0i64;
            for (lo, hi) in &view.plan.unread_ranges {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3
                       AND kind = 'msg' AND recalled_at IS NULL AND sender_user <> $4",
                )
                .bind(conv)
                .bind(lo)
                .bind(hi)
                .bind(viewer.as_str())
                .fetch_one(&mut **self)
                .await?;
                unread += n;
            }
            let mut last_event = None;
            if let Some(seq) = view.plan.last_seq {
                let conv_id = parley_domain::ConvId::from_trusted(conv.to_owned());
                last_event = sql::range(self, &conv_id, (seq, seq), true, 1).await?.pop();
            }
            counted.push(Counted { unread, last_event });
        }
        Ok(counted)
    }
}

impl crate::flow::media::MediaTx for Tx<'_> {
    const LOCK_BLOB_SQL: &'static str = "SELECT sha256 FROM media_blobs WHERE sha256 = $1";
    const LOCK_UPLOADER_SQL: &'static str = "SELECT user_id FROM users WHERE user_id = $1";
}

impl crate::flow::push::PushTx for Tx<'_> {
    const OUTBOX_BATCH_SQL: &'static str =
        "SELECT conv_id, seq FROM push_outbox ORDER BY conv_id, seq LIMIT $1";
    const CLAIM_SQL: &'static str = "UPDATE push_pending SET lease_owner = $1,
         lease_until_ms = $2 + $3
       WHERE rowid IN (SELECT rowid FROM push_pending
              WHERE due_ms <= $2 AND (lease_until_ms IS NULL OR lease_until_ms < $2)
              ORDER BY due_ms LIMIT $4)
       RETURNING user_id, device_id, conv_id";
    const EXPAND_LOCK_SQL: &'static str = "SELECT 1 AS locked";
}
