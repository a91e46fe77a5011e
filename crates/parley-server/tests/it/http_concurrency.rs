//! The first seed's concurrency checks through the HTTP server (not the store): concurrent
//! identical sends resolve to one row, and concurrent distinct sends leave a gapless log.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use parley_client::{Client, EventKind, NewConversation, SendAck};
use parley_testkit::{test_on_both_stores, ServerConfig, Sql, StoreKind, TestServer};
use tokio::sync::Barrier;

const REPLAYS: usize = 32;
const DISTINCT_SENDS: usize = 200;

/// Sends all `(client, client_msg_id, body)` at once: every task waits at one barrier first.
async fn send_all_at_once(sends: Vec<(Client, String, String)>, conv: &str) -> Vec<SendAck> {
    let barrier = Arc::new(Barrier::new(sends.len()));
    let mut tasks = Vec::with_capacity(sends.len());
    for (client, key, body) in sends {
        let barrier = barrier.clone();
        let conv = conv.to_owned();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            client.send(&conv, &key, &body).await
        }));
    }
    let mut acks = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await {
            Ok(Ok(ack)) => acks.push(ack),
            Ok(Err(e)) => panic!("send {i} was not answered 200: {e}"),
            Err(e) => panic!("send task {i} failed: {e}"),
        }
    }
    acks
}

async fn next_seq(sql: &Sql, conv: &str) -> Result<i64> {
    Ok(sql
        .one(
            "SELECT next_seq FROM conversations WHERE conv_id = $1",
            &[conv.into()],
        )
        .await?)
}

/// Every event the reader sees, by pages of `events?after=` following `through_seq`.
async fn read_whole_log(client: &Client, conv: &str) -> Result<Vec<parley_client::Event>> {
    let mut after = 0;
    let mut events = Vec::new();
    loop {
        let page = client.events_after(conv, after, Some(100), None).await?;
        events.extend(page.events);
        ensure!(page.through_seq >= after, "cursor moved back");
        if page.through_seq == page.head {
            return Ok(events);
        }
        after = page.through_seq;
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    check_04_concurrent_replay_one_row_http
);
/// 04-concurrent-replay-one-row over HTTP: 32 identical sends of one device at once.
async fn check_04_concurrent_replay_one_row_http(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let conv = ana
        .create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-r"))
        .await?;
    ensure!(conv.head == 1, "created: {conv:?}");

    let sends = (0..REPLAYS)
        .map(|_| (ana.clone(), "m-same".to_owned(), "same body".to_owned()))
        .collect();
    let acks = send_all_at_once(sends, "c-r").await;
    ensure!(acks.len() == REPLAYS, "{} answers", acks.len());
    let firsts = acks.iter().filter(|a| !a.dup).count();
    let seqs: HashSet<i64> = acks.iter().map(|a| a.seq).collect();
    let ids: HashSet<&str> = acks.iter().map(|a| a.message_id.as_str()).collect();
    ensure!(firsts == 1, "{firsts} answers with dup=false");
    ensure!(seqs == HashSet::from([2]), "seqs: {seqs:?}");
    ensure!(ids.len() == 1, "message ids: {ids:?}");

    let events = read_whole_log(&ana, "c-r").await?;
    let msgs: Vec<_> = events.iter().filter(|e| e.kind == EventKind::Msg).collect();
    ensure!(msgs.len() == 1, "msg events via the API: {}", msgs.len());
    ensure!(
        msgs[0].seq == 2
            && msgs[0].client_msg_id.as_deref() == Some("m-same")
            && msgs[0].message_id.as_deref() == ids.iter().next().copied(),
        "event: {:?}",
        msgs[0]
    );

    let sql = server.sql();
    let rows: i64 = sql.one("SELECT count(*) FROM events WHERE conv_id = 'c-r' AND kind = 'msg' AND client_msg_id = 'm-same'", &[])
    .await?;
    ensure!(rows == 1, "msg rows by SQL: {rows}");
    let all: i64 = sql
        .one("SELECT count(*) FROM events WHERE conv_id = 'c-r'", &[])
        .await?;
    ensure!(all == 2, "rows by SQL: {all}");
    ensure!(next_seq(sql, "c-r").await? == 3, "next_seq");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    check_04_seq_gapless_http
);
/// 04-seq-gapless over HTTP: 200 distinct sends at once from four members.
async fn check_04_seq_gapless_http(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let users = ["u-a", "u-b", "u-c", "u-d"];
    let mut clients = Vec::new();
    for u in users {
        clients.push(server.user_with_device(u).await);
    }
    let conv = clients[0]
        .create_conversation(&NewConversation::group(["u-b", "u-c", "u-d"]).with_conv_id("c-g"))
        .await?;
    let joins = conv.head;
    ensure!(joins == 4, "created: {conv:?}");

    let sends = (0..DISTINCT_SENDS)
        .map(|i| {
            let c = clients[i % clients.len()].clone();
            (c, format!("m-{i}"), format!("body {i}"))
        })
        .collect();
    let acks = send_all_at_once(sends, "c-g").await;
    ensure!(acks.len() == DISTINCT_SENDS, "{} answers", acks.len());
    ensure!(acks.iter().all(|a| !a.dup), "a distinct send answered dup");
    let acked: BTreeSet<i64> = acks.iter().map(|a| a.seq).collect();
    let expected: BTreeSet<i64> = (joins + 1..=joins + DISTINCT_SENDS as i64).collect();
    ensure!(
        acked == expected,
        "acked seqs are not {expected:?}: {acked:?}"
    );
    let ids: HashSet<&str> = acks.iter().map(|a| a.message_id.as_str()).collect();
    ensure!(ids.len() == DISTINCT_SENDS, "{} message ids", ids.len());

    let sql = server.sql();
    let msgs: i64 = sql
        .one(
            "SELECT count(*) FROM events WHERE conv_id = 'c-g' AND kind = 'msg'",
            &[],
        )
        .await?;
    ensure!(msgs == DISTINCT_SENDS as i64, "msg rows by SQL: {msgs}");
    let seqs: Vec<i64> = sql
        .column(
            "SELECT seq FROM events WHERE conv_id = 'c-g' ORDER BY seq",
            &[],
        )
        .await?;
    let head = *seqs.last().context("empty log")?;
    ensure!(
        seqs == (1..=head).collect::<Vec<i64>>(),
        "the log has a hole or repeat: {seqs:?}"
    );
    ensure!(head == joins + DISTINCT_SENDS as i64, "head {head}");
    let next = next_seq(sql, "c-g").await?;
    ensure!(next == head + 1, "next_seq {next}, head {head}");

    // Every member reads the same gapless log through the API.
    for c in &clients[1..] {
        let events = read_whole_log(c, "c-g").await?;
        let first = events.first().map(|e| e.seq);
        let got: Vec<i64> = events.iter().map(|e| e.seq).collect();
        let from = first.context("empty read")?;
        ensure!(
            got == (from..=head).collect::<Vec<i64>>(),
            "API read has a hole"
        );
        let api_msgs = events.iter().filter(|e| e.kind == EventKind::Msg).count();
        ensure!(
            api_msgs == DISTINCT_SENDS,
            "msg events via the API: {api_msgs}"
        );
    }
    let view = clients[0].get_conversation("c-g").await?;
    ensure!(view.head == head, "view head {}", view.head);
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    check_04_mixed_replays_and_distinct_sends_http
);
/// Replays and distinct sends mixed at once: each request key still maps to exactly one event
/// and the log stays gapless.
async fn check_04_mixed_replays_and_distinct_sends_http(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-a").await;
    let ben = server.user_with_device("u-b").await;
    ana.create_conversation(&NewConversation::group(["u-b"]).with_conv_id("c-m"))
        .await?;
    // 10 keys, each sent 8 times, by two users (the same key of two senders is two requests).
    let mut sends = Vec::new();
    for k in 0..10 {
        for _ in 0..4 {
            sends.push((ana.clone(), format!("k-{k}"), format!("a{k}")));
            sends.push((ben.clone(), format!("k-{k}"), format!("b{k}")));
        }
    }
    let acks = send_all_at_once(sends, "c-m").await;
    ensure!(acks.len() == 80);
    let firsts = acks.iter().filter(|a| !a.dup).count();
    ensure!(firsts == 20, "{firsts} answers with dup=false");
    let seqs: BTreeSet<i64> = acks.iter().map(|a| a.seq).collect();
    ensure!(seqs == (3..=22).collect(), "acked seqs: {seqs:?}");

    let sql = server.sql();
    let per_key: Vec<i64> = sql
        .column(
            "SELECT count(*) FROM events WHERE conv_id = 'c-m' AND kind = 'msg'
         GROUP BY sender_user, client_msg_id",
            &[],
        )
        .await?;
    ensure!(
        per_key.len() == 20 && per_key.iter().all(|n| *n == 1),
        "rows per request key: {per_key:?}"
    );
    let seqs: Vec<i64> = sql
        .column(
            "SELECT seq FROM events WHERE conv_id = 'c-m' ORDER BY seq",
            &[],
        )
        .await?;
    ensure!(seqs == (1..=22).collect::<Vec<i64>>(), "log: {seqs:?}");
    ensure!(next_seq(sql, "c-m").await? == 23);
    Ok(())
}
