//! `send_with_retry` and raw requests against a scripted stub server, so every failure mode is
//! produced on purpose: 503s, a hung answer, a refusal, a refused connection.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::{Json, Router};
use parley_client::{code, Client, ClientError, ClientOptions, Method, RetryPolicy};
use serde_json::{json, Value};

/// The stub's client gives up on an answer after this long.
const TEST_TIMEOUT_MS: u64 = 300;
const ATTEMPTS_MAX: u32 = 4;
/// Time a busy 2-core machine may add to a bounded wait.
const SLOP_MS: u64 = 2_000;

#[derive(Clone, Copy)]
enum Reply {
    /// A stable error code with its status.
    Error(u16, &'static str),
    /// No answer before the client's timeout.
    Hang,
    /// The ack of a committed send.
    Ack,
}

#[derive(Clone, Default)]
struct Stub {
    script: Arc<Mutex<VecDeque<Reply>>>,
    sends: Arc<Mutex<Vec<Value>>>,
}

async fn send(
    State(stub): State<Stub>,
    Path(conv_id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let n = {
        let mut sends = stub.sends.lock().unwrap();
        sends.push(body);
        sends.len()
    };
    let reply = stub
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Ack);
    match reply {
        Reply::Error(status, code) => (
            StatusCode::from_u16(status).unwrap(),
            Json(json!({"error": {"code": code, "message": "scripted"}})),
        )
            .into_response(),
        Reply::Hang => {
            tokio::time::sleep(Duration::from_millis(TEST_TIMEOUT_MS * 10)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Reply::Ack => Json(json!({
            "conv_id": conv_id, "seq": 3, "message_id": "7b0c", "dup": n > 1, "future": 1
        }))
        .into_response(),
    }
}

async fn echo(headers: HeaderMap, body: String) -> Json<Value> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    Json(json!({
        "authorization": header("authorization"),
        "content_type": header("content-type"),
        "x_extra": header("x-extra"),
        "body": body,
    }))
}

async fn start(script: &[Reply]) -> Result<(Client, Stub)> {
    let stub = Stub::default();
    stub.script.lock().unwrap().extend(script.iter().copied());
    let app = Router::new()
        .route("/v1/conversations/{conv_id}/messages", post(send))
        .route("/echo", any(echo))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((client(&base)?, stub))
}

fn client(base: &str) -> Result<Client> {
    let options = ClientOptions {
        request_timeout_ms: TEST_TIMEOUT_MS,
        retry: RetryPolicy {
            attempts_max: ATTEMPTS_MAX,
            backoff_first_ms: 1,
            backoff_max_ms: 5,
            ..RetryPolicy::default()
        },
        ..ClientOptions::default()
    };
    Ok(Client::with_options(base, "pd_test", options)?)
}

/// Quick pauses, no cap on attempts: only the time budget ends the retries.
fn within_budget(c: Client, budget_ms: u64) -> Client {
    c.with_retry_policy(RetryPolicy {
        backoff_first_ms: 1,
        backoff_max_ms: 5,
        ..RetryPolicy::within_ms(budget_ms)
    })
}

/// Every attempt carried the same request key and body, and there were `attempts`.
fn same_request_each_time(stub: &Stub, attempts: usize) -> Result<()> {
    let seen = every_attempt_the_same(stub)?;
    ensure!(seen == attempts, "{seen} attempts, not {attempts}");
    Ok(())
}

/// Every attempt the stub saw carried the same request key and body; answers how many it saw.
fn every_attempt_the_same(stub: &Stub) -> Result<usize> {
    let sends = stub.sends.lock().unwrap();
    let first = json!({"client_msg_id": "m-1", "body": "hello"});
    ensure!(
        sends.iter().all(|s| *s == first),
        "requests differ: {sends:?}"
    );
    Ok(sends.len())
}

#[tokio::test]
async fn unknown_outcomes_are_resent_with_the_same_key() -> Result<()> {
    let (c, stub) = start(&[
        Reply::Error(503, code::OUTCOME_UNKNOWN),
        Reply::Error(503, code::UNAVAILABLE),
    ])
    .await?;
    let ack = c.send_with_retry("c-1", "m-1", "hello").await?;
    ensure!(ack.seq == 3 && ack.dup && ack.conv_id == "c-1", "{ack:?}");
    same_request_each_time(&stub, 3)
}

#[tokio::test]
async fn a_timed_out_send_is_resent() -> Result<()> {
    let (c, stub) = start(&[Reply::Hang]).await?;
    let first = c.send("c-1", "m-1", "hello").await;
    ensure!(
        matches!(first, Err(ClientError::Timeout(_))),
        "plain send: {first:?}"
    );
    stub.script.lock().unwrap().push_back(Reply::Hang);
    c.send_with_retry("c-1", "m-1", "hello").await?;
    same_request_each_time(&stub, 3)
}

#[tokio::test]
async fn refusals_are_final() -> Result<()> {
    let (c, stub) = start(&[Reply::Error(409, code::IDEMPOTENCY_MISMATCH)]).await?;
    let e = c.send_with_retry("c-1", "m-1", "hello").await.unwrap_err();
    ensure!(e.status() == Some(409) && e.code() == Some(code::IDEMPOTENCY_MISMATCH));
    same_request_each_time(&stub, 1)
}

#[tokio::test]
async fn attempts_are_bounded() -> Result<()> {
    let unknown = Reply::Error(503, code::OUTCOME_UNKNOWN);
    let (c, stub) = start(&[unknown; ATTEMPTS_MAX as usize + 1]).await?;
    let e = c.send_with_retry("c-1", "m-1", "hello").await.unwrap_err();
    ensure!(e.code() == Some(code::OUTCOME_UNKNOWN), "{e}");
    same_request_each_time(&stub, ATTEMPTS_MAX as usize)
}

#[tokio::test]
async fn the_time_budget_ends_the_retries() -> Result<()> {
    let unknown = Reply::Error(503, code::OUTCOME_UNKNOWN);
    let (c, stub) = start(&[unknown; 10_000]).await?;
    let c = within_budget(c, 400);
    let started = Instant::now();
    let e = c.send_with_retry("c-1", "m-1", "hello").await.unwrap_err();
    let took = started.elapsed();
    // Either the last pause would have ended past the budget (the error is that attempt's) or
    // the budget ran out while a retry waited for its answer: on a busy machine an attempt can
    // take long enough for the second, and both leave the outcome for the caller to retry.
    ensure!(
        e.code() == Some(code::OUTCOME_UNKNOWN)
            || matches!(e, ClientError::RetryBudgetSpent { .. }),
        "{e:?}"
    );
    ensure!(e.is_retryable(), "{e:?}");
    // The budget is never cut short; scheduling on a busy machine may add
    // to the time, never take from it.
    ensure!(took >= Duration::from_millis(400 - 5), "{took:?}");
    ensure!(took < Duration::from_millis(400 + SLOP_MS), "{took:?}");
    // An attempt cut short by the budget may still reach the stub after the call returned, so
    // the attempts are counted once, together with the check of their requests.
    let attempts = every_attempt_the_same(&stub)?;
    ensure!(attempts > ATTEMPTS_MAX as usize, "only {attempts} attempts");
    Ok(())
}

#[tokio::test]
async fn a_retry_hung_at_the_end_of_the_budget_is_cut_short() -> Result<()> {
    let (c, stub) = start(&[Reply::Error(503, code::UNAVAILABLE), Reply::Hang]).await?;
    // The budget ends before the hung retry's own timeout (TEST_TIMEOUT_MS).
    let c = within_budget(c, TEST_TIMEOUT_MS / 2);
    let e = c.send_with_retry("c-1", "m-1", "hello").await.unwrap_err();
    ensure!(
        matches!(e, ClientError::RetryBudgetSpent { attempts: 2, .. }) && e.is_retryable(),
        "{e:?}"
    );
    same_request_each_time(&stub, 2)
}

#[tokio::test]
async fn a_refused_connection_is_a_retryable_transport_error() -> Result<()> {
    // A port that was free a moment ago: nothing listens there.
    let port = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await?
        .local_addr()?
        .port();
    let c = client(&format!("http://127.0.0.1:{port}"))?;
    let e = c.send_with_retry("c-1", "m-1", "hello").await.unwrap_err();
    ensure!(
        matches!(e, ClientError::Transport(_)) && e.is_retryable() && e.status().is_none(),
        "{e:?}"
    );
    Ok(())
}

#[tokio::test]
async fn raw_requests_send_exactly_what_they_are_given() -> Result<()> {
    let (c, _) = start(&[]).await?;
    let (status, v) = c
        .raw(Method::POST, "/echo")
        .body("{not json")
        .header("x-extra", "1")
        .send()
        .await?;
    ensure!(status == 200, "{status}");
    ensure!(v["body"] == "{not json" && v["x_extra"] == "1", "{v}");
    ensure!(v["authorization"] == "Bearer pd_test", "{v}");
    ensure!(v["content_type"] == "application/json", "{v}");

    let (_, v) = c
        .raw(Method::POST, "/echo")
        .json(&json!({"unknown": true}))
        .without_auth()
        .send()
        .await?;
    ensure!(
        v["authorization"].is_null() && v["body"] == r#"{"unknown":true}"#,
        "{v}"
    );

    let (_, v) = c.raw(Method::GET, "/echo").bearer("other").send().await?;
    ensure!(v["authorization"] == "Bearer other", "{v}");

    let r = c.raw(Method::GET, "/nowhere").response().await?;
    ensure!(
        r.status == 404 && r.json.is_null() && r.text.is_empty(),
        "{r:?}"
    );
    Ok(())
}
