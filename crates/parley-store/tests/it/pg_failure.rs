//! Failures injected for real into the send transaction with triggers in the test database.

use crate::contract::{new_conv, send, user};
use anyhow::{ensure, Result};
use parley_domain::ConvKind;
use parley_store::{Store, StoreError};
use parley_testkit::TestDb;
use sqlx::PgPool;

async fn counter_and_rows(pool: &PgPool) -> Result<(i64, i64)> {
    let next: i64 = sqlx::query_scalar("SELECT next_seq FROM conversations WHERE conv_id = 'c-f'")
        .fetch_one(pool)
        .await?;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = 'c-f'")
        .fetch_one(pool)
        .await?;
    Ok((next, rows))
}

/// A failure after the insert and before commit rolls everything back: next_seq and the log are
/// as they were, and the answer says the store failed before anything was written.
#[tokio::test]
async fn failure_after_insert_before_commit_leaves_log_unchanged() -> Result<()> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let ana = user(&store, "u-ana").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-f"), &[]))
        .await?
        .conv_id;
    send(&store, &conv, &ana, "m-1", "fine").await?;
    let before = counter_and_rows(store.pool()).await?;
    sqlx::query(
        "CREATE FUNCTION fail_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.body = 'poison' THEN RAISE EXCEPTION 'injected failure after insert'; END IF; RETURN NEW; END $$",
    )
    .execute(store.pool())
    .await?;
    sqlx::query("CREATE TRIGGER fail_after_insert AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION fail_after_insert()")
        .execute(store.pool())
        .await?;
    let r = send(&store, &conv, &ana, "m-2", "poison").await;
    ensure!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "answer: {r:?}"
    );
    let after = counter_and_rows(store.pool()).await?;
    ensure!(
        before == after,
        "next_seq and rows moved: {before:?} -> {after:?}"
    );
    // The next send takes the seq the failed one would have had: no hole (P1, P5).
    let ok = send(&store, &conv, &ana, "m-3", "fine").await?;
    ensure!(
        ok.seq == before.0,
        "next seq {} expected {}",
        ok.seq,
        before.0
    );
    Ok(())
}

/// A failure at commit answers OUTCOME_UNKNOWN (P6), never a plain failure; the retry with the
/// same request key then tells the truth.
#[tokio::test]
async fn failure_at_commit_reports_outcome_unknown() -> Result<()> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let ana = user(&store, "u-ana").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-f"), &[]))
        .await?
        .conv_id;
    let before = counter_and_rows(store.pool()).await?;
    // A deferred constraint trigger runs at COMMIT, after every statement of the send succeeded.
    sqlx::query(
        "CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'injected failure at commit'; END $$",
    )
    .execute(store.pool())
    .await?;
    sqlx::query(
        "CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED
         FOR EACH ROW EXECUTE FUNCTION fail_at_commit()",
    )
    .execute(store.pool())
    .await?;
    let r = send(&store, &conv, &ana, "m-1", "hello").await;
    ensure!(
        matches!(r, Err(StoreError::OutcomeUnknown(_))),
        "answer: {r:?}"
    );
    ensure!(
        counter_and_rows(store.pool()).await? == before,
        "state moved after failed commit"
    );
    sqlx::query("DROP TRIGGER fail_at_commit ON events")
        .execute(store.pool())
        .await?;
    let retry = send(&store, &conv, &ana, "m-1", "hello").await?;
    ensure!(!retry.dup && retry.seq == before.0, "retry: {retry:?}");
    Ok(())
}
