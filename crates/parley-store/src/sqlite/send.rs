//! The primitives of the send transaction (`flow::send`) on SQLite: one `BEGIN IMMEDIATE`
//! transaction, which holds the database's write lock from its first statement. The write lock
//! is the embedded counterpart of PostgreSQL's row lock, held for the whole transaction, so
//! every check sees every send that committed before.

use chrono::{DateTime, Utc};

use super::rows::{now, tick, ts, uuid_text};
use super::Tx;
use crate::error::StoreError;
use crate::flow::send::{NewMessage, SendTx};

impl SendTx for Tx<'_> {
    /// The write lock is held already; this reads the counter. This store keeps no message
    /// count (its unread counts are range counts).
    const LOCK_FOR_SEND_SQL: &'static str =
        "SELECT next_seq, 0 AS msg_count FROM conversations WHERE conv_id = $1";
    /// The test break `no-row-lock` does not apply here: the transaction took the database's
    /// write lock at `BEGIN IMMEDIATE`, before this read, and that lock cannot be skipped by a
    /// statement. For the same reason `no-unique-index` changes nothing on SQLite: a key check
    /// moved before this read still runs under the write lock, so it sees every earlier commit.
    const READ_FOR_SEND_UNLOCKED_SQL: &'static str = Self::LOCK_FOR_SEND_SQL;

    async fn insert_message(&mut self, msg: &NewMessage<'_>) -> Result<DateTime<Utc>, StoreError> {
        let conv = msg.req.conv_id.as_str();
        let sender = msg.req.sender_user.as_str();
        let created_at = now();
        let at = ts(created_at);
        let change = tick(self).await?;
        sqlx::query(
            "INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                                 client_msg_id, request_hash, body, created_at)
             VALUES ($1, $2, 'msg', $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(conv)
        .bind(msg.slot.seq)
        .bind(uuid_text(msg.message_id))
        .bind(sender)
        .bind(msg.req.sender_device.as_str())
        .bind(msg.req.client_msg_id.as_str())
        .bind(msg.req.request_hash.as_str())
        .bind(msg.req.body.as_str())
        .bind(&at)
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "UPDATE conversations SET next_seq = $2 + 1, change_seq = $3 WHERE conv_id = $1",
        )
        .bind(conv)
        .bind(msg.slot.seq)
        .bind(change)
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "INSERT INTO read_marks (conv_id, user_id, read_seq, updated_at, change_seq)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (conv_id, user_id) DO UPDATE
               SET read_seq = max(read_marks.read_seq, excluded.read_seq),
                   updated_at = excluded.updated_at, change_seq = excluded.change_seq",
        )
        .bind(conv)
        .bind(sender)
        .bind(msg.slot.seq)
        .bind(&at)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok(created_at)
    }
}
