//! Store failures injected with triggers in the test database, seen over HTTP: a failure while
//! committing answers 503 OUTCOME_UNKNOWN (P6), a failure before the commit 503 UNAVAILABLE;
//! neither leaves a trace, and a retry with the same client_msg_id learns the truth.
//!
//! On PostgreSQL the commit failure is a deferred constraint trigger; on SQLite it is a row that
//! violates a deferred foreign key, which SQLite checks only at COMMIT. Counting the trigger's
//! runs needs a counter that a rollback does not undo (a PostgreSQL sequence): the checks that
//! count are PostgreSQL-only and say so.

use anyhow::{ensure, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse, RetryPolicy};
use parley_testkit::{test_on_both_stores, ServerConfig, Sql, StoreKind, TestServer};
use serde_json::{json, Value};
use sqlx::PgPool;

const CONV: &str = "c-f";

/// Retries quickly, so the tests do not wait on the default backoff.
fn fast_retry(attempts_max: u32) -> RetryPolicy {
    RetryPolicy {
        attempts_max,
        backoff_first_ms: 10,
        backoff_max_ms: 20,
        ..RetryPolicy::default()
    }
}

async fn setup(store: StoreKind) -> Result<(TestServer, Client)> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    server.user_with_device("u-b").await;
    ua.create_conversation(&NewConversation::group(["u-b"]).with_conv_id(CONV))
        .await?;
    let ack = ua.send(CONV, "m-1", "first").await?;
    ensure!(ack.seq == 3 && !ack.dup, "{ack:?}");
    Ok((server, ua))
}

/// `(next_seq, events, membership periods)` of c-f, by SQL.
async fn conv_state(sql: &Sql) -> Result<(i64, i64, i64)> {
    let next: i64 = sql
        .one(
            "SELECT next_seq FROM conversations WHERE conv_id = $1",
            &[CONV.into()],
        )
        .await?;
    let events: i64 = sql
        .one(
            "SELECT count(*) FROM events WHERE conv_id = $1",
            &[CONV.into()],
        )
        .await?;
    let periods: i64 = sql
        .one(
            "SELECT count(*) FROM membership_periods WHERE conv_id = $1",
            &[CONV.into()],
        )
        .await?;
    Ok((next, events, periods))
}

/// The log's seqs of c-f, by SQL.
async fn log_seqs(sql: &Sql) -> Result<Vec<i64>> {
    Ok(sql
        .column(
            "SELECT seq FROM events WHERE conv_id = $1 ORDER BY seq",
            &[CONV.into()],
        )
        .await?)
}

/// Makes every later write of an event fail at COMMIT, after all its statements succeeded.
async fn install_commit_failure(sql: &Sql) -> Result<()> {
    match sql {
        Sql::Postgres(pool) => install_pg_commit_failure(pool, None).await,
        Sql::Sqlite(_) => {
            for ddl in [
                "CREATE TABLE commit_guard_parent (id INTEGER PRIMARY KEY)",
                "CREATE TABLE commit_guard (parent INTEGER REFERENCES commit_guard_parent
                   DEFERRABLE INITIALLY DEFERRED)",
                "CREATE TRIGGER fail_at_commit AFTER INSERT ON events
                 BEGIN INSERT INTO commit_guard VALUES (NEW.seq); END",
            ] {
                sql.execute(ddl, &[]).await?;
            }
            Ok(())
        }
    }
}

/// Makes every later insert of an event fail inside its statement, before any commit.
async fn install_insert_failure(sql: &Sql) -> Result<()> {
    match sql {
        Sql::Postgres(pool) => install_pg_insert_failure(pool).await,
        Sql::Sqlite(_) => {
            sql.execute(
                "CREATE TRIGGER fail_after_insert AFTER INSERT ON events
                 BEGIN SELECT RAISE(ABORT, 'injected failure after insert'); END",
                &[],
            )
            .await?;
            Ok(())
        }
    }
}

/// Removes a trigger installed by the functions above.
async fn drop_trigger(sql: &Sql, name: &str) -> Result<()> {
    let ddl = match sql {
        Sql::Postgres(_) => format!("DROP TRIGGER {name} ON events"),
        Sql::Sqlite(_) => format!("DROP TRIGGER {name}"),
    };
    sql.execute(&ddl, &[]).await?;
    Ok(())
}

/// The whole log as u-a sees it, as raw JSON.
async fn log_json(c: &Client) -> Result<Value> {
    let (status, json) = c
        .raw(
            Method::GET,
            &format!("/v1/conversations/{CONV}/events?after=0&limit=500"),
        )
        .send()
        .await?;
    ensure!(status == 200, "events: {status} {json}");
    Ok(json)
}

async fn raw_send(c: &Client, key: &str, body: &str) -> Result<RawResponse> {
    Ok(
        c.raw(Method::POST, &format!("/v1/conversations/{CONV}/messages"))
            .json(&json!({"client_msg_id": key, "body": body}))
            .response()
            .await?,
    )
}

fn error_code(r: &RawResponse) -> &str {
    r.json["error"]["code"].as_str().unwrap_or("<none>")
}

/// A deferred constraint trigger on `events` that raises at COMMIT, after every statement of
/// the write succeeded. With `fail_times`, it raises only on its first `fail_times` runs: the
/// count lives in a sequence, which a rollback does not undo.
async fn install_pg_commit_failure(pool: &PgPool, fail_times: Option<i64>) -> Result<()> {
    sqlx::query("CREATE SEQUENCE commit_failure_runs")
        .execute(pool)
        .await?;
    let limit = fail_times.map_or("NULL".to_owned(), |n| n.to_string());
    sqlx::query(&format!(
        "CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF {limit} IS NULL OR nextval('commit_failure_runs') <= {limit} THEN
             RAISE EXCEPTION 'injected failure at commit';
           END IF;
           RETURN NULL;
         END $$"
    ))
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON events
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit()",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A plain AFTER INSERT trigger on `events` that raises inside the statement, before any
/// commit; every run is counted in a sequence.
async fn install_pg_insert_failure(pool: &PgPool) -> Result<()> {
    sqlx::query("CREATE SEQUENCE insert_failure_runs")
        .execute(pool)
        .await?;
    sqlx::query(
        "CREATE FUNCTION fail_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           PERFORM nextval('insert_failure_runs');
           RAISE EXCEPTION 'injected failure after insert';
         END $$",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE TRIGGER fail_after_insert AFTER INSERT ON events
         FOR EACH ROW EXECUTE FUNCTION fail_after_insert()",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// How many times a counting trigger ran (0 when never).
async fn runs(pool: &PgPool, sequence: &str) -> Result<i64> {
    let (last, called): (i64, bool) =
        sqlx::query_as(&format!("SELECT last_value, is_called FROM {sequence}"))
            .fetch_one(pool)
            .await?;
    Ok(if called { last } else { 0 })
}

test_on_both_stores!(check_06_commit_failure_answers_outcome_unknown_http);
/// A failure at commit answers 503 OUTCOME_UNKNOWN; the counter and the log are unchanged;
/// once the store is healthy, `send_with_retry` with the same key commits at the original seq.
async fn check_06_commit_failure_answers_outcome_unknown_http(store: StoreKind) -> Result<()> {
    let (server, ua) = setup(store).await?;
    let sql = server.sql();
    let before = conv_state(sql).await?;
    ensure!(before == (4, 3, 2), "{before:?}");
    let log = log_json(&ua).await?;
    install_commit_failure(sql).await?;

    let r = raw_send(&ua, "m-2", "hello").await?;
    ensure!(
        r.status == 503 && error_code(&r) == code::OUTCOME_UNKNOWN,
        "send during commit failure: {} {}",
        r.status,
        r.text
    );
    ensure!(
        !r.text.contains("injected"),
        "store detail leaked: {}",
        r.text
    );
    ensure!(conv_state(sql).await? == before, "state moved");
    ensure!(log_json(&ua).await? == log, "the log changed");

    // A plain SDK send sees the same code, and reports it as retryable.
    let e = ua
        .clone()
        .with_retry_policy(RetryPolicy::none())
        .send_with_retry(CONV, "m-2", "hello")
        .await
        .unwrap_err();
    ensure!(
        e.status() == Some(503) && e.code() == Some(code::OUTCOME_UNKNOWN) && e.is_retryable(),
        "{e}"
    );
    ensure!(conv_state(sql).await? == before, "state moved");

    drop_trigger(sql, "fail_at_commit").await?;
    let ack = ua
        .clone()
        .with_retry_policy(fast_retry(3))
        .send_with_retry(CONV, "m-2", "hello")
        .await?;
    ensure!(ack.seq == before.0 && !ack.dup, "retry: {ack:?}");
    let again = ua.send(CONV, "m-2", "hello").await?;
    ensure!(
        again.dup && again.seq == ack.seq && again.message_id == ack.message_id,
        "replay: {again:?}"
    );
    ensure!(conv_state(sql).await? == (5, 4, 2), "after retry");
    Ok(())
}

/// `send_with_retry` rides through one failed commit by itself: the first attempt answers
/// OUTCOME_UNKNOWN, the second commits with dup=false at the original seq.
///
/// PostgreSQL only: failing exactly once needs a counter that the failed transaction's rollback
/// does not undo (a sequence), which SQLite does not have.
#[tokio::test]
async fn check_06_send_with_retry_recovers_from_one_failed_commit_postgres_only() -> Result<()> {
    let (server, ua) = setup(StoreKind::Postgres).await?;
    let pool = server.pg_store().pool();
    let before = conv_state(server.sql()).await?;
    install_pg_commit_failure(pool, Some(1)).await?;

    let ack = ua
        .clone()
        .with_retry_policy(fast_retry(3))
        .send_with_retry(CONV, "m-2", "hello")
        .await?;
    ensure!(ack.seq == before.0 && !ack.dup, "{ack:?}");
    // The trigger ran at both commits: the failed first and the successful second attempt.
    let n = runs(pool, "commit_failure_runs").await?;
    ensure!(n == 2, "commit attempts: {n}");
    let seqs = log_seqs(server.sql()).await?;
    ensure!(seqs == vec![1, 2, 3, 4], "log: {seqs:?}");
    Ok(())
}

test_on_both_stores!(check_06_member_change_commit_failure_outcome_unknown_http);
/// A membership change whose commit fails answers OUTCOME_UNKNOWN too, and changes nothing.
async fn check_06_member_change_commit_failure_outcome_unknown_http(
    store: StoreKind,
) -> Result<()> {
    let (server, ua) = setup(store).await?;
    server.user_with_device("u-c").await;
    let sql = server.sql();
    let before = conv_state(sql).await?;
    install_commit_failure(sql).await?;
    let r = ua
        .raw(Method::POST, &format!("/v1/conversations/{CONV}/members"))
        .json(&json!({"user_id": "u-c"}))
        .response()
        .await?;
    ensure!(
        r.status == 503 && error_code(&r) == code::OUTCOME_UNKNOWN,
        "add member: {} {}",
        r.status,
        r.text
    );
    let r = ua
        .raw(
            Method::DELETE,
            &format!("/v1/conversations/{CONV}/members/u-b"),
        )
        .response()
        .await?;
    ensure!(
        r.status == 503 && error_code(&r) == code::OUTCOME_UNKNOWN,
        "remove member: {} {}",
        r.status,
        r.text
    );
    ensure!(conv_state(sql).await? == before, "state moved");
    let view = ua.get_conversation(CONV).await?;
    let members: Vec<String> = view
        .members
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.user_id)
        .collect();
    ensure!(members == vec!["u-a", "u-b"], "members: {members:?}");
    Ok(())
}

test_on_both_stores!(check_06_failure_before_commit_answers_unavailable_http);
/// A failure inside the insert, before the commit, answers 503 UNAVAILABLE and writes nothing;
/// the retries of `send_with_retry` each fail the same way and write nothing either; after the
/// repair the next send takes the seq the failed one would have had. The number of attempts
/// that reached the store is counted on PostgreSQL only (see the top of this file).
async fn check_06_failure_before_commit_answers_unavailable_http(store: StoreKind) -> Result<()> {
    let (server, ua) = setup(store).await?;
    let sql = server.sql();
    let before = conv_state(sql).await?;
    let log = log_json(&ua).await?;
    install_insert_failure(sql).await?;

    let r = raw_send(&ua, "m-2", "hello").await?;
    ensure!(
        r.status == 503 && error_code(&r) == code::UNAVAILABLE,
        "send during insert failure: {} {}",
        r.status,
        r.text
    );
    ensure!(
        !r.text.contains("injected"),
        "store detail leaked: {}",
        r.text
    );
    ensure!(conv_state(sql).await? == before, "state moved");
    ensure!(log_json(&ua).await? == log, "the log changed");
    if let Sql::Postgres(pool) = sql {
        ensure!(runs(pool, "insert_failure_runs").await? == 1);
    }

    let e = ua
        .clone()
        .with_retry_policy(fast_retry(3))
        .send_with_retry(CONV, "m-2", "hello")
        .await
        .unwrap_err();
    ensure!(
        e.status() == Some(503) && e.code() == Some(code::UNAVAILABLE),
        "{e}"
    );
    if let Sql::Postgres(pool) = sql {
        let n = runs(pool, "insert_failure_runs").await?;
        ensure!(n == 4, "insert attempts: {n}");
    }
    ensure!(conv_state(sql).await? == before, "state moved");

    drop_trigger(sql, "fail_after_insert").await?;
    let ack = ua.send(CONV, "m-2", "hello").await?;
    ensure!(ack.seq == before.0 && !ack.dup, "after repair: {ack:?}");
    let seqs = log_seqs(sql).await?;
    ensure!(seqs == vec![1, 2, 3, 4], "log: {seqs:?}");
    Ok(())
}
