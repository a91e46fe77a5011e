//! `RATE_LIMIT_PER_S` (SPEC §6): a token bucket per device for sends, over HTTP (429
//! `RATE_LIMITED` with `Retry-After`) and WebSocket (an `error` frame with `retry_after_ms`),
//! and one for the admin endpoints. A refused send writes nothing; another device keeps its
//! own budget.
//!
//! The rate is one request per second with a burst of one, and each burst sends ten requests
//! back to back: unless the ten took nine seconds, some must be refused, and at most one more
//! than the elapsed seconds can pass.

use std::time::{Duration, Instant};

use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::{code, Client, Method, NewConversation};
use parley_store::token::new_device_token;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);
/// Requests of one burst.
const BURST_REQUESTS: usize = 10;

/// A device of `user`, issued through the store so that setting the test up spends nothing of
/// the admin endpoints' budget.
async fn device(server: &TestServer, user: &str, device: &str) -> Result<Client> {
    let (token, hash) = new_device_token();
    server
        .store()
        .issue_device_token(
            &parley_domain::UserId::parse(user)?,
            &parley_domain::DeviceId::parse(device)?,
            &hash,
        )
        .await?;
    Ok(server.client(&token))
}

async fn rows_with_key(server: &TestServer, key: &str) -> Result<i64> {
    Ok(server
        .sql()
        .one(
            "SELECT count(*) FROM events WHERE client_msg_id = $1",
            &[key.into()],
        )
        .await?)
}

/// Fails unless `accepted` of a burst fits the rate: at least one refused, and no more passed
/// than the burst plus what refilled while it ran.
fn check_burst(accepted: usize, started: Instant, what: &str) -> Result<()> {
    let refilled = started.elapsed().as_secs() as usize;
    ensure!(
        accepted < BURST_REQUESTS && accepted <= 1 + refilled,
        "{what}: {accepted} of {BURST_REQUESTS} accepted in {:?} at one per second",
        started.elapsed()
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_rate_limit_per_device_http_and_ws
);
async fn check_rate_limit_per_device_http_and_ws(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        rate_limit_per_s: 1,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    for user in ["u-ana", "u-ben"] {
        server
            .store()
            .create_user(&parley_domain::UserId::parse(user)?, None)
            .await?;
    }
    let phone = device(&server, "u-ana", "phone").await?;
    let laptop = device(&server, "u-ana", "laptop").await?;
    let tablet = device(&server, "u-ana", "tablet").await?;
    phone
        .create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;

    // HTTP: 429 with Retry-After and the error JSON; a refused send leaves no row.
    let started = Instant::now();
    let mut accepted = 0;
    let mut retry_after_s = 0;
    for i in 0..BURST_REQUESTS {
        let key = format!("h-{i}");
        let r = phone
            .raw(Method::POST, "/v1/conversations/c-1/messages")
            .json(&json!({"client_msg_id": key, "body": "hi"}))
            .response()
            .await?;
        match r.status {
            200 => accepted += 1,
            429 => {
                ensure!(
                    r.json["error"]["code"] == code::RATE_LIMITED,
                    "429 without the code: {}",
                    r.text
                );
                let header = r.headers.get("retry-after").and_then(|v| v.to_str().ok());
                retry_after_s = header.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                ensure!(retry_after_s >= 1, "Retry-After: {header:?}");
                ensure!(
                    rows_with_key(&server, &key).await? == 0,
                    "{key} was written"
                );
            }
            other => anyhow::bail!("send {i}: {other} {}", r.text),
        }
    }
    check_burst(accepted, started, "HTTP")?;
    let rows: i64 = server
        .sql()
        .one("SELECT count(*) FROM events WHERE kind = 'msg'", &[])
        .await?;
    ensure!(rows == accepted as i64, "{rows} rows for {accepted} acks");

    // Another device of the same user has its own bucket.
    ensure!(laptop.send("c-1", "l-1", "hi").await?.seq > 0, "laptop");

    // WebSocket: an error frame with the code and retry_after_ms; nothing written.
    let mut ws = Ws::connect(server.base_url(), tablet.token()).await?;
    let started = Instant::now();
    for i in 0..BURST_REQUESTS {
        ws.send(json!({"type": "send", "req_id": i, "conv_id": "c-1",
                       "client_msg_id": format!("w-{i}"), "body": "hi"}))
            .await?;
    }
    let mut accepted = 0;
    let mut answered = 0;
    while answered < BURST_REQUESTS {
        let Some(frame) = ws.next_json(WAIT).await? else {
            anyhow::bail!("{answered} of {BURST_REQUESTS} sends answered");
        };
        match frame["type"].as_str() {
            Some("ack") => accepted += 1,
            Some("error") => {
                ensure!(
                    frame["code"] == code::RATE_LIMITED
                        && frame["retry_after_ms"].as_u64().is_some_and(|ms| ms > 0),
                    "{frame}"
                );
                let key = format!("w-{}", frame["req_id"]);
                ensure!(
                    rows_with_key(&server, &key).await? == 0,
                    "{key} was written"
                );
            }
            _ => continue,
        }
        answered += 1;
    }
    check_burst(accepted, started, "WebSocket")?;

    // Once the wait it was told is over, the device sends again.
    tokio::time::sleep(Duration::from_secs(retry_after_s)).await;
    ensure!(
        phone.send("c-1", "h-after", "hi").await?.seq > 0,
        "after the wait"
    );
    Ok(())
}

#[tokio::test]
async fn admin_calls_are_rate_limited() -> Result<()> {
    let config = ServerConfig {
        rate_limit_per_s: 1,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(StoreKind::Sqlite, config).await;
    let admin = server.admin();
    let started = Instant::now();
    let mut accepted = 0;
    for i in 0..BURST_REQUESTS {
        let user = format!("u-{i}");
        let r = admin
            .raw(Method::POST, "/v1/admin/users")
            .json(&json!({"user_id": user}))
            .response()
            .await?;
        match r.status {
            201 => accepted += 1,
            429 => {
                ensure!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
                let rows: i64 = server
                    .sql()
                    .one(
                        "SELECT count(*) FROM users WHERE user_id = $1",
                        &[user.as_str().into()],
                    )
                    .await?;
                ensure!(rows == 0, "{user} was created");
            }
            other => anyhow::bail!("create {user}: {other} {}", r.text),
        }
    }
    check_burst(accepted, started, "admin")
}

#[tokio::test]
async fn no_limit_by_default() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    for i in 0..BURST_REQUESTS {
        ana.send("c-1", &format!("m-{i}"), "hi").await?;
    }
    Ok(())
}
