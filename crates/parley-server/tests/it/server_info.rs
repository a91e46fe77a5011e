//! `GET /v1/admin/server`: the node's version, store, bus and limits, to the admin token only.

use anyhow::{ensure, Result};
use parley_client::Method;
use parley_domain::Limits;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

test_on_both_stores!(
    #[tokio::test]
    admin_server_reports_store_bus_and_limits
);
async fn admin_server_reports_store_bus_and_limits(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        limits: Limits {
            body_bytes_max: 1234,
            request_bytes_max: 5678,
        },
        recall_window_ms: 4321,
        pull_threshold: 17,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let (status, info) = server
        .admin()
        .raw(Method::GET, "/v1/admin/server")
        .send()
        .await?;
    ensure!(status == 200, "{status} {info}");
    let (kind, idle) = match store {
        StoreKind::Postgres => ("postgres", serde_json::json!(10_000)),
        StoreKind::Sqlite => ("sqlite", serde_json::Value::Null),
    };
    ensure!(info["store"] == kind && info["bus"] == "local", "{info}");
    ensure!(info["version"] == env!("CARGO_PKG_VERSION"), "{info}");
    ensure!(
        info["gateway_id"].as_str().is_some_and(|g| !g.is_empty()),
        "{info}"
    );
    let limits = &info["limits"];
    ensure!(
        limits["body_bytes_max"] == 1234
            && limits["request_bytes_max"] == 5678
            && limits["recall_window_ms"] == 4321
            && limits["pull_threshold"] == 17
            && limits["page_len_max"] == 500
            && limits["pg_idle_in_transaction_timeout_ms"] == idle,
        "{limits}"
    );

    let device = server.user_with_device("u-ana").await;
    let (status, body) = device.raw(Method::GET, "/v1/admin/server").send().await?;
    ensure!(
        status == 403 && body["error"]["code"] == "FORBIDDEN",
        "device: {status} {body}"
    );
    let (status, body) = device
        .raw(Method::GET, "/v1/admin/server")
        .without_auth()
        .send()
        .await?;
    ensure!(status == 401, "no token: {status} {body}");
    Ok(())
}
