//! The primitives of conversation creation and membership changes (`flow::create`,
//! `flow::membership`) on SQLite. The transaction holds the database's write lock, so reading
//! the conversation row is its lock; each write takes the change clock's next value.

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, ConvKind, EventKind};

use super::rows::{json_list, now, tick, ts};
use super::Tx;
use crate::error::StoreError;
use crate::flow::create::{CreateTx, NewRow};
use crate::flow::membership::{MemberChange, MembershipTx};
use crate::rows;

impl CreateTx for Tx<'_> {
    const COUNT_USERS_SQL: &'static str =
        "SELECT count(*) AS known FROM users WHERE user_id IN (SELECT value FROM json_each($1))";

    async fn insert_conversation(
        &mut self,
        row: &NewRow<'_>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let created_at = now();
        let change = tick(self).await?;
        let inserted = sqlx::query(
            "INSERT INTO conversations (conv_id, kind, mls_epoch, title, delivery_mode, pull_threshold, next_seq,
                                        recall_window_ms, retention_ms, member_count, change_seq, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (conv_id) DO NOTHING",
        )
        .bind(row.conv_id.as_str())
        .bind(row.req.kind.stored_as())
        .bind((row.req.kind == ConvKind::Encrypted).then_some(0_i64))
        .bind(row.req.title.as_deref())
        .bind(row.delivery.mode.as_str())
        .bind(row.delivery.pull_threshold.map(i64::from))
        .bind(row.next_seq)
        .bind(row.req.recall_window_ms)
        .bind(row.req.retention_ms)
        .bind(rows::int4(row.members.len()))
        .bind(change)
        .bind(ts(created_at))
        .execute(&mut **self)
        .await?;
        Ok((inserted.rows_affected() == 1).then_some(created_at))
    }

    async fn insert_initial_members(
        &mut self,
        row: &NewRow<'_>,
        created_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let users = json_list(row.members.iter().map(|(u, _)| u.as_str()))?;
        let roles = json_list(row.members.iter().map(|(_, r)| r.as_str()))?;
        // json_each's key is the 0-based array index: member i joins at seq i + 1.
        sqlx::query(
            "INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at)
             SELECT $1, key + 1, 'join', $2, value, $3 FROM json_each($4)",
        )
        .bind(row.conv_id.as_str())
        .bind(row.req.creator.as_str())
        .bind(ts(created_at))
        .bind(&users)
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             SELECT $1, u.value, u.key + 1, r.value
               FROM json_each($2) AS u JOIN json_each($3) AS r ON r.key = u.key",
        )
        .bind(row.conv_id.as_str())
        .bind(&users)
        .bind(&roles)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}

/// The join or leave event of a membership change, stamped now; answers the time.
async fn insert_member_event(
    tx: &mut Tx<'_>,
    change: &MemberChange<'_>,
    kind: EventKind,
) -> Result<DateTime<Utc>, StoreError> {
    let at = now();
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(change.conv_id.as_str())
    .bind(change.slot.seq)
    .bind(kind.as_str())
    .bind(change.actor.as_str())
    .bind(change.target.as_str())
    .bind(ts(at))
    .execute(&mut **tx)
    .await?;
    Ok(at)
}

impl MembershipTx for Tx<'_> {
    /// The write lock is held already; this reads the row. This store keeps no message count.
    const LOCK_FOR_CHANGE_SQL: &'static str = "SELECT
           CASE WHEN mls_epoch IS NULL THEN kind ELSE 'encrypted' END AS kind, next_seq, 0 AS msg_count, member_count,
           delivery_mode, pull_threshold, mls_epoch
      FROM conversations WHERE conv_id = $1";

    async fn append_join(
        &mut self,
        join: &MemberChange<'_>,
        to_pull: bool,
    ) -> Result<DateTime<Utc>, StoreError> {
        let at = insert_member_event(self, join, EventKind::Join).await?;
        sqlx::query(
            "INSERT INTO membership_periods (conv_id, user_id, from_seq, role) VALUES ($1, $2, $3, 'member')",
        )
        .bind(join.conv_id.as_str())
        .bind(join.target.as_str())
        .bind(join.slot.seq)
        .execute(&mut **self)
        .await?;
        let change = tick(self).await?;
        sqlx::query(
            "UPDATE conversations
                SET next_seq = $2 + 1, member_count = member_count + 1,
                    delivery_mode = CASE WHEN $3 THEN 'pull' ELSE delivery_mode END, change_seq = $4
              WHERE conv_id = $1",
        )
        .bind(join.conv_id.as_str())
        .bind(join.slot.seq)
        .bind(to_pull)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok(at)
    }

    async fn append_leave(
        &mut self,
        leave: &MemberChange<'_>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let at = insert_member_event(self, leave, EventKind::Leave).await?;
        sqlx::query(
            "UPDATE membership_periods SET to_seq = $2
              WHERE conv_id = $1 AND user_id = $3 AND to_seq IS NULL",
        )
        .bind(leave.conv_id.as_str())
        .bind(leave.slot.seq)
        .bind(leave.target.as_str())
        .execute(&mut **self)
        .await?;
        let change = tick(self).await?;
        sqlx::query(
            "UPDATE conversations SET next_seq = $2 + 1, member_count = member_count - 1, change_seq = $3
              WHERE conv_id = $1",
        )
        .bind(leave.conv_id.as_str())
        .bind(leave.slot.seq)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok(at)
    }

    async fn mark_changed(&mut self, conv_id: &ConvId) -> Result<(), StoreError> {
        let change = tick(self).await?;
        sqlx::query("UPDATE conversations SET change_seq = $2 WHERE conv_id = $1")
            .bind(conv_id.as_str())
            .bind(change)
            .execute(&mut **self)
            .await?;
        Ok(())
    }
}
