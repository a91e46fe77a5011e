//! The view primitives (`views.rs`) on SQLite: the asked conversations' rows, periods and read
//! marks in one statement each (the ids as one JSON array), then per view one primary-key range
//! count per unread range and one range read for the last event. Unread counts here grow with
//! the unread backlog (PostgreSQL's ordinals make them O(1)); at one node's scale that is cheap.

use parley_domain::{MemberView, Period, UserId};
use sqlx::Row;

use super::read::range;
use super::rows::json_list;
use super::Tx;
use crate::error::StoreError;
use crate::rows;
use crate::sql::MEMBER_LIST_SQL;
use crate::views::{ConvRow, Counted, Planned, ViewTx};

impl ViewTx for Tx<'_> {
    async fn conversation_rows(&mut self, ids: &[String]) -> Result<Vec<ConvRow>, StoreError> {
        let found = sqlx::query(
            "SELECT conv_id, kind, title, delivery_mode, next_seq, min_seq, epoch, recall_window_ms, retention_ms
             FROM conversations WHERE conv_id IN (SELECT value FROM json_each($1))",
        )
        .bind(json_list(ids.iter().map(String::as_str))?)
        .fetch_all(&mut **self)
        .await?;
        found
            .iter()
            .map(|r| {
                Ok(ConvRow {
                    conv_id: r.try_get("conv_id")?,
                    kind: rows::conv_kind(r.try_get("kind")?)?,
                    title: r.try_get("title")?,
                    delivery_mode: rows::delivery_mode(r.try_get("delivery_mode")?)?,
                    next_seq: r.try_get("next_seq")?,
                    min_seq: r.try_get("min_seq")?,
                    epoch: r.try_get("epoch")?,
                    recall_window_ms: r.try_get("recall_window_ms")?,
                    retention_ms: r.try_get("retention_ms")?,
                })
            })
            .collect()
    }

    async fn viewer_periods(
        &mut self,
        viewer: &UserId,
        ids: &[String],
    ) -> Result<Vec<(String, Period)>, StoreError> {
        let found = sqlx::query(
            "SELECT conv_id, from_seq, to_seq FROM membership_periods
              WHERE user_id = $1 AND conv_id IN (SELECT value FROM json_each($2))",
        )
        .bind(viewer.as_str())
        .bind(json_list(ids.iter().map(String::as_str))?)
        .fetch_all(&mut **self)
        .await?;
        found
            .iter()
            .map(|r| {
                let period = Period {
                    from_seq: r.try_get("from_seq")?,
                    to_seq: r.try_get("to_seq")?,
                };
                Ok((r.try_get("conv_id")?, period))
            })
            .collect()
    }

    async fn read_marks(
        &mut self,
        viewer: &UserId,
        ids: &[String],
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let found = sqlx::query(
            "SELECT conv_id, read_seq FROM read_marks
              WHERE user_id = $1 AND conv_id IN (SELECT value FROM json_each($2))",
        )
        .bind(viewer.as_str())
        .bind(json_list(ids.iter().map(String::as_str))?)
        .fetch_all(&mut **self)
        .await?;
        found
            .iter()
            .map(|r| Ok((r.try_get("conv_id")?, r.try_get("read_seq")?)))
            .collect()
    }

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
                last_event = range(self, &conv_id, (seq, seq), true, 1).await?.pop();
            }
            counted.push(Counted { unread, last_event });
        }
        Ok(counted)
    }

    async fn member_list(&mut self, conv_id: &str) -> Result<Vec<MemberView>, StoreError> {
        let found = sqlx::query(MEMBER_LIST_SQL)
            .bind(conv_id)
            .fetch_all(&mut **self)
            .await?;
        found
            .iter()
            .map(|r| {
                Ok(MemberView {
                    user_id: UserId::from_trusted(r.try_get("user_id")?),
                    role: rows::role(r.try_get("role")?)?,
                })
            })
            .collect()
    }
}
