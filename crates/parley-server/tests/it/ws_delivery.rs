//! Sends and pushes over WebSocket (chapter 06): acks after commit, retries, fanout to every
//! device, and isolation of a slow consumer.

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_bus::Subscription;
use parley_client::NewConversation;
use parley_domain::Limits;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};
use sqlx::Connection;

const WAIT: Duration = Duration::from_secs(5);
/// How long the slow consumer may take to be disconnected once the others got every push.
const SLOW_DISCONNECT_WAIT: Duration = Duration::from_secs(20);

fn send_frame(req_id: i64, conv: &str, key: &str, body: &str) -> Value {
    json!({"type": "send", "req_id": req_id, "conv_id": conv, "client_msg_id": key, "body": body})
}

async fn ready(ws: &mut Ws) -> Result<()> {
    ws.send(json!({"type": "ping", "req_id": "ready"})).await?;
    ws.next_of("pong", WAIT).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_06_ack_after_commit
);
/// No ack and no push before the send's transaction committed, and none at all when its commit
/// fails (P6, P7). On PostgreSQL the transaction is held between its insert and its COMMIT
/// (`ack_after_commit_pg`); SQLite has one writer and no way to hold a commit, so there the
/// send is held before it starts, behind the write lock.
async fn check_06_ack_after_commit(store: StoreKind) -> Result<()> {
    match store {
        StoreKind::Postgres => ack_after_commit_pg().await,
        StoreKind::Sqlite => ack_after_commit_sqlite().await,
    }
}

/// The advisory lock key the commit trigger of `ack_after_commit_pg` waits on. Advisory locks
/// belong to one database, so parallel tests do not share it.
const COMMIT_HOLD_KEY: i64 = 0x0606;
/// A deferred constraint trigger runs at COMMIT, after every statement of the send succeeded:
/// a body `held` waits there for the advisory lock, a body `poison` fails the commit.
fn commit_hold_ddl() -> [String; 2] {
    [
        format!(
            "CREATE FUNCTION hold_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.body = 'poison' THEN RAISE EXCEPTION 'injected failure at commit'; END IF;
               IF NEW.body = 'held' THEN PERFORM pg_advisory_xact_lock({COMMIT_HOLD_KEY}); END IF;
               RETURN NULL;
             END $$"
        ),
        "CREATE CONSTRAINT TRIGGER hold_at_commit AFTER INSERT ON events
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_at_commit()"
            .to_owned(),
    ]
}

/// The events of `conv` in the log, by SQL: what another transaction sees as committed.
async fn committed_msgs(server: &TestServer, conv: &str) -> Result<i64> {
    Ok(server
        .sql()
        .one(
            "SELECT count(*) FROM events WHERE conv_id = $1 AND kind = 'msg'",
            &[conv.into()],
        )
        .await?)
}

/// The next committed event the bus announces within `WAIT`, as `(conv_id, seq, body)`.
async fn next_announced(sub: &mut Subscription) -> Result<(String, i64, Option<String>)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = tokio::time::timeout_at(deadline, sub.recv())
            .await
            .context("no announcement on the bus")??;
        if let Some(c) = got.committed() {
            let body = c.event.as_ref().and_then(|e| e.body.clone());
            return Ok((c.conv_id.as_str().to_owned(), c.head, body));
        }
    }
}

/// The frames `ws` receives up to and including the first one of `kind` for `req_id`.
async fn frames_until(ws: &mut Ws, kind: &str, req_id: i64) -> Result<Vec<Value>> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let frame = ws
            .next_json(left)
            .await?
            .with_context(|| format!("no {kind} for req {req_id}; saw {seen:?}"))?;
        let done = frame["type"] == kind && frame["req_id"] == req_id;
        seen.push(frame);
        if done {
            return Ok(seen);
        }
    }
}

/// The events pushed to `ws` up to and including the one with `body`.
async fn events_until(ws: &mut Ws, body: &str) -> Result<Vec<Value>> {
    let mut seen = Vec::new();
    loop {
        let push = ws
            .next_of("event", WAIT)
            .await
            .with_context(|| format!("no push of {body:?}; saw {seen:?}"))?;
        let done = push["event"]["body"] == body;
        seen.push(push["event"].clone());
        if done {
            return Ok(seen);
        }
    }
}

/// On PostgreSQL: the test holds an advisory lock that the send's deferred commit trigger
/// waits for, so the send has inserted its event and waits inside COMMIT (seen in
/// `pg_stat_activity`). Meanwhile a send to another conversation, a marker, goes through the
/// same bus, fanout and connection queues: it arrives at the WebSocket watcher and the bus
/// subscriber with nothing of the held send before it, and its ack reaches the sender with no
/// ack of the held send before it. After the release the held send is acked and pushed. Then a
/// send whose commit fails answers OUTCOME_UNKNOWN, and the marker sent after it is the first
/// thing anyone sees: nothing of the failed send is pushed or announced, ever.
async fn ack_after_commit_pg() -> Result<()> {
    let server = TestServer::start(ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    server.user_with_device("u-ben").await;
    let ben = server.device("u-ben", "d2").await;
    for conv in ["c-1", "c-2"] {
        ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id(conv))
            .await?;
    }
    let mut sender = Ws::connect(server.base_url(), ana.token()).await?;
    let mut watcher = Ws::connect(server.base_url(), ben.token()).await?;
    ready(&mut sender).await?;
    ready(&mut watcher).await?;
    for ddl in commit_hold_ddl() {
        server.sql().execute(&ddl, &[]).await?;
    }
    let mut bus = server.bus().subscribe();
    let mut holder = sqlx::PgConnection::connect(server.db().url()).await?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(COMMIT_HOLD_KEY)
        .execute(&mut holder)
        .await?;

    sender.send(send_frame(1, "c-1", "m-1", "held")).await?;
    // The send's session waits for the advisory lock: it is inside COMMIT, its insert done.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let waiting: i64 = server
            .sql()
            .one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                &[],
            )
            .await?;
        if waiting == 1 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the send never waited at its commit ({waiting} sessions waiting)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ensure!(
        committed_msgs(&server, "c-1").await? == 0,
        "the held send is visible before its commit"
    );

    sender.send(send_frame(2, "c-2", "m-2", "marker-1")).await?;
    let before_marker = frames_until(&mut sender, "ack", 2).await?;
    ensure!(
        !before_marker.iter().any(|f| f["req_id"] == 1),
        "an answer to the held send before its commit: {before_marker:?}"
    );
    let pushed = events_until(&mut watcher, "marker-1").await?;
    ensure!(
        pushed.len() == 1,
        "pushed before the held send committed: {pushed:?}"
    );
    let announced = next_announced(&mut bus).await?;
    ensure!(
        announced.0 == "c-2" && announced.2.as_deref() == Some("marker-1"),
        "announced before the held send committed: {announced:?}"
    );

    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(COMMIT_HOLD_KEY)
        .execute(&mut holder)
        .await?;
    let ack = frames_until(&mut sender, "ack", 1).await?;
    let ack = ack.last().context("no ack")?;
    ensure!(ack["seq"] == 3 && ack["dup"] == false, "ack {ack}");
    let pushed = events_until(&mut watcher, "held").await?;
    ensure!(
        pushed.len() == 1 && pushed[0]["conv_id"] == "c-1" && pushed[0]["seq"] == 3,
        "push of the held send {pushed:?}"
    );
    let announced = next_announced(&mut bus).await?;
    ensure!(
        announced == ("c-1".to_owned(), 3, Some("held".to_owned())),
        "announced {announced:?}"
    );

    // A commit that fails: the answer says the outcome is unknown, and nothing is pushed.
    sender.send(send_frame(3, "c-1", "m-3", "poison")).await?;
    let failed = frames_until(&mut sender, "error", 3).await?;
    let failed = failed.last().context("no error")?;
    ensure!(
        failed["code"] == "OUTCOME_UNKNOWN",
        "failed commit {failed}"
    );
    sender.send(send_frame(4, "c-1", "m-4", "marker-2")).await?;
    let before_marker = frames_until(&mut sender, "ack", 4).await?;
    ensure!(
        !before_marker
            .iter()
            .any(|f| f["req_id"] == 3 || f["event"]["body"] == "poison"),
        "the sender saw the failed send again: {before_marker:?}"
    );
    ensure!(
        before_marker.last().is_some_and(|a| a["seq"] == 4),
        "marker ack {before_marker:?}"
    );
    let pushed = events_until(&mut watcher, "marker-2").await?;
    ensure!(
        pushed.len() == 1 && pushed[0]["seq"] == 4,
        "pushed besides the marker: {pushed:?}"
    );
    let announced = next_announced(&mut bus).await?;
    ensure!(
        announced == ("c-1".to_owned(), 4, Some("marker-2".to_owned())),
        "announced before the marker: {announced:?}"
    );
    ensure!(
        committed_msgs(&server, "c-1").await? == 2,
        "the failed send left a row"
    );
    Ok(())
}

/// On SQLite: while another transaction holds the write lock the send cannot commit; neither
/// its ack nor its push arrives. Both arrive once the lock is released. SQLite has one writer,
/// so no marker can commit meanwhile: "nothing arrived" is judged over a window here.
async fn ack_after_commit_sqlite() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    server.user_with_device("u-ben").await;
    let ben = server.device("u-ben", "d2").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;
    let mut sender = Ws::connect(server.base_url(), ana.token()).await?;
    let mut watcher = Ws::connect(server.base_url(), ben.token()).await?;
    ready(&mut sender).await?;
    ready(&mut watcher).await?;

    let lock = server.sql().hold_write_lock("c-1").await?;
    sender.send(send_frame(1, "c-1", "m-1", "hello")).await?;
    let early_ack = sender.next_json(Duration::from_millis(700)).await?;
    let early_push = watcher.next_json(Duration::from_millis(100)).await?;
    ensure!(early_ack.is_none(), "ack before commit: {early_ack:?}");
    ensure!(early_push.is_none(), "push before commit: {early_push:?}");
    lock.release().await?;

    let ack = sender.next_of("ack", WAIT).await?;
    ensure!(
        ack["req_id"] == 1 && ack["seq"] == 3 && ack["dup"] == false,
        "ack {ack}"
    );
    let push = watcher.next_of("event", WAIT).await?;
    ensure!(
        push["event"]["seq"] == 3 && push["event"]["body"] == "hello",
        "push {push}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_06_retry_after_lost_ack
);
/// The connection drops between commit and ack: the retry with the same client_msg_id answers
/// dup=true with the original seq, and the log holds one event.
async fn check_06_retry_after_lost_ack(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    ready(&mut ws).await?;
    let lock = server.sql().hold_write_lock("c-1").await?;
    ws.send(send_frame(1, "c-1", "m-1", "hello")).await?;
    // On PostgreSQL the send is seen waiting for the row lock, so the drop comes while it is in
    // progress. SQLite shows no such wait; there the frame, written before the drop, reaches
    // the server before the end of the stream, and the server finishes a request it read
    // after its connection ended.
    if store == StoreKind::Postgres {
        crate::waits::lock_waiters(&server, 1, WAIT).await?;
    }
    drop(ws); // the ack can no longer arrive
    lock.release().await?;
    // The send commits on the server although its client is gone.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let n: i64 = server
            .sql()
            .one(
                "SELECT count(*) FROM events WHERE conv_id = 'c-1' AND kind = 'msg'",
                &[],
            )
            .await?;
        if n == 1 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the orphaned send never committed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    ws.send(send_frame(2, "c-1", "m-1", "hello")).await?;
    let ack = ws.next_of("ack", WAIT).await?;
    ensure!(ack["dup"] == true && ack["seq"] == 2, "retry ack {ack}");
    let n: i64 = server
        .sql()
        .one(
            "SELECT count(*) FROM events WHERE conv_id = 'c-1' AND kind = 'msg'",
            &[],
        )
        .await?;
    ensure!(n == 1, "events after retry: {n}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_06_push_to_all_devices
);
/// A committed event reaches every online device of every member, the sender's other devices
/// included; a leaver's devices get their own leave event and nothing after it.
async fn check_06_push_to_all_devices(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana1 = server.user_with_device("u-ana").await;
    let ana2 = server.device("u-ana", "d2").await;
    let ben = server.user_with_device("u-ben").await;
    let cai = server.user_with_device("u-cai").await;
    ana1.create_conversation(&NewConversation::group(["u-ben", "u-cai"]).with_conv_id("c-1"))
        .await?;
    let mut ws_ana2 = Ws::connect(server.base_url(), ana2.token()).await?;
    let mut ws_ben = Ws::connect(server.base_url(), ben.token()).await?;
    let mut ws_cai = Ws::connect(server.base_url(), cai.token()).await?;
    for ws in [&mut ws_ana2, &mut ws_ben, &mut ws_cai] {
        ready(ws).await?;
    }
    let ack = ana1.send("c-1", "m-1", "hi all").await?;
    for ws in [&mut ws_ana2, &mut ws_ben, &mut ws_cai] {
        let push = ws.next_of("event", WAIT).await?;
        ensure!(
            push["event"]["seq"] == ack.seq && push["event"]["body"] == "hi all",
            "push {push}"
        );
    }
    // cai leaves: everyone, cai included, sees the leave; cai sees nothing after it.
    let left = cai.remove_member("c-1", "u-cai").await?.seq;
    for ws in [&mut ws_ana2, &mut ws_ben, &mut ws_cai] {
        let push = ws.next_of("event", WAIT).await?;
        ensure!(
            push["event"]["seq"] == left && push["event"]["kind"] == "leave",
            "leave push {push}"
        );
    }
    ana1.send("c-1", "m-2", "after").await?;
    ensure!(
        ws_ben.next_of("event", WAIT).await?["event"]["body"] == "after",
        "ben missed m-2"
    );
    let leak = ws_cai.next_json(Duration::from_millis(500)).await?;
    ensure!(leak.is_none(), "a former member got a push: {leak:?}");
    Ok(())
}

/// Pushes in the slow-consumer test: each carries a large body so kernel buffers fill quickly.
const SLOW_TEST_MESSAGES: usize = 400;
const SLOW_TEST_BODY_BYTES: usize = 60 * 1024;
/// Most messages sent and not yet read by the fast client: half its outbound queue.
const SLOW_TEST_LEAD: usize = 4;

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_06_slow_consumer_isolated
);
/// A client that never reads fills its bounded queue and is disconnected; another client's
/// deliveries are complete and in order meanwhile.
async fn check_06_slow_consumer_isolated(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        limits: Limits {
            body_bytes_max: SLOW_TEST_BODY_BYTES,
            request_bytes_max: 2 * SLOW_TEST_BODY_BYTES,
        },
        outbound_queue_len_max: 8,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let ana = server.user_with_device("u-ana").await;
    let fast = server.user_with_device("u-fast").await;
    let slow = server.user_with_device("u-slow").await;
    ana.create_conversation(&NewConversation::group(["u-fast", "u-slow"]).with_conv_id("c-1"))
        .await?;
    let mut ws_fast = Ws::connect(server.base_url(), fast.token()).await?;
    let mut ws_slow = Ws::connect(server.base_url(), slow.token()).await?;
    ready(&mut ws_fast).await?;
    ready(&mut ws_slow).await?; // from here on the slow client never reads

    let body = "x".repeat(SLOW_TEST_BODY_BYTES);
    // How many pushes the fast client has read: the sender stays at most SLOW_TEST_LEAD
    // messages ahead of it, so the fast client is never the slow one, however loaded the
    // machine, while the client that never reads falls behind without bound.
    let (read_tx, mut read_rx) = tokio::sync::watch::channel(0usize);
    let reader = tokio::spawn(async move {
        let mut seqs = Vec::new();
        while seqs.len() < SLOW_TEST_MESSAGES {
            let push = ws_fast.next_of("event", Duration::from_secs(20)).await?;
            seqs.push(push["event"]["seq"].as_i64().unwrap_or(-1));
            let _ = read_tx.send(seqs.len());
        }
        anyhow::Ok(seqs)
    });
    for i in 0..SLOW_TEST_MESSAGES {
        let caught_up = read_rx.wait_for(|read| read + SLOW_TEST_LEAD >= i);
        tokio::time::timeout(Duration::from_secs(20), caught_up)
            .await
            .context("the fast client stopped reading")??;
        ana.send("c-1", &format!("m-{i}"), &body).await?;
    }
    let seqs = reader.await??;
    let expected: Vec<i64> = (4..4 + SLOW_TEST_MESSAGES as i64).collect();
    ensure!(
        seqs == expected,
        "the fast client's pushes were not complete and in order"
    );

    // The slow client was disconnected: its route is gone while it still has not read. The
    // bound is generous because the route's release is a write that queues behind the sends on
    // a loaded machine (one writer on the embedded store).
    let deadline = tokio::time::Instant::now() + SLOW_DISCONNECT_WAIT;
    loop {
        let routes: i64 = server
            .sql()
            .one("SELECT count(*) FROM routes WHERE user_id = 'u-slow'", &[])
            .await?;
        if routes == 0 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the slow client is still connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(ws_slow);
    Ok(())
}

/// Conversations in `check_fanout_reads_new_member_sets_together`.
const COLD_CONVS: usize = 24;
/// Messages sent into each of them at once.
const COLD_MSGS_PER_CONV: usize = 3;

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_fanout_reads_new_member_sets_together
);
/// Sends into many conversations the fanout has not seen yet, all at once: the fanout takes
/// their announcements together and reads the new member sets concurrently; every event still
/// reaches the member's device exactly once, and each conversation's events in seq order.
async fn check_fanout_reads_new_member_sets_together(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    for c in 0..COLD_CONVS {
        ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id(format!("c-{c}")))
            .await?;
    }
    let mut ws_ben = Ws::connect(server.base_url(), ben.token()).await?;
    ready(&mut ws_ben).await?;
    let sends = (0..COLD_CONVS).map(|c| {
        let ana = &ana;
        async move {
            for m in 0..COLD_MSGS_PER_CONV {
                ana.send(&format!("c-{c}"), &format!("m-{m}"), &format!("{c}/{m}"))
                    .await?;
            }
            anyhow::Ok(())
        }
    });
    for sent in futures::future::join_all(sends).await {
        sent?;
    }
    let mut last_seq: std::collections::HashMap<String, i64> = Default::default();
    for _ in 0..COLD_CONVS * COLD_MSGS_PER_CONV {
        let push = ws_ben.next_of("event", WAIT).await?;
        let conv = push["event"]["conv_id"]
            .as_str()
            .context("conv_id")?
            .to_owned();
        let seq = push["event"]["seq"].as_i64().context("seq")?;
        let before = last_seq.insert(conv.clone(), seq);
        ensure!(
            before.is_none_or(|b| seq == b + 1),
            "{conv}: seq {seq} after {before:?}"
        );
    }
    ensure!(
        last_seq.len() == COLD_CONVS,
        "pushed conversations {}",
        last_seq.len()
    );
    let extra = ws_ben.next_json(Duration::from_millis(300)).await?;
    ensure!(
        extra.as_ref().is_none_or(|f| f["type"] != "event"),
        "an event beyond the sends: {extra:?}"
    );
    Ok(())
}
