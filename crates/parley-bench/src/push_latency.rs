//! The push-latency scenario.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use parley_client::{AdminClient, NewConversation};
use tokio::sync::{Mutex, Semaphore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::report::{micros_histogram, percentiles_ms};
use super::BenchArgs;

/// A pushed or sent message: its conversation and seq.
type MsgKey = (String, i64);

/// How long the receiver may trail the last ack before the run counts pushes as lost.
const DRAIN_TIMEOUT_MS: u64 = 10_000;

pub async fn run(args: &BenchArgs) -> Result<()> {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let admin = AdminClient::new(&args.url, &args.admin_token)?;
    let (sender_id, receiver_id) = (format!("bench-s-{tag}"), format!("bench-r-{tag}"));
    for user in [&sender_id, &receiver_id] {
        admin
            .create_user(user, None)
            .await
            .context("creating a benchmark user")?;
    }
    let sender = admin.device_client(&admin.create_device(&sender_id, "d1").await?);
    let receiver_token = admin.create_device(&receiver_id, "d1").await?;
    let conversations = args.groups.max(1);
    let mut conv_ids = Vec::with_capacity(conversations);
    for c in 0..conversations {
        let conv_id = format!("bench-{tag}-{c}");
        sender
            .create_conversation(
                &NewConversation::group([receiver_id.as_str()]).with_conv_id(&conv_id),
            )
            .await?;
        conv_ids.push(conv_id);
    }

    // The receiver records when each seq's push arrives.
    let ws_url = format!(
        "{}/v1/ws",
        args.url.trim_end_matches('/').replacen("http", "ws", 1)
    );
    let mut req = ws_url.into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {receiver_token}").parse()?);
    let (mut ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .context("receiver WebSocket")?;
    let pushes: Arc<Mutex<HashMap<MsgKey, Instant>>> = Arc::default();
    let recorder = {
        let pushes = pushes.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = ws.next().await {
                let at = Instant::now();
                let Message::Text(t) = msg else { continue };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(t.as_str()) else {
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
    tokio::time::sleep(Duration::from_millis(200)).await;

    let limit = Arc::new(Semaphore::new(args.concurrency.max(1)));
    // Each acked send: its key, when it was sent and when its ack arrived.
    let sends: Arc<Mutex<Vec<(MsgKey, Instant, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.messages);
    for i in 0..args.messages {
        let permit = limit.clone().acquire_owned().await?;
        let conv_id = conv_ids[i % conversations].clone();
        let (sender, sends) = (sender.clone(), sends.clone());
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ack = sender
                .send_with_retry(&conv_id, &format!("m-{i}"), "benchmark message body")
                .await;
            let acked = Instant::now();
            drop(permit);
            if let Ok(ack) = ack {
                sends.lock().await.push(((conv_id, ack.seq), start, acked));
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed();
    let deadline = Instant::now() + Duration::from_millis(DRAIN_TIMEOUT_MS);
    let sent = sends.lock().await.len();
    while pushes.lock().await.len() < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    recorder.abort();

    let (mut ack_h, mut push_h, mut lag_h) = (
        micros_histogram()?,
        micros_histogram()?,
        micros_histogram()?,
    );
    let pushes = pushes.lock().await;
    let mut lost = 0u64;
    for (key, start, acked) in sends.lock().await.iter() {
        ack_h.record((*acked - *start).as_micros().max(1) as u64)?;
        match pushes.get(key) {
            Some(pushed) => {
                push_h.record(pushed.saturating_duration_since(*start).as_micros().max(1) as u64)?;
                lag_h.record(pushed.saturating_duration_since(*acked).as_micros().max(1) as u64)?;
            }
            None => lost += 1,
        }
    }
    if sent == 0 {
        bail!("no send was acked");
    }
    let report = serde_json::json!({
        "scenario": "push-latency",
        "messages": args.messages,
        "sends_acked": sent,
        "concurrency": args.concurrency,
        "groups": conversations,
        "duration_s": elapsed.as_secs_f64(),
        "throughput_per_s": sent as f64 / elapsed.as_secs_f64(),
        "pushes_missing": lost,
        "ack_latency_ms": percentiles_ms(&ack_h),
        "push_latency_ms": percentiles_ms(&push_h),
        "push_after_ack_ms": percentiles_ms(&lag_h),
    });
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    println!("report written to {}", path.display());
    Ok(())
}
