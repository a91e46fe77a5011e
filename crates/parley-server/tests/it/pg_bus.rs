//! The PostgreSQL event bus between two gateways ("gw-a", "gw-b") on one fresh database.
//! Notifications are per database, so parallel tests never hear each other.
//!
//! These tests live with the server rather than in `parley-bus`: they need the test kit's
//! fresh databases, and the kit depends on the server, which depends on the bus, so a
//! dev-dependency of the bus on the kit would close a cycle.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use chrono::Utc;
use parley_bus::pg::{CancellationToken, PgBus};
use parley_bus::{Committed, EventBus, Notice, Subscription};
use parley_domain::{ConvId, DeviceId, Event, EventKind, UserId};
use parley_testkit::TestDb;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::broadcast::error::TryRecvError;

/// Longest wait for something that normally takes milliseconds.
const ARRIVAL_TIMEOUT_MS: u64 = 10_000;

async fn pool(db: &TestDb) -> Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(2)
        .connect(db.url())
        .await?)
}

/// Two buses on a fresh database; the database goes with the returned `TestDb`, so a test
/// keeps it to the end.
async fn two_gateways() -> Result<(TestDb, PgPool, PgBus, PgBus, CancellationToken)> {
    let db = TestDb::create().await;
    let pool = pool(&db).await?;
    let stop = CancellationToken::new();
    let a = PgBus::start(pool.clone(), "gw-a".into(), stop.clone()).await?;
    let b = PgBus::start(pool.clone(), "gw-b".into(), stop.clone()).await?;
    Ok((db, pool, a, b, stop))
}

fn event(conv: &str, seq: i64) -> Arc<Event> {
    Arc::new(Event {
        conv_id: ConvId::parse(conv).expect("valid conv id"),
        seq,
        kind: EventKind::Msg,
        created_at: Utc::now(),
        message_id: Some(uuid::Uuid::new_v4()),
        sender_user: None,
        sender_device: Some("d1".into()),
        client_msg_id: Some(format!("m-{seq}")),
        body: Some(format!("body {seq}")),
        recalled: false,
        subject_user: None,
        target_seq: None,
        rel: None,
        mls: None,
    })
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout(Duration::from_millis(ARRIVAL_TIMEOUT_MS), f)
        .await
        .with_context(|| format!("{what}: nothing within {ARRIVAL_TIMEOUT_MS} ms"))
}

/// The next committed event or head; a notice in between is an error.
async fn next(sub: &mut Subscription, what: &str) -> Result<Committed> {
    let got = within(what, sub.recv()).await??;
    got.committed()
        .cloned()
        .with_context(|| format!("{what}: a notice instead of an event: {got:?}"))
}

/// `from` announces a marker event; it must be the next thing `sub` gets. Notifications reach
/// a listener in commit order, so whatever was committed before the marker arrives before it.
async fn marker_reaches(from: &PgBus, sub: &mut Subscription) -> Result<()> {
    from.announce(event("c-marker", 1));
    let got = next(sub, "the marker").await?;
    ensure!(
        got.conv_id.as_str() == "c-marker",
        "before the marker: {got:?}"
    );
    Ok(())
}

/// The next notice; an event in between is an error.
async fn next_notice(sub: &mut Subscription, what: &str) -> Result<Notice> {
    let got = within(what, sub.recv()).await??;
    got.notice()
        .cloned()
        .with_context(|| format!("{what}: an event instead of a notice: {got:?}"))
}

async fn stop_both(a: PgBus, b: PgBus, stop: CancellationToken) -> Result<()> {
    stop.cancel();
    within("bus tasks to end", async {
        a.stopped().await;
        b.stopped().await;
    })
    .await
}

#[tokio::test]
async fn a_local_subscriber_gets_the_full_event_at_once() -> Result<()> {
    let (_db, _pool, a, b, stop) = two_gateways().await?;
    let mut sub_a = a.subscribe();
    let sent = event("c-1", 4);
    a.announce(sent.clone());
    // No await in between: delivery on the announcing node does not wait for PostgreSQL.
    let got = sub_a
        .try_recv()
        .context("A's subscriber has nothing right after announce")?;
    let got = got.committed().context("not an event")?;
    ensure!(
        got.conv_id.as_str() == "c-1" && got.head == 4,
        "got {got:?}"
    );
    let payload = got
        .event
        .clone()
        .context("A's own subscriber must get the payload")?;
    ensure!(
        Arc::ptr_eq(&payload, &sent),
        "a copy instead of the announced event"
    );
    stop_both(a, b, stop).await
}

#[tokio::test]
async fn an_announcement_on_a_reaches_b_as_a_head_without_payload() -> Result<()> {
    let (_db, _pool, a, b, stop) = two_gateways().await?;
    let mut sub_b = b.subscribe();
    a.announce(event("c-1", 4));
    let got = next(&mut sub_b, "B's announcement").await?;
    ensure!(got.conv_id.as_str() == "c-1", "conv {}", got.conv_id);
    ensure!(got.head == 4, "head {}", got.head);
    ensure!(
        got.event.is_none(),
        "B must read the log, not get a payload"
    );
    ensure!(b.stats().notifications_received == 1, "{:?}", b.stats());
    stop_both(a, b, stop).await
}

#[tokio::test]
async fn a_gateway_ignores_its_own_notification_coming_back() -> Result<()> {
    let (_db, _pool, a, b, stop) = two_gateways().await?;
    let mut sub_a = a.subscribe();
    let mut sub_b = b.subscribe();
    a.announce(event("c-1", 1));
    ensure!(
        sub_a
            .try_recv()
            .is_ok_and(|x| x.committed().is_some_and(|c| c.event.is_some())),
        "the local delivery"
    );
    next(&mut sub_b, "B's announcement").await?;
    // The notification does come back to A's listener; it must be recognised and dropped.
    within("A to see its own notification", async {
        while a.stats().own_ignored == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    // A marker from B, sent after B heard A, reaches A after anything of A's own that could
    // still come back: it must be the next thing A's subscriber gets.
    marker_reaches(&b, &mut sub_a).await?;
    ensure!(a.stats().notifications_received == 1, "{:?}", a.stats());
    stop_both(a, b, stop).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_1000_over_10_conversations_reaches_b_coalesced_with_every_final_head(
) -> Result<()> {
    const CONVS: i64 = 10;
    const SENDS: i64 = 1_000;
    let (_db, _pool, a, b, stop) = two_gateways().await?;
    let mut sub_b = b.subscribe();
    // Round robin: conversation i gets heads 1..=100, in order, interleaved with the others.
    for n in 0..SENDS {
        a.announce(event(&format!("c-{}", n % CONVS), n / CONVS + 1));
    }
    let final_head = SENDS / CONVS;
    let mut latest: HashMap<String, i64> = HashMap::new();
    let mut received = 0;
    while latest.len() < CONVS as usize || latest.values().any(|&h| h < final_head) {
        let got = next(&mut sub_b, "the final heads on B").await?;
        received += 1;
        let before = latest
            .insert(got.conv_id.to_string(), got.head)
            .unwrap_or(0);
        ensure!(
            got.head > before,
            "{}: head {} after {before}",
            got.conv_id,
            got.head
        );
        ensure!(got.event.is_none(), "B must not get payloads");
    }
    ensure!(
        latest.values().all(|&h| h == final_head),
        "final heads: {latest:?}"
    );
    let stats = a.stats();
    ensure!(
        received < SENDS,
        "{received} announcements reached B: not coalesced"
    );
    ensure!(
        stats.notifications_sent < SENDS as u64,
        "{} notifications for {SENDS} announcements",
        stats.notifications_sent
    );
    ensure!(
        stats.queued == SENDS as u64 && stats.dropped == 0,
        "{stats:?}"
    );
    println!("{SENDS} announcements -> {received} on B; A's bus: {stats:?}");
    stop_both(a, b, stop).await
}

#[tokio::test]
async fn b_reconnects_after_its_listener_connection_is_killed_and_hears_again() -> Result<()> {
    let (_db, pool, a, b, stop) = two_gateways().await?;
    let mut sub_b = b.subscribe();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'parley-listen gw-b'",
    )
    .fetch_all(&pool)
    .await?;
    ensure!(
        killed == vec![true],
        "listener backends terminated: {killed:?}"
    );
    // What A announces while B is away is lost (sync repairs it); keep announcing until B is
    // back and hears one.
    let heard = within("B to hear A after reconnecting", async {
        let mut seq = 0;
        loop {
            seq += 1;
            a.announce(event("c-r", seq));
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(got) = sub_b.try_recv().ok().and_then(|a| a.committed().cloned()) {
                return got;
            }
        }
    })
    .await?;
    ensure!(
        heard.conv_id.as_str() == "c-r" && heard.event.is_none(),
        "{heard:?}"
    );
    ensure!(b.stats().listen_reconnects >= 1, "{:?}", b.stats());
    stop_both(a, b, stop).await
}

#[tokio::test]
async fn the_bus_stops_when_its_shutdown_token_is_cancelled() -> Result<()> {
    let (_db, _pool, a, b, stop) = two_gateways().await?;
    stop_both(a.clone(), b, stop).await?;
    // After the stop, announcing still reaches local subscribers and never blocks.
    let mut sub_a = a.subscribe();
    a.announce(event("c-1", 1));
    ensure!(sub_a.try_recv().is_ok(), "local delivery after stop");
    ensure!(a.stats().dropped == 1, "{:?}", a.stats());
    Ok(())
}

#[tokio::test]
async fn a_read_notice_and_a_revoke_notice_cross_from_a_to_b_and_reach_a_at_once() -> Result<()> {
    let (_db, _pool, a, b, stop) = two_gateways().await?;
    let mut sub_a = a.subscribe();
    let mut sub_b = b.subscribe();
    let ana = UserId::parse("u-ana")?;
    let read = Notice::ReadMoved {
        user_id: ana.clone(),
        conv_id: ConvId::parse("c-1")?,
        read_seq: 4,
        origin_device: DeviceId::parse("phone")?,
    };
    let revoke = Notice::DeviceRevoked {
        user_id: ana,
        device_id: DeviceId::parse("laptop")?,
    };
    a.notify(read.clone());
    a.notify(revoke.clone());
    // A's own subscribers get both at once, without a round trip through PostgreSQL.
    for sent in [&read, &revoke] {
        let got = sub_a
            .try_recv()
            .context("A's subscriber right after notify")?;
        ensure!(got.notice() == Some(sent), "A got {got:?}");
    }
    // B gets both, in the order A made them.
    ensure!(next_notice(&mut sub_b, "the read on B").await? == read);
    ensure!(next_notice(&mut sub_b, "the revoke on B").await? == revoke);
    // And A does not hear its own notices a second time: a marker from B, sent after B heard
    // them, is the next thing A's subscriber gets.
    marker_reaches(&b, &mut sub_a).await?;
    // A counts a notice as sent once `pg_notify` returned, which may be after B received it.
    within("A to count its notices sent", async {
        while a.stats().notices_sent < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    let (sa, sb) = (a.stats(), b.stats());
    ensure!(sa.notices_sent == 2 && sa.notices_lost == 0, "{sa:?}");
    ensure!(
        sb.notices_received == 2 && sb.notices_unknown == 0,
        "{sb:?}"
    );
    match sub_a.try_recv() {
        Err(TryRecvError::Empty) => {}
        other => bail!("A got its own notice back: {other:?}"),
    }
    stop_both(a, b, stop).await
}
