//! Time limits of client connections (`ServerConfig::connections`): a silent or trickling
//! request head, a half-sent or trickling body and an idle keep-alive connection are each
//! closed at their limit, the limits are told apart (an idle keep-alive is not held to the head
//! limit), and hyper's own answer to an over-long URL carries the error body.
//!
//! The limits are short here so the tests are quick; the deadlines checked are the limit plus
//! [`LATE_MS`], since a loaded machine fires timers late but never early. These tests run on
//! the embedded store only: the connection layer sits below the store and never reaches it.

use std::time::Duration;

use crate::raw_tcp::{self, HEALTHZ};
use anyhow::{ensure, Context, Result};
use parley_server::config::ConnectionLimits;
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

const HEAD_MS: u64 = 600;
const BODY_MS: u64 = 800;
const KEEPALIVE_MS: u64 = 2_000;
/// How late a close may come on a loaded machine.
const LATE_MS: u64 = 3_000;
/// Timers never fire early; this allows for the clocks of client and server to differ by
/// when each started counting.
const EARLY_MS: u64 = 50;
const ANSWER_WAIT: Duration = Duration::from_secs(10);

fn short_limits() -> ServerConfig {
    ServerConfig {
        connections: ConnectionLimits {
            header_timeout_ms: HEAD_MS,
            body_timeout_ms: BODY_MS,
            keepalive_idle_ms: KEEPALIVE_MS,
            ..ConnectionLimits::default()
        },
        ..ServerConfig::default()
    }
}

async fn server() -> TestServer {
    TestServer::start_on(StoreKind::Sqlite, short_limits()).await
}

/// Checks that a close seen at `closed` came `limit_ms` after `from`, give or take.
fn closed_at_limit(what: &str, from: Instant, closed: Instant, limit_ms: u64) -> Result<()> {
    let took = closed.duration_since(from).as_millis() as u64;
    ensure!(
        took + EARLY_MS >= limit_ms,
        "{what}: closed after {took} ms, before its limit of {limit_ms} ms"
    );
    ensure!(
        took <= limit_ms + LATE_MS,
        "{what}: closed after {took} ms; the limit is {limit_ms} ms"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_at_the_head_timeout() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut silent = raw_tcp::connect(addr).await?;
    let opened = Instant::now();
    let closed = raw_tcp::until_closed(&mut silent, opened + ms(HEAD_MS + LATE_MS)).await?;
    ensure!(
        closed.received.is_empty(),
        "the server answered a silent connection"
    );
    closed_at_limit("silent connection", opened, closed.at, HEAD_MS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_head_is_closed_at_the_head_timeout_however_often_it_sends() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut slow = raw_tcp::connect(addr).await?;
    let opened = Instant::now();
    // One byte every 100 ms: a whole head would take about 4 s, each gap is far below the
    // limit, and still the head as a whole must arrive within it.
    let closed = raw_tcp::trickle(&mut slow, HEALTHZ, ms(100)).await?;
    let Some(closed) = closed else {
        anyhow::bail!("the whole head went out one byte at a time and was never cut");
    };
    closed_at_limit("trickled head", opened, closed, HEAD_MS)
}

/// A request to an endpoint that reads its body, with a body of `declared` bytes of which the
/// caller sends the start.
fn post_head(admin_token: &str, declared: usize) -> Vec<u8> {
    format!(
        "POST /v1/admin/users HTTP/1.1\r\nhost: parley\r\nauthorization: Bearer {admin_token}\r\n\
         content-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_body_is_cut_at_the_body_timeout() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut half = raw_tcp::connect(addr).await?;
    half.write_all(&post_head(server.admin_token(), 100))
        .await?;
    half.write_all(br#"{"user_id": "u-half""#).await?;
    let sent = Instant::now();
    let closed = raw_tcp::until_closed(&mut half, sent + ms(BODY_MS + LATE_MS)).await?;
    closed_at_limit("half-sent body", sent, closed.at, BODY_MS)?;
    let answer = raw_tcp::parse_answer(&closed.received)?;
    ensure!(answer.status == 400, "answer {answer:?}");
    ensure!(
        answer.json()?["error"]["code"] == "BAD_REQUEST",
        "answer {answer:?}"
    );
    let users: i64 = server
        .sql()
        .one("SELECT count(*) FROM users WHERE user_id = 'u-half'", &[])
        .await?;
    ensure!(users == 0, "a cut request wrote something");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_at_the_body_timeout_however_often_it_sends() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut slow = raw_tcp::connect(addr).await?;
    let body = format!(
        r#"{{"user_id": "u-slow", "display_name": "{}"}}"#,
        "x".repeat(60)
    );
    slow.write_all(&post_head(server.admin_token(), body.len()))
        .await?;
    let started = Instant::now();
    let closed = raw_tcp::trickle(&mut slow, body.as_bytes(), ms(100)).await?;
    let Some(closed) = closed else {
        anyhow::bail!("the whole body went out one byte at a time and was never cut");
    };
    closed_at_limit("trickled body", started, closed, BODY_MS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_is_kept_past_the_head_timeout_and_closed_at_its_own() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut conn = raw_tcp::connect(addr).await?;
    let first = raw_tcp::exchange(&mut conn, HEALTHZ, ANSWER_WAIT).await?;
    ensure!(first.status == 200, "{first:?}");
    // Idle for longer than a head may take: a keep-alive wait is not a head.
    ensure!(
        raw_tcp::open_after(&mut conn, ms(HEAD_MS + 400)).await?,
        "an idle keep-alive connection was closed at the head timeout"
    );
    let second = raw_tcp::exchange(&mut conn, HEALTHZ, ANSWER_WAIT).await?;
    ensure!(second.status == 200, "{second:?}");
    let answered = Instant::now();
    let closed = raw_tcp::until_closed(&mut conn, answered + ms(KEEPALIVE_MS + LATE_MS)).await?;
    ensure!(
        closed.received.is_empty(),
        "unexpected bytes on an idle connection"
    );
    closed_at_limit("idle keep-alive", answered, closed.at, KEEPALIVE_MS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_head_must_arrive_within_the_head_timeout_of_its_first_byte() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut conn = raw_tcp::connect(addr).await?;
    let first = raw_tcp::exchange(&mut conn, HEALTHZ, ANSWER_WAIT).await?;
    ensure!(first.status == 200, "{first:?}");
    conn.write_all(&HEALTHZ[..8]).await?;
    let started = Instant::now();
    let closed = raw_tcp::until_closed(&mut conn, started + ms(HEAD_MS + LATE_MS)).await?;
    closed_at_limit("started head", started, closed.at, HEAD_MS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_url_is_answered_414_with_the_error_body() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut conn = raw_tcp::connect(addr).await?;
    let path = format!("/v1/conversations/{}", "a".repeat(100 * 1024));
    let request = format!("GET {path} HTTP/1.1\r\nhost: parley\r\n\r\n");
    let answer = raw_tcp::exchange(&mut conn, request.as_bytes(), ANSWER_WAIT).await?;
    ensure!(answer.status == 414, "{answer:?}");
    ensure!(
        answer.header("content-type") == Some("application/json"),
        "{answer:?}"
    );
    let body = answer.json()?;
    ensure!(body["error"]["code"] == "REQUEST_TOO_LARGE", "{body}");
    ensure!(body["error"]["message"].is_string(), "{body}");
    // Nothing of the connection is trusted after a head that could not be parsed.
    let closed = raw_tcp::until_closed(&mut conn, Instant::now() + ANSWER_WAIT).await?;
    ensure!(closed.received.is_empty(), "bytes after the answer");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_head_is_answered_400_with_the_error_body() -> Result<()> {
    let server = server().await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut conn = raw_tcp::connect(addr).await?;
    let answer = raw_tcp::exchange(
        &mut conn,
        b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
        ANSWER_WAIT,
    )
    .await?;
    ensure!(answer.status == 400, "{answer:?}");
    ensure!(
        answer.json()?["error"]["code"] == "BAD_REQUEST",
        "{answer:?}"
    );
    Ok(())
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The write-stall limit of the test below.
const WRITE_STALL_MS: u64 = 1_000;
/// Pipelined requests written per chunk, and the longest a chunk may take to be accepted
/// before the server counts as no longer reading.
const PIPELINED_PER_CHUNK: usize = 1_000;
const CHUNK_WRITE_WAIT: Duration = Duration::from_millis(500);
/// A bound on the bytes written, whatever the socket buffers hold.
const PIPELINED_BYTES_MAX: usize = 64 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_at_the_write_stall_timeout() -> Result<()> {
    let config = ServerConfig {
        connections: ConnectionLimits {
            write_stall_timeout_ms: WRITE_STALL_MS,
            ..ConnectionLimits::default()
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(StoreKind::Sqlite, config).await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut tcp = raw_tcp::connect(addr).await?;
    // Requests pipelined and answers never read: the answers fill both sockets' buffers, the
    // server's writes stop making progress, and it stops reading requests too.
    let chunk = HEALTHZ.repeat(PIPELINED_PER_CHUNK);
    let mut requests = 0;
    let mut written = 0;
    loop {
        ensure!(
            written < PIPELINED_BYTES_MAX,
            "the server still read requests after {written} bytes of unread answers"
        );
        match tokio::time::timeout(CHUNK_WRITE_WAIT, tcp.write_all(&chunk)).await {
            Ok(Ok(())) => {
                requests += PIPELINED_PER_CHUNK;
                written += chunk.len();
            }
            // The server stopped reading (or has closed already): its writes are stalled.
            Ok(Err(_)) | Err(_) => break,
        }
    }
    // Still not reading, for longer than the limit plus a loaded machine's lateness.
    tokio::time::sleep(Duration::from_millis(WRITE_STALL_MS + LATE_MS)).await;
    let closed = raw_tcp::until_closed(&mut tcp, Instant::now() + ANSWER_WAIT)
        .await
        .context("the connection of a client that stopped reading was kept")?;
    let answers = closed
        .received
        .windows(b"HTTP/1.1 200".len())
        .filter(|w| *w == b"HTTP/1.1 200")
        .count();
    // A server without the limit answers every request it read once reading resumes, and
    // keeps the connection; one with it closed the connection while nobody read.
    ensure!(
        answers < requests,
        "{answers} answers to {requests} requests: the connection was never cut"
    );
    Ok(())
}
