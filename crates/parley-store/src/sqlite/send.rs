//! The primitives of the send transaction (`flow::send`) on SQLite: one `BEGIN IMMEDIATE`
//! transaction, which holds the database's write lock from its first statement. The write lock
//! is the embedded counterpart of PostgreSQL's row lock, held for the whole transaction, so
//! every check sees every send that committed before.

use chrono::{DateTime, Utc};

use sqlx::SqliteConnection;

use super::rows::{now, ts, uuid_text};
use super::Tx;
use crate::error::StoreError;
use crate::flow::send::{NewMessage, SendTx};

/// The writes of one send as one statement list, so they reach sqlx's SQLite worker thread in
/// one hand-off instead of four: each hand-off is a wake-up of that thread and then of the
/// caller, and under load those wake-ups, not SQLite, were most of a send's cost. The list
/// advances the change clock, inserts the message, advances the counter past it and moves the
/// sender's read position to it (an own message is read); the counter and the read position
/// take the clock's new value. SQLite runs the statements in order and stops at the first
/// error, so a failed list leaves the statements before it written: the transaction, or the
/// batch's savepoint around the list (`send_batch.rs`), undoes them.
///
/// Every statement of a list binds by number from the same arguments ([`write_message`]):
/// `$1` conv_id, `$2` seq, `$3` message_id, `$4` sender_user, `$5` sender_device,
/// `$6` client_msg_id, `$7` request_hash, `$8` body, `$9` created_at.
macro_rules! write_message_sql {
    () => {
        "UPDATE change_clock SET last = last + 1 WHERE id = 1;
         INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                             client_msg_id, request_hash, body, created_at)
         VALUES ($1, $2, 'msg', $3, $4, $5, $6, $7, $8, $9);
         UPDATE conversations
            SET next_seq = $2 + 1, change_seq = (SELECT last FROM change_clock WHERE id = 1)
          WHERE conv_id = $1;
         INSERT INTO read_marks (conv_id, user_id, read_seq, updated_at, change_seq)
         VALUES ($1, $4, $2, $9, (SELECT last FROM change_clock WHERE id = 1))
         ON CONFLICT (conv_id, user_id) DO UPDATE
           SET read_seq = max(read_marks.read_seq, excluded.read_seq),
               updated_at = excluded.updated_at, change_seq = excluded.change_seq"
    };
}
pub(super) use write_message_sql;

/// The writes of a lone send, in its own transaction.
const WRITE_MESSAGE_SQL: &str = write_message_sql!();

/// Runs `sql`, a list built on [`write_message_sql`], for `msg` in one call; answers the
/// message's `created_at`.
pub(super) async fn write_message(
    conn: &mut SqliteConnection,
    sql: &'static str,
    msg: &NewMessage<'_>,
) -> Result<DateTime<Utc>, sqlx::Error> {
    let created_at = now();
    sqlx::query(sql)
        .bind(msg.req.conv_id.as_str())
        .bind(msg.slot.seq)
        .bind(uuid_text(msg.message_id))
        .bind(msg.req.sender_user.as_str())
        .bind(msg.req.sender_device.as_str())
        .bind(msg.req.client_msg_id.as_str())
        .bind(msg.req.request_hash.as_str())
        .bind(msg.req.body.as_str())
        .bind(ts(created_at))
        .execute(conn)
        .await?;
    Ok(created_at)
}

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
        Ok(write_message(self, WRITE_MESSAGE_SQL, msg).await?)
    }
}
