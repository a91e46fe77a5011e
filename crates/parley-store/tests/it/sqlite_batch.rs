//! Group commit on the SQLite store: concurrent sends committed in one transaction, each
//! request decided on its own. A second connection holds the database's write lock while the
//! sends queue, so the batch is seen to form (`[1, n]` in the observer), never assumed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use crate::contract::{self, new_conv, send, user};
use anyhow::{bail, ensure, Result};
use parley_domain::{ConvKind, Rejection};
use parley_store::sqlite::SqliteStore;
use parley_store::{SendOutcome, Store, StoreError, StoreObserver};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use tempfile::TempDir;

/// Longest wait for the first send's batch to be taken by the worker.
const FIRST_BATCH_SEEN_MS: u64 = 10_000;

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

/// A store with ana and ben in group `c-f` (head 2) and ana alone in group `c-g` (head 1),
/// user cat in neither, and a second connection to the same file.
async fn setup() -> Result<(SqliteStore, SqliteConnection, TempDir)> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_dir(dir.path()).await?;
    store.migrate().await?;
    let ana = user(&store, "u-ana").await?;
    let ben = user(&store, "u-ben").await?;
    user(&store, "u-cat").await?;
    store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-f"), &[&ben]))
        .await?;
    store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-g"), &[]))
        .await?;
    let probe = SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(store.path())
            .busy_timeout(Duration::from_secs(5)),
    )
    .await?;
    Ok((store, probe, dir))
}

/// One send of a batch: conversation, sender, request key, body.
type Plan = (&'static str, &'static str, &'static str, &'static str);

/// Sends `first` and waits until the worker took it (its batch of one, which then waits for
/// the write lock the probe holds); queues every send of `batch` (each joins the queue on its
/// first poll); releases the lock. The store commits `first` alone and `batch` as one batch.
/// Answers `first`'s, then `batch`'s in order, and the batch sizes seen.
async fn one_batch_behind_a_held_lock(
    store: &SqliteStore,
    probe: &mut SqliteConnection,
    first: Plan,
    batch: &[Plan],
) -> Result<(Vec<Answer>, Vec<usize>)> {
    let sizes = Arc::new(BatchSizes::default());
    store.observe(sizes.clone());
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *probe).await?;
    let first = {
        let store = store.clone();
        tokio::spawn(async move {
            let (conv, from, key, body) = first;
            send(
                &store,
                &contract::cid(conv),
                &contract::uid(from),
                key,
                body,
            )
            .await
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(FIRST_BATCH_SEEN_MS);
    while sizes.seen().is_empty() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the first send was never taken"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut queued: Vec<Pin<Box<dyn Future<Output = Answer> + Send + '_>>> = batch
        .iter()
        .map(|&(conv, from, key, body)| {
            Box::pin(async move {
                send(store, &contract::cid(conv), &contract::uid(from), key, body).await
            }) as Pin<Box<_>>
        })
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
        bail!("{ready_at_once} queued sends answered while the write lock was held");
    }
    sqlx::query("COMMIT").execute(&mut *probe).await?;
    let mut answers = vec![first.await?];
    for f in queued {
        answers.push(f.await);
    }
    Ok((answers, sizes.seen()))
}

/// Sends `plan` again, once nothing makes it fail: it writes at `seq`, not as a replay, since
/// its earlier failure wrote nothing.
async fn retry_writes_at(store: &SqliteStore, plan: Plan, seq: i64) -> Result<()> {
    let (conv, from, key, body) = plan;
    let retry = send(store, &contract::cid(conv), &contract::uid(from), key, body).await?;
    ensure!(
        retry.seq == seq && !retry.dup,
        "retry of the poisoned send: {retry:?}, expected seq {seq}"
    );
    Ok(())
}

/// Seqs and client_msg_ids of the messages of `conv`, ascending, read on the probe.
async fn messages(probe: &mut SqliteConnection, conv: &str) -> Result<Vec<(i64, String)>> {
    Ok(sqlx::query_as(
        "SELECT seq, client_msg_id FROM events WHERE conv_id = $1 AND kind = 'msg' ORDER BY seq",
    )
    .bind(conv)
    .fetch_all(&mut *probe)
    .await?)
}

async fn next_seq(probe: &mut SqliteConnection, conv: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT next_seq FROM conversations WHERE conv_id = $1")
            .bind(conv)
            .fetch_one(&mut *probe)
            .await?,
    )
}

/// The batch of [`every_request_of_a_batch_is_decided_alone`]: writes to two conversations
/// from two senders, a replay of a key written earlier in the batch, the same key with another
/// body, a non-member, and a send the test's trigger makes fail in the database.
const MIXED: [Plan; 10] = [
    ("c-f", "u-ana", "m-1", "hello"),
    ("c-g", "u-ana", "m-g1", "hello"),
    ("c-f", "u-ben", "m-b1", "hello"),
    ("c-f", "u-ana", "m-1", "hello"),
    ("c-f", "u-ana", "m-1", "another body"),
    ("c-f", "u-cat", "m-c1", "hello"),
    ("c-f", "u-ana", "m-p", "poison"),
    ("c-f", "u-ana", "m-2", "hello"),
    ("c-g", "u-ana", "m-g2", "hello"),
    ("c-f", "u-ben", "m-b2", "hello"),
];

/// In one batch seen to form, each request gets its own answer: the writes take consecutive
/// seqs per conversation, the replay of a key written earlier in the batch answers that write
/// (dup, same seq and message id), the same key with another body a mismatch, the non-member
/// `NOT_MEMBER`, the send failing in the database `Unavailable` alone, and nothing else moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_of_a_batch_is_decided_alone() -> Result<()> {
    let (store, mut probe, _dir) = setup().await?;
    sqlx::query(
        "CREATE TRIGGER fail_after_insert AFTER INSERT ON events WHEN NEW.body = 'poison'
         BEGIN SELECT RAISE(ABORT, 'injected failure after insert'); END",
    )
    .execute(&mut probe)
    .await?;
    let first = ("c-f", "u-ben", "m-b0", "hello");
    let (answers, batches) =
        one_batch_behind_a_held_lock(&store, &mut probe, first, &MIXED).await?;
    ensure!(
        batches == [1, MIXED.len()],
        "the batch did not form: batches {batches:?}"
    );
    let ack = |i: usize| -> Result<&SendOutcome> {
        match &answers[i] {
            Ok(a) => Ok(a),
            Err(e) => bail!(
                "send {i} {:?}: {e:?}",
                if i == 0 { first } else { MIXED[i - 1] }
            ),
        }
    };
    // Answers are indexed from the first send: MIXED[k] is answers[k + 1].
    ensure!(ack(0)?.seq == 3 && !ack(0)?.dup, "first: {:?}", answers[0]);
    let written = [(1, 4), (2, 2), (3, 5), (8, 6), (9, 3), (10, 7)];
    for (i, seq) in written {
        ensure!(
            ack(i)?.seq == seq && !ack(i)?.dup,
            "send {i}: {:?}, expected seq {seq}",
            answers[i]
        );
    }
    let (original, replay) = (ack(1)?, ack(4)?);
    ensure!(
        replay.dup && replay.seq == original.seq && replay.message_id == original.message_id,
        "the replay in the batch: {replay:?} for {original:?}"
    );
    let rejected = |i: usize| answers[i].as_ref().err().and_then(StoreError::rejected);
    ensure!(
        rejected(5) == Some(&Rejection::IdempotencyMismatch),
        "another body under a key of the batch: {:?}",
        answers[5]
    );
    ensure!(
        rejected(6) == Some(&Rejection::NotMember),
        "non-member: {:?}",
        answers[6]
    );
    ensure!(
        matches!(answers[7], Err(StoreError::Unavailable(_))),
        "the poisoned send: {:?}",
        answers[7]
    );
    let keys = |rows: Vec<(i64, String)>| rows.into_iter().map(|(s, k)| format!("{s}:{k}"));
    let f: Vec<String> = keys(messages(&mut probe, "c-f").await?).collect();
    let g: Vec<String> = keys(messages(&mut probe, "c-g").await?).collect();
    ensure!(
        f == ["3:m-b0", "4:m-1", "5:m-b1", "6:m-2", "7:m-b2"] && g == ["2:m-g1", "3:m-g2"],
        "logs after the batch: c-f {f:?}, c-g {g:?}"
    );
    ensure!(
        next_seq(&mut probe, "c-f").await? == 8 && next_seq(&mut probe, "c-g").await? == 4,
        "counters off the logs"
    );
    // Everything answered is durable and the poisoned key was never taken: once the trigger
    // is gone, its retry writes at the next seq.
    sqlx::query("DROP TRIGGER fail_after_insert")
        .execute(&mut probe)
        .await?;
    retry_writes_at(&store, ("c-f", "u-ana", "m-p", "poison"), 8).await
}

/// A request's writes reach SQLite as one statement list; when its last statement (the read
/// mark) fails, the insert and the counter update that ran before it are undone with the
/// request's savepoint: the request answers `Unavailable` alone, its seq goes to the next
/// request, and its retry writes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_late_in_a_requests_writes_undoes_all_of_them() -> Result<()> {
    let (store, mut probe, _dir) = setup().await?;
    // The read mark is written after the event, so the trigger finds the poisoned body.
    for event in ["INSERT", "UPDATE"] {
        sqlx::query(&format!(
            "CREATE TRIGGER fail_at_read_mark_{event} BEFORE {event} ON read_marks
             WHEN (SELECT body FROM events WHERE conv_id = NEW.conv_id AND seq = NEW.read_seq)
                  = 'poison-late'
             BEGIN SELECT RAISE(ABORT, 'injected failure at the read mark'); END"
        ))
        .execute(&mut probe)
        .await?;
    }
    let first = ("c-f", "u-ben", "m-b0", "hello");
    let batch: [Plan; 3] = [
        ("c-f", "u-ana", "m-1", "hello"),
        ("c-f", "u-ana", "m-p", "poison-late"),
        ("c-f", "u-ben", "m-b1", "hello"),
    ];
    let (answers, batches) =
        one_batch_behind_a_held_lock(&store, &mut probe, first, &batch).await?;
    ensure!(
        batches == [1, batch.len()],
        "the batch did not form: batches {batches:?}"
    );
    let seqs: Vec<Option<i64>> = answers
        .iter()
        .map(|a| a.as_ref().ok().map(|a| a.seq))
        .collect();
    ensure!(
        seqs == [Some(3), Some(4), None, Some(5)],
        "answers: {answers:?}"
    );
    ensure!(
        matches!(answers[2], Err(StoreError::Unavailable(_))),
        "the poisoned send: {:?}",
        answers[2]
    );
    let log: Vec<String> = messages(&mut probe, "c-f")
        .await?
        .into_iter()
        .map(|(seq, key)| format!("{seq}:{key}"))
        .collect();
    ensure!(
        log == ["3:m-b0", "4:m-1", "5:m-b1"] && next_seq(&mut probe, "c-f").await? == 6,
        "log after the batch: {log:?}"
    );
    let ana_read: i64 = sqlx::query_scalar(
        "SELECT read_seq FROM read_marks WHERE conv_id = 'c-f' AND user_id = 'u-ana'",
    )
    .fetch_one(&mut probe)
    .await?;
    ensure!(ana_read == 4, "ana's read mark at {ana_read}");
    for event in ["INSERT", "UPDATE"] {
        sqlx::query(&format!("DROP TRIGGER fail_at_read_mark_{event}"))
            .execute(&mut probe)
            .await?;
    }
    retry_writes_at(&store, ("c-f", "u-ana", "m-p", "poison-late"), 6).await
}

/// A failed commit of a batch (a deferred foreign key the test's trigger violates) leaves every
/// write of it, and the replay of one of its writes, outcome-unknown (P6), while the refusal
/// keeps its answer; nothing is written, and the retries write once each at consecutive seqs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_commit_of_a_batch_leaves_its_writes_unknown() -> Result<()> {
    let (store, mut probe, _dir) = setup().await?;
    let batch: [Plan; 4] = [
        ("c-f", "u-ana", "m-1", "hello"),
        ("c-f", "u-ana", "m-1", "hello"),
        ("c-f", "u-cat", "m-c1", "hello"),
        ("c-f", "u-ben", "m-b1", "hello"),
    ];
    // The first send commits before the trigger exists: the probe adds it while holding the
    // write lock, inside the transaction it commits to release the batch.
    let first = ("c-f", "u-ben", "m-b0", "hello");
    let ack = send(
        &store,
        &contract::cid(first.0),
        &contract::uid(first.1),
        first.2,
        first.3,
    )
    .await?;
    ensure!(ack.seq == 3, "first: {ack:?}");
    for ddl in [
        "CREATE TABLE commit_guard_parent (id INTEGER PRIMARY KEY)",
        "CREATE TABLE commit_guard (parent INTEGER REFERENCES commit_guard_parent
           DEFERRABLE INITIALLY DEFERRED)",
        "CREATE TRIGGER fail_at_commit AFTER INSERT ON events
         BEGIN INSERT INTO commit_guard VALUES (NEW.seq); END",
    ] {
        sqlx::query(ddl).execute(&mut probe).await?;
    }
    let second = ("c-g", "u-ana", "m-g1", "hello");
    let (answers, batches) =
        one_batch_behind_a_held_lock(&store, &mut probe, second, &batch).await?;
    ensure!(
        batches == [1, batch.len()],
        "the batch did not form: batches {batches:?}"
    );
    let unknown = |i: usize| matches!(answers[i], Err(StoreError::OutcomeUnknown(_)));
    ensure!(
        unknown(0) && unknown(1) && unknown(2) && unknown(4),
        "writes and the replay of one: {answers:?}"
    );
    ensure!(
        answers[3].as_ref().err().and_then(StoreError::rejected) == Some(&Rejection::NotMember),
        "the refusal: {:?}",
        answers[3]
    );
    ensure!(
        messages(&mut probe, "c-f").await?.len() == 1 && next_seq(&mut probe, "c-f").await? == 4,
        "the failed batch left rows or moved the counter"
    );
    sqlx::query("DROP TRIGGER fail_at_commit")
        .execute(&mut probe)
        .await?;
    let mut seqs = Vec::new();
    for (conv, from, key, body) in [batch[0], batch[3]] {
        let retry = send(
            &store,
            &contract::cid(conv),
            &contract::uid(from),
            key,
            body,
        )
        .await?;
        ensure!(
            !retry.dup,
            "retry of a failed commit answered dup: {retry:?}"
        );
        seqs.push(retry.seq);
    }
    ensure!(seqs == [4, 5], "retries at {seqs:?}");
    Ok(())
}

/// The negative control of the batch: the same sends one at a time commit one transaction
/// each, which the observer shows as batches of one. Group commit is what makes the size above
/// larger than one, not the test's queueing.
#[tokio::test]
async fn sends_one_at_a_time_commit_alone() -> Result<()> {
    let (store, _probe, _dir) = setup().await?;
    let sizes = Arc::new(BatchSizes::default());
    store.observe(sizes.clone());
    for (conv, from, key, body) in MIXED.iter().take(3) {
        send(
            &store,
            &contract::cid(conv),
            &contract::uid(from),
            key,
            body,
        )
        .await?;
    }
    ensure!(sizes.seen() == [1, 1, 1], "batches {:?}", sizes.seen());
    Ok(())
}
