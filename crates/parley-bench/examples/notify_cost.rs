//! What `pg_notify` inside the send transaction costs, against the after-commit bus.
//!
//! Runs the store's own send transaction (`PgStore::send`: lock the conversation row FOR NO KEY
//! UPDATE, check the request key and the sender's period, insert the event, advance next_seq,
//! commit) from N concurrent clients over many conversations for a fixed time, in three modes:
//!
//! - `none`: no notification at all, the ceiling;
//! - `inline`: `pg_notify` inside every send transaction, as the first seed does, from an
//!   `AFTER INSERT` trigger on `events`;
//! - `after-commit`: [`PgBus`], which notifies after commit, coalesced, from a task of its own.
//!
//! Every mode has the same trigger, so all pay the same trigger call; only in `inline` does it
//! notify. A second bus on the same database listens throughout and counts what arrives, so the
//! notifications are really consumed. Every mode runs on a database of its own, created on the
//! given server, seeded the same way, and dropped after the mode.
//!
//! ```text
//! cargo run --release -p parley-bench --example notify_cost -- \
//!     --database-url postgres://postgres@127.0.0.1:5432/postgres --clients 16 --seconds 10
//! ```

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use parley_bus::pg::{CancellationToken, PgBus};
use parley_bus::EventBus;
use parley_domain::{Body, ClientMsgId, ConvId, ConvKind, DeviceId, UserId};
use parley_store::pg::PgStore;
use parley_store::{NewConversation, SendRequest, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

/// The server the benchmark creates its database on, when none is given.
const DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// Prefix of the benchmark's databases; each is dropped after its mode.
const BENCH_DB_PREFIX: &str = "parley_bench_notify_";
/// The one sender; it is a member of every conversation.
const SENDER: &str = "u-bench";
/// The sender's device.
const DEVICE: &str = "d-bench";
/// Conversations created at once while seeding.
const SEED_CONCURRENCY: usize = 16;
/// Highest latency the histograms record: one minute, in microseconds.
const LATENCY_US_MAX: u64 = 60_000_000;
/// Time given to the listening bus to receive what was sent before its counters are read.
const DRAIN_WAIT_MS: u64 = 1_000;

#[derive(Parser)]
#[command(
    about = "Send throughput without notify, with pg_notify in the transaction, and with the after-commit bus"
)]
struct Args {
    /// PostgreSQL server to create the benchmark database on (only its database name is
    /// replaced).
    #[arg(long, env = "PARLEY_BENCH_DATABASE_URL", default_value = DATABASE_URL_DEFAULT)]
    database_url: String,
    /// Concurrent sending clients, each with its own connection.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Measured duration of each mode.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Unmeasured run before each mode, so caches and connections are warm.
    #[arg(long, default_value_t = 1)]
    warmup_seconds: u64,
    /// Conversations the sends are spread over (uniformly at random).
    #[arg(long, default_value_t = 1_000)]
    conversations: u32,
    /// The modes to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "none,inline,after-commit"
    )]
    modes: Vec<Mode>,
    /// How many times the modes run, one after the other.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// No notification at all.
    None,
    /// `pg_notify` inside every send transaction.
    Inline,
    /// The after-commit bus.
    AfterCommit,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::None => "no notify",
            Mode::Inline => "pg_notify in the transaction",
            Mode::AfterCommit => "after commit, coalesced (PgBus)",
        }
    }
}

struct Outcome {
    commits: u64,
    elapsed: Duration,
    latency_us: Histogram<u64>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.clients == 0 || args.seconds == 0 || args.conversations == 0 {
        bail!("--clients, --seconds and --conversations must be at least 1");
    }
    let server = PgConnectOptions::from_str(&args.database_url).context("--database-url")?;
    let mut admin = PgConnection::connect_with(&server)
        .await
        .context("cannot connect to PostgreSQL")?;
    describe(&mut admin, &args).await?;
    println!(
        "| mode | commits/s | p50 ms | p99 ms | max ms | notifications | heads heard by the peer |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for _ in 0..args.rounds {
        for &mode in &args.modes {
            // A database per mode, so no mode inherits the rows, bloat or statistics of another.
            let name = format!(
                "{BENCH_DB_PREFIX}{}_{:08x}",
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                rand::random::<u32>()
            );
            sqlx::query(&format!("CREATE DATABASE \"{name}\""))
                .execute(&mut admin)
                .await
                .context("cannot create the benchmark database")?;
            let outcome = run_mode(&args, server.clone().database(&name), mode).await;
            let dropped = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut admin)
                .await;
            if let Err(e) = dropped {
                eprintln!("note: could not drop the benchmark database {name}: {e}");
            }
            println!("{}", outcome?);
        }
    }
    Ok(())
}

/// Creates the schema and conversations, warms up, measures one mode; returns its table row.
async fn run_mode(args: &Args, options: PgConnectOptions, mode: Mode) -> Result<String> {
    // One connection per client and one for setup; the buses connect on their own.
    let pool = PgPoolOptions::new()
        .max_connections(args.clients + 1)
        .connect_with(options)
        .await?;
    let store = PgStore::from_pool(pool.clone());
    store.migrate().await?;
    seed(&store, args.conversations).await?;
    sqlx::query(trigger_function(mode)).execute(&pool).await?;
    sqlx::query(
        "CREATE TRIGGER bench_after_insert AFTER INSERT ON events
           FOR EACH ROW EXECUTE FUNCTION bench_after_insert()",
    )
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
    sqlx::query("CHECKPOINT").execute(&pool).await?;

    let stop = CancellationToken::new();
    let bus = PgBus::start(pool.clone(), "bench-sender".into(), stop.clone()).await?;
    let peer = PgBus::start(pool.clone(), "bench-peer".into(), stop.clone()).await?;
    let heard = Arc::new(AtomicU64::new(0));
    let counter = tokio::spawn(count_announcements(peer.subscribe(), heard.clone()));

    if args.warmup_seconds > 0 {
        drive(&store, &bus, args, mode, args.warmup_seconds).await?;
    }
    let sent_before = bus.stats().notifications_sent;
    let received_before = peer.stats().notifications_received;
    let heard_before = heard.load(Ordering::Relaxed);
    let outcome = drive(&store, &bus, args, mode, args.seconds).await?;
    tokio::time::sleep(Duration::from_millis(DRAIN_WAIT_MS)).await;
    let notifications = match mode {
        Mode::None => 0,
        Mode::Inline => peer.stats().notifications_received - received_before,
        Mode::AfterCommit => bus.stats().notifications_sent - sent_before,
    };
    let heard = heard.load(Ordering::Relaxed) - heard_before;
    let dropped = bus.stats().dropped;
    stop.cancel();
    bus.stopped().await;
    peer.stopped().await;
    counter.abort();
    pool.close().await;

    if dropped > 0 {
        eprintln!("note: the bus dropped {dropped} announcements (queue full)");
    }
    let rate = outcome.commits as f64 / outcome.elapsed.as_secs_f64();
    let ms = |q: f64| outcome.latency_us.value_at_quantile(q) as f64 / 1_000.0;
    Ok(format!(
        "| {} | {rate:.0} | {:.2} | {:.2} | {:.1} | {notifications} | {heard} |",
        mode.name(),
        ms(0.50),
        ms(0.99),
        outcome.latency_us.max() as f64 / 1_000.0,
    ))
}

/// The trigger function of `mode`: every mode calls one after each insert into `events`, only
/// `inline` notifies from it, inside the send transaction.
fn trigger_function(mode: Mode) -> &'static str {
    match mode {
        Mode::Inline => {
            "CREATE FUNCTION bench_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               PERFORM pg_notify('parley_events', json_build_object(
                 'origin', 'bench-inline',
                 'heads', json_build_array(json_build_array(NEW.conv_id, NEW.seq)))::text);
               RETURN NULL;
             END $$"
        }
        Mode::None | Mode::AfterCommit => {
            "CREATE FUNCTION bench_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RETURN NULL; END $$"
        }
    }
}

/// One user, and `conversations` groups of which it is the only member, made by the store.
async fn seed(store: &PgStore, conversations: u32) -> Result<()> {
    let sender = UserId::parse(SENDER)?;
    store.create_user(&sender, None).await?;
    futures::stream::iter(1..=conversations)
        .map(|i| {
            let req = NewConversation {
                creator: sender.clone(),
                kind: ConvKind::Group,
                conv_id: Some(conv_id(i)),
                members: Vec::new(),
                title: None,
                delivery_mode: None,
                pull_threshold: 500,
                recall_window_ms: 120_000,
                retention_ms: None,
            };
            async move { store.create_conversation(&req).await.map(|_| ()) }
        })
        .buffer_unordered(SEED_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    Ok(())
}

fn conv_id(i: u32) -> ConvId {
    ConvId::from_trusted(format!("b-{i}"))
}

async fn describe(admin: &mut PgConnection, args: &Args) -> Result<()> {
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut *admin)
        .await?;
    let sync: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut *admin)
        .await?;
    let fsync: String = sqlx::query_scalar("SHOW fsync")
        .fetch_one(&mut *admin)
        .await?;
    println!(
        "PostgreSQL {version} (synchronous_commit={sync}, fsync={fsync}); {} clients over {} \
         conversations, {} s per mode after {} s warm-up, a fresh database per mode, {} round(s)\n",
        args.clients, args.conversations, args.seconds, args.warmup_seconds, args.rounds
    );
    Ok(())
}

async fn count_announcements(mut sub: parley_bus::Subscription, heard: Arc<AtomicU64>) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match sub.recv().await {
            Ok(_) => {
                heard.fetch_add(1, Ordering::Relaxed);
            }
            Err(RecvError::Lagged(n)) => {
                heard.fetch_add(n, Ordering::Relaxed);
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Runs `clients` senders for `seconds` and merges their results.
async fn drive(
    store: &PgStore,
    bus: &PgBus,
    args: &Args,
    mode: Mode,
    seconds: u64,
) -> Result<Outcome> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut clients = Vec::new();
    for client in 0..args.clients {
        let store = store.clone();
        let bus = bus.clone();
        let conversations = args.conversations;
        clients.push(tokio::spawn(async move {
            sender(store, bus, mode, client, conversations, deadline).await
        }));
    }
    let mut commits = 0;
    let mut latency_us = Histogram::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    for c in clients {
        let (n, h) = c.await??;
        commits += n;
        latency_us.add(h)?;
    }
    Ok(Outcome {
        commits,
        elapsed: start.elapsed(),
        latency_us,
    })
}

/// One client: sends until the deadline, one send at a time, to random conversations.
async fn sender(
    store: PgStore,
    bus: PgBus,
    mode: Mode,
    client: u32,
    conversations: u32,
    deadline: Instant,
) -> Result<(u64, Histogram<u64>)> {
    let user = UserId::parse(SENDER)?;
    let device = DeviceId::parse(DEVICE)?;
    let body = Body::parse("hello", 64)?;
    let mut rng = StdRng::seed_from_u64(u64::from(client));
    let mut latency_us = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    let mut n = 0u64;
    let run = rand::random::<u32>();
    while Instant::now() < deadline {
        let req = SendRequest::new(
            conv_id(rng.gen_range(1..=conversations)),
            user.clone(),
            device.clone(),
            ClientMsgId::parse(&format!("k-{run:08x}-{client}-{n}"))?,
            body.clone(),
        );
        let began = Instant::now();
        let outcome = store.send(&req).await?;
        let Some(event) = outcome.event else {
            bail!("send {n} of client {client} was answered as a replay");
        };
        if mode == Mode::AfterCommit {
            bus.announce(Arc::new(event));
        }
        latency_us.saturating_record(began.elapsed().as_micros() as u64);
        n += 1;
    }
    Ok((n, latency_us))
}
