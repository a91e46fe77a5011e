//! `--cleanup`: removes what verify runs left behind. Every scratch id starts with
//! `verify-` and eight hex digits of its run.
//!
//! With the database, one transaction deletes every row of the store's tables whose user or
//! conversation id carries that prefix (all verify runs, not only this one). Without it, the
//! API has no delete for users or conversations: the devices of this run's scratch users are
//! revoked, so their tokens are worthless, and the rows stay.

use sqlx::{Connection, PgConnection};

use crate::context::Target;
use crate::error::VerifyError;

/// `LIKE` pattern of every scratch id: `verify-` and eight characters of the run tag, then `-`.
pub const SCRATCH_ID_PATTERN: &str = "verify-________-%";

/// The deletes, children first; `$1` is the pattern.
const DELETES: &[(&str, &str)] = &[
    ("routes", "DELETE FROM routes WHERE user_id LIKE $1"),
    (
        "read_marks",
        "DELETE FROM read_marks WHERE conv_id LIKE $1 OR user_id LIKE $1",
    ),
    (
        "idem_tombstones",
        "DELETE FROM idem_tombstones WHERE conv_id LIKE $1",
    ),
    ("events", "DELETE FROM events WHERE conv_id LIKE $1"),
    (
        "membership_periods",
        "DELETE FROM membership_periods WHERE conv_id LIKE $1 OR user_id LIKE $1",
    ),
    (
        "conversations",
        "DELETE FROM conversations WHERE conv_id LIKE $1",
    ),
    ("devices", "DELETE FROM devices WHERE user_id LIKE $1"),
    ("users", "DELETE FROM users WHERE user_id LIKE $1"),
];

/// What `--cleanup` did.
#[derive(Debug, Clone, Default)]
pub struct CleanupReport {
    /// Rows deleted per table (with the database).
    pub deleted: Vec<(String, u64)>,
    /// Devices revoked through the admin API (without it).
    pub revoked_devices: usize,
    /// What could not be removed, in words.
    pub left: Option<String>,
}

/// Removes the scratch data: every verify run's rows with the database, else this run's
/// device tokens.
pub async fn cleanup(target: &Target) -> Result<CleanupReport, VerifyError> {
    let mut report = CleanupReport::default();
    if let Some(url) = &target.database_url {
        let mut conn = PgConnection::connect(url).await?;
        let mut tx = conn.begin().await?;
        for (table, statement) in DELETES {
            let n = sqlx::query(statement)
                .bind(SCRATCH_ID_PATTERN)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            report.deleted.push(((*table).to_owned(), n));
        }
        tx.commit().await?;
        return Ok(report);
    }
    let users = target
        .scratch_users
        .lock()
        .map(|u| u.clone())
        .unwrap_or_default();
    for (user, devices) in users {
        for device in devices {
            // A device a check revoked itself answers 404; that is the state wanted.
            if target.admin.revoke_device(&user, &device).await.is_ok() {
                report.revoked_devices += 1;
            }
        }
    }
    report.left = Some(
        "without --database-url the users, conversations and messages stay (the API deletes \
         neither); their devices were revoked"
            .into(),
    );
    Ok(report)
}
