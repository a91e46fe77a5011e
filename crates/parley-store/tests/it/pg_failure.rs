//! Failures injected for real into the send transaction with triggers in the test database.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use crate::contract::{new_conv, send, user};
use anyhow::{bail, ensure, Result};
use parley_domain::ConvKind;
use parley_store::{SendOutcome, Store, StoreError, StoreObserver};
use parley_testkit::TestDb;
use sqlx::PgPool;

/// Longest wait for the first send to be seen waiting for the row lock the test holds.
const LOCK_WAIT_SEEN_MS: u64 = 10_000;
/// Sends queued behind the first in [`one_batch_behind_a_held_send`].
const QUEUED_SENDS: usize = 23;

/// The size of every batch the store's send path commits (or fails), in order.
#[derive(Default)]
struct BatchSizes(Mutex<Vec<usize>>);

impl StoreObserver for BatchSizes {
    fn send_batch(&self, sends: usize) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sends);
    }

    fn pool_wait(&self, _wait: Duration) {}
}

impl BatchSizes {
    fn seen(&self) -> Vec<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

type Answer = Result<SendOutcome, StoreError>;

/// Makes the store form one batch for certain: while the test holds c-f's row lock, send
/// `m-b0` and wait until its transaction is seen waiting for the lock; then queue `m-b1` to
/// `m-b23` (each send joins the queue on its first poll, and none can be taken while c-f is
/// in the held transaction), then release the lock. The store then commits `m-b0` alone and
/// the others as one batch, which the returned observer shows as `[1, 23]`. Answers in key
/// order.
async fn one_batch_behind_a_held_send(
    store: &parley_store::pg::PgStore,
    conv: &parley_domain::ConvId,
    ana: &parley_domain::UserId,
) -> Result<(Vec<Answer>, Vec<usize>)> {
    let sizes = Arc::new(BatchSizes::default());
    store.observe(sizes.clone());
    let mut lock = store.pool().begin().await?;
    sqlx::query("SELECT 1 FROM conversations WHERE conv_id = $1 FOR UPDATE")
        .bind(conv.as_str())
        .execute(&mut *lock)
        .await?;
    let first = {
        let (store, conv, ana) = (store.clone(), conv.clone(), ana.clone());
        tokio::spawn(async move { send(&store, &conv, &ana, "m-b0", "hello").await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(LOCK_WAIT_SEEN_MS);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(store.pool())
        .await?;
        if waiting == 1 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the first send never waited for the row lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let keys: Vec<String> = (1..=QUEUED_SENDS).map(|i| format!("m-b{i}")).collect();
    let mut queued: Vec<Pin<Box<dyn Future<Output = Answer> + Send + '_>>> = keys
        .iter()
        .map(|key| Box::pin(send(store, conv, ana, key, "hello")) as Pin<Box<_>>)
        .collect();
    let ready_at_once = std::future::poll_fn(|cx| {
        let ready = queued
            .iter_mut()
            .map(|f| f.as_mut().poll(cx).is_ready())
            .filter(|&ready| ready)
            .count();
        Poll::Ready(ready)
    })
    .await;
    if ready_at_once > 0 {
        bail!("{ready_at_once} queued sends answered while c-f was locked");
    }
    lock.rollback().await?;
    let mut answers = vec![first.await?];
    for f in queued {
        answers.push(f.await);
    }
    Ok((answers, sizes.seen()))
}

async fn counter_and_rows(pool: &PgPool) -> Result<(i64, i64)> {
    let next: i64 = sqlx::query_scalar("SELECT next_seq FROM conversations WHERE conv_id = 'c-f'")
        .fetch_one(pool)
        .await?;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = 'c-f'")
        .fetch_one(pool)
        .await?;
    Ok((next, rows))
}

/// A fresh database with user ana and her group `c-f` (head 1: her join).
async fn group_of_ana() -> Result<(
    TestDb,
    parley_store::pg::PgStore,
    parley_domain::UserId,
    parley_domain::ConvId,
)> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let ana = user(&store, "u-ana").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-f"), &[]))
        .await?
        .conv_id;
    Ok((db, store, ana, conv))
}

/// Makes every commit that inserted an event fail: a deferred constraint trigger runs at
/// COMMIT, after every statement of the send succeeded.
async fn fail_every_commit(pool: &PgPool) -> Result<()> {
    sqlx::query(
        "CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'injected failure at commit'; END $$",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED
         FOR EACH ROW EXECUTE FUNCTION fail_at_commit()",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A failure after the insert and before commit rolls everything back: next_seq and the log are
/// as they were, and the answer says the store failed before anything was written.
#[tokio::test]
async fn failure_after_insert_before_commit_leaves_log_unchanged() -> Result<()> {
    let (_db, store, ana, conv) = group_of_ana().await?;
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
    let (_db, store, ana, conv) = group_of_ana().await?;
    let before = counter_and_rows(store.pool()).await?;
    fail_every_commit(store.pool()).await?;
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

/// Starts `n` sends from ana at once, keys `m-b<i>`, and returns the answers in key order.
async fn concurrent_sends(
    store: &parley_store::pg::PgStore,
    conv: &parley_domain::ConvId,
    ana: &parley_domain::UserId,
    n: usize,
) -> Result<Vec<Result<parley_store::SendOutcome, StoreError>>> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (store, conv, ana, start) = (store.clone(), conv.clone(), ana.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            send(&store, &conv, &ana, &format!("m-b{i}"), "hello").await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await?);
    }
    Ok(answers)
}

/// A commit failure under concurrent sends, which the store commits in batches (a batch of 23
/// is seen to form): every send answers OUTCOME_UNKNOWN, nothing is written, and every retry
/// with the same key then writes once, at consecutive seqs (P1, P6).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failure_at_commit_of_a_batch_leaves_every_outcome_unknown() -> Result<()> {
    let (_db, store, ana, conv) = group_of_ana().await?;
    let before = counter_and_rows(store.pool()).await?;
    fail_every_commit(store.pool()).await?;
    let (answers, batches) = one_batch_behind_a_held_send(&store, &conv, &ana).await?;
    ensure!(
        batches == [1, QUEUED_SENDS],
        "the batch did not form: batches {batches:?}"
    );
    ensure!(
        answers
            .iter()
            .all(|a| matches!(a, Err(StoreError::OutcomeUnknown(_)))),
        "answers: {answers:?}"
    );
    ensure!(
        counter_and_rows(store.pool()).await? == before,
        "state moved after failed commits"
    );
    sqlx::query("DROP TRIGGER fail_at_commit ON events")
        .execute(store.pool())
        .await?;
    let retries = concurrent_sends(&store, &conv, &ana, 24).await?;
    let mut seqs = Vec::new();
    for r in retries {
        let ack = r?;
        ensure!(!ack.dup, "a retry of a failed commit answered dup");
        seqs.push(ack.seq);
    }
    seqs.sort_unstable();
    let expected: Vec<i64> = (before.0..before.0 + 24).collect();
    ensure!(seqs == expected, "seqs {seqs:?}");
    Ok(())
}

/// A statement failure inside a batch (a poisoned row in a batch of 23 seen to form) rolls the
/// batch back, and its requests
/// are then sent one by one: only the poisoned send answers UNAVAILABLE and writes nothing,
/// every other send is written, and the log stays gapless.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failure_inside_a_batch_writes_nothing_and_leaves_no_gap() -> Result<()> {
    let (_db, store, ana, conv) = group_of_ana().await?;
    sqlx::query(
        "CREATE FUNCTION fail_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.client_msg_id = 'm-b7' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$",
    )
    .execute(store.pool())
    .await?;
    sqlx::query("CREATE TRIGGER fail_after_insert AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION fail_after_insert()")
        .execute(store.pool())
        .await?;
    let (answers, batches) = one_batch_behind_a_held_send(&store, &conv, &ana).await?;
    ensure!(
        batches == [1, QUEUED_SENDS],
        "the batch did not form: batches {batches:?}"
    );
    let mut seqs = Vec::new();
    let mut failed = 0;
    for (i, a) in answers.iter().enumerate() {
        match a {
            Ok(ack) => seqs.push(ack.seq),
            Err(StoreError::Unavailable(_)) => failed += 1,
            Err(e) => anyhow::bail!("send {i}: {e:?}"),
        }
    }
    ensure!(
        matches!(answers[7], Err(StoreError::Unavailable(_))),
        "the poisoned send: {:?}",
        answers[7]
    );
    let (next, rows) = counter_and_rows(store.pool()).await?;
    ensure!(
        failed == 1 && rows as usize == 1 + seqs.len() && seqs.len() == 23,
        "{rows} rows for {} acks and {failed} failures",
        seqs.len()
    );
    seqs.sort_unstable();
    let expected: Vec<i64> = (2..2 + seqs.len() as i64).collect();
    ensure!(
        seqs == expected && next == 2 + seqs.len() as i64,
        "seqs {seqs:?}, next_seq {next}"
    );
    Ok(())
}
