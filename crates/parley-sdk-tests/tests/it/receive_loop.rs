//! Replying from the loop that takes deliveries: with more deliveries waiting than the queue
//! holds, a send made from that loop is still answered at once, and the app then gets exactly
//! the log, in order, each event once.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures::stream::{self, StreamExt, TryStreamExt};
use parley_client::ws::DELIVERY_QUEUE_LEN_MAX_DEFAULT;
use parley_client::{Delivery, NewConversation, Realtime, RealtimeOptions};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

use crate::deliveries::next_delivery;

/// Messages ben sends while ana reads nothing: more than her delivery queue holds.
const BACKLOG: usize = DELIVERY_QUEUE_LEN_MAX_DEFAULT + 300;
/// Sends of ben in flight at once.
const SENDERS: usize = 8;
/// Longest wait for the session to have filled the queue.
const FILL_WAIT_MS: u64 = 60_000;
/// Longest acceptable wait for the answer to the send from the loop: well below the request's
/// own timeout (10 s), which is how long it took while answers waited behind deliveries.
const ANSWER_WAIT_MS: u64 = 3_000;

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_send_from_the_receive_loop_is_answered_behind_a_full_queue
);
async fn a_send_from_the_receive_loop_is_answered_behind_a_full_queue(
    store: StoreKind,
) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    let mut rt = Realtime::connect(&ana, RealtimeOptions::default()).await?;
    rt.track(conv, chat.epoch, 0);

    stream::iter(0..BACKLOG)
        .map(|i| {
            let ben = ben.clone();
            async move { ben.send(conv, &format!("b-{i}"), &format!("ben {i}")).await }
        })
        .buffer_unordered(SENDERS)
        .try_collect::<Vec<_>>()
        .await?;
    // The cursor is the last seq handed to the queue: once it passes the queue's length, the
    // queue is full, since nothing was taken.
    let deadline = Instant::now() + Duration::from_millis(FILL_WAIT_MS);
    while rt.cursor(conv).map_or(0, |(_, seq)| seq) < DELIVERY_QUEUE_LEN_MAX_DEFAULT as i64 {
        ensure!(
            Instant::now() < deadline,
            "the queue did not fill: {:?}",
            rt.cursor(conv)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The loop's first delivery, and the reply to it made right there.
    let first = rt.next().await.context("a delivery")?;
    ensure!(
        matches!(&first, Delivery::Event(e) if e.seq == 1),
        "{first:?}"
    );
    let asked = Instant::now();
    let reply = tokio::time::timeout(
        Duration::from_millis(ANSWER_WAIT_MS),
        rt.send(conv, "a-1", "a reply from the loop"),
    )
    .await
    .context("the reply waited behind the unread deliveries")??;
    let answered_ms = asked.elapsed().as_millis();
    println!("{store}: the reply from the loop was acked in {answered_ms} ms");

    let head = reply.seq;
    ensure!(head == BACKLOG as i64 + 3, "{reply:?}");
    let mut seqs = vec![1];
    while seqs.len() < head as usize {
        let next = next_delivery(&mut rt)
            .await
            .with_context(|| format!("after {} deliveries", seqs.len()))?;
        match next {
            Delivery::Event(e) => {
                // Ana made both joins and sent the reply, from this device.
                let by_ana = e.sender_user.as_deref() == Some("ana");
                let reply = e.client_msg_id.as_deref() == Some("a-1");
                ensure!(
                    e.own == by_ana && e.own_device == reply,
                    "own flags of #{}: {e:?}",
                    e.seq
                );
                seqs.push(e.seq);
            }
            other => bail!("unexpected delivery: {other:?}"),
        }
    }
    let expected: Vec<i64> = (1..=head).collect();
    ensure!(seqs == expected, "the deliveries are not the log in order");
    Ok(())
}
