//! Statements whose text runs unchanged on PostgreSQL and on SQLite.

/// The actor's and the target's open periods and whether the target is a user, in one round
/// trip. `$1` conv_id, `$2` actor, `$3` target.
pub(crate) const PARTIES_SQL: &str = "SELECT
   (SELECT role FROM membership_periods
     WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL) AS actor_role,
   EXISTS (SELECT 1 FROM users WHERE user_id = $3) AS target_exists,
   (SELECT role FROM membership_periods
     WHERE conv_id = $1 AND user_id = $3 AND to_seq IS NULL) AS target_role";

/// The current members but the leaver. `$1` conv_id, `$2` leaver.
pub(crate) const REMAINING_MEMBERS_SQL: &str = "SELECT user_id, role, from_seq
   FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL AND user_id <> $2";

/// Sets the role of an open period. `$1` conv_id, `$2` user, `$3` role.
pub(crate) const SET_OPEN_ROLE_SQL: &str =
    "UPDATE membership_periods SET role = $3 WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL";

/// A user's membership periods of a conversation, ascending. `$1` conv_id, `$2` user.
pub(crate) const PERIODS_SQL: &str = "SELECT from_seq, to_seq FROM membership_periods
   WHERE conv_id = $1 AND user_id = $2 ORDER BY from_seq";

/// What a recall needs of its target. `$1` conv_id, `$2` seq.
pub(crate) const RECALL_TARGET_SQL: &str = "SELECT kind, sender_user, created_at, recalled_at
   FROM events WHERE conv_id = $1 AND seq = $2";

/// The recall of a recalled message. It follows its target, so the search starts there.
/// `$1` conv_id, `$2` the target's seq.
pub(crate) const EXISTING_RECALL_SQL: &str = "SELECT seq FROM events
  WHERE conv_id = $1 AND seq > $2 AND kind = 'recall' AND target_seq = $2
  ORDER BY seq LIMIT 1";

/// The first events from `min_seq`, ascending: what a purge may cut. `$1` conv_id, `$2`
/// min_seq, `$3` how many.
pub(crate) const OLDEST_EVENTS_SQL: &str =
    "SELECT seq, created_at FROM events WHERE conv_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3";

/// The range read of the log, ascending: one primary-key range scan (`04-history-uses-pk`
/// explains exactly this text). `$1` conv_id, `$2`–`$3` the seqs, `$4` how many.
pub const EVENTS_RANGE_ASC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq ASC LIMIT $4";
/// The range read of the log, descending (history pages).
pub const EVENTS_RANGE_DESC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq DESC LIMIT $4";

/// The range read for `descending` or not.
pub(crate) fn events_range_sql(descending: bool) -> &'static str {
    if descending {
        EVENTS_RANGE_DESC_SQL
    } else {
        EVENTS_RANGE_ASC_SQL
    }
}

/// The conversation's log bounds for a read. `$1` conv_id.
pub(crate) const LOG_BOUNDS_SQL: &str =
    "SELECT next_seq, min_seq, epoch FROM conversations WHERE conv_id = $1";

/// What a gateway's member cache starts from. `$1` conv_id.
pub(crate) const MEMBER_SNAPSHOT_SQL: &str =
    "SELECT next_seq, delivery_mode, pull_threshold FROM conversations WHERE conv_id = $1";

/// The current members with the start of their period. `$1` conv_id.
pub(crate) const OPEN_PERIODS_SQL: &str =
    "SELECT user_id, from_seq FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL";

/// The current members with their roles, earliest first. `$1` conv_id.
pub(crate) const MEMBER_LIST_SQL: &str = "SELECT user_id, role FROM membership_periods
   WHERE conv_id = $1 AND to_seq IS NULL ORDER BY from_seq";

/// The device's route. `$1` user, `$2` device.
pub(crate) const ROUTE_SQL: &str =
    "SELECT gateway_id, conn_id FROM routes WHERE user_id = $1 AND device_id = $2";

/// Deletes the device's route only where it still names the connection (P9). `$1` user,
/// `$2` device, `$3` conn_id.
pub(crate) const RELEASE_ROUTE_SQL: &str =
    "DELETE FROM routes WHERE user_id = $1 AND device_id = $2 AND conn_id = $3";

/// The live device of a token hash. `$1` token_hash.
pub(crate) const AUTHENTICATE_SQL: &str =
    "SELECT user_id, device_id FROM devices WHERE token_hash = $1 AND revoked_at IS NULL";
