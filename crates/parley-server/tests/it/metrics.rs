//! `GET /metrics` (issue 14, item 6): the counters after a send, a replay, a mismatch, a send
//! by a non-member and an invalid send, each read from a scrape of the text exposition; the
//! open WebSocket and its route claim; and the scrape refused to anyone but the admin token.

use std::collections::HashMap;
use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_client::{code, Client, DeliveryMode, Method, NewConversation};
use parley_store::token::new_device_token;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);
/// Retention of the purged conversation, and the purge's interval: a few runs within `WAIT`.
const RETENTION_MS: i64 = 300;
const PURGE_INTERVAL_MS: u64 = 50;
/// Pause between two scrapes while waiting for the purge.
const SCRAPE_INTERVAL_MS: u64 = 50;

/// One scrape as `name{labels}` -> value; `# HELP`, `# TYPE` and `# EOF` lines are skipped.
fn parse(text: &str) -> Result<HashMap<String, f64>> {
    let mut samples = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').context("a sample without a value")?;
        let value: f64 = value.parse().with_context(|| format!("value of {line}"))?;
        samples.insert(series.to_owned(), value);
    }
    Ok(samples)
}

/// The value of `series`, 0 when the scrape does not have it.
pub fn value(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

pub async fn scrape(server: &TestServer) -> Result<HashMap<String, f64>> {
    let r = reqwest::Client::new()
        .get(format!("{}/metrics", server.base_url()))
        .bearer_auth(server.admin_token())
        .send()
        .await?;
    ensure!(r.status() == 200, "scrape: {}", r.status());
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    ensure!(
        content_type.starts_with("application/openmetrics-text"),
        "content type {content_type}"
    );
    parse(&r.text().await?)
}

test_on_both_stores!(check_metrics_count_sends_by_outcome);
async fn check_metrics_count_sends_by_outcome(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    let cy = server.user_with_device("u-cy").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;
    let mut ben_ws = Ws::connect(server.base_url(), ben.token()).await?;
    // The connection is served once it answers a frame.
    ben_ws.send(json!({"type": "ping", "req_id": 1})).await?;
    ben_ws.next_of("pong", WAIT).await?;
    let before = scrape(&server).await?;

    ensure!(!ana.send("c-1", "k-1", "hello").await?.dup, "first send");
    ben_ws.next_of("event", WAIT).await?;
    ensure!(ana.send("c-1", "k-1", "hello").await?.dup, "replay");
    let mismatch = ana.send("c-1", "k-1", "another body").await;
    ensure!(
        mismatch.as_ref().err().and_then(|e| e.code()) == Some(code::IDEMPOTENCY_MISMATCH),
        "mismatch: {mismatch:?}"
    );
    let outsider = cy.send("c-1", "k-2", "hello").await;
    ensure!(outsider.is_err(), "a non-member's send: {outsider:?}");
    let invalid = ana
        .raw(Method::POST, "/v1/conversations/c-1/messages")
        .json(&json!({"client_msg_id": "k-3"}))
        .response()
        .await?;
    ensure!(invalid.status == 400, "invalid send: {}", invalid.status);

    let after = scrape(&server).await?;
    let delta = |series: &str| value(&after, series) - value(&before, series);
    for (outcome, expected) in [
        ("written", 1.0),
        ("replayed", 1.0),
        ("mismatch", 1.0),
        ("refused", 1.0),
        ("invalid", 1.0),
        ("rate_limited", 0.0),
    ] {
        let series = format!("parley_sends_total{{outcome=\"{outcome}\"}}");
        ensure!(delta(&series) == expected, "{series}: {}", delta(&series));
    }
    ensure!(
        delta("parley_send_ack_seconds_count") == 2.0,
        "acks timed: {}",
        delta("parley_send_ack_seconds_count")
    );
    ensure!(delta("parley_pushes_total") >= 1.0, "no push counted");
    ensure!(
        value(&after, "parley_open_connections{kind=\"websocket\"}") == 1.0,
        "open websockets: {after:?}"
    );
    ensure!(
        value(&after, "parley_open_connections{kind=\"http\"}") >= 1.0,
        "open HTTP connections"
    );
    ensure!(
        value(&after, "parley_route_claims_total") == 1.0,
        "route claims"
    );
    ensure!(
        delta("parley_store_pool_wait_seconds_count") > 0.0,
        "no pool wait measured"
    );
    if store == StoreKind::Postgres {
        // The written, replayed and mismatched sends each went through the batched path.
        ensure!(
            delta("parley_store_send_batch_size_count") >= 3.0,
            "batches: {}",
            delta("parley_store_send_batch_size_count")
        );
    }

    // A second connection of the same device takes the route over: a kick.
    let mut again = Ws::connect(server.base_url(), ben.token()).await?;
    again.send(json!({"type": "ping", "req_id": 2})).await?;
    again.next_of("pong", WAIT).await?;
    let (close, _) = ben_ws.until_close(WAIT).await?;
    ensure!(close == 4001, "kicked close code {close}");
    let last = scrape(&server).await?;
    ensure!(value(&last, "parley_route_kicks_total") == 1.0, "kicks");
    ensure!(
        value(&last, "parley_ws_closed_total{reason=\"kicked\"}") == 1.0,
        "closes: {last:?}"
    );
    // Gone before the stop, which would otherwise wait for their close frames.
    drop((ben_ws, again));
    server.stop().await;
    Ok(())
}

/// A user with a device, made through the store, so that a rate-limited server's admin budget
/// is not spent on setting the test up.
async fn device(server: &TestServer, user: &str) -> Result<Client> {
    let user = parley_domain::UserId::parse(user)?;
    server.store().create_user(&user, None).await?;
    let (token, hash) = new_device_token();
    let device = parley_domain::DeviceId::parse("d1")?;
    server
        .store()
        .issue_device_token(&user, &device, &hash)
        .await?;
    Ok(server.client(&token))
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_metrics_count_rate_limits_hints_and_purges
);
async fn check_metrics_count_rate_limits_hints_and_purges(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        rate_limit_per_s: 1,
        purge_interval_ms: PURGE_INTERVAL_MS,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let ana = device(&server, "u-ana").await?;
    let ben = device(&server, "u-ben").await?;
    let mut ben_ws = Ws::connect(server.base_url(), ben.token()).await?;
    ben_ws.send(json!({"type": "ping", "req_id": 1})).await?;
    ben_ws.next_of("pong", WAIT).await?;
    ana.create_conversation(
        &NewConversation::group(["u-ben"])
            .with_conv_id("c-pull")
            .with_delivery_mode(DeliveryMode::Pull)
            .with_retention_ms(RETENTION_MS),
    )
    .await?;

    ana.send("c-pull", "k-1", "hello").await?;
    // The bucket holds one send: the next one at once is refused.
    let refused = ana.send("c-pull", "k-2", "hello").await;
    ensure!(
        refused.as_ref().err().and_then(|e| e.code()) == Some(code::RATE_LIMITED),
        "second send: {refused:?}"
    );
    ben_ws.next_of("hint", WAIT).await?;

    let deadline = tokio::time::Instant::now() + WAIT;
    let samples = loop {
        let samples = scrape(&server).await?;
        if value(&samples, "parley_purge_events_deleted_total") >= 3.0 {
            break samples;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the purge deleted nothing within {WAIT:?}: {samples:?}"
        );
        tokio::time::sleep(Duration::from_millis(SCRAPE_INTERVAL_MS)).await;
    };
    for (series, expected) in [
        ("parley_sends_total{outcome=\"written\"}", 1.0),
        ("parley_sends_total{outcome=\"rate_limited\"}", 1.0),
        ("parley_rate_limited_total{kind=\"send\"}", 1.0),
    ] {
        ensure!(value(&samples, series) == expected, "{series}: {samples:?}");
    }
    ensure!(
        value(&samples, "parley_hints_total") >= 1.0,
        "no hint counted"
    );
    ensure!(
        value(&samples, "parley_pushes_total") == 0.0,
        "a pull conversation pushed"
    );
    ensure!(
        value(&samples, "parley_purge_runs_total") >= 1.0,
        "no purge run"
    );
    ensure!(
        value(&samples, "parley_purge_tombstones_written_total") >= 1.0,
        "the purged message left no tombstone"
    );
    drop(ben_ws);
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn metrics_need_the_admin_token() -> Result<()> {
    let server = TestServer::start_default().await;
    let device = server.user_with_device("u-ana").await;
    let url = format!("{}/metrics", server.base_url());
    let http = reqwest::Client::new();
    for token in [None, Some(device.token()), Some("not-a-token")] {
        let mut req = http.get(&url);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let r = req.send().await?;
        ensure!(r.status() == 401, "token {token:?}: {}", r.status());
        let body: serde_json::Value = r.json().await?;
        ensure!(
            body["error"]["code"] == code::UNAUTHENTICATED,
            "error body {body}"
        );
    }
    let samples = scrape(&server).await?;
    ensure!(
        samples.contains_key("parley_sends_total{outcome=\"written\"}"),
        "no send counter in the scrape"
    );
    server.stop().await;
    Ok(())
}
