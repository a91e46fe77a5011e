//! The sync-feed scenario: what a device pays to learn what changed and to catch up.
//!
//! A reader belongs to `--conversations` groups with `--backlog` unread messages each (written
//! through the normal send path). Measured: the full feed (no token) and the incremental feed
//! after 100 conversations changed, each repeated; then the catch-up of the 10,000 events
//! written into those 100 conversations (events-after in pages of 500 per changed
//! conversation), repeated from the same starting state.

use std::time::Instant;

use anyhow::{ensure, Result};
use hdrhistogram::Histogram;
use parley_client::{
    Client, Conversation, EventsPage, NewConversation, Realtime, RealtimeHandle, RealtimeOptions,
};
use serde_json::{json, Value};

use crate::baseline_pages::{PageRead, RawPages};
use crate::fixtures::{bounded, run_tag, user_with_device};
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::target::Target;
use crate::BenchArgs;

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

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let world = seed(args, target).await?;
    let full = full_feed(args, &world).await?;
    let changed = incremental_feed(&world, &full.token).await?;
    let catch_up = catch_up(args, &world, &changed.conversations).await?;
    let report = json!({
        "scenario": "sync-feed",
        "conversations": world.convs.len(),
        "backlog_per_conversation": args.backlog,
        "seed_s": world.seed_s,
        "full_feed_ms": percentiles_ms(&full.latency),
        "changed_conversations": changed.conversations.len(),
        "incremental_feed_ms": percentiles_ms(&changed.latency),
    });
    publish(&args.out, &merged(report, catch_up.report()))
}

/// `report` with the fields of `more` added.
fn merged(mut report: Value, more: Value) -> Value {
    if let (Some(into), Value::Object(more)) = (report.as_object_mut(), more) {
        into.extend(more);
    }
    report
}

/// The reader, the writer and the reader's conversations, seeded with the backlog.
struct World {
    reader: Client,
    reader_id: String,
    writer: Client,
    convs: Vec<String>,
    seed_s: f64,
}

async fn seed(args: &BenchArgs, target: &Target) -> Result<World> {
    let tag = run_tag(8);
    let admin = target.admin()?;
    let (reader_id, writer_id) = (format!("sync-r-{tag}"), format!("sync-w-{tag}"));
    let reader = admin.device_client(&user_with_device(&admin, &reader_id).await?);
    let writer = admin.device_client(&user_with_device(&admin, &writer_id).await?);
    let convs: Vec<String> = (0..args.conversations)
        .map(|i| format!("sync-{tag}-{i}"))
        .collect();
    let seeding = Instant::now();
    bounded(convs.len(), SEED_CONCURRENCY, |i| {
        let req = NewConversation::group([reader_id.as_str()]).with_conv_id(&convs[i]);
        let writer = &writer;
        async move {
            writer.create_conversation(&req).await?;
            Ok(())
        }
    })
    .await?;
    write_messages(&writer, &convs, args.backlog, "b").await?;
    let seed_s = seeding.elapsed().as_secs_f64();
    println!(
        "seeded {} conversations x {} messages in {seed_s:.1} s",
        convs.len(),
        args.backlog
    );
    Ok(World {
        reader,
        reader_id,
        writer,
        convs,
        seed_s,
    })
}

/// `per_conv` messages into each of `convs`, written concurrently.
async fn write_messages(
    writer: &Client,
    convs: &[String],
    per_conv: usize,
    tag: &str,
) -> Result<()> {
    let jobs: Vec<(&str, usize)> = convs
        .iter()
        .flat_map(|c| (0..per_conv).map(move |i| (c.as_str(), i)))
        .collect();
    bounded(jobs.len(), SEED_CONCURRENCY, |i| {
        let (conv, n) = jobs[i];
        async move {
            writer
                .send_with_retry(conv, &format!("{tag}-{n}"), "backlog message")
                .await?;
            Ok(())
        }
    })
    .await?;
    Ok(())
}

/// The full feed, its latency and the token of the last call.
struct FullFeed {
    latency: Histogram<u64>,
    token: String,
}

async fn full_feed(args: &BenchArgs, world: &World) -> Result<FullFeed> {
    let mut latency = micros_histogram()?;
    let mut token = String::new();
    let mut unread_total = 0;
    for _ in 0..FEED_CALLS {
        let started = Instant::now();
        let feed = world.reader.list_conversations(None).await?;
        record(&mut latency, started.elapsed());
        ensure!(
            feed.conversations.len() == world.convs.len(),
            "full feed has {} conversations",
            feed.conversations.len()
        );
        unread_total = feed.conversations.iter().map(|c| c.unread).sum::<i64>();
        token = feed.sync_token;
    }
    ensure!(
        unread_total == (world.convs.len() * args.backlog) as i64,
        "unread total {unread_total}"
    );
    Ok(FullFeed { latency, token })
}

/// The incremental feed after [`CHANGED_CONVERSATIONS`] changed, and what it returned.
struct ChangedFeed {
    latency: Histogram<u64>,
    conversations: Vec<Conversation>,
}

/// 100 conversations change; the incremental feed returns exactly them.
async fn incremental_feed(world: &World, token: &str) -> Result<ChangedFeed> {
    let changed = &world.convs[..CHANGED_CONVERSATIONS.min(world.convs.len())];
    write_messages(&world.writer, changed, MESSAGES_PER_CHANGED, "c").await?;
    let mut latency = micros_histogram()?;
    let mut conversations = Vec::new();
    for _ in 0..FEED_CALLS {
        let started = Instant::now();
        let feed = world.reader.list_conversations(Some(token)).await?;
        record(&mut latency, started.elapsed());
        conversations = feed.conversations;
    }
    ensure!(
        conversations.len() == changed.len(),
        "incremental feed has {} conversations",
        conversations.len()
    );
    Ok(ChangedFeed {
        latency,
        conversations,
    })
}

/// The catch-up's latency over each path, and the events and pages of its last run.
struct CatchUp {
    http: Histogram<u64>,
    ws: Histogram<u64>,
    /// Empty without --database-url.
    raw: Histogram<u64>,
    events: usize,
    pages: usize,
}

impl CatchUp {
    /// The report's fields: latencies, events per second at the median run, and the ratios
    /// of the server's paths to the raw read.
    fn report(&self) -> Value {
        let per_s = |h: &Histogram<u64>| {
            (!h.is_empty()).then(|| self.events as f64 / (h.value_at_quantile(0.5) as f64 / 1e6))
        };
        let (http, ws, raw) = (per_s(&self.http), per_s(&self.ws), per_s(&self.raw));
        let ratio = |path: Option<f64>| Some(path? / raw?);
        json!({
            "catch_up_events": self.events,
            "catch_up_pages": self.pages,
            "catch_up_ms": percentiles_ms(&self.http),
            "catch_up_ws_ms": percentiles_ms(&self.ws),
            "catch_up_raw_ms": (!self.raw.is_empty()).then(|| percentiles_ms(&self.raw)),
            "catch_up_http_events_per_s": http,
            "catch_up_ws_events_per_s": ws,
            "catch_up_raw_events_per_s": raw,
            "catch_up_http_to_raw": ratio(http),
            "catch_up_ws_to_raw": ratio(ws),
        })
    }
}

/// How a catch-up reads its pages through the server.
#[derive(Clone, Copy)]
enum Via<'a> {
    Http(&'a Client),
    Ws(&'a RealtimeHandle),
}

impl Via<'_> {
    async fn page(self, conv: &Conversation, after: i64) -> Result<EventsPage> {
        let (id, limit, epoch) = (conv.conv_id.as_str(), Some(PAGE_LIMIT), Some(conv.epoch));
        Ok(match self {
            Via::Http(client) => client.events_after(id, after, limit, epoch).await?,
            Via::Ws(session) => session.sync(id, after, limit, epoch).await?,
        })
    }
}

/// One catch-up: events-after from each changed conversation's `cursor` to its head. Answers
/// the events and every page read, as the raw baseline replays them.
async fn catch_up_once(
    via: Via<'_>,
    changed: &[Conversation],
    cursor: i64,
) -> Result<(usize, Vec<PageRead>)> {
    let mut events = 0;
    let mut pages = Vec::new();
    for conv in changed {
        let mut after = cursor;
        while after < conv.head {
            let page = via.page(conv, after).await?;
            events += page.events.len();
            pages.push(PageRead {
                conv_id: conv.conv_id.clone(),
                after,
                limit: PAGE_LIMIT,
            });
            ensure!(page.through_seq > after, "no progress at {after}");
            after = page.through_seq;
        }
    }
    Ok((events, pages))
}

/// Events-after from each changed conversation's cursor (the head before the change), over
/// HTTP, over the WebSocket's `sync` frame and, with --database-url, as the raw statement on
/// PostgreSQL; each path once to warm up, then in turns, so that all three see the same load.
async fn catch_up(args: &BenchArgs, world: &World, changed: &[Conversation]) -> Result<CatchUp> {
    let cursor = 2 + args.backlog as i64;
    let realtime = Realtime::connect(&world.reader, RealtimeOptions::default()).await?;
    let session = realtime.handle();
    let mut raw = match &args.database_url {
        Some(url) => Some(RawPages::connect(url, &world.reader_id).await?),
        None => None,
    };
    let mut out = CatchUp {
        http: micros_histogram()?,
        ws: micros_histogram()?,
        raw: micros_histogram()?,
        events: 0,
        pages: 0,
    };
    let expected = CHANGED_CONVERSATIONS * MESSAGES_PER_CHANGED;
    for run in 0..=CATCH_UP_RUNS {
        let measured = run > 0;
        let started = Instant::now();
        let (events, reads) = catch_up_once(Via::Http(&world.reader), changed, cursor).await?;
        if measured {
            record(&mut out.http, started.elapsed());
        }
        ensure!(events == expected, "caught up {events} events over HTTP");
        let started = Instant::now();
        let (ws_events, _) = catch_up_once(Via::Ws(&session), changed, cursor).await?;
        if measured {
            record(&mut out.ws, started.elapsed());
        }
        ensure!(
            ws_events == expected,
            "caught up {ws_events} events over the WebSocket"
        );
        if let Some(raw) = raw.as_mut() {
            let started = Instant::now();
            let raw_events = raw.read_all(&reads).await?;
            if measured {
                record(&mut out.raw, started.elapsed());
            }
            ensure!(raw_events == expected, "read {raw_events} events raw");
        }
        (out.events, out.pages) = (events, reads.len());
    }
    if let Some(raw) = raw {
        raw.close().await;
    }
    session.close().await;
    drop(realtime);
    Ok(out)
}
