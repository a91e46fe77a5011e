//! The push-latency scenario: one sender sends over HTTP at a fixed concurrency, round robin
//! into `--groups` groups; a second user's device, a member of each, holds a WebSocket and
//! records when each message's push arrives.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::StreamExt;
use parley_client::{Client, NewConversation};
use serde_json::{json, Value};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use crate::fixtures::{self, run_tag, user_with_device};
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::target::Target;
use crate::BenchArgs;

/// A pushed or sent message: its conversation and seq.
type MsgKey = (String, i64);
/// Arrival of each pushed message.
type Pushes = Arc<Mutex<HashMap<MsgKey, Instant>>>;

/// How long the receiver may trail the last ack before the run counts pushes as lost.
const DRAIN_TIMEOUT_MS: u64 = 10_000;
/// How often the drain looks at the push count.
const DRAIN_POLL_MS: u64 = 20;
/// Time given to the receiver's connection to be registered before the first send.
const CONNECT_SETTLE_MS: u64 = 200;

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    if !args.versus_one_in_flight {
        return publish(&args.out, &measure(args, target, args.concurrency).await?);
    }
    // One in flight first, then --concurrency, each with its own users and groups, so the
    // second run replays none of the first's request keys.
    let one = measure(args, target, 1).await?;
    let mut report = measure(args, target, args.concurrency).await?;
    let rate = |r: &Value| r["throughput_per_s"].as_f64().unwrap_or(0.0);
    let ratio = rate(&report) / rate(&one);
    report["throughput_ratio_to_one_in_flight"] = json!(ratio);
    report["one_in_flight"] = one;
    publish(&args.out, &report)
}

/// One run of the scenario at `concurrency` sends in flight; answers its report.
async fn measure(args: &BenchArgs, target: &Target, concurrency: usize) -> Result<Value> {
    let world = setup(args, target).await?;
    let (pushes, recorder) = listen(target.url(), &world.receiver_token).await?;
    let sent = send(args, &world, concurrency).await?;
    drain(&pushes, sent.acks.len()).await;
    recorder.abort();
    let pushed = pushes.lock().await;
    report(args, &world, &sent, concurrency, &pushed)
}

/// The sender, the receiver's token and the groups they share.
struct World {
    sender: Client,
    receiver_token: String,
    conv_ids: Vec<String>,
}

async fn setup(args: &BenchArgs, target: &Target) -> Result<World> {
    let tag = run_tag(8);
    let admin = target.admin()?;
    let (sender_id, receiver_id) = (format!("bench-s-{tag}"), format!("bench-r-{tag}"));
    let sender = admin.device_client(&user_with_device(&admin, &sender_id).await?);
    let receiver_token = user_with_device(&admin, &receiver_id).await?;
    let mut conv_ids = Vec::with_capacity(args.groups.max(1));
    for c in 0..args.groups.max(1) {
        let conv_id = format!("bench-{tag}-{c}");
        sender
            .create_conversation(
                &NewConversation::group([receiver_id.as_str()]).with_conv_id(&conv_id),
            )
            .await?;
        conv_ids.push(conv_id);
    }
    Ok(World {
        sender,
        receiver_token,
        conv_ids,
    })
}

/// The receiver's socket, recording when each seq's push arrives.
async fn listen(base_url: &str, token: &str) -> Result<(Pushes, JoinHandle<()>)> {
    let mut ws = fixtures::connect(base_url, token).await?;
    let pushes: Pushes = Arc::default();
    let recorder = {
        let pushes = pushes.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = ws.next().await {
                let at = Instant::now();
                let Message::Text(t) = msg else { continue };
                let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else {
                    continue;
                };
                if v["type"] == "event" && v["event"]["kind"] == "msg" {
                    if let (Some(conv), Some(seq)) =
                        (v["event"]["conv_id"].as_str(), v["event"]["seq"].as_i64())
                    {
                        pushes.lock().await.insert((conv.to_owned(), seq), at);
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(CONNECT_SETTLE_MS)).await;
    Ok((pushes, recorder))
}

/// Each acked send: its key, when it was sent and when its ack arrived.
struct Sent {
    acks: Vec<(MsgKey, Instant, Instant)>,
    elapsed: Duration,
}

/// `--messages` sends, `concurrency` in flight, round robin over the groups.
async fn send(args: &BenchArgs, world: &World, concurrency: usize) -> Result<Sent> {
    let limit = Arc::new(Semaphore::new(concurrency.max(1)));
    let acks: Arc<Mutex<Vec<(MsgKey, Instant, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.messages);
    for i in 0..args.messages {
        let permit = limit.clone().acquire_owned().await?;
        let conv_id = world.conv_ids[i % world.conv_ids.len()].clone();
        let (sender, acks) = (world.sender.clone(), acks.clone());
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ack = sender
                .send_with_retry(&conv_id, &format!("m-{i}"), "benchmark message body")
                .await;
            let acked = Instant::now();
            drop(permit);
            if let Ok(ack) = ack {
                acks.lock().await.push(((conv_id, ack.seq), start, acked));
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed();
    let acks = std::mem::take(&mut *acks.lock().await);
    Ok(Sent { acks, elapsed })
}

/// Waits until every acked send was pushed, or for at most [`DRAIN_TIMEOUT_MS`].
async fn drain(pushes: &Pushes, sent: usize) {
    let deadline = Instant::now() + Duration::from_millis(DRAIN_TIMEOUT_MS);
    while pushes.lock().await.len() < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
}

fn report(
    args: &BenchArgs,
    world: &World,
    sent: &Sent,
    concurrency: usize,
    pushes: &HashMap<MsgKey, Instant>,
) -> Result<Value> {
    if sent.acks.is_empty() {
        bail!("no send was acked");
    }
    let (mut ack_h, mut push_h, mut lag_h) = (
        micros_histogram()?,
        micros_histogram()?,
        micros_histogram()?,
    );
    let mut lost = 0u64;
    for (key, start, acked) in &sent.acks {
        record(&mut ack_h, *acked - *start);
        match pushes.get(key) {
            Some(pushed) => {
                record(&mut push_h, pushed.saturating_duration_since(*start));
                record(&mut lag_h, pushed.saturating_duration_since(*acked));
            }
            None => lost += 1,
        }
    }
    let acked = sent.acks.len();
    Ok(json!({
        "scenario": "push-latency",
        "messages": args.messages,
        "sends_acked": acked,
        "concurrency": concurrency,
        "groups": world.conv_ids.len(),
        "duration_s": sent.elapsed.as_secs_f64(),
        "throughput_per_s": acked as f64 / sent.elapsed.as_secs_f64(),
        "pushes_missing": lost,
        "ack_latency_ms": percentiles_ms(&ack_h),
        "push_latency_ms": percentiles_ms(&push_h),
        "push_after_ack_ms": percentiles_ms(&lag_h),
    }))
}
