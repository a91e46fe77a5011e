//! The sync-feed scenario: what a device pays to learn what changed and to catch up.
//!
//! A reader belongs to `--conversations` groups with `--backlog` unread messages each (written
//! through the normal send path). Measured: the full feed (no token) and the incremental feed
//! after 100 conversations changed, each repeated; then the catch-up of the 10,000 events
//! written into those 100 conversations (events-after in pages of 500 per changed
//! conversation), repeated from the same starting state.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use parley_client::{AdminClient, Client, NewConversation};
use tokio::sync::Semaphore;

use super::report::{micros_histogram, percentiles_ms};
use super::BenchArgs;

/// Conversations that change between the two feed calls, and messages written into each:
/// 100 x 100 = the 10,000-event catch-up.
const CHANGED_CONVERSATIONS: usize = 100;
const MESSAGES_PER_CHANGED: usize = 100;
/// Repetitions of each measured call.
const FEED_CALLS: usize = 30;
const CATCH_UP_RUNS: usize = 5;
/// Writes in flight while seeding.
const SEED_CONCURRENCY: usize = 32;
/// The largest page of events-after.
const PAGE_LIMIT: u32 = 500;

async fn bounded<F, Fut>(jobs: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(SEED_CONCURRENCY));
    let mut tasks = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let permit = limit.clone().acquire_owned().await?;
        let fut = f(i);
        tasks.push(tokio::spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

async fn write_messages(
    writer: &Client,
    convs: &[String],
    per_conv: usize,
    tag: &str,
) -> Result<()> {
    let jobs: Vec<(String, usize)> = convs
        .iter()
        .flat_map(|c| (0..per_conv).map(move |i| (c.clone(), i)))
        .collect();
    let jobs = Arc::new(jobs);
    let tag = tag.to_owned();
    bounded(jobs.len(), |i| {
        let (writer, jobs, tag) = (writer.clone(), jobs.clone(), tag.clone());
        async move {
            let (conv, n) = &jobs[i];
            writer
                .send_with_retry(conv, &format!("{tag}-{n}"), "backlog message")
                .await?;
            Ok(())
        }
    })
    .await
}

pub async fn run(args: &BenchArgs) -> Result<()> {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let admin = AdminClient::new(&args.url, &args.admin_token)?;
    let (reader_id, writer_id) = (format!("sync-r-{tag}"), format!("sync-w-{tag}"));
    for user in [&reader_id, &writer_id] {
        admin
            .create_user(user, None)
            .await
            .context("creating a benchmark user")?;
    }
    let reader = admin.device_client(&admin.create_device(&reader_id, "d1").await?);
    let writer = admin.device_client(&admin.create_device(&writer_id, "d1").await?);
    let convs: Vec<String> = (0..args.conversations)
        .map(|i| format!("sync-{tag}-{i}"))
        .collect();
    let seeding = Instant::now();
    {
        let convs = Arc::new(convs.clone());
        let reader_id = reader_id.clone();
        bounded(convs.len(), |i| {
            let (writer, convs, reader_id) = (writer.clone(), convs.clone(), reader_id.clone());
            async move {
                let req = NewConversation::group([reader_id.as_str()]).with_conv_id(&convs[i]);
                writer.create_conversation(&req).await?;
                Ok(())
            }
        })
        .await?;
    }
    write_messages(&writer, &convs, args.backlog, "b").await?;
    let seed_s = seeding.elapsed().as_secs_f64();
    println!(
        "seeded {} conversations x {} messages in {seed_s:.1} s",
        convs.len(),
        args.backlog
    );

    // The full feed.
    let mut full_h = micros_histogram()?;
    let mut token = String::new();
    let mut unread_total = 0;
    for _ in 0..FEED_CALLS {
        let started = Instant::now();
        let feed = reader.list_conversations(None).await?;
        full_h.record(started.elapsed().as_micros().max(1) as u64)?;
        ensure!(
            feed.conversations.len() == convs.len(),
            "full feed has {} conversations",
            feed.conversations.len()
        );
        unread_total = feed.conversations.iter().map(|c| c.unread).sum::<i64>();
        token = feed.sync_token;
    }
    ensure!(
        unread_total == (convs.len() * args.backlog) as i64,
        "unread total {unread_total}"
    );

    // 100 conversations change; the incremental feed returns exactly them.
    let changed: Vec<String> = convs.iter().take(CHANGED_CONVERSATIONS).cloned().collect();
    write_messages(&writer, &changed, MESSAGES_PER_CHANGED, "c").await?;
    let mut since_h = micros_histogram()?;
    let mut feed_changed = Vec::new();
    for _ in 0..FEED_CALLS {
        let started = Instant::now();
        let feed = reader.list_conversations(Some(&token)).await?;
        since_h.record(started.elapsed().as_micros().max(1) as u64)?;
        feed_changed = feed.conversations;
    }
    ensure!(
        feed_changed.len() == changed.len(),
        "incremental feed has {} conversations",
        feed_changed.len()
    );

    // Catch-up: events-after from each conversation's cursor (the head before the change).
    let cursor = 2 + args.backlog as i64;
    let mut catch_h = micros_histogram()?;
    let mut fetched = 0usize;
    let mut pages = 0usize;
    for _ in 0..CATCH_UP_RUNS {
        let started = Instant::now();
        fetched = 0;
        pages = 0;
        for conv in &feed_changed {
            let mut after = cursor;
            while after < conv.head {
                let page = reader
                    .events_after(&conv.conv_id, after, Some(PAGE_LIMIT), Some(conv.epoch))
                    .await?;
                fetched += page.events.len();
                pages += 1;
                ensure!(page.through_seq > after, "no progress at {after}");
                after = page.through_seq;
            }
        }
        catch_h.record(started.elapsed().as_micros().max(1) as u64)?;
    }
    ensure!(
        fetched == CHANGED_CONVERSATIONS * MESSAGES_PER_CHANGED,
        "caught up {fetched} events"
    );

    let report = serde_json::json!({
        "scenario": "sync-feed",
        "conversations": convs.len(),
        "backlog_per_conversation": args.backlog,
        "seed_s": seed_s,
        "full_feed_ms": percentiles_ms(&full_h),
        "changed_conversations": feed_changed.len(),
        "incremental_feed_ms": percentiles_ms(&since_h),
        "catch_up_events": fetched,
        "catch_up_pages": pages,
        "catch_up_ms": percentiles_ms(&catch_h),
    });
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    println!("report written to {}", path.display());
    Ok(())
}
