//! Sends issued while the server is down: the default retry budget (20 s) rides out an outage
//! of five seconds plus the restart, over HTTP (`send_with_retry`) and over the realtime
//! session (`RealtimeHandle::send`), each stored once under its request key. The test prints
//! how long each send took to succeed.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use parley_client::{
    Delivery, NewConversation, Realtime, RealtimeOptions, RETRY_BUDGET_MS_DEFAULT,
};
use parley_testkit::{parley_binary, test_on_both_stores, ServerProcess, StoreKind};

use crate::deliveries::wait_for;

/// How long the server stays down before it is started again.
const OUTAGE_MS: u64 = 5_000;

fn is_notice(d: &Delivery) -> bool {
    !matches!(d, Delivery::Event(_))
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sends_ride_out_a_five_second_outage
);
async fn sends_ride_out_a_five_second_outage(store: StoreKind) -> Result<()> {
    let mut server = ServerProcess::start_on(parley_binary(), store).await;
    let ana = server.user_with_device("ana").await;
    server.user_with_device("ben").await;
    let conv = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?
        .conv_id;
    let mut rt = Realtime::connect(&ana, RealtimeOptions::default()).await?;
    ensure!(rt.is_connected());

    server.kill();
    let down = Instant::now();
    let http = {
        let (ana, conv) = (ana.clone(), conv.clone());
        tokio::spawn(async move {
            let ack = ana.send_with_retry(&conv, "http-1", "over HTTP").await;
            (ack, down.elapsed())
        })
    };
    let realtime = {
        let (handle, conv) = (rt.handle(), conv.clone());
        tokio::spawn(async move {
            let ack = handle.send(&conv, "ws-1", "over the socket").await;
            (ack, down.elapsed())
        })
    };
    let lost = wait_for(&mut rt, is_notice).await?;
    ensure!(matches!(lost, Delivery::Disconnected { .. }), "{lost:?}");
    ensure!(!rt.is_connected());

    tokio::time::sleep(Duration::from_millis(OUTAGE_MS)).await;
    let restarting = Instant::now();
    // No send can succeed before the new process exists; one may succeed before `restart`
    // returns, which waits for the server's readiness answer after it listens.
    let down_at_least = down.elapsed();
    server.restart().await;
    let outage = down.elapsed();
    let restart = restarting.elapsed();
    let (http_ack, http_took) = http.await?;
    let (ws_ack, ws_took) = realtime.await?;
    let http_ack = http_ack.context("send_with_retry")?;
    let ws_ack = ws_ack.context("the realtime send")?;
    println!(
        "{store}: server down {} ms (killed, {OUTAGE_MS} ms, then a restart of {} ms); \
         send_with_retry succeeded {} ms after the kill, the realtime send {} ms after it",
        outage.as_millis(),
        restart.as_millis(),
        http_took.as_millis(),
        ws_took.as_millis()
    );
    let budget = Duration::from_millis(RETRY_BUDGET_MS_DEFAULT);
    for took in [http_took, ws_took] {
        ensure!(
            took >= down_at_least && took < budget,
            "{took:?}: the server was down {down_at_least:?} before its restart began"
        );
    }
    ensure!(wait_for(&mut rt, is_notice).await? == Delivery::Reconnected);
    ensure!(rt.is_connected());

    // Each send is in the log once, at its acked seq, under its own key.
    let log = ana.all_events(&conv).await?;
    for (key, ack) in [("http-1", &http_ack), ("ws-1", &ws_ack)] {
        let stored: Vec<i64> = log
            .iter()
            .filter(|e| e.client_msg_id.as_deref() == Some(key))
            .map(|e| e.seq)
            .collect();
        ensure!(
            stored == [ack.seq],
            "{key}: acked {ack:?}, stored at {stored:?}"
        );
    }
    Ok(())
}
