//! The primitives of conversation creation and membership changes (`flow::create`,
//! `flow::membership`) on PostgreSQL: each write is one statement (event, period and counter
//! together), after the row lock `FOR NO KEY UPDATE`.

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, ConvKind};

use super::PgTx;
use crate::error::StoreError;
use crate::flow::create::{CreateTx, NewRow};
use crate::flow::membership::{MemberChange, MembershipTx};
use crate::rows;

impl CreateTx for PgTx<'_> {
    const COUNT_USERS_SQL: &'static str =
        "SELECT count(*) AS known FROM users WHERE user_id = ANY($1)";

    async fn insert_conversation(
        &mut self,
        row: &NewRow<'_>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO conversations (conv_id, kind, mls_epoch, title, delivery_mode, pull_threshold,
                                        next_seq, recall_window_ms, retention_ms, member_count)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (conv_id) DO NOTHING
             RETURNING created_at",
        )
        .bind(row.conv_id.as_str())
        .bind(row.req.kind.stored_as())
        .bind((row.req.kind == ConvKind::Encrypted).then_some(0_i64))
        .bind(row.req.title.as_deref())
        .bind(row.delivery.mode.as_str())
        .bind(row.delivery.pull_threshold.map(rows::int4))
        .bind(row.next_seq)
        .bind(row.req.recall_window_ms)
        .bind(row.req.retention_ms)
        .bind(rows::int4(row.members.len()))
        .fetch_optional(&mut **self)
        .await?)
    }

    async fn insert_initial_members(
        &mut self,
        row: &NewRow<'_>,
        created_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let users: Vec<&str> = row.members.iter().map(|(u, _)| u.as_str()).collect();
        let seqs: Vec<i64> = (1..).take(row.members.len()).collect();
        let roles: Vec<&str> = row.members.iter().map(|(_, r)| r.as_str()).collect();
        sqlx::query(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at, msg_ordinal)
               SELECT $1, s, 'join', $2, u, $5, 0 FROM UNNEST($3::text[], $4::bigint[]) AS t(u, s)
             )
             INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             SELECT $1, u, s, r FROM UNNEST($3::text[], $4::bigint[], $6::text[]) AS t(u, s, r)",
        )
        .bind(row.conv_id.as_str())
        .bind(row.req.creator.as_str())
        .bind(&users)
        .bind(&seqs)
        .bind(created_at)
        .bind(&roles)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}

impl MembershipTx for PgTx<'_> {
    const LOCK_FOR_CHANGE_SQL: &'static str = "SELECT
           CASE WHEN mls_epoch IS NULL THEN kind ELSE 'encrypted' END AS kind, next_seq, msg_count,
           member_count::bigint AS member_count, delivery_mode,
           pull_threshold::bigint AS pull_threshold, mls_epoch
      FROM conversations WHERE conv_id = $1 FOR NO KEY UPDATE";

    async fn append_join(
        &mut self,
        join: &MemberChange<'_>,
        to_pull: bool,
    ) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, msg_ordinal)
               VALUES ($1, $2, 'join', $3, $4, $6) RETURNING created_at
             ), period AS (
               INSERT INTO membership_periods (conv_id, user_id, from_seq, role) VALUES ($1, $4, $2, 'member')
             ), counter AS (
               UPDATE conversations
                  SET next_seq = $2 + 1, member_count = member_count + 1,
                      delivery_mode = CASE WHEN $5 THEN 'pull' ELSE delivery_mode END,
                      change_xid = pg_current_xact_id()
                WHERE conv_id = $1
             )
             SELECT created_at FROM ev",
        )
        .bind(join.conv_id.as_str())
        .bind(join.slot.seq)
        .bind(join.actor.as_str())
        .bind(join.target.as_str())
        .bind(to_pull)
        .bind(join.slot.msg_ordinal)
        .fetch_one(&mut **self)
        .await?)
    }

    async fn append_leave(
        &mut self,
        leave: &MemberChange<'_>,
    ) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, msg_ordinal)
               VALUES ($1, $2, 'leave', $3, $4, $5) RETURNING created_at
             ), period AS (
               UPDATE membership_periods SET to_seq = $2
                WHERE conv_id = $1 AND user_id = $4 AND to_seq IS NULL
             ), counter AS (
               UPDATE conversations
                  SET next_seq = $2 + 1, member_count = member_count - 1, change_xid = pg_current_xact_id()
                WHERE conv_id = $1
             )
             SELECT created_at FROM ev",
        )
        .bind(leave.conv_id.as_str())
        .bind(leave.slot.seq)
        .bind(leave.actor.as_str())
        .bind(leave.target.as_str())
        .bind(leave.slot.msg_ordinal)
        .fetch_one(&mut **self)
        .await?)
    }

    async fn mark_changed(&mut self, conv_id: &ConvId) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE conversations SET change_xid = pg_current_xact_id() WHERE conv_id = $1",
        )
        .bind(conv_id.as_str())
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}
