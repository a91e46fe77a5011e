//! Incremental sync against a real server on a fresh PostgreSQL database: the feed lists what
//! changed, a device that was away ends with exactly the log it may see, and read positions
//! made on another device reach it.

use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use futures::stream::{self, StreamExt, TryStreamExt};
use parley_client::{
    Client, Delivery, Event, NewConversation, Realtime, RealtimeOptions, SyncState,
};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

use crate::deliveries::next_delivery;

fn seqs(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

/// `(seq, message_id)` of each event: what identifies it across two reads.
fn keys(events: &[Event]) -> Vec<(i64, Option<String>)> {
    events
        .iter()
        .map(|e| (e.seq, e.message_id.clone()))
        .collect()
}

/// The state's log of `conv_id` is exactly the log the server lets the device's user see:
/// same seqs and message ids, strictly increasing, nothing twice.
async fn ensure_state_matches_server(
    state: &SyncState,
    client: &Client,
    conv_id: &str,
) -> Result<usize> {
    let kept = state
        .events(conv_id)
        .with_context(|| format!("the state does not know {conv_id}"))?;
    ensure!(
        kept.windows(2).all(|w| w[0].seq < w[1].seq),
        "{conv_id}: seqs do not strictly increase: {:?}",
        seqs(kept)
    );
    let visible = client.all_events(conv_id).await?;
    ensure!(
        keys(kept) == keys(&visible),
        "{conv_id}: the state has {:?}, the server shows {:?}",
        seqs(kept),
        seqs(&visible)
    );
    Ok(kept.len())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_07_sync_feed_only_changed_sdk
);
async fn check_07_sync_feed_only_changed_sdk(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let convs: Vec<String> = (0..5).map(|i| format!("g-{i}")).collect();
    for conv_id in &convs {
        ana.create_conversation(&NewConversation::group(["ben"]).with_conv_id(conv_id))
            .await?;
    }

    let mut state = SyncState::new();
    let first = ana.catch_up(&mut state).await?;
    ensure!(
        first.changed == convs && first.listed == 5,
        "first catch-up: {first:?}"
    );
    // Each group holds ana's and ben's joins.
    ensure!(first.events == 10 && first.pages == 5, "{first:?}");
    for conv_id in &convs {
        ensure!(seqs(state.events(conv_id).unwrap_or_default()) == [1, 2]);
        ensure!(state.cursor(conv_id) == Some((1, 2)));
    }
    let token = state
        .token()
        .context("no token after a catch-up")?
        .to_owned();

    for i in 0..3 {
        ben.send_with_retry("g-1", &format!("b1-{i}"), "hi").await?;
    }
    for i in 0..2 {
        ben.send_with_retry("g-3", &format!("b3-{i}"), "hi").await?;
    }
    let second = ana.catch_up(&mut state).await?;
    println!("second catch-up: {second:?}");
    ensure!(second.changed == ["g-1", "g-3"], "{second:?}");
    ensure!(second.events == 5 && second.pages == 2, "{second:?}");
    // The feed may list a conversation where nothing changed, never omit one that did.
    ensure!(second.listed >= 2, "{second:?}");
    ensure!(state.token() != Some(token.as_str()), "the token moves on");
    ensure!(seqs(state.events("g-1").unwrap_or_default()) == [1, 2, 3, 4, 5]);
    ensure!(seqs(state.events("g-3").unwrap_or_default()) == [1, 2, 3, 4]);
    ensure!(state.unread("g-1") == Some(3) && state.unread("g-3") == Some(2));
    ensure!(state.unread("g-0") == Some(0));

    let third = ana.catch_up(&mut state).await?;
    println!("third catch-up: {third:?}");
    ensure!(third.changed.is_empty(), "{third:?}");
    ensure!(third.events == 0 && third.pages == 0, "{third:?}");
    for conv_id in &convs {
        ensure_state_matches_server(&state, &ana, conv_id).await?;
    }
    Ok(())
}

/// Conversations of the offline check, messages per conversation, and where ana's membership
/// changes (indices of the message before which it happens).
const OFFLINE_CONVS: usize = 100;
const OFFLINE_MSGS_PER_CONV: usize = 100;
/// Ana leaves these herself, from her other device, before message 50.
const LEAVE_AT: [(usize, usize); 2] = [(10, 50), (20, 50)];
/// Ben removes ana from this one before message 30 and adds her back before message 70.
const REMOVED: usize = 30;
const REMOVE_AT: usize = 30;
const READD_AT: usize = 70;
/// Conversations written at once; each has two senders, so sends in flight stay within 16.
const WRITERS: usize = 8;

fn offline_conv(i: usize) -> String {
    format!("g-{i:03}")
}

/// Sends messages `range` of `conv_id`: ben the even ones, cai the odd ones, both at once.
async fn send_range(
    ben: &Client,
    cai: &Client,
    conv_id: &str,
    range: std::ops::Range<usize>,
) -> Result<()> {
    let by = |client: &Client, parity: usize| {
        let client = client.clone();
        let range = range.clone();
        async move {
            for k in range.filter(|k| k % 2 == parity) {
                client
                    .send_with_retry(conv_id, &format!("m-{k}"), &format!("message {k}"))
                    .await?;
            }
            anyhow::Ok(())
        }
    };
    let (b, c) = tokio::join!(by(ben, 0), by(cai, 1));
    b.and(c)
}

/// All messages of one conversation, with ana's membership changes at their points.
async fn write_conversation(
    i: usize,
    ana_tablet: &Client,
    ben: &Client,
    cai: &Client,
) -> Result<()> {
    let conv_id = offline_conv(i);
    let all = OFFLINE_MSGS_PER_CONV;
    if let Some(&(_, at)) = LEAVE_AT.iter().find(|(c, _)| *c == i) {
        send_range(ben, cai, &conv_id, 0..at).await?;
        ana_tablet.remove_member(&conv_id, "ana").await?;
        send_range(ben, cai, &conv_id, at..all).await?;
    } else if i == REMOVED {
        send_range(ben, cai, &conv_id, 0..REMOVE_AT).await?;
        ben.remove_member(&conv_id, "ana").await?;
        send_range(ben, cai, &conv_id, REMOVE_AT..READD_AT).await?;
        ben.add_member(&conv_id, "ana").await?;
        send_range(ben, cai, &conv_id, READD_AT..all).await?;
    } else {
        send_range(ben, cai, &conv_id, 0..all).await?;
    }
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_07_offline_device_catches_up
);
async fn check_07_offline_device_catches_up(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ana_tablet = server.device("ana", "tablet").await;
    let ben = server.user_with_device("ben").await;
    let cai = server.user_with_device("cai").await;

    let convs: Vec<String> = (0..OFFLINE_CONVS).map(offline_conv).collect();
    stream::iter(&convs)
        .map(|conv_id| {
            let request = NewConversation::group(["ana", "cai"]).with_conv_id(conv_id);
            let ben = ben.clone();
            async move { ben.create_conversation(&request).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;

    let mut state = SyncState::new();
    let first = ana.catch_up(&mut state).await?;
    // Ana sees her own join (2) and cai's (3) in each group.
    ensure!(
        first.changed.len() == OFFLINE_CONVS && first.events == 2 * OFFLINE_CONVS,
        "first catch-up: changed {}, events {}",
        first.changed.len(),
        first.events
    );

    // The phone is offline from here: no call is made with its token until the catch-up.
    let written = Instant::now();
    stream::iter(0..OFFLINE_CONVS)
        .map(|i| write_conversation(i, &ana_tablet, &ben, &cai))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<_>>()
        .await?;
    let write_ms = written.elapsed().as_millis();

    let started = Instant::now();
    let report = ana.catch_up(&mut state).await?;
    let catch_up_ms = started.elapsed().as_millis();
    println!(
        "offline catch-up: {} messages written in {write_ms} ms; one catch-up: {} conversations \
         listed, {} changed, {} events fetched, {} pages, {catch_up_ms} ms",
        OFFLINE_CONVS * OFFLINE_MSGS_PER_CONV,
        report.listed,
        report.changed.len(),
        report.events,
        report.pages
    );
    ensure!(report.changed == convs, "every conversation changed");
    ensure!(report.truncated.is_empty() && report.epoch_resets.is_empty());
    ensure!(report.unfinished.is_empty() && report.inaccessible.is_empty());

    let mut kept_total = 0;
    for conv_id in &convs {
        kept_total += ensure_state_matches_server(&state, &ana, conv_id).await?;
    }
    // What ana may see, counted from the script: two joins and every message where she stayed;
    // up to and including her leave where she left; her removal, her rejoin and the messages
    // outside the gap where she was removed.
    let msgs = OFFLINE_MSGS_PER_CONV;
    let left: usize = LEAVE_AT.iter().map(|(_, at)| 2 + at + 1).sum();
    let removed = 2 + REMOVE_AT + 1 + 1 + (msgs - READD_AT);
    let stayed = (OFFLINE_CONVS - LEAVE_AT.len() - 1) * (2 + msgs);
    let expected_total = stayed + left + removed;
    ensure!(
        kept_total == expected_total,
        "the state holds {kept_total} events, the script lets ana see {expected_total}"
    );
    ensure!(
        report.events == expected_total - first.events,
        "fetched {} events, {} were new",
        report.events,
        expected_total - first.events
    );
    // One page per conversation suffices: none has more than 500 new visible events.
    ensure!(report.pages == OFFLINE_CONVS, "{} pages", report.pages);

    // Invisible ranges are passed by the cursor, not left as gaps.
    let removed_conv = offline_conv(REMOVED);
    let conv = state.conversation(&removed_conv).context("removed conv")?;
    ensure!(
        conv.cursor == conv.head && conv.head == (3 + msgs + 2) as i64,
        "{conv:?}"
    );
    let (left_conv, at) = LEAVE_AT[0];
    let conv = state
        .conversation(&offline_conv(left_conv))
        .context("left")?;
    ensure!(
        conv.cursor == (3 + at + 1) as i64 && conv.head == conv.cursor,
        "a former member's head is her leave event: {conv:?}"
    );

    let again = ana.catch_up(&mut state).await?;
    ensure!(again.changed.is_empty() && again.events == 0, "{again:?}");
    ensure!(
        catch_up_ms < 30_000,
        "the catch-up took {catch_up_ms} ms on its own"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_07_read_state_across_devices_sdk
);
async fn check_07_read_state_across_devices_sdk(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ana_tablet = server.device("ana", "tablet").await;
    let ben = server.user_with_device("ben").await;
    let g = "g-read";
    ana.create_conversation(&NewConversation::group(["ben"]).with_conv_id(g))
        .await?;

    let mut state = SyncState::new();
    ana.catch_up(&mut state).await?;
    ensure!(state.read_seq(g) == Some(0) && state.unread(g) == Some(0));

    for k in 3..=5 {
        ben.send_with_retry(g, &format!("b-{k}"), "hi").await?;
    }
    // Ana's own message (6) moves her read position to it: never unread.
    ana_tablet.send_with_retry(g, "a-6", "mine").await?;
    for k in 7..=8 {
        ben.send_with_retry(g, &format!("b-{k}"), "hi").await?;
    }
    let report = ana.catch_up(&mut state).await?;
    ensure!(report.changed == [g] && report.events == 6, "{report:?}");
    ensure!(
        state.read_seq(g) == Some(6) && state.unread(g) == Some(2),
        "read {:?}, unread {:?}",
        state.read_seq(g),
        state.unread(g)
    );

    // Read on the tablet; the phone learns it from the feed.
    ana_tablet.mark_read(g, 7).await?;
    let report = ana.catch_up(&mut state).await?;
    ensure!(report.changed == [g] && report.events == 0, "{report:?}");
    ensure!(state.read_seq(g) == Some(7) && state.unread(g) == Some(1));

    // The same over the phone's realtime session: a `read` delivery, then a pushed event.
    let mut rt = Realtime::connect(&ana, RealtimeOptions::default()).await?;
    state.track_in(&rt.handle());
    // Answered once the connection is registered, so the read below is pushed to it.
    rt.ping().await?;
    ana_tablet.mark_read(g, 8).await?;
    loop {
        let delivery = next_delivery(&mut rt).await?;
        ensure!(
            !state.apply_delivery(&delivery),
            "no catch-up due: {delivery:?}"
        );
        if matches!(delivery, Delivery::Read { .. }) {
            break;
        }
    }
    ensure!(state.read_seq(g) == Some(8) && state.unread(g) == Some(0));
    ensure!(!state.apply_read(g, 5), "a read position never moves back");
    ensure!(state.read_seq(g) == Some(8));

    let ack = ben.send_with_retry(g, "b-9", "hi").await?;
    loop {
        let delivery = next_delivery(&mut rt).await?;
        ensure!(
            !state.apply_delivery(&delivery),
            "no catch-up due: {delivery:?}"
        );
        match delivery {
            Delivery::Event(e) if e.seq == ack.seq => break,
            Delivery::Event(e) => bail!("unexpected event {e:?}"),
            _ => {}
        }
    }
    ensure!(state.cursor(g) == Some((1, ack.seq)));
    rt.close().await;

    // The pushed event is not fetched again; the count comes from the server.
    let report = ana.catch_up(&mut state).await?;
    ensure!(report.events == 0 && report.pages == 0, "{report:?}");
    ensure!(state.read_seq(g) == Some(8) && state.unread(g) == Some(1));

    // Another own message: read through it, nothing unread.
    ana_tablet.send_with_retry(g, "a-10", "mine again").await?;
    let report = ana.catch_up(&mut state).await?;
    ensure!(report.events == 1, "{report:?}");
    ensure!(state.read_seq(g) == Some(10) && state.unread(g) == Some(0));
    ensure_state_matches_server(&state, &ana, g).await?;
    Ok(())
}
