//! Contention between nodes on one PostgreSQL database, made certain and observed.
//!
//! On one node the send queue puts a conversation in one batch at a time, so concurrent sends
//! there never meet in the database. Across nodes only the conversation's row lock settles them.
//! To show that this guard did the settling, a test holds one send's transaction inside its
//! COMMIT (a deferred constraint trigger waits for an advisory lock the test holds, after the
//! insert, with the row lock held) and waits until a session of the other node is seen blocked
//! by it (`pg_blocking_pids`), before letting it commit.

use std::time::Duration;

use anyhow::{ensure, Result};
use parley_store::pg::PgStore;
use parley_store::Store;
use parley_testkit::{TestDb, STORE_POOL_SIZE_DEFAULT};
use sqlx::{Connection, PgConnection, PgPool};

/// The body whose commit waits for the test's advisory lock.
pub const HELD_BODY: &str = "held";
/// The advisory lock key the commit trigger waits on; advisory locks belong to one database.
const COMMIT_HOLD_KEY: i64 = 0x0404;
/// Longest wait for the database to show a wait the test caused.
const OBSERVE_WAIT_MS: u64 = 10_000;
/// Pause between two looks at `pg_stat_activity`.
const OBSERVE_INTERVAL_MS: u64 = 10;
/// The `application_name` prefix of the nodes' sessions; node `i` is `<prefix><i>`.
const NODE_APP_PREFIX: &str = "parley-node-";

/// A store of its own on `db`, as another node would have, its sessions named
/// `parley-node-<index>` in `pg_stat_activity`.
pub async fn node_store(db: &TestDb, index: usize) -> Result<PgStore> {
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}application_name={NODE_APP_PREFIX}{index}", db.url());
    let store = PgStore::connect(&url, STORE_POOL_SIZE_DEFAULT).await?;
    store.migrate().await?;
    Ok(store)
}

/// The advisory lock that holds every send of [`HELD_BODY`] inside its COMMIT while held.
pub struct CommitHold {
    conn: PgConnection,
}

impl CommitHold {
    /// Installs the trigger on `db` and takes the lock.
    pub async fn install(db: &TestDb, pool: &PgPool) -> Result<CommitHold> {
        Self::install_trigger(pool).await?;
        Self::install_lock_only(db).await
    }

    /// Takes the lock again, the trigger being installed already.
    pub async fn install_lock_only(db: &TestDb) -> Result<CommitHold> {
        let mut conn = PgConnection::connect(db.url()).await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(COMMIT_HOLD_KEY)
            .execute(&mut conn)
            .await?;
        Ok(CommitHold { conn })
    }

    async fn install_trigger(pool: &PgPool) -> Result<()> {
        sqlx::query(&format!(
            "CREATE FUNCTION hold_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.body = '{HELD_BODY}' THEN PERFORM pg_advisory_xact_lock({COMMIT_HOLD_KEY}); END IF;
               RETURN NULL;
             END $$"
        ))
        .execute(pool)
        .await?;
        sqlx::query(
            "CREATE CONSTRAINT TRIGGER hold_at_commit AFTER INSERT ON events
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_at_commit()",
        )
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Waits until a node's send waits inside its COMMIT for this lock, and answers which node.
    pub async fn wait_until_holding(&self, pool: &PgPool) -> Result<String> {
        let sql = format!(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()
             AND wait_event_type = 'Lock' AND wait_event = 'advisory'
             AND application_name LIKE '{NODE_APP_PREFIX}%'"
        );
        poll(|| async {
            Ok(sqlx::query_scalar::<_, String>(&sql)
                .fetch_optional(pool)
                .await?)
        })
        .await
        .map_err(|e| e.context("no send waited at its commit"))
    }

    /// Lets the held commits go.
    pub async fn release(mut self) -> Result<()> {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(COMMIT_HOLD_KEY)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }
}

/// Waits until a session of one node is blocked by a session of another node, and answers
/// `(blocked node, blocking node)`: the database's row lock, not a queue, is ordering them.
pub async fn wait_for_cross_node_block(pool: &PgPool) -> Result<(String, String)> {
    let sql = format!(
        "SELECT a.application_name, b.application_name
         FROM pg_stat_activity a
         CROSS JOIN LATERAL unnest(pg_blocking_pids(a.pid)) AS blocker(pid)
         JOIN pg_stat_activity b ON b.pid = blocker.pid
         WHERE a.datname = current_database()
           AND a.application_name LIKE '{NODE_APP_PREFIX}%'
           AND b.application_name LIKE '{NODE_APP_PREFIX}%'
           AND a.application_name <> b.application_name
         LIMIT 1"
    );
    poll(|| async {
        Ok(sqlx::query_as::<_, (String, String)>(&sql)
            .fetch_optional(pool)
            .await?)
    })
    .await
    .map_err(|e| e.context("no session of one node was blocked by another node's"))
}

/// Calls `look` until it finds something, for at most `OBSERVE_WAIT_MS`.
async fn poll<T, F, Fut>(mut look: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_millis(OBSERVE_WAIT_MS);
    loop {
        if let Some(found) = look().await? {
            return Ok(found);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "nothing within {OBSERVE_WAIT_MS} ms"
        );
        tokio::time::sleep(Duration::from_millis(OBSERVE_INTERVAL_MS)).await;
    }
}
