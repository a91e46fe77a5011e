//! Store failures injected with triggers in the test database, seen over HTTP: a failure while
//! committing answers 503 OUTCOME_UNKNOWN (P6), a failure before the commit 503 UNAVAILABLE;
//! neither leaves a trace, and a retry with the same client_msg_id learns the truth.

use anyhow::{ensure, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse, RetryPolicy};
use parley_testkit::TestServer;
use serde_json::{json, Value};
use sqlx::PgPool;

const CONV: &str = "c-f";

/// Retries quickly, so the tests do not wait on the default backoff.
fn fast_retry(attempts_max: u32) -> RetryPolicy {
    RetryPolicy {
        attempts_max,
        backoff_first_ms: 10,
        backoff_max_ms: 20,
    }
}

async fn setup() -> Result<(TestServer, Client)> {
    let server = TestServer::start_default().await;
    let ua = server.user_with_device("u-a").await;
    server.user_with_device("u-b").await;
    ua.create_conversation(&NewConversation::group(["u-b"]).with_conv_id(CONV))
        .await?;
    let ack = ua.send(CONV, "m-1", "first").await?;
    ensure!(ack.seq == 3 && !ack.dup, "{ack:?}");
    Ok((server, ua))
}

/// `(next_seq, events, membership periods)` of c-f, by SQL.
async fn conv_state(pool: &PgPool) -> Result<(i64, i64, i64)> {
    let next: i64 = sqlx::query_scalar("SELECT next_seq FROM conversations WHERE conv_id = $1")
        .bind(CONV)
        .fetch_one(pool)
        .await?;
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = $1")
        .bind(CONV)
        .fetch_one(pool)
        .await?;
    let periods: i64 =
        sqlx::query_scalar("SELECT count(*) FROM membership_periods WHERE conv_id = $1")
            .bind(CONV)
            .fetch_one(pool)
            .await?;
    Ok((next, events, periods))
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
async fn install_commit_failure(pool: &PgPool, fail_times: Option<i64>) -> Result<()> {
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
async fn install_insert_failure(pool: &PgPool) -> Result<()> {
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

/// A failure at commit answers 503 OUTCOME_UNKNOWN; the counter and the log are unchanged;
/// once the store is healthy, `send_with_retry` with the same key commits at the original seq.
#[tokio::test]
async fn check_06_commit_failure_answers_outcome_unknown_http() -> Result<()> {
    let (server, ua) = setup().await?;
    let pool = server.store().pool();
    let before = conv_state(pool).await?;
    ensure!(before == (4, 3, 2), "{before:?}");
    let log = log_json(&ua).await?;
    install_commit_failure(pool, None).await?;

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
    ensure!(conv_state(pool).await? == before, "state moved");
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
    ensure!(conv_state(pool).await? == before, "state moved");

    sqlx::query("DROP TRIGGER fail_at_commit ON events")
        .execute(pool)
        .await?;
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
    ensure!(conv_state(pool).await? == (5, 4, 2), "after retry");
    Ok(())
}

/// `send_with_retry` rides through one failed commit by itself: the first attempt answers
/// OUTCOME_UNKNOWN, the second commits with dup=false at the original seq.
#[tokio::test]
async fn check_06_send_with_retry_recovers_from_one_failed_commit() -> Result<()> {
    let (server, ua) = setup().await?;
    let pool = server.store().pool();
    let before = conv_state(pool).await?;
    install_commit_failure(pool, Some(1)).await?;

    let ack = ua
        .clone()
        .with_retry_policy(fast_retry(3))
        .send_with_retry(CONV, "m-2", "hello")
        .await?;
    ensure!(ack.seq == before.0 && !ack.dup, "{ack:?}");
    // The trigger ran at both commits: the failed first and the successful second attempt.
    let n = runs(pool, "commit_failure_runs").await?;
    ensure!(n == 2, "commit attempts: {n}");
    let seqs: Vec<i64> =
        sqlx::query_scalar("SELECT seq FROM events WHERE conv_id = $1 ORDER BY seq")
            .bind(CONV)
            .fetch_all(pool)
            .await?;
    ensure!(seqs == vec![1, 2, 3, 4], "log: {seqs:?}");
    Ok(())
}

/// A membership change whose commit fails answers OUTCOME_UNKNOWN too, and changes nothing.
#[tokio::test]
async fn check_06_member_change_commit_failure_outcome_unknown_http() -> Result<()> {
    let (server, ua) = setup().await?;
    server.user_with_device("u-c").await;
    let pool = server.store().pool();
    let before = conv_state(pool).await?;
    install_commit_failure(pool, None).await?;
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
    ensure!(conv_state(pool).await? == before, "state moved");
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

/// A failure inside the insert, before the commit, answers 503 UNAVAILABLE and writes nothing;
/// the retries of `send_with_retry` each fail the same way and write nothing either; after the
/// repair the next send takes the seq the failed one would have had.
#[tokio::test]
async fn check_06_failure_before_commit_answers_unavailable_http() -> Result<()> {
    let (server, ua) = setup().await?;
    let pool = server.store().pool();
    let before = conv_state(pool).await?;
    let log = log_json(&ua).await?;
    install_insert_failure(pool).await?;

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
    ensure!(conv_state(pool).await? == before, "state moved");
    ensure!(log_json(&ua).await? == log, "the log changed");
    ensure!(runs(pool, "insert_failure_runs").await? == 1);

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
    let n = runs(pool, "insert_failure_runs").await?;
    ensure!(n == 4, "insert attempts: {n}");
    ensure!(conv_state(pool).await? == before, "state moved");

    sqlx::query("DROP TRIGGER fail_after_insert ON events")
        .execute(pool)
        .await?;
    let ack = ua.send(CONV, "m-2", "hello").await?;
    ensure!(ack.seq == before.0 && !ack.dup, "after repair: {ack:?}");
    let seqs: Vec<i64> =
        sqlx::query_scalar("SELECT seq FROM events WHERE conv_id = $1 ORDER BY seq")
            .bind(CONV)
            .fetch_all(pool)
            .await?;
    ensure!(seqs == vec![1, 2, 3, 4], "log: {seqs:?}");
    Ok(())
}
