//! Recall and retention over HTTP and WebSocket (chapter 11): the recall endpoint and its
//! push, the background purge, and retries answered from tombstones.

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);
/// Recall window of the conversation whose window the test lets pass.
const SHORT_WINDOW_MS: i64 = 200;
/// Retention of the purged conversation, and the purge interval of its server: short, so the
/// background job acts within the test.
const RETENTION_MS: i64 = 300;
const PURGE_INTERVAL_MS: u64 = 50;

async fn call(c: &Client, method: Method, path: &str, body: Option<Value>) -> Result<RawResponse> {
    let mut req = c.raw(method, path);
    if let Some(b) = body {
        req = req.json(&b);
    }
    Ok(req.response().await?)
}

fn expect(r: &RawResponse, status: u16, code: &str, what: &str) -> Result<()> {
    ensure!(
        r.status == status && r.json["error"]["code"] == code,
        "{what}: expected {status} {code}, got {} {}",
        r.status,
        r.text
    );
    Ok(())
}

async fn ready(ws: &mut Ws) -> Result<()> {
    ws.send(json!({"type": "ping", "req_id": "ready"})).await?;
    ws.next_of("pong", WAIT).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_recall_over_http
);
/// 11-recall-window, 11-recall-erases-body and 11-recall-idempotent over HTTP: the recall
/// answers `{seq, target_seq}`, its event is pushed like any other, the target reads as
/// recalled without a body and its stored body is gone; recalling again answers the same recall
/// and pushes nothing; another member gets NOT_SENDER, a join NOT_FOUND, a bad seq BAD_REQUEST;
/// past the conversation's own window the answer is RECALL_WINDOW_EXPIRED.
async fn check_11_recall_over_http(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-r"))
        .await?;
    ana.create_conversation(
        &NewConversation::group(["u-ben"])
            .with_conv_id("c-short")
            .with_recall_window_ms(SHORT_WINDOW_MS),
    )
    .await?;
    let mut ws = Ws::connect(server.base_url(), ben.token()).await?;
    ready(&mut ws).await?;

    ana.send("c-r", "m-1", "secret words").await?; // 3
    ensure!(ws.next_of("event", WAIT).await?["event"]["seq"] == 3);
    let r = call(
        &ana,
        Method::POST,
        "/v1/conversations/c-r/events/3/recall",
        None,
    )
    .await?;
    ensure!(
        r.status == 200 && r.json == json!({"seq": 4, "target_seq": 3}),
        "recall: {} {}",
        r.status,
        r.text
    );
    let pushed = ws.next_of("event", WAIT).await?;
    let e = &pushed["event"];
    ensure!(
        e["seq"] == 4
            && e["kind"] == "recall"
            && e["target_seq"] == 3
            && e["sender_user"] == "u-ana",
        "pushed recall: {pushed}"
    );

    let again = call(
        &ana,
        Method::POST,
        "/v1/conversations/c-r/events/3/recall",
        None,
    )
    .await?;
    ensure!(
        again.status == 200 && again.json == r.json,
        "recall again: {} {}",
        again.status,
        again.text
    );
    let extra = ws.next_json(Duration::from_millis(300)).await?;
    ensure!(extra.is_none(), "a repeated recall pushed {extra:?}");

    let page = call(
        &ben,
        Method::GET,
        "/v1/conversations/c-r/events?after=2",
        None,
    )
    .await?;
    let target = &page.json["events"][0];
    ensure!(
        target["seq"] == 3
            && target["kind"] == "msg"
            && target["recalled"] == true
            && target.get("body").is_none(),
        "recalled target: {target}"
    );
    ensure!(page.json["head"] == 4, "head {}", page.json["head"]);
    let stored: Option<String> = server
        .sql()
        .one(
            "SELECT body FROM events WHERE conv_id = 'c-r' AND seq = 3",
            &[],
        )
        .await?;
    ensure!(stored.is_none(), "stored body after recall: {stored:?}");

    let r = call(
        &ben,
        Method::POST,
        "/v1/conversations/c-r/events/3/recall",
        None,
    )
    .await?;
    expect(&r, 403, code::NOT_SENDER, "another member recalls")?;
    let r = call(
        &ana,
        Method::POST,
        "/v1/conversations/c-r/events/1/recall",
        None,
    )
    .await?;
    expect(&r, 404, code::NOT_FOUND, "recall of a join")?;
    let r = call(
        &ana,
        Method::POST,
        "/v1/conversations/c-r/events/x/recall",
        None,
    )
    .await?;
    expect(&r, 400, code::BAD_REQUEST, "recall of seq x")?;

    ana.send("c-short", "s-1", "too late").await?; // 3
    tokio::time::sleep(Duration::from_millis(SHORT_WINDOW_MS as u64 + 100)).await;
    let r = call(
        &ana,
        Method::POST,
        "/v1/conversations/c-short/events/3/recall",
        None,
    )
    .await?;
    expect(
        &r,
        409,
        code::RECALL_WINDOW_EXPIRED,
        "recall after the window",
    )?;
    let head = ana.get_conversation("c-short").await?.head;
    ensure!(head == 3, "a refused recall wrote: head {head}");
    let e = ana.history("c-short", None, Some(1)).await?;
    let e = e.events.first().context("no event")?;
    ensure!(
        !e.recalled && e.body.as_deref() == Some("too late"),
        "refused target: {e:?}"
    );
    Ok(())
}

/// Polls the conversation as `c` sees it until `min_seq` reaches `want`.
async fn wait_min_seq(c: &Client, conv: &str, want: i64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let view = c.get_conversation(conv).await?;
        if view.min_seq >= want {
            ensure!(
                view.min_seq == want,
                "min_seq {} overshot {want}",
                view.min_seq
            );
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "min_seq still {} after {WAIT:?}",
            view.min_seq
        );
        tokio::time::sleep(Duration::from_millis(PURGE_INTERVAL_MS)).await;
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_purge_advances_min_seq_http
);
/// 11-purge-advances-min-seq with the server's own background job: events past the
/// conversation's retention disappear, `min_seq` rises to `next_seq`, reads say `truncated`,
/// the head stays, and the next send continues the sequence (P1).
async fn check_11_purge_advances_min_seq_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "11-purge-advances-min-seq").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_retry_after_purge_hits_tombstone_http
);
/// 11-retry-after-purge-hits-tombstone over HTTP and WebSocket: after the background purge, a
/// retry with the same body answers `dup: true, purged: true` with the original seq and
/// message id; another body is 409 IDEMPOTENCY_MISMATCH; nothing is written.
async fn check_11_retry_after_purge_hits_tombstone_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "11-retry-after-purge-hits-tombstone").await
}

/// Tombstone life of the expiry test: long enough to be seen, short enough to pass in the test.
const TOMBSTONE_TTL_MS: u64 = 1_000;

/// 11-tombstone-expiry with the server's own job: the purge moves the key into a tombstone,
/// the job deletes the tombstone once it is older than `TOMBSTONE_TTL_MS`, and from then on the
/// key is free: the same request is a new message (clients retry for far less than the TTL,
/// whose default is seven days).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_11_tombstone_expiry_in_background() -> Result<()> {
    let server = TestServer::start(ServerConfig {
        purge_interval_ms: PURGE_INTERVAL_MS,
        tombstone_ttl_ms: TOMBSTONE_TTL_MS,
        ..ServerConfig::default()
    })
    .await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(
        &NewConversation::group(Vec::<String>::new())
            .with_conv_id("c-ttl")
            .with_retention_ms(RETENTION_MS),
    )
    .await?;
    ana.send("c-ttl", "m-1", "hello").await?; // 2
    wait_min_seq(&ana, "c-ttl", 3).await?;
    const TOMBSTONES_SQL: &str = "SELECT count(*) FROM idem_tombstones WHERE conv_id = 'c-ttl'";
    let tombstones: i64 = server.sql().one(TOMBSTONES_SQL, &[]).await?;
    ensure!(tombstones == 1, "no tombstone after the purge");
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.sql().one::<i64>(TOMBSTONES_SQL, &[]).await? > 0 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the tombstone outlived its TTL of {TOMBSTONE_TTL_MS} ms by {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(PURGE_INTERVAL_MS)).await;
    }
    let again = ana.send("c-ttl", "m-1", "hello").await?;
    ensure!(
        !again.dup && again.seq == 3,
        "send with an expired key: {again:?}"
    );
    Ok(())
}
