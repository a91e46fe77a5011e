//! The realtime session against a real server on a fresh PostgreSQL database: pushes reach
//! every device, requests are answered over the socket, and a device that missed pushes ends
//! with exactly the log, in order, each event once.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use parley_client::{
    code, Client, ClientError, Delivery, Event, NewConversation, Realtime, RealtimeOptions,
    StopReason,
};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

use crate::deliveries::{next_delivery, quiet, wait_for, DELIVERY_WAIT_MS};

/// Reads deliveries until `want` events of `conv_id` arrived; the other deliveries are returned
/// alongside, in the order they came.
async fn collect_events(
    rt: &mut Realtime,
    conv_id: &str,
    want: usize,
) -> Result<(Vec<Event>, Vec<Delivery>)> {
    let mut events = Vec::new();
    let mut others = Vec::new();
    while events.len() < want {
        let next = next_delivery(rt)
            .await
            .with_context(|| format!("waiting for event {} of {want}", events.len() + 1))?;
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

async fn connect(client: &Client) -> Result<Realtime> {
    Ok(Realtime::connect(client, RealtimeOptions::default()).await?)
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pushes_reach_every_device_in_order
);
async fn pushes_reach_every_device_in_order(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana1 = server.user_with_device("ana").await;
    let ana2 = server.device("ana", "d2").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana1
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();

    let mut rt_ana1 = connect(&ana1).await?;
    let mut rt_ana2 = connect(&ana2).await?;
    let mut rt_ben = connect(&ben).await?;
    for rt in [&rt_ana1, &rt_ana2, &rt_ben] {
        rt.track(conv, chat.epoch, 0);
    }
    // Tracking from 0 catches up what existed before: ana sees both joins, ben only his own.
    ensure!(seqs(&collect_events(&mut rt_ana1, conv, 2).await?.0) == [1, 2]);
    ensure!(seqs(&collect_events(&mut rt_ana2, conv, 2).await?.0) == [1, 2]);
    ensure!(seqs(&collect_events(&mut rt_ben, conv, 1).await?.0) == [2]);

    let ack = rt_ana1.send(conv, "m-1", "hello").await?;
    ensure!(ack.seq == 3 && !ack.dup, "{ack:?}");
    let again = rt_ana1.send(conv, "m-1", "hello").await?;
    ensure!(
        again.dup && again.seq == 3 && again.message_id == ack.message_id,
        "{again:?}"
    );
    let e = rt_ana1.send(conv, "m-1", "other").await.unwrap_err();
    ensure!(
        e.code() == Some(code::IDEMPOTENCY_MISMATCH) && e.status() == Some(409),
        "{e}"
    );
    rt_ben.send(conv, "b-1", "hi ana").await?;
    rt_ana2.send(conv, "m-2", "from the tablet").await?;

    for rt in [&mut rt_ana1, &mut rt_ana2, &mut rt_ben] {
        let (events, _) = collect_events(rt, conv, 3).await?;
        ensure!(seqs(&events) == [3, 4, 5], "{:?}", seqs(&events));
        let bodies: Vec<_> = events.iter().map(|e| e.body.as_deref()).collect();
        ensure!(
            bodies == [Some("hello"), Some("hi ana"), Some("from the tablet")],
            "{bodies:?}"
        );
        ensure!(rt.cursor(conv) == Some((chat.epoch, 5)));
    }
    // The replayed send was not pushed a second time.
    quiet(&mut rt_ana1, 300).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    read_positions_reach_the_users_other_devices
);
async fn read_positions_reach_the_users_other_devices(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana1 = server.user_with_device("ana").await;
    let ana2 = server.device("ana", "d2").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana1
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    ben.send(conv, "b-1", "one").await?;
    ben.send(conv, "b-2", "two").await?;

    let rt_ana1 = connect(&ana1).await?;
    let mut rt_ana2 = connect(&ana2).await?;
    rt_ana1.ping().await?;
    rt_ana2.ping().await?;
    let ack = rt_ana1.mark_read(conv, 4).await?;
    ensure!(ack.read_seq == 4, "{ack:?}");
    let d = wait_for(&mut rt_ana2, |d| matches!(d, Delivery::Read { .. })).await?;
    ensure!(
        d == Delivery::Read {
            conv_id: conv.to_owned(),
            read_seq: 4
        },
        "{d:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_device_that_missed_pushes_ends_with_exactly_the_log
);
/// 07-sdk-fills-gap: a device misses the pushes of 50 messages while its connection is down;
/// after reconnecting it ends with exactly the log, and a send made while it was away is
/// answered once the connection is back.
async fn a_device_that_missed_pushes_ends_with_exactly_the_log(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana1 = server.user_with_device("ana").await;
    let ana2 = server.device("ana", "d2").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana1
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    ben.send(conv, "b-0", "before").await?;

    // The pause before reconnecting is at least 2.5 s: the sends below happen while no
    // connection exists, so their pushes are lost for this device.
    let options = RealtimeOptions {
        reconnect_backoff_first_ms: 5_000,
        ..RealtimeOptions::default()
    };
    let mut rt = Realtime::connect(&ana1, options).await?;
    rt.track(conv, chat.epoch, 0);
    ensure!(seqs(&collect_events(&mut rt, conv, 3).await?.0) == [1, 2, 3]);

    rt.handle().reconnect().await?;
    let mut sends = Vec::new();
    for i in 0..50 {
        let (client, key, body) = if i % 2 == 0 {
            (ana2.clone(), format!("a-{i}"), format!("tablet {i}"))
        } else {
            (ben.clone(), format!("b-{i}"), format!("ben {i}"))
        };
        let conv = conv.to_owned();
        sends.push(tokio::spawn(async move {
            client.send_with_retry(&conv, &key, &body).await
        }));
    }
    for send in sends {
        send.await??;
    }
    ensure!(
        rt.cursor(conv) == Some((chat.epoch, 3)),
        "pushes arrived while the connection was down: {:?}",
        rt.cursor(conv)
    );
    let handle = rt.handle();
    let conv_owned = conv.to_owned();
    let while_away =
        tokio::spawn(async move { handle.send(&conv_owned, "a-away", "sent while away").await });

    let (events, others) = collect_events(&mut rt, conv, 51).await?;
    ensure!(
        matches!(
            others.as_slice(),
            [Delivery::Disconnected { .. }, Delivery::Reconnected, ..]
        ),
        "{others:?}"
    );
    let ack = while_away.await??;
    ensure!(ack.seq == 54 && !ack.dup, "{ack:?}");

    let log = ana1.all_events(conv).await?;
    let expected: Vec<Event> = log.into_iter().filter(|e| e.seq > 3).collect();
    ensure!(
        seqs(&events) == seqs(&expected),
        "got {:?}, log {:?}",
        seqs(&events),
        seqs(&expected)
    );
    ensure!(
        events == expected,
        "the delivered events differ from the log"
    );
    ensure!(rt.cursor(conv) == Some((chat.epoch, 54)));
    quiet(&mut rt, 300).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_reader_that_falls_behind_still_gets_exactly_the_log
);
/// An app that stops reading: the session stops reading the socket instead of buffering, and
/// once the app reads again it gets exactly the log. Should the server cut the slow reader off
/// meanwhile (4008), the session reconnects and resyncs; the app sees the same events either way.
async fn a_reader_that_falls_behind_still_gets_exactly_the_log(store: StoreKind) -> Result<()> {
    const MESSAGES: i64 = 200;
    let config = ServerConfig {
        outbound_queue_len_max: 4,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    let options = RealtimeOptions {
        delivery_queue_len_max: 2,
        ..RealtimeOptions::default()
    };
    let mut rt = Realtime::connect(&ben, options).await?;
    rt.track(conv, chat.epoch, 2);
    rt.ping().await?;

    let body = "x".repeat(1024);
    for i in 0..MESSAGES {
        ana.send_with_retry(conv, &format!("m-{i}"), &body).await?;
    }
    let (events, _) = collect_events(&mut rt, conv, MESSAGES as usize).await?;
    ensure!(
        seqs(&events) == (3..3 + MESSAGES).collect::<Vec<_>>(),
        "{:?}",
        seqs(&events)
    );
    ensure!(rt.cursor(conv) == Some((chat.epoch, 2 + MESSAGES)));
    quiet(&mut rt, 300).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_push_for_an_untracked_conversation_starts_tracking_it
);
async fn a_push_for_an_untracked_conversation_starts_tracking_it(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let mut rt = connect(&ben).await?;
    rt.ping().await?;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    ana.send(conv, "m-1", "first").await?;
    ana.send(conv, "m-2", "second").await?;
    // The join pushed at creation starts tracking; everything after it follows in order.
    let (events, _) = collect_events(&mut rt, conv, 3).await?;
    ensure!(seqs(&events) == [2, 3, 4], "{:?}", seqs(&events));
    ensure!(rt.cursor(conv) == Some((chat.epoch, 4)));
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_push_beyond_a_gap_is_preceded_by_the_missing_events
);
/// A push far beyond the cursor is preceded by every event in between, fetched page by page.
async fn a_push_beyond_a_gap_is_preceded_by_the_missing_events(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    for i in 0..45 {
        ana.send(conv, &format!("m-{i}"), &format!("message {i}"))
            .await?;
    }
    let options = RealtimeOptions {
        auto_track_full: true,
        gap_fill_page_len: 10,
        ..RealtimeOptions::default()
    };
    let mut rt = Realtime::connect(&ben, options).await?;
    rt.ping().await?;
    let ack = ana.send(conv, "m-last", "last").await?;
    ensure!(ack.seq == 48, "{ack:?}");

    let (events, _) = collect_events(&mut rt, conv, 47).await?;
    ensure!(events == ben.all_events(conv).await?, "{:?}", seqs(&events));
    ensure!(rt.cursor(conv) == Some((chat.epoch, 48)));
    quiet(&mut rt, 300).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    refusals_come_back_with_their_code
);
async fn refusals_come_back_with_their_code(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let rt = connect(&ana).await?;
    let e = rt.send("nowhere", "m-1", "hello").await.unwrap_err();
    ensure!(
        e.code() == Some(code::NOT_MEMBER) && e.status() == Some(404),
        "{e}"
    );
    let e = rt.mark_read("nowhere", 1).await.unwrap_err();
    ensure!(e.code() == Some(code::NOT_MEMBER), "{e}");

    let bad = server.client("not-a-token");
    let e = Realtime::connect(&bad, RealtimeOptions::default())
        .await
        .unwrap_err();
    ensure!(
        e.status() == Some(401) && e.code() == Some(code::UNAUTHENTICATED),
        "{e}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_newer_connection_of_the_device_kicks_the_session_for_good
);
async fn a_newer_connection_of_the_device_kicks_the_session_for_good(
    store: StoreKind,
) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let mut old = connect(&ana).await?;
    old.ping().await?;
    let new = connect(&ana).await?;

    ensure!(wait_for(&mut old, |_| true).await? == Delivery::Kicked);
    let end = tokio::time::timeout(Duration::from_millis(DELIVERY_WAIT_MS), old.next()).await?;
    ensure!(end.is_none(), "{end:?}");
    ensure!(old.handle().stop_reason() == Some(StopReason::Kicked));
    let e = old.ping().await.unwrap_err();
    ensure!(
        matches!(
            e,
            ClientError::SessionStopped {
                reason: StopReason::Kicked
            }
        ),
        "{e}"
    );
    // The old session did not come back and push the new one out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    new.ping().await?;
    new.close().await;
    ensure!(new.handle().stop_reason() == Some(StopReason::Closed));
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_revoked_device_stops
);
async fn a_revoked_device_stops(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let mut rt = connect(&ana).await?;
    rt.ping().await?;
    server
        .admin()
        .revoke_device("ana", parley_testkit::TEST_DEVICE_ID)
        .await?;
    ensure!(wait_for(&mut rt, |_| true).await? == Delivery::Revoked);
    ensure!(rt.handle().stop_reason() == Some(StopReason::Revoked));
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    typing_and_presence_reach_the_other_member
);
/// The session delivers a co-member's presence and typing, and `typing` sends one; the
/// presence endpoint fills the initial view.
async fn typing_and_presence_reach_the_other_member(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    let mut rt_ben = connect(&ben).await?;
    rt_ben.ping().await?;

    let rt_ana = connect(&ana).await?;
    let d = wait_for(&mut rt_ben, |d| matches!(d, Delivery::Presence { .. })).await?;
    ensure!(
        d == Delivery::Presence {
            user_id: "ana".into(),
            online: true,
            last_seen: None
        },
        "{d:?}"
    );
    let seen = ben.presence(&["ana", "ghost"]).await?;
    ensure!(
        seen.len() == 1 && seen[0].user_id == "ana" && seen[0].online,
        "{seen:?}"
    );

    rt_ana.typing(conv).await?;
    let d = wait_for(&mut rt_ben, |d| matches!(d, Delivery::Typing { .. })).await?;
    ensure!(
        d == Delivery::Typing {
            conv_id: conv.to_owned(),
            user_id: "ana".into(),
            expires_ms: 5_000
        },
        "{d:?}"
    );

    rt_ana.close().await;
    let d = wait_for(&mut rt_ben, |d| matches!(d, Delivery::Presence { .. })).await?;
    ensure!(
        matches!(&d, Delivery::Presence { user_id, online: false, last_seen: Some(_) }
            if user_id == "ana"),
        "{d:?}"
    );
    Ok(())
}
