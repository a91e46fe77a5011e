//! Waits for events the tests cause and can observe, instead of sleeping and hoping: a metric
//! that moves once the server finished something, a session of the server seen waiting for a
//! lock in PostgreSQL. Each is bounded and says what did not happen.

use std::time::Duration;

use anyhow::{bail, Result};
use parley_testkit::{Sql, TestServer};

use crate::metrics::{scrape, value};

/// Pause between two looks.
const POLL_INTERVAL_MS: u64 = 10;

/// Scrapes the server's metrics until `series` satisfies `done`, for at most `wait`, and
/// answers its value.
pub async fn metric(
    server: &TestServer,
    series: &str,
    wait: Duration,
    done: impl Fn(f64) -> bool,
) -> Result<f64> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let seen = value(&scrape(server).await?, series);
        if done(seen) {
            return Ok(seen);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{series} is {seen} after {wait:?}");
        }
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
    }
}

/// Waits, for at most `wait`, until WebSocket connections on the server number `open`. A
/// connection leaves the count last of all, after its route was released: this is how a test
/// knows a closed connection's cleanup ran.
pub async fn open_websockets(server: &TestServer, open: f64, wait: Duration) -> Result<()> {
    metric(
        server,
        "parley_open_connections{kind=\"websocket\"}",
        wait,
        |n| n == open,
    )
    .await
    .map(drop)
}

/// Waits, for at most `wait`, until at least `sessions` sessions on the server's PostgreSQL
/// database wait for a lock (a row, a table or an advisory lock): a request is then in
/// progress and stuck where the test holds it.
pub async fn lock_waiters(server: &TestServer, sessions: i64, wait: Duration) -> Result<()> {
    let Sql::Postgres(pool) = server.sql() else {
        bail!("lock waits are observed on PostgreSQL only");
    };
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await?;
        if waiting >= sessions {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{waiting} sessions wait for a lock after {wait:?}, expected {sessions}");
        }
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
    }
}
