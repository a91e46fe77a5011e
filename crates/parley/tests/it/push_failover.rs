//! Notifications across a gateway's death (docs/PUSH.md): two `parley serve` processes share a
//! PostgreSQL store; one is killed with SIGKILL while it sends notifications to a slow push
//! service; the other takes its claims when their lease runs out. Nothing is lost, and nothing
//! is sent twice except a notification that was in flight at the kill.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use parley_client::{Client, NewConversation};
use parley_push::receiver::{Mode, TestPushService};
use parley_testkit::{GatewayOptions, ProcessBus, ServerProcess};

/// Offline devices, one per conversation.
const DEVICES: usize = 24;
/// Rounds of one message per conversation.
const ROUNDS: usize = 6;
/// The push service holds each notification this long, so the killed gateway has some in
/// flight.
const SLOW_MS: u64 = 300;
/// A duplicate may only be a notification whose first copy arrived this close to the kill:
/// sent but not yet reported when the process died.
const IN_FLIGHT_WINDOW: Duration = Duration::from_millis(SLOW_MS + 1_500);
/// The lease the survivor waits out (the shortest a server accepts), plus coalescing.
const SETTLE_WAIT: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_14_dedupe_across_gateway_kill() -> Result<()> {
    let svc = TestPushService::start().await?;
    svc.set_mode(Mode::SlowMs(SLOW_MS));
    let mut options = GatewayOptions::new(ProcessBus::Postgres, "push-gw");
    options.extra_args = [
        "--push-allow-http",
        "--push-coalesce-ms",
        "200",
        "--push-lease-ms",
        "1",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut gateways =
        ServerProcess::start_gateways_with(env!("CARGO_BIN_EXE_parley"), 2, &options).await;
    let admin = gateways[1].admin();
    admin.create_user("u-ana", None).await?;
    let ana_a = admin.device_client(&admin.create_device("u-ana", "d1").await?);
    let ana_b = {
        let token = admin.create_device("u-ana", "d2").await?;
        Client::new(gateways[1].base_url(), &token)?
    };
    let ana_a = Client::new(gateways[0].base_url(), ana_a.token())?;
    for i in 0..DEVICES {
        let user = format!("u-{i}");
        admin.create_user(&user, None).await?;
        let device = admin.device_client(&admin.create_device(&user, "phone").await?);
        let sub = svc.subscribe(&user);
        device
            .register_web_push(&sub.endpoint, &sub.p256dh, &sub.auth)
            .await?;
        ana_b
            .create_conversation(
                &NewConversation::group([user.clone()]).with_conv_id(format!("c-{i}")),
            )
            .await?;
    }

    // Rounds go to the gateway that will die, so its worker wakes first and claims most work.
    let mut kill_at = None;
    for round in 0..ROUNDS {
        let sender = if kill_at.is_none() { &ana_a } else { &ana_b };
        let sends = (0..DEVICES).map(|i| {
            let key = format!("m-{round}-{i}");
            async move { sender.send(&format!("c-{i}"), &key, "hello").await }
        });
        let acks = futures::future::join_all(sends).await;
        if kill_at.is_none() && round >= 1 && !svc.received().is_empty() {
            gateways[0].kill();
            kill_at = Some(Instant::now());
        } else if kill_at.is_some() {
            ensure!(
                acks.iter().all(Result::is_ok),
                "sends to the survivor failed"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let Some(kill_at) = kill_at else {
        anyhow::bail!(
            "no notification before the kill: {} received",
            svc.received().len()
        );
    };

    // The head of each conversation, as the survivor reads it.
    let mut last = BTreeMap::new();
    for i in 0..DEVICES {
        let events = ana_b.all_events(&format!("c-{i}")).await?;
        let seq = events
            .iter()
            .filter(|e| e.body.is_some())
            .map(|e| e.seq)
            .max();
        last.insert(format!("u-{i}"), seq.unwrap_or(0));
    }
    let deadline = Instant::now() + SETTLE_WAIT;
    loop {
        let got = svc.received();
        let done = last.iter().all(|(user, seq)| {
            got.iter()
                .any(|r| &r.name == user && r.payload["seq"].as_i64() == Some(*seq))
        });
        if done {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "not every device was notified of its latest message: {} notifications, want {:?}",
            got.len(),
            last
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let got = svc.received();
    let mut copies: BTreeMap<(String, i64), Vec<Instant>> = BTreeMap::new();
    for r in &got {
        let seq = r.payload["seq"].as_i64().unwrap_or(-1);
        copies.entry((r.name.clone(), seq)).or_default().push(r.at);
    }
    let mut in_flight_dups = 0;
    for ((user, seq), at) in &copies {
        if at.len() > 1 {
            let first = at.iter().min().copied().unwrap_or(kill_at);
            let near_kill = if first > kill_at {
                first - kill_at
            } else {
                kill_at - first
            };
            ensure!(
                at.len() == 2 && near_kill <= IN_FLIGHT_WINDOW,
                "{user}@{seq} notified {} times, first {near_kill:?} from the kill",
                at.len()
            );
            in_flight_dups += 1;
        }
    }
    println!(
        "check_14_dedupe_across_gateway_kill: {} notifications to {DEVICES} devices, {} distinct, \
         {in_flight_dups} sent again after the kill (in flight when it came)",
        got.len(),
        copies.len()
    );
    Ok(())
}
