//! `idle_in_transaction_session_timeout` on the store's own PostgreSQL connections: a
//! connection of the pool that sits in a transaction holding a conversation's row lock is ended
//! by the database within the bound, the lock goes with it, and a send to that conversation
//! then goes through.

use std::time::{Duration, Instant};

use crate::contract::{self, new_conv, user};
use anyhow::{ensure, Context, Result};
use parley_domain::ConvKind;
use parley_store::pg::{PgStore, SEND_LOCK_SQL};
use parley_store::Store;
use parley_testkit::TestDb;

/// The timeout under test: short, so the test is quick, and far above a send's own duration.
const IDLE_TIMEOUT_MS: u64 = 600;
/// How much later than the timeout the blocked send may finish: PostgreSQL checks the timeout
/// on a timer, then the send's batch retries its lock.
const SLACK_MS: u64 = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_transaction_of_the_pool_is_ended_and_its_lock_released() -> Result<()> {
    let db = TestDb::create().await;
    let store = PgStore::connect_with(db.url(), 4, IDLE_TIMEOUT_MS).await?;
    store.migrate().await?;
    ensure!(
        store.describe().idle_in_transaction_timeout_ms == Some(IDLE_TIMEOUT_MS),
        "described: {:?}",
        store.describe()
    );
    let ana = user(&store, "ana").await?;
    let created = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-hot"), &[]))
        .await?;
    ensure!(created.events.len() == 1, "created: {created:?}");

    // A connection of the store's own pool, stuck in a transaction that holds the row lock
    // every send to c-hot takes first.
    let mut stuck = store.pool().begin().await?;
    let setting: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(&mut *stuck)
        .await?;
    ensure!(
        setting == format!("{IDLE_TIMEOUT_MS}ms"),
        "setting: {setting}"
    );
    sqlx::query(SEND_LOCK_SQL)
        .bind("c-hot")
        .fetch_one(&mut *stuck)
        .await?;
    let locked_at = Instant::now();

    let sent = tokio::time::timeout(
        Duration::from_millis(IDLE_TIMEOUT_MS + SLACK_MS),
        contract::send(&store, &created.conv_id, &ana, "m-1", "after the stuck one"),
    )
    .await
    .context("the send stayed blocked past the idle timeout")??;
    let waited = locked_at.elapsed();
    ensure!(sent.seq == 2, "send: {sent:?}");
    // The send waited for the lock: it went through because the holder was ended, not because
    // the lock was never held.
    ensure!(
        waited >= Duration::from_millis(IDLE_TIMEOUT_MS / 2),
        "the send did not wait for the lock: {waited:?}"
    );
    let after = sqlx::query("SELECT 1").execute(&mut *stuck).await;
    ensure!(
        after.is_err(),
        "the idle transaction's connection is still alive"
    );
    Ok(())
}

#[tokio::test]
async fn connect_reports_the_default_timeout_and_sets_it() -> Result<()> {
    let db = TestDb::create().await;
    let store = PgStore::connect(db.url(), 1).await?;
    ensure!(
        store.describe().idle_in_transaction_timeout_ms
            == Some(parley_store::pg::IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT)
    );
    let setting: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(store.pool())
        .await?;
    ensure!(setting == "10s", "setting: {setting}");
    Ok(())
}
