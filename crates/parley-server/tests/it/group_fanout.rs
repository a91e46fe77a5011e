//! Group fanout over real sockets (chapter 08): pull groups get coalesced hints instead of
//! events, and a group switches to pull at the join that reaches the threshold.

use std::time::{Duration, Instant};

use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_client::{DeliveryMode, NewConversation};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);
/// Messages of the burst; they commit far faster than one per hint interval.
const BURST_MESSAGES: i64 = 40;
/// How much two hints' arrival times may fall short of the interval through delivery jitter
/// on a busy test machine. The coalescing itself is checked exactly, on a paused clock, in
/// `gateway::hints`.
const JITTER_MS: u64 = 100;

async fn ready(ws: &mut Ws) -> Result<()> {
    ws.send(json!({"type": "ping", "req_id": "ready"})).await?;
    ws.next_of("pong", WAIT).await?;
    Ok(())
}

/// Every frame that arrives until one satisfies `last`, then whatever follows within `quiet`,
/// each with its arrival time.
async fn frames_until(
    ws: &mut Ws,
    last: impl Fn(&Value) -> bool,
    quiet: Duration,
) -> Result<Vec<(Instant, Value)>> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let v = ws
            .next_json(left)
            .await?
            .with_context(|| format!("the awaited frame never came; saw {seen:?}"))?;
        let done = last(&v);
        seen.push((Instant::now(), v));
        if done {
            break;
        }
    }
    while let Some(v) = ws.next_json(quiet).await? {
        seen.push((Instant::now(), v));
    }
    Ok(seen)
}

/// The hints of `conv` among `frames`: arrival time and head.
fn hints_of(frames: &[(Instant, Value)], conv: &str) -> Vec<(Instant, i64)> {
    frames
        .iter()
        .filter(|(_, v)| v["type"] == "hint" && v["conv_id"] == conv)
        .filter_map(|(at, v)| Some((*at, v["head"].as_i64()?)))
        .collect()
}

fn is_hint(v: &Value, conv: &str, head: i64) -> bool {
    v["type"] == "hint" && v["conv_id"] == conv && v["head"] == head
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_08_pull_group_hints_coalesced
);
/// 08-pull-group-hints-coalesced: a burst into a pull group reaches each device as a few
/// `hint` frames and no `event` frame; the heads go forward, the last one is the head after
/// the burst, hints are about one interval apart, and every device (two of one user here)
/// gets its own. The device then pulls every message with `sync`. A push group beside it still
/// gets full events, and a lone message after a quiet interval is hinted at once.
async fn check_08_pull_group_hints_coalesced(store: StoreKind) -> Result<()> {
    let config = ServerConfig::default();
    let interval = Duration::from_millis(config.hint_interval_ms);
    let server = TestServer::start_on(store, config).await;
    let ana = server.user_with_device("u-ana").await;
    let ben1 = server.user_with_device("u-ben").await;
    let ben2 = server.device("u-ben", "d2").await;
    ana.create_conversation(
        &NewConversation::group(["u-ben"])
            .with_conv_id("c-pull")
            .with_delivery_mode(DeliveryMode::Pull),
    )
    .await?;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-push"))
        .await?;
    let mut sender = Ws::connect(server.base_url(), ana.token()).await?;
    let mut ws1 = Ws::connect(server.base_url(), ben1.token()).await?;
    let mut ws2 = Ws::connect(server.base_url(), ben2.token()).await?;
    for ws in [&mut sender, &mut ws1, &mut ws2] {
        ready(ws).await?;
    }

    // Readers timestamp frames as they arrive, while the burst is sent.
    let head = 2 + BURST_MESSAGES;
    let watch = |mut ws: Ws| {
        tokio::spawn(async move {
            let frames = frames_until(&mut ws, |v| is_hint(v, "c-pull", head), 2 * interval).await;
            frames.map(|f| (ws, f))
        })
    };
    let (watch1, watch2) = (watch(ws1), watch(ws2));

    // The burst, pipelined on one socket.
    for i in 0..BURST_MESSAGES {
        sender
            .send(json!({"type": "send", "req_id": i, "conv_id": "c-pull",
                         "client_msg_id": format!("m-{i}"), "body": format!("burst {i}")}))
            .await?;
    }
    let mut acked = 0;
    while acked < BURST_MESSAGES {
        let ack = sender.next_of("ack", WAIT).await?;
        ensure!(ack["dup"] == false, "burst ack {ack}");
        acked += 1;
    }
    let (mut ws1, frames1) = watch1.await??;
    let (mut ws2, frames2) = watch2.await??;
    for (name, frames) in [("d1", frames1), ("d2", frames2)] {
        let events: Vec<&Value> = frames
            .iter()
            .map(|(_, v)| v)
            .filter(|v| v["type"] == "event")
            .collect();
        ensure!(
            events.is_empty(),
            "{name}: events in a pull group: {events:?}"
        );
        let hints = hints_of(&frames, "c-pull");
        let heads: Vec<i64> = hints.iter().map(|(_, h)| *h).collect();
        ensure!(
            heads.windows(2).all(|w| w[0] < w[1]) && heads.last() == Some(&head),
            "{name}: heads {heads:?}, expected increasing up to {head}"
        );
        ensure!(
            (heads.len() as i64) < BURST_MESSAGES,
            "{name}: {} hints for {BURST_MESSAGES} messages: not coalesced",
            heads.len()
        );
        // One hint per interval at most: n hints span at least (n - 1) intervals.
        let span = hints[hints.len() - 1].0 - hints[0].0;
        let allowed =
            1 + (span + Duration::from_millis(JITTER_MS)).as_millis() / interval.as_millis().max(1);
        ensure!(
            heads.len() as u128 <= allowed,
            "{name}: {} hints within {span:?} at a {interval:?} interval (heads {heads:?})",
            heads.len()
        );
        println!(
            "{name}: {} hints for {BURST_MESSAGES} messages over {span:?}: heads {heads:?}",
            heads.len()
        );
    }

    // The device pulls what the hint announced.
    ws1.send(json!({"type": "sync", "req_id": "s", "conv_id": "c-pull", "after": 2, "limit": 500}))
        .await?;
    let page = ws1.next_of("ack", WAIT).await?;
    let bodies: Vec<&str> = page["events"]
        .as_array()
        .context("events")?
        .iter()
        .filter_map(|e| e["body"].as_str())
        .collect();
    ensure!(
        bodies.len() as i64 == BURST_MESSAGES
            && bodies.first() == Some(&"burst 0")
            && page["head"] == head,
        "pulled {} bodies, head {}",
        bodies.len(),
        page["head"]
    );

    // A push group still gets the full event.
    ana.send("c-push", "p-1", "pushed").await?;
    let push = ws1.next_of("event", WAIT).await?;
    ensure!(
        push["event"]["conv_id"] == "c-push" && push["event"]["body"] == "pushed",
        "push group: {push}"
    );

    // After a quiet interval, a lone message is hinted at once, not at the interval's end.
    tokio::time::sleep(2 * interval).await;
    let sent = Instant::now();
    ana.send("c-pull", "m-lone", "lone").await?;
    let hint = ws2.next_of("hint", WAIT).await?;
    let latency = sent.elapsed();
    ensure!(
        hint["head"] == head + 1,
        "lone hint {hint}, expected head {}",
        head + 1
    );
    println!("lone message: hint after {latency:?} (interval {interval:?})");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_08_threshold_switches_to_pull_ws
);
/// 08-threshold-switches-to-pull over sockets: a group of two with threshold 3 pushes full
/// events; the join of the third member switches it to pull in the store and in the gateway's
/// member cache, so the join itself and every later event reach the devices as hints.
async fn check_08_threshold_switches_to_pull_ws(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(
        store,
        ServerConfig {
            pull_threshold: 3,
            ..ServerConfig::default()
        },
    )
    .await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    server.user_with_device("u-cai").await;
    let created = ana
        .create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-grow"))
        .await?;
    ensure!(
        created.delivery_mode == DeliveryMode::Push,
        "two members: {:?}",
        created.delivery_mode
    );
    let mut ws = Ws::connect(server.base_url(), ben.token()).await?;
    ready(&mut ws).await?;

    ana.send("c-grow", "m-1", "while push").await?; // 3
    let push = ws.next_of("event", WAIT).await?;
    ensure!(
        push["event"]["seq"] == 3 && push["event"]["body"] == "while push",
        "push before the threshold: {push}"
    );

    let join = ana.add_member("c-grow", "u-cai").await?.seq; // 4
    ensure!(join == 4, "join seq {join}");
    let view = ana.get_conversation("c-grow").await?;
    ensure!(
        view.delivery_mode == DeliveryMode::Pull,
        "three members: {:?}",
        view.delivery_mode
    );
    ana.send("c-grow", "m-2", "after the switch").await?; // 5
    let frames = frames_until(
        &mut ws,
        |v| is_hint(v, "c-grow", 5),
        Duration::from_millis(300),
    )
    .await?;
    let events: Vec<&Value> = frames
        .iter()
        .map(|(_, v)| v)
        .filter(|v| v["type"] == "event")
        .collect();
    ensure!(events.is_empty(), "events after the switch: {events:?}");
    let heads: Vec<i64> = hints_of(&frames, "c-grow")
        .iter()
        .map(|(_, h)| *h)
        .collect();
    ensure!(
        heads.first() == Some(&4) && heads.last() == Some(&5),
        "hints after the switch: {heads:?}"
    );
    Ok(())
}
