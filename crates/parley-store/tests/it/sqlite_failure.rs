//! Failures injected for real into the SQLite store's write transactions, through triggers
//! added to the test's database file, and the durability of what was acked.

use std::time::Duration;

use crate::contract;
use crate::contract::{new_conv, send, user};
use anyhow::{ensure, Result};
use parley_domain::ConvKind;
use parley_store::sqlite::SqliteStore;
use parley_store::{Store, StoreError};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use tempfile::TempDir;

async fn setup() -> Result<(SqliteStore, SqliteConnection, TempDir)> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_dir(dir.path()).await?;
    store.migrate().await?;
    let ana = user(&store, "u-ana").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-f"), &[]))
        .await?
        .conv_id;
    send(&store, &conv, &ana, "m-1", "fine").await?;
    // A second connection to the same file, as another process would have.
    let probe = SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(store.path())
            .busy_timeout(Duration::from_secs(5)),
    )
    .await?;
    Ok((store, probe, dir))
}

async fn counter_and_rows(conn: &mut SqliteConnection) -> Result<(i64, i64)> {
    let next: i64 = sqlx::query_scalar("SELECT next_seq FROM conversations WHERE conv_id = 'c-f'")
        .fetch_one(&mut *conn)
        .await?;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = 'c-f'")
        .fetch_one(&mut *conn)
        .await?;
    Ok((next, rows))
}

/// A failure inside the insert, before the commit, rolls everything back and answers
/// `Unavailable`; the next send takes the seq the failed one would have had (P1, P5).
#[tokio::test]
async fn failure_after_insert_before_commit_leaves_log_unchanged() -> Result<()> {
    let (store, mut probe, _dir) = setup().await?;
    let ana = contract::uid("u-ana");
    let conv = contract::cid("c-f");
    let before = counter_and_rows(&mut probe).await?;
    sqlx::query(
        "CREATE TRIGGER fail_after_insert AFTER INSERT ON events WHEN NEW.body = 'poison'
         BEGIN SELECT RAISE(ABORT, 'injected failure after insert'); END",
    )
    .execute(&mut probe)
    .await?;
    let r = send(&store, &conv, &ana, "m-2", "poison").await;
    ensure!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "answer: {r:?}"
    );
    let after = counter_and_rows(&mut probe).await?;
    ensure!(before == after, "moved: {before:?} -> {after:?}");
    let ok = send(&store, &conv, &ana, "m-3", "fine").await?;
    ensure!(
        ok.seq == before.0,
        "next seq {} expected {}",
        ok.seq,
        before.0
    );
    Ok(())
}

/// A failure at COMMIT (a deferred foreign key that the trigger's row violates, checked only
/// when committing) answers `OutcomeUnknown` and leaves nothing behind; once repaired, a retry
/// with the same request key commits at the original seq with dup = false.
#[tokio::test]
async fn failure_at_commit_answers_outcome_unknown() -> Result<()> {
    let (store, mut probe, _dir) = setup().await?;
    let ana = contract::uid("u-ana");
    let conv = contract::cid("c-f");
    let before = counter_and_rows(&mut probe).await?;
    for ddl in [
        "CREATE TABLE commit_guard_parent (id INTEGER PRIMARY KEY)",
        "CREATE TABLE commit_guard (parent INTEGER REFERENCES commit_guard_parent
           DEFERRABLE INITIALLY DEFERRED)",
        "CREATE TRIGGER fail_at_commit AFTER INSERT ON events
         BEGIN INSERT INTO commit_guard VALUES (NEW.seq); END",
    ] {
        sqlx::query(ddl).execute(&mut probe).await?;
    }
    let r = send(&store, &conv, &ana, "m-2", "hello").await;
    ensure!(
        matches!(r, Err(StoreError::OutcomeUnknown(_))),
        "answer: {r:?}"
    );
    let after = counter_and_rows(&mut probe).await?;
    ensure!(before == after, "moved: {before:?} -> {after:?}");
    // The failed transaction was rolled back: the single writer is free for the next write.
    sqlx::query("DROP TRIGGER fail_at_commit")
        .execute(&mut probe)
        .await?;
    let retry = send(&store, &conv, &ana, "m-2", "hello").await?;
    ensure!(
        retry.seq == before.0 && !retry.dup,
        "retry after repair: {retry:?}"
    );
    Ok(())
}

/// A write lock held by another connection makes a send wait (busy timeout), not fail; the
/// send commits once the lock is released, at the next seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_waits_for_a_foreign_write_lock() -> Result<()> {
    let (store, mut probe, _dir) = setup().await?;
    let ana = contract::uid("u-ana");
    let conv = contract::cid("c-f");
    sqlx::query("BEGIN IMMEDIATE").execute(&mut probe).await?;
    let pending = {
        let (store, conv, ana) = (store.clone(), conv.clone(), ana.clone());
        tokio::spawn(async move { send(&store, &conv, &ana, "m-2", "waited").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!pending.is_finished(), "the send did not wait for the lock");
    sqlx::query("COMMIT").execute(&mut probe).await?;
    let ack = pending.await??;
    ensure!(ack.seq == 3 && !ack.dup, "ack after the lock: {ack:?}");
    Ok(())
}

/// Everything acked is in the file: a store opened again on it reads the same log.
#[tokio::test]
async fn acked_writes_survive_reopening() -> Result<()> {
    let (store, probe, dir) = setup().await?;
    drop(probe);
    let ana = contract::uid("u-ana");
    let conv = contract::cid("c-f");
    for i in 2..=20 {
        send(&store, &conv, &ana, &format!("m-{i}"), "kept").await?;
    }
    store.close().await;
    let reopened = SqliteStore::open_dir(dir.path()).await?;
    reopened.migrate().await?;
    let seen = contract::seqs_seen(&reopened, &conv, &ana).await?;
    let seqs: Vec<i64> = seen.iter().map(|(s, _)| *s).collect();
    ensure!(
        seqs == (1..=21).collect::<Vec<i64>>(),
        "reopened log {seqs:?}"
    );
    let next = send(&reopened, &conv, &ana, "m-21", "after").await?;
    ensure!(next.seq == 22 && !next.dup, "{next:?}");
    Ok(())
}
