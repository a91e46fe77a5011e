//! A realtime session given two gateways of one PostgreSQL database (`parley serve --bus
//! postgres`, real processes): when the gateway its socket is on dies (SIGKILL), the session
//! reconnects to the other, catches up every event sent meanwhile with no gap and no repeat,
//! and the sends that were unacked when the gateway died are each stored and delivered once,
//! under their own `client_msg_id`. With one URL the session stays on its gateway, as before:
//! it sees nothing written through the other until its own comes back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use parley_client::{Client, Delivery, Event, NewConversation, Realtime, RealtimeOptions};
use parley_testkit::{parley_binary, ServerProcess};
use tokio::sync::watch;

use crate::deliveries::{next_delivery, quiet, wait_for, DELIVERY_WAIT_MS};

/// Tasks sending on the session, each one message at a time.
const SENDERS_LEN: usize = 4;
/// Sends acked by A before it is killed.
const ACKED_BEFORE_KILL: usize = 20;
/// Sends acked after the kill before the senders stop.
const ACKED_AFTER_KILL: usize = 20;
/// Messages the other user sends through the surviving gateway while the session moves.
const MEANWHILE_LEN: usize = 5;
/// How long a session must stay without an event that must not reach it: several reconnect
/// attempts (200 ms, 400 ms, 800 ms apart at first).
const UNREACHED_MS: u64 = 2_000;
/// How long to watch for a repeat once everything arrived.
const QUIET_PERIOD_MS: u64 = 500;

/// Reads deliveries until the cursor of `conv_id` reached `head`; answers the events of
/// `conv_id` and the other deliveries, in the order they came.
async fn take_through(
    rt: &mut Realtime,
    conv_id: &str,
    head: i64,
) -> Result<(Vec<Event>, Vec<Delivery>)> {
    let mut events: Vec<Event> = Vec::new();
    let mut others = Vec::new();
    while events.last().map_or(0, |e| e.seq) < head {
        let next = next_delivery(rt).await.with_context(|| {
            let last = events.last().map(|e| e.seq);
            format!("waiting for seq {head} of {conv_id}, last delivered {last:?}")
        })?;
        match next {
            Delivery::Event(e) if e.conv_id == conv_id => events.push(e.event),
            other => others.push(other),
        }
    }
    Ok((events, others))
}

fn seqs(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

/// Whether `gateway` (as the session reports it) is `base_url`.
fn is_at(gateway: &str, base_url: &str) -> bool {
    gateway.trim_end_matches('/') == base_url.trim_end_matches('/')
}

async fn head_of(client: &Client, conv_id: &str) -> Result<i64> {
    Ok(client.get_conversation(conv_id).await?.head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateways_session_moves_on_and_misses_nothing() -> Result<()> {
    let mut nodes = ServerProcess::start_gateways(parley_binary(), 2).await;
    let urls: Vec<String> = nodes.iter().map(|n| n.base_url().to_owned()).collect();
    let ana = nodes[0].user_with_device("ana").await;
    let ben = nodes[0].user_with_device("ben").await;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();

    let options = RealtimeOptions::default().with_gateways(urls.clone());
    let mut rt = Realtime::connect(&ana, options).await?;
    // The session starts at a random gateway: A is whichever it is on, B the other.
    let a = urls
        .iter()
        .position(|u| is_at(rt.gateway().as_str(), u))
        .with_context(|| format!("the session is on {}, not on {urls:?}", rt.gateway()))?;
    let b = 1 - a;
    let ana_b = ana.with_base_url(&urls[b])?;
    let ben_b = ben.with_base_url(&urls[b])?;
    let mut delivered = Vec::new();
    rt.track(conv, chat.epoch, 0);
    delivered.extend(take_through(&mut rt, conv, 2).await?.0);
    // Before the kill, a message written through B reaches the session on A over the bus.
    let before = ben_b.send(conv, "ben-before", "before").await?;
    delivered.extend(take_through(&mut rt, conv, before.seq).await?.0);

    // Senders on the session write one message after the other, each acked before the next,
    // and A dies in the middle of their stream: the sends in flight then were written and
    // never answered (committed or not), and those after it wait for the new connection.
    // Each is resent with its key until acked.
    let (acked, mut acked_rx) = watch::channel(0usize);
    let acked = Arc::new(acked);
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..SENDERS_LEN)
        .map(|sender| {
            let (handle, conv) = (rt.handle(), conv.to_owned());
            let (acked, stop) = (acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut acks = Vec::new();
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = format!("ana-{sender}-{i}");
                    let started = Instant::now();
                    let ack = handle.send(&conv, &key, "during the failover").await;
                    acked.send_modify(|n| *n += 1);
                    acks.push((key, started, ack, Instant::now()));
                }
                acks
            })
        })
        .collect();
    let wait = Duration::from_millis(DELIVERY_WAIT_MS);
    tokio::time::timeout(wait, acked_rx.wait_for(|n| *n >= ACKED_BEFORE_KILL))
        .await
        .context("the senders did not get going")??;
    let killed_at = Instant::now();
    nodes[a].kill();
    for i in 0..MEANWHILE_LEN {
        ben_b
            .send(conv, &format!("ben-meanwhile-{i}"), "meanwhile")
            .await?;
    }
    // The senders go on through B for a while, then stop.
    let resumed = *acked_rx.borrow() + ACKED_AFTER_KILL;
    tokio::time::timeout(wait, acked_rx.wait_for(|n| *n >= resumed))
        .await
        .context("the senders did not resume on B")??;
    stop.store(true, Ordering::SeqCst);
    let mut acks = HashMap::new();
    // Sends issued before the kill and acked after it: unacked when A died, then resent.
    let mut unacked_at_kill = 0;
    for sender in senders {
        for (key, started, ack, finished) in sender.await? {
            let ack = ack.with_context(|| format!("the send of {key}"))?;
            if started < killed_at && finished > killed_at {
                unacked_at_kill += 1;
            }
            acks.insert(key, ack);
        }
    }
    ensure!(unacked_at_kill >= 1, "no send was in flight when A died");
    let resent_after_commit = acks.values().filter(|ack| ack.dup).count();

    let head = head_of(&ana_b, conv).await?;
    let (events, notices) = take_through(&mut rt, conv, head).await?;
    delivered.extend(events);
    let caught_up = killed_at.elapsed();
    quiet(&mut rt, QUIET_PERIOD_MS).await?;
    ensure!(
        is_at(rt.gateway().as_str(), &urls[b]) && rt.is_connected(),
        "the session is on {} (connected: {}), not on B {}",
        rt.gateway(),
        rt.is_connected(),
        urls[b]
    );
    ensure!(
        notices
            .iter()
            .any(|d| matches!(d, Delivery::Disconnected { .. }))
            && notices.contains(&Delivery::Reconnected),
        "{notices:?}"
    );

    // Exactly the log, in order, each event once: no gap, no repeat.
    let log = ana_b.all_events(conv).await?;
    ensure!(
        seqs(&delivered) == seqs(&log),
        "delivered {:?}, log {:?}",
        seqs(&delivered),
        seqs(&log)
    );
    ensure!(
        seqs(&log) == (1..=head).collect::<Vec<_>>(),
        "{:?}",
        seqs(&log)
    );
    // Each send once in the log, at the seq of its ack, under its own key.
    for (key, ack) in &acks {
        let stored: Vec<i64> = log
            .iter()
            .filter(|e| e.client_msg_id.as_deref() == Some(key.as_str()))
            .map(|e| e.seq)
            .collect();
        ensure!(
            stored == [ack.seq],
            "{key}: acked {ack:?}, stored at {stored:?}"
        );
    }
    let meanwhile = log
        .iter()
        .filter(|e| {
            e.client_msg_id
                .as_deref()
                .is_some_and(|k| k.starts_with("ben-meanwhile-"))
        })
        .count();
    ensure!(meanwhile == MEANWHILE_LEN, "{meanwhile}");
    println!(
        "failover: {} sends by {SENDERS_LEN} senders, {unacked_at_kill} unacked when A was \
         killed ({resent_after_commit} of them committed by A and acked by B as dup); \
         {} events delivered once each; caught up on B {} ms after the kill",
        acks.len(),
        delivered.len(),
        caught_up.as_millis()
    );
    rt.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_url_the_session_waits_for_its_gateway_to_return() -> Result<()> {
    let mut nodes = ServerProcess::start_gateways(parley_binary(), 2).await;
    let (a_url, b_url) = (
        nodes[0].base_url().to_owned(),
        nodes[1].base_url().to_owned(),
    );
    let ana = nodes[0].user_with_device("ana").await;
    let ben = nodes[0].user_with_device("ben").await;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    let ben_b = ben.with_base_url(&b_url)?;

    // No gateways given: the client's own base URL (A), as without the option.
    let mut rt = Realtime::connect(&ana, RealtimeOptions::default()).await?;
    ensure!(is_at(rt.gateway().as_str(), &a_url), "{}", rt.gateway());
    rt.track(conv, chat.epoch, 0);
    take_through(&mut rt, conv, 2).await?;

    nodes[0].kill();
    let lost = wait_for(&mut rt, |d| !matches!(d, Delivery::Event(_))).await?;
    ensure!(matches!(lost, Delivery::Disconnected { .. }), "{lost:?}");
    let sent = ben_b.send(conv, "ben-while-a-is-down", "x").await?;
    // B is up and holds the event, but the session knows only A: nothing arrives.
    quiet(&mut rt, UNREACHED_MS).await?;
    ensure!(!rt.is_connected() && is_at(rt.gateway().as_str(), &a_url));

    nodes[0].restart().await;
    let (events, notices) = take_through(&mut rt, conv, sent.seq).await?;
    ensure!(seqs(&events) == [sent.seq], "{:?}", seqs(&events));
    ensure!(notices.contains(&Delivery::Reconnected), "{notices:?}");
    ensure!(is_at(rt.gateway().as_str(), &a_url), "{}", rt.gateway());
    rt.close().await;
    Ok(())
}
