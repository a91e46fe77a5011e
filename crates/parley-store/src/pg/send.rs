//! The primitives of the send transaction (`flow::send`) on PostgreSQL, one READ COMMITTED
//! transaction of five round trips: BEGIN, the row lock, the key check, the insert, COMMIT.
//! A lone send runs the same steps in one round trip, the function `send_message`
//! (`send_function.rs`); this transaction stays for the test break `ack-before-commit`, which
//! needs a commit apart from the answer. The statements are exported for the benchmark's
//! baseline, which runs them without the server.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::send_function;
use super::timed_pool::TimedPool;
use super::PgTx;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::flow::send::{send_in, NewMessage, SendTx};
use crate::types::{SendOutcome, SendRequest};

/// Steps 2–4, the key check, read the same on SQLite, so its text is in `sql.rs`; exported
/// here beside the other steps.
pub use crate::sql::SEND_KEY_CHECK_SQL;

/// Step 1: the conversation's row lock, its counter and its message count. `$1` conv_id.
pub const SEND_LOCK_SQL: &str =
    "SELECT next_seq, msg_count FROM conversations WHERE conv_id = $1 FOR NO KEY UPDATE";

/// Step 1 without its lock, for the test break `no-row-lock` only (`breaks.rs`).
const SEND_READ_UNLOCKED_SQL: &str =
    "SELECT next_seq, msg_count FROM conversations WHERE conv_id = $1";

/// Step 5: insert at `next_seq`, advance the counter and the message count, and move the
/// sender's read position to the new message (an own message is read), all in one statement.
/// `$1` conv_id, `$2` seq, `$3` message_id, `$4` sender_user, `$5` sender_device, `$6`
/// client_msg_id, `$7` request_hash, `$8` body, `$9` msg_ordinal (the message count after it).
pub const SEND_INSERT_SQL: &str = "WITH ins AS (
   INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                       client_msg_id, request_hash, body, msg_ordinal)
   VALUES ($1, $2, 'msg', $3, $4, $5, $6, $7, $8, $9)
   RETURNING created_at
 ), counter AS (
   UPDATE conversations
      SET next_seq = $2 + 1, msg_count = $9, change_xid = pg_current_xact_id()
    WHERE conv_id = $1
 ), mark AS (
   INSERT INTO read_marks (conv_id, user_id, read_seq) VALUES ($1, $4, $2)
   ON CONFLICT (conv_id, user_id) DO UPDATE
     SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq), updated_at = now(),
         change_xid = pg_current_xact_id()
 )
 SELECT created_at FROM ins";

/// One send in its own transaction, with the store's test `breaks` (none outside a test
/// build).
pub(super) async fn send_one(
    pool: &TimedPool,
    req: &SendRequest,
    breaks: Breaks,
) -> Result<SendOutcome, StoreError> {
    if breaks.ack_before_commit() {
        return send_in(pool.begin().await?, req, breaks).await;
    }
    send_function::send_one(pool, req, breaks).await
}

impl SendTx for PgTx<'_> {
    const LOCK_FOR_SEND_SQL: &'static str = SEND_LOCK_SQL;
    const READ_FOR_SEND_UNLOCKED_SQL: &'static str = SEND_READ_UNLOCKED_SQL;

    async fn insert_message(&mut self, msg: &NewMessage<'_>) -> Result<DateTime<Utc>, StoreError> {
        let inserted = sqlx::query(SEND_INSERT_SQL)
            .bind(msg.req.conv_id.as_str())
            .bind(msg.slot.seq)
            .bind(msg.message_id)
            .bind(msg.req.sender_user.as_str())
            .bind(msg.req.sender_device.as_str())
            .bind(msg.req.client_msg_id.as_str())
            .bind(msg.req.request_hash.as_str())
            .bind(msg.req.body.as_str())
            .bind(msg.slot.msg_ordinal)
            .fetch_one(&mut **self)
            .await?;
        Ok(inserted.try_get("created_at")?)
    }
}
