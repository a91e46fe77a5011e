//! Negative controls over Parley's own send and route paths (issue 12, item 5): each runs the
//! store with one guard removed by a test break (`parley_store::breaks`, the test-only feature
//! `test-breaks`, which the test kit turns on in every test build) and shows that the check
//! naming that guard fails, with the failure the guard exists to prevent. Each also runs the
//! same steps without the break and shows the check passing, beside the contract test that
//! checks it on its own (named in each control).
//!
//! The sends of one store to one conversation never overlap (its send queue commits a
//! conversation in one batch at a time), so the races below run over several stores on one
//! database, as several gateways would. A transaction of the test holds the conversation's row
//! lock while the stores' first sends start, and the test waits until each of them is seen
//! waiting for a lock in `pg_stat_activity` before it lets go: the sends overlap by
//! construction, not by luck.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use parley_domain::{ConvId, ConvKind, EventKind, UserId};
use parley_store::pg::PgStore;
use parley_store::sqlite::SqliteStore;
use parley_store::{Breaks, SendOutcome, Store, StoreError};
use parley_testkit::TestDb;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};

use crate::contract::{self, new_conv, send, user};

/// Stores (gateways) on one database in the races: enough that several transactions overlap.
const RACE_STORES: usize = 4;
/// Connections of each racing store: a send worker or two, and room for a read.
const RACE_POOL_SIZE: u32 = 4;
/// Identical concurrent sends, as in `04-concurrent-replay-one-row`.
const REPLAY_SENDS: usize = 32;
/// Distinct concurrent sends, as in `04-seq-gapless`.
const DISTINCT_SENDS: usize = 200;
/// Longest wait for the racing transactions to be seen waiting for a lock.
const LOCK_WAIT_TIMEOUT_MS: u64 = 10_000;
/// Pause between two looks at `pg_stat_activity` while waiting for lock waiters.
const LOCK_POLL_INTERVAL_MS: u64 = 10;

/// `RACE_STORES` stores on `db` without the guards `breaks` names.
async fn racing_stores(db: &TestDb, breaks: &str) -> Result<Vec<Arc<dyn Store>>> {
    let breaks = Breaks::parse(breaks).context("this test build has no test-breaks feature")?;
    let mut stores: Vec<Arc<dyn Store>> = Vec::with_capacity(RACE_STORES);
    for _ in 0..RACE_STORES {
        let store = PgStore::connect(db.url(), RACE_POOL_SIZE).await?;
        stores.push(Arc::new(store.with_breaks(breaks)));
    }
    Ok(stores)
}

/// Holds `conv`'s row lock in a transaction of the test until it is dropped or rolled back.
async fn hold_row_lock(pool: &PgPool, conv: &ConvId) -> Result<Transaction<'static, Postgres>> {
    let mut holder = pool.begin().await?;
    sqlx::query("SELECT 1 FROM conversations WHERE conv_id = $1 FOR UPDATE")
        .bind(conv.as_str())
        .execute(&mut *holder)
        .await?;
    Ok(holder)
}

/// Waits until at least `n` backends of this database wait for a lock; answers how many.
async fn lock_waiters_at_least(pool: &PgPool, n: i64) -> Result<i64> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(LOCK_WAIT_TIMEOUT_MS);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await?;
        if waiting >= n {
            return Ok(waiting);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{waiting} of {n} transactions seen waiting for a lock in {LOCK_WAIT_TIMEOUT_MS} ms");
        }
        tokio::time::sleep(Duration::from_millis(LOCK_POLL_INTERVAL_MS)).await;
    }
}

/// The answers of `total` concurrent sends to `conv` through `stores` in turn, sender and key
/// from `who(i)`: the first send of each store starts alone while the test holds the row lock,
/// the rest once all of those wait for a lock, and the lock is let go after that. Each store's
/// first send is therefore a lone transaction that overlaps every other store's.
async fn race<F>(
    db: &TestDb,
    stores: &[Arc<dyn Store>],
    conv: &ConvId,
    total: usize,
    who: F,
) -> Result<Vec<Result<SendOutcome, StoreError>>>
where
    F: Fn(usize) -> (UserId, String),
{
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(db.url())
        .await?;
    let holder = hold_row_lock(&pool, conv).await?;
    let spawn = |i: usize| {
        let store = stores[i % stores.len()].clone();
        let (from, key) = who(i);
        let conv = conv.clone();
        tokio::spawn(async move { send(&*store, &conv, &from, &key, "x").await })
    };
    let mut tasks: Vec<_> = (0..stores.len().min(total)).map(spawn).collect();
    let waiting = lock_waiters_at_least(&pool, stores.len() as i64).await?;
    println!("race: {waiting} transactions waiting for a lock before the rest start");
    tasks.extend((stores.len()..total).map(spawn));
    holder.rollback().await?;
    let mut answers = Vec::with_capacity(total);
    for task in tasks {
        answers.push(task.await?);
    }
    Ok(answers)
}

/// A fresh database, its migrated store, and a conversation of ana and ben (their joins are
/// seqs 1 and 2).
async fn chat(kind: ConvKind, id: &str) -> Result<(TestDb, PgStore, UserId, UserId, ConvId)> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let ana = user(&store, "u-ana").await?;
    let ben = user(&store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, kind, Some(id), &[&ben]))
        .await?
        .conv_id;
    Ok((db, store, ana, ben, conv))
}

/// Rows of the log holding `key`.
async fn rows_of_key(pool: &PgPool, conv: &ConvId, key: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = $1 AND client_msg_id = $2")
            .bind(conv.as_str())
            .bind(key)
            .fetch_one(pool)
            .await?,
    )
}

/// `04-control-check-then-insert-duplicates`: 32 concurrent identical sends over four stores
/// with `no-unique-index` (the key checked before the row lock) and the unique index
/// `events_request_key` dropped land more than one row, which `04-concurrent-replay-one-row`
/// (`pg_contract.rs`) forbids. With the break and the index kept, the index refuses the late
/// requests (one row); without the break, the index dropped, the race lands one row: the key
/// check under the lock is the guard, the index its backstop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_control_check_then_insert_duplicates() -> Result<()> {
    let (db, store, ana, _ben, conv) = chat(ConvKind::Direct, "c-replay").await?;
    let broken = racing_stores(&db, "no-unique-index").await?;

    // With the break and the index in place, the index stops the second row: the late
    // requests fail on `events_request_key` instead of answering as replays.
    let answers = race(&db, &broken, &conv, REPLAY_SENDS, |_| {
        (ana.clone(), "m-indexed".to_owned())
    })
    .await?;
    let rows = rows_of_key(store.pool(), &conv, "m-indexed").await?;
    let refused = answers
        .iter()
        .filter(|a| matches!(a, Err(e) if e.to_string().contains("events_request_key")))
        .count();
    println!("04-control-check-then-insert-duplicates (index kept): rows = {rows}, refused by the index = {refused}");
    ensure!(
        rows == 1 && refused > 0,
        "with the index the break must end in one row and refusals: {rows} rows, {refused} refused"
    );

    sqlx::query("DROP INDEX events_request_key")
        .execute(store.pool())
        .await?;
    let same = |_| (ana.clone(), "m-same".to_owned());

    let guarded = racing_stores(&db, "").await?;
    let answers = race(&db, &guarded, &conv, REPLAY_SENDS, same).await?;
    let fresh = answers
        .iter()
        .filter(|a| matches!(a, Ok(a) if !a.dup))
        .count();
    let rows = rows_of_key(store.pool(), &conv, "m-same").await?;
    println!("04-control-check-then-insert-duplicates (guarded): rows = {rows}, fresh = {fresh}");
    ensure!(
        rows == 1 && fresh == 1 && answers.iter().all(Result::is_ok),
        "without the break the check must pass: {rows} rows, {fresh} fresh answers"
    );

    let answers = race(&db, &broken, &conv, REPLAY_SENDS, |_| {
        (ana.clone(), "m-again".to_owned())
    })
    .await?;
    let fresh = answers
        .iter()
        .filter(|a| matches!(a, Ok(a) if !a.dup))
        .count();
    let rows = rows_of_key(store.pool(), &conv, "m-again").await?;
    println!("04-control-check-then-insert-duplicates: rows = {rows}, fresh = {fresh}");
    ensure!(
        rows > 1,
        "the control must show the failure: expected more than 1 row, got {rows}"
    );
    Ok(())
}

/// Whether the check of `04-seq-gapless` holds for `answers` to a conversation whose log must
/// then be seqs 1..=`head`: every send acked, the log without a hole or a repeated seq, and
/// the head its last seq. Answers the failure it saw otherwise.
async fn gapless(
    store: &dyn Store,
    conv: &ConvId,
    reader: &UserId,
    answers: &[Result<SendOutcome, StoreError>],
    head: i64,
) -> Result<Option<String>> {
    let failed: Vec<&StoreError> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    let seqs: Vec<i64> = contract::seqs_seen(store, conv, reader)
        .await?
        .iter()
        .map(|(seq, _)| *seq)
        .collect();
    let acked: BTreeSet<i64> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok().map(|a| a.seq))
        .collect();
    if let Some(e) = failed.first() {
        return Ok(Some(format!(
            "{} of {} sends failed, the first with: {e}",
            failed.len(),
            answers.len()
        )));
    }
    if acked.len() != answers.len() {
        return Ok(Some(format!(
            "{} sends acked {} distinct seqs",
            answers.len(),
            acked.len()
        )));
    }
    if seqs != (1..=head).collect::<Vec<_>>() {
        return Ok(Some(format!("the log is not 1..={head}: {seqs:?}")));
    }
    let view_head = store.get_conversation(conv, reader).await?.head;
    if view_head != head {
        return Ok(Some(format!("head {view_head}, expected {head}")));
    }
    Ok(None)
}

/// `04-control-seq-without-row-lock`: 200 concurrent distinct sends over four stores with
/// `no-row-lock` fail the check of `04-seq-gapless` (`pg_contract.rs`): sends of two stores
/// read the same `next_seq` and write the same seq. The primary key `(conv_id, seq)` refuses
/// the second row, so the harm shows as acked-sends-missing (sends failing with a duplicate
/// key on `events_pkey`) rather than as a repeated seq in the log. The same race with the lock
/// passes the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_control_seq_without_row_lock() -> Result<()> {
    let (db, store, ana, ben, conv) = chat(ConvKind::Group, "c-gapless").await?;
    let distinct = |i: usize| {
        let from = [&ana, &ben][i % 2].clone();
        (from, format!("m-{i}"))
    };
    let total = DISTINCT_SENDS as i64;

    let guarded = racing_stores(&db, "").await?;
    let answers = race(&db, &guarded, &conv, DISTINCT_SENDS, distinct).await?;
    let failure = gapless(&store, &conv, &ana, &answers, 2 + total).await?;
    println!("04-control-seq-without-row-lock (guarded): {failure:?}");
    ensure!(
        failure.is_none(),
        "without the break the check must pass: {failure:?}"
    );

    let broken = racing_stores(&db, "no-row-lock").await?;
    let more = |i: usize| {
        let from = [&ana, &ben][i % 2].clone();
        (from, format!("n-{i}"))
    };
    let answers = race(&db, &broken, &conv, DISTINCT_SENDS, more).await?;
    let committed = answers.iter().filter(|a| a.is_ok()).count() as i64;
    let failure = gapless(&store, &conv, &ana, &answers, 2 + total + committed).await?;
    println!("04-control-seq-without-row-lock: {failure:?}");
    let Some(failure) = failure else {
        bail!("the control must show the failure: the check passed without the row lock");
    };
    // The failure is the seq race's: two transactions wrote one seq.
    ensure!(
        failure.contains("events_pkey"),
        "the check failed, but not by a seq written twice: {failure}"
    );
    Ok(())
}

/// A store kind's name, a store of it with every guard and one without the broken guard.
type KindGuardedBroken = (&'static str, Arc<dyn Store>, Arc<dyn Store>);

/// What keeps the stores of `guarded_and_broken` alive: their databases and directories.
type Held = (TestDb, TestDb, tempfile::TempDir, tempfile::TempDir);

/// A store of each kind as built, and one of each without the guards `breaks` names.
async fn guarded_and_broken(breaks: Breaks) -> Result<([KindGuardedBroken; 2], Held)> {
    let (guarded_db, broken_db) = (TestDb::create().await, TestDb::create().await);
    let (guarded_dir, broken_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let sqlite = |dir: std::path::PathBuf| async move {
        let store = SqliteStore::open_dir(&dir).await?;
        store.migrate().await?;
        anyhow::Ok(store)
    };
    let stores: [KindGuardedBroken; 2] = [
        (
            "postgres",
            Arc::new(guarded_db.store().await),
            Arc::new(broken_db.store().await.with_breaks(breaks)),
        ),
        (
            "sqlite",
            Arc::new(sqlite(guarded_dir.path().to_owned()).await?),
            Arc::new(
                sqlite(broken_dir.path().to_owned())
                    .await?
                    .with_breaks(breaks),
            ),
        ),
    ];
    Ok((stores, (guarded_db, broken_db, guarded_dir, broken_dir)))
}

/// `05-control-cleanup-without-compare-and-delete`: with `cleanup-without-cad`, the old
/// connection's cleanup deletes the new connection's route, so the contract check
/// `05-old-cleanup-keeps-new-route` (`contract::old_cleanup_keeps_new_route`) fails with exactly
/// that observation; on a store of the same kind without the break it passes. On both stores
/// (the guard is in the statement both run).
#[tokio::test]
async fn check_05_control_cleanup_without_compare_and_delete() -> Result<()> {
    let breaks = Breaks::parse("cleanup-without-cad")?;
    let (stores, _held) = guarded_and_broken(breaks).await?;
    for (kind, guarded, broken) in stores {
        contract::old_cleanup_keeps_new_route(&*guarded)
            .await
            .with_context(|| format!("{kind}: without the break the check must pass"))?;
        let failed = contract::old_cleanup_keeps_new_route(&*broken)
            .await
            .map_err(|e| e.to_string());
        println!("05-control-cleanup-without-compare-and-delete ({kind}): {failed:?}");
        match failed {
            Err(e) if e == "the old connection's cleanup deleted the new route" => {}
            other => bail!("{kind}: the control must show the failure, got {other:?}"),
        }
    }
    Ok(())
}

/// Makes the commit of a transaction that inserted a message with body `poison` fail: a
/// deferred constraint trigger runs at COMMIT, after every statement of the send succeeded.
async fn poison_commits(pool: &PgPool) -> Result<()> {
    sqlx::query(
        "CREATE FUNCTION fail_poison_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.body = 'poison' THEN RAISE EXCEPTION 'injected failure at commit'; END IF;
         RETURN NULL; END $$",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE CONSTRAINT TRIGGER fail_poison_at_commit AFTER INSERT ON events
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_poison_at_commit()",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// `06-control-ack-before-commit`: with `ack-before-commit` a send whose commit fails is acked
/// all the same, and the acked message is not in the log (its seq goes to the next message),
/// which `06-ack-after-commit` forbids. Without the break the same send answers
/// `OUTCOME_UNKNOWN` and acks nothing (as `pg_failure.rs` checks for every failed commit).
#[tokio::test]
async fn check_06_control_ack_before_commit() -> Result<()> {
    let (_db, store, ana, _ben, conv) = chat(ConvKind::Direct, "c-ack").await?;
    poison_commits(store.pool()).await?;
    let guarded: &dyn Store = &store;

    let answer = send(guarded, &conv, &ana, "m-1", "poison").await;
    println!("06-control-ack-before-commit (guarded): {answer:?}");
    ensure!(
        matches!(answer, Err(StoreError::OutcomeUnknown(_))),
        "without the break a failed commit must not be acked: {answer:?}"
    );

    let broken = store
        .clone()
        .with_breaks(Breaks::parse("ack-before-commit")?);
    let acked = send(&broken, &conv, &ana, "m-2", "poison")
        .await
        .context("the broken store acks before its commit")?;
    // The next send takes the row lock once the poisoned transaction has ended, so after it
    // the log is final for both.
    let next = send(guarded, &conv, &ana, "m-3", "after").await?;
    let log = contract::events_seen(guarded, &conv, &ana).await?;
    let in_log = log.iter().any(|e| e.message_id == Some(acked.message_id));
    let msgs: Vec<(i64, EventKind)> = log.iter().map(|e| (e.seq, e.kind)).collect();
    println!(
        "06-control-ack-before-commit: acked seq {} in log: {in_log}; next send seq {}; log {msgs:?}",
        acked.seq, next.seq
    );
    ensure!(
        !in_log && next.seq == acked.seq,
        "the control must show the failure: acked seq {} (in log: {in_log}), next seq {}",
        acked.seq,
        next.seq
    );
    Ok(())
}

/// `12-control-target-without-visibility`: with `no-target-visibility`, a member who joined
/// after a message can react to it, reply to it and root a thread on it, so the contract check
/// of the hidden-target rule (`contract::relations::hidden_target_rule`, `12-hidden-target`)
/// fails: the hidden message answers otherwise than a missing one. Without the break it passes.
/// On both stores (the guard is the domain rule both run).
#[tokio::test]
async fn check_12_control_target_without_visibility() -> Result<()> {
    let breaks = Breaks::parse("no-target-visibility")?;
    let (stores, _held) = guarded_and_broken(breaks).await?;
    for (kind, guarded, broken) in stores {
        contract::relations::hidden_target_rule(&*guarded)
            .await
            .with_context(|| format!("{kind}: without the break the check must pass"))?;
        let failed = contract::relations::hidden_target_rule(&*broken)
            .await
            .map_err(|e| e.to_string());
        println!("12-control-target-without-visibility ({kind}): {failed:?}");
        match failed {
            Err(e) if e.starts_with("reply: hidden") => {}
            other => {
                bail!("{kind}: the check should fail on the hidden reply target, got {other:?}")
            }
        }
    }
    Ok(())
}

/// `13-control-media-without-visibility`: with `no-media-visibility`, the download check sees
/// only that some message names the media, so a member who joined after the message reads it
/// and `contract::media::late_member_cannot_read` fails. Without the break it passes.
#[tokio::test]
async fn check_13_control_media_without_visibility() -> Result<()> {
    let breaks = Breaks::parse("no-media-visibility")?;
    let (stores, _held) = guarded_and_broken(breaks).await?;
    for (kind, guarded, broken) in stores {
        contract::media::late_member_cannot_read(&*guarded)
            .await
            .with_context(|| format!("{kind}: without the break the check must pass"))?;
        let failed = contract::media::late_member_cannot_read(&*broken)
            .await
            .map_err(|e| e.to_string());
        println!("13-control-media-without-visibility ({kind}): {failed:?}");
        match failed {
            Err(e) if e.starts_with("late member") => {}
            other => bail!("{kind}: the check should fail on the late member, got {other:?}"),
        }
    }
    Ok(())
}

/// `14-control-push-after-read`: with `push-ignores-read`, the claim reports every notification
/// unread, so a device is notified of a message its user already read on another device and
/// `contract::push::read_drops_notification` (`store_push_read_drops_notification`) fails on
/// the read position. Without the break it passes. On both stores (the claim is one flow).
#[tokio::test]
async fn check_14_control_push_after_read() -> Result<()> {
    let breaks = Breaks::parse("push-ignores-read")?;
    let (stores, _held) = guarded_and_broken(breaks).await?;
    for (kind, guarded, broken) in stores {
        contract::push::read_drops_notification(&*guarded)
            .await
            .with_context(|| format!("{kind}: without the break the check must pass"))?;
        let failed = contract::push::read_drops_notification(&*broken)
            .await
            .map_err(|e| e.to_string());
        println!("14-control-push-after-read ({kind}): {failed:?}");
        match failed {
            Err(e) if e.starts_with("read position") => {}
            other => bail!("{kind}: the check should fail on the read position, got {other:?}"),
        }
    }
    Ok(())
}

/// `15-control-search-ignores-periods`: with `search-ignores-periods`, a search checks that the
/// searcher is a member of the conversation but not that a hit lies inside one of their
/// periods, so a member who joined after one message and left before another finds both and
/// `contract::search::visibility_follows_periods` fails on the member's period. Without the
/// break it passes. On both stores (each backend's statement takes the same flag). The verify
/// check `15-outside-periods-not-found` fails the same way through `parley serve`
/// (`crates/parley/tests/it/break_process.rs`).
#[tokio::test]
async fn check_15_control_search_ignores_periods() -> Result<()> {
    let breaks = Breaks::parse("search-ignores-periods")?;
    let (stores, _held) = guarded_and_broken(breaks).await?;
    for (kind, guarded, broken) in stores {
        contract::search::visibility_follows_periods(&*guarded)
            .await
            .with_context(|| format!("{kind}: without the break the check must pass"))?;
        let failed = contract::search::visibility_follows_periods(&*broken)
            .await
            .map_err(|e| e.to_string());
        println!("15-control-search-ignores-periods ({kind}): {failed:?}");
        match failed {
            Err(e) if e == "a member finds only what their period holds" => {}
            other => bail!("{kind}: the check should fail on the member's period, got {other:?}"),
        }
    }
    Ok(())
}
