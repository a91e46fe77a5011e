//! A gateway that cannot renew its lease (chapter 10): it refuses new WebSockets with 503
//! `LEASE_EXPIRED` and `/readyz` answers 503 `LEASE_EXPIRED` (200 with `"lease": "ok"` once
//! held), until a renewal succeeds again. Renewals are made to fail by holding the lock every renewal needs.

use std::time::{Duration, Instant};

use crate::ws_support::{ws_url, Ws};
use anyhow::{bail, ensure, Result};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// The shortest lease: renewed every 100 ms, lapsed 300 ms after the last renewal.
const LEASE_MS: u64 = 300;
/// Longest wait for the lease to lapse or come back.
const WAIT: Duration = Duration::from_secs(10);

/// `/readyz`'s status and body.
async fn readyz(base_url: &str) -> Result<(u16, Value)> {
    let answer = reqwest::get(format!("{base_url}/readyz")).await?;
    let status = answer.status().as_u16();
    Ok((status, answer.json().await?))
}

/// Polls `/readyz` until the lease is held (`true`: 200 with `"lease": "ok"`) or expired
/// (`false`: 503 `LEASE_EXPIRED`), at most `WAIT`.
async fn lease_becomes(base_url: &str, held: bool) -> Result<(u16, Value)> {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = readyz(base_url).await?;
        let now_held = status == 200 && body["lease"] == "ok";
        let now_expired = status == 503 && body["error"]["code"] == "LEASE_EXPIRED";
        if (held && now_held) || (!held && now_expired) {
            return Ok((status, body));
        }
        if Instant::now() >= deadline {
            bail!("lease still {body} after {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The status and error code of a refused upgrade; `None` when the upgrade succeeded.
async fn upgrade_refusal(base_url: &str, token: &str) -> Result<Option<(u16, Value)>> {
    let mut req = ws_url(base_url).into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    match tokio_tungstenite::connect_async(req).await {
        Ok(_) => Ok(None),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = response.body().clone().unwrap_or_default();
            Ok(Some((
                response.status().as_u16(),
                serde_json::from_slice(&body)?,
            )))
        }
        Err(e) => bail!("upgrade failed without an answer: {e}"),
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_10_lease_lost_refuses_connections
);
async fn check_10_lease_lost_refuses_connections(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        gateway_lease_ms: LEASE_MS,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let ana = server.user_with_device("u-ana").await;
    // Negative control: with the lease held the upgrade succeeds and the node is ready.
    let (status, body) = readyz(server.base_url()).await?;
    ensure!(
        status == 200 && body["lease"] == "ok" && body["status"] == "ready",
        "{body}"
    );
    let mut open = Ws::connect(server.base_url(), ana.token()).await?;

    let lock = server.sql().hold_lease_lock().await?;
    lease_becomes(server.base_url(), false).await?;
    let refusal = upgrade_refusal(server.base_url(), ana.token()).await?;
    ensure!(
        refusal.as_ref().is_some_and(
            |(status, body)| *status == 503 && body["error"]["code"] == "LEASE_EXPIRED"
        ),
        "upgrade without the lease: {refusal:?}"
    );
    // A connection opened before stays served.
    open.send(json!({"type": "ping", "req_id": 1})).await?;
    open.next_of("pong", WAIT).await?;

    lock.release().await?;
    let (_, body) = lease_becomes(server.base_url(), true).await?;
    ensure!(body["status"] == "ready", "{body}");
    let refusal = upgrade_refusal(server.base_url(), ana.token()).await?;
    ensure!(refusal.is_none(), "upgrade after the renewal: {refusal:?}");
    server.stop().await;
    Ok(())
}
