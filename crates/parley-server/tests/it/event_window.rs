//! The gateway's event window (`gateway::window`): a fetch after a hint in a pull group is
//! answered from memory, and every answer is the one the store gives, for a member who joined
//! mid-window, a member who left, after a recall, and right after an ack (read your writes).
//! The window's own rules (gaps, bounds, eviction, purges) are unit tests in the module.

use std::time::{Duration, Instant};

use crate::metrics::{scrape, value};
use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_client::{Client, DeliveryMode, NewConversation, SendOptions};
use parley_domain::{ConvId, Event, UserId};
use parley_store::EventsQuery;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

const WAIT: Duration = Duration::from_secs(5);
const CONV: &str = "c-window";
const HIT: &str = "parley_window_fetches_total{outcome=\"hit\"}";

/// The events-after page `user` gets over HTTP, and the one the store answers for the same
/// cursor, both as the wire's JSON.
async fn both_pages(
    server: &TestServer,
    client: &Client,
    user: &str,
    after: i64,
    limit: u32,
) -> Result<(serde_json::Value, serde_json::Value)> {
    let served = client
        .events_after(CONV, after, Some(limit), None)
        .await
        .with_context(|| format!("{user} after {after}"))?;
    let page = server
        .store()
        .events(
            &ConvId::from_trusted(CONV.into()),
            &UserId::from_trusted(user.into()),
            EventsQuery::After { after, epoch: None },
            limit,
        )
        .await?;
    let stored = parley_wire::EventsPage::<Event> {
        events: page.events,
        head: page.head,
        min_seq: page.min_seq,
        epoch: page.epoch,
        through_seq: page.through_seq,
        truncated: page.truncated,
        next_before: page.next_before,
    };
    Ok((
        serde_json::to_value(&served)?,
        serde_json::to_value(&stored)?,
    ))
}

/// Waits for a hint of the window's conversation with a head of at least `head`.
async fn hinted(ws: &mut Ws, head: i64) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        ensure!(!left.is_zero(), "no hint with head {head}");
        let hint = ws.next_of("hint", left).await?;
        if hint["conv_id"] == CONV && hint["head"].as_i64().is_some_and(|h| h >= head) {
            return Ok(());
        }
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    window_answers_like_the_store
);
/// A pull group with messages, a member who joins mid-window, edits, reactions added and taken
/// back, a thread with a recalled reply, a recall of a reacted message and a member who leaves:
/// after the last hint every cursor of every reader, with a small and a large page, gets the
/// store's answer byte for byte, and some of those answers came from the window.
async fn window_answers_like_the_store(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    let cai = server.user_with_device("u-cai").await;
    ana.create_conversation(
        &NewConversation::group(["u-ben"])
            .with_conv_id(CONV)
            .with_delivery_mode(DeliveryMode::Pull),
    )
    .await?;
    // A socket online, so the fanout follows the conversation and fills its window.
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    let mut seqs = Vec::new();
    for i in 1..=4 {
        seqs.push(
            ana.send(CONV, &format!("a-{i}"), &format!("ana {i}"))
                .await?
                .seq,
        );
    }
    let joined = ana.add_member(CONV, "u-cai").await?.seq;
    let mut bens = Vec::new();
    for i in 1..=3 {
        bens.push(
            ben.send(CONV, &format!("b-{i}"), &format!("ben {i}"))
                .await?
                .seq,
        );
    }
    cai.send(CONV, "c-1", "cai 1").await?;
    // Relations the window folds: an edit, reactions added and taken back (some to messages
    // from before cai joined, which cai reads without them), a thread with a recalled reply.
    ana.edit(CONV, seqs[0], "e-1", "ana 1, edited").await?;
    ben.react(CONV, seqs[0], "👍").await?;
    cai.react(CONV, bens[0], "🎉").await?;
    ben.react(CONV, bens[0], "👍").await?;
    ben.unreact(CONV, seqs[0], "👍").await?;
    cai.react(CONV, bens[0], "👍").await?;
    ana.react(CONV, seqs[0], "👍").await?;
    let in_thread = SendOptions::in_thread(bens[1]);
    cai.send_with(CONV, "t-1", "in thread", &in_thread).await?;
    let second = ben.send_with(CONV, "t-2", "me too", &in_thread).await?.seq;
    ben.recall(CONV, second).await?;
    ana.react(CONV, seqs[1], "👀").await?;
    ana.recall(CONV, seqs[1]).await?;
    let left = ana.remove_member(CONV, "u-ben").await?.seq;
    let head = ana.send(CONV, "a-5", "ana 5").await?.seq;
    hinted(&mut ws, head).await?;

    let hits_before = value(&scrape(&server).await?, HIT);
    for (user, client) in [("u-ana", &ana), ("u-ben", &ben), ("u-cai", &cai)] {
        for after in 0..=head {
            for limit in [2, 50] {
                let (served, stored) = both_pages(&server, client, user, after, limit).await?;
                ensure!(
                    served == stored,
                    "{user} after {after} limit {limit} (joined @{joined}, left @{left}):\n\
                     served {served}\nstore  {stored}"
                );
            }
        }
    }
    let hits = value(&scrape(&server).await?, HIT) - hits_before;
    // ana from the first message on and cai from their join on: most cursors are hits.
    ensure!(hits >= 10.0, "only {hits} fetches came from the window");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    window_reads_your_writes
);
/// Right after each ack, a fetch from just before the acked seq holds it, on the sender and on
/// another member, whether the window or the store answers.
async fn window_reads_your_writes(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    ana.create_conversation(
        &NewConversation::group(["u-ben"])
            .with_conv_id(CONV)
            .with_delivery_mode(DeliveryMode::Pull),
    )
    .await?;
    let _ws = Ws::connect(server.base_url(), ben.token()).await?;
    let first = ana.send(CONV, "m-0", "x").await?.seq;
    // Teach the window min_seq and epoch, as a reader's first fetch does.
    ben.events_after(CONV, first - 1, None, None).await?;
    let hits_before = value(&scrape(&server).await?, HIT);
    for i in 1..=40 {
        let seq = ana.send(CONV, &format!("m-{i}"), "x").await?.seq;
        for reader in [&ana, &ben] {
            let page = reader.events_after(CONV, seq - 2, None, None).await?;
            let got: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
            ensure!(
                got.contains(&seq) && page.head >= seq,
                "acked seq {seq} missing: {got:?}, head {}",
                page.head
            );
        }
    }
    let hits = value(&scrape(&server).await?, HIT) - hits_before;
    ensure!(hits > 0.0, "no fetch came from the window");
    Ok(())
}
