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
