//! `parley bench`: load against a running server over real sockets, through the client SDK.
//!
//! Scenario `push-latency`: one sender sends over HTTP at a fixed concurrency into one group or
//! round robin into several (`--groups`); a second user's device, a member of each, holds a
//! WebSocket. For every message the report gives the ack latency (send to ack), the push latency (send to push) and the push lag behind the ack (push
//! arrival minus ack arrival), each as percentiles.
//!
//! The load model of SPEC §13 (`seed-peak`, `saturate`, `hot-conversation`,
//! `reconnect-storm`) runs through simulated devices, each an SDK realtime session; every
//! device's deliveries are checked against the acks through a final sync. `harness.rs` runs
//! their phases; each scenario's file holds only what is its own.
//!
//! Scenario `media` (`media.rs`): attachments' upload and download throughput against the raw
//! disk in the same run, the server's memory under concurrent large uploads, and the media
//! sweep's deletion rate.
//!
//! Scenario `push` (`push_notify.rs`): offline notifications by Web Push to every member device
//! of many groups, none connected, at a push service in this process: notifications per second,
//! commit (ack) to notification, the server's CPU per notification, and the send throughput
//! with and without notifications in the same run.
//!
//! Scenario `search` (`search.rs`, its data in `search_seed.rs`): message search over a log
//! seeded straight into the server's database (1,000,000 messages by default), through HTTP and
//! through `Store::search` in the same run, at 1 and 16 searches in flight; and the send
//! throughput with the search index's trigger on and off.
//!
//! Scenario `e2ee` (`e2ee.rs`): plain sends against encrypted ones (the SDK's `E2ee`: MLS
//! encryption, `POST /mls`) among the same members, and the Commit costs of a 100-device
//! encrypted group: the Commit that adds 99 devices, self-updates, and applying them.

mod connections;
mod cpu;
mod e2ee;
mod fanout;
mod fixtures;
mod large_group;
mod media;
mod online_groups;
mod push_latency;
mod push_notify;
mod report;
mod rss;
mod search;
mod search_seed;
mod sync_feed;

mod baseline;
mod baseline_pages;
mod conclude;
mod devices;
mod gateway_failover;
mod gateways;
mod harness;
mod hot_conversation;
mod load;
mod load_report;
mod plots;
mod progress;
mod reconnect_storm;
mod relations;
mod saturate;
mod seed_peak;
mod server_metrics;
mod target;
mod verify;
mod world;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::target::Target;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Commit-to-push latency: sends over HTTP, pushes over WebSocket.
    PushLatency,
    /// The sync feed of a user with many conversations, and a 10,000-event catch-up.
    SyncFeed,
    /// Fanout to a large group, push or pull: send-to-delivery and server CPU per message.
    LargeGroup,
    /// The seed's peak: 1,250 sends/s over direct chats, groups and one hot group.
    SeedPeak,
    /// The seed's peak twice in one run, plain sends then 20 % reactions and 5 % edits beside
    /// sends: the ack latency of the mixed half against the plain half's.
    Relations,
    /// Closed loop with rising concurrency until throughput stops rising.
    Saturate,
    /// Every sender on one conversation.
    HotConversation,
    /// Every device drops and resyncs at once, under load.
    ReconnectStorm,
    /// Steady load over a group spread over the gateways; one gateway is killed halfway.
    GatewayFailover,
    /// Many idle WebSockets to one server: its memory per connection, the connect rate, and a
    /// push to every one of them.
    Connections,
    /// Push groups of 1,000 online members at a steady rate: server CPU per delivered frame.
    Fanout,
    /// Attachments: upload and download throughput against the raw disk, the server's memory
    /// under concurrent large uploads (--server-pid), and the media sweep's deletion rate.
    Media,
    /// Offline notifications: every member device of many groups, none connected, registered
    /// for Web Push at a push service in this process; notifications per second, commit to
    /// notification, server CPU per notification, sends with and without notifications.
    Push,
    /// Message search over a log seeded into the server's database: HTTP search latency and
    /// throughput beside `Store::search` on the same database, and sends with the index's
    /// trigger on and off.
    Search,
    /// End-to-end encryption: plain against encrypted sends among the same members, and the
    /// Commits of a 100-device encrypted group (adding 99 at once, self-updates, applying them).
    E2ee,
}

/// How the gateways the benchmark starts pass committed events to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GatewayBus {
    /// In-process: one gateway only.
    Local,
    /// PostgreSQL notifications.
    Postgres,
    /// A NATS server (--nats-url).
    Nats,
}

impl GatewayBus {
    /// The value of `parley serve --bus`.
    pub fn as_arg(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Postgres => "postgres",
            Self::Nats => "nats",
        }
    }
}

#[derive(Args)]
pub struct BenchArgs {
    /// Base URL of the server, e.g. http://127.0.0.1:8080; repeat for several gateways of one
    /// deployment: the devices of the load-model scenarios are spread over them round robin
    /// (the other scenarios use the first).
    #[arg(
        long,
        required_unless_present = "gateways",
        conflicts_with = "gateways"
    )]
    pub url: Vec<String>,
    /// The server's admin token: the benchmark creates its own users and devices. Generated
    /// when absent and the benchmark starts the gateways itself (--gateways).
    #[arg(
        long,
        env = "PARLEY_ADMIN_TOKEN",
        hide_env_values = true,
        required_unless_present = "gateways"
    )]
    pub admin_token: Option<String>,
    /// Start this many `parley serve` processes on --database-url (one database) instead of
    /// benchmarking --url, and stop them at the end; gateway-failover needs them.
    #[arg(long, requires = "database_url", value_parser = clap::value_parser!(u32).range(1..=gateways::GATEWAYS_MAX))]
    pub gateways: Option<u32>,
    /// Bus of the gateways started with --gateways; `local` only for one.
    #[arg(long, value_enum, default_value = "nats")]
    pub bus: GatewayBus,
    /// NATS server of the gateways started with --gateways --bus nats.
    #[arg(long, env = "PARLEY_NATS_URL", default_value = gateways::NATS_URL_DEFAULT)]
    pub nats_url: String,
    /// Lease of the gateways started with --gateways (passed as PARLEY_GATEWAY_LEASE_MS): short,
    /// so the routes of a killed gateway are reaped within the run.
    #[arg(long, default_value_t = gateways::LEASE_MS_DEFAULT)]
    pub gateway_lease_ms: u64,
    #[arg(long, value_enum, default_value = "push-latency")]
    pub scenario: Scenario,
    /// Messages to send.
    #[arg(long, default_value_t = 10_000)]
    pub messages: usize,
    /// Sends in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// push-latency: run once at one send in flight, then at --concurrency, and report both
    /// with `throughput_ratio_to_one_in_flight` (how much concurrent sends gain, on any store).
    #[arg(long)]
    pub versus_one_in_flight: bool,
    /// Group conversations the push-latency sends are spread over, round robin. One is a
    /// single hot conversation (in PostgreSQL every send waits for the same row lock); several
    /// show the store's ceiling across conversations.
    #[arg(long, default_value_t = 1)]
    pub groups: usize,
    /// Conversations of the reading user (sync-feed).
    #[arg(long, default_value_t = 1_000)]
    pub conversations: usize,
    /// Messages already in each conversation before measuring (sync-feed).
    #[arg(long, default_value_t = 50)]
    pub backlog: usize,
    /// Directory for report.json.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    #[command(flatten)]
    pub large_group: large_group::LargeGroupArgs,
    #[command(flatten)]
    pub fanout: FanoutArgs,
    #[command(flatten)]
    pub media: media::MediaArgs,
    #[command(flatten)]
    pub push: push_notify::PushArgs,
    #[command(flatten)]
    pub search: search::SearchArgs,
    #[command(flatten)]
    pub e2ee: e2ee::E2eeArgs,
    /// Seconds of load (load-model scenarios).
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Sends per second, open loop: latency counts from each send's scheduled time. Each
    /// scenario has its own default; for hot-conversation it switches from closed to open loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// PostgreSQL server for the raw-transaction baseline; it runs in a scratch database that
    /// is created there and dropped afterwards. With --gateways, also the gateways' database.
    /// For sync-feed, the server's own database: the catch-up's pages are read there raw.
    #[arg(long, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Users to create (scenario default when absent).
    #[arg(long)]
    pub users: Option<usize>,
    /// Devices online (scenario default when absent).
    #[arg(long)]
    pub online: Option<usize>,
    /// Senders of hot-conversation, each one member of the conversation (closed loop: one
    /// send in flight each).
    #[arg(long, default_value_t = 16)]
    pub senders: usize,
    /// Highest concurrency saturate tries (the baseline opens as many PostgreSQL connections).
    #[arg(long, default_value_t = 64)]
    pub max_concurrency: usize,
    /// Seed of the random choices (who talks to whom, who sends).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The options of the connections and fanout scenarios; their socket count is `--online`.
#[derive(Args, Debug, Clone)]
pub struct FanoutArgs {
    /// Members of each push group, every one with a device online (connections, fanout).
    #[arg(long, default_value_t = 1_000)]
    pub group_size: usize,
    /// Pushes to every connection, each one message into every group at once (connections).
    #[arg(long, default_value_t = 20)]
    pub push_rounds: usize,
    /// WebSocket handshakes in flight at once (connections, fanout).
    #[arg(long, default_value_t = 64)]
    pub connect_concurrency: usize,
}

/// Runs the scenario against --url, or against gateways it starts (--gateways), which are
/// stopped afterwards whatever the outcome.
pub async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let target = Target::resolve(&args).await?;
    let outcome = run(&args, &target).await;
    target.stop().await;
    outcome
}

async fn run(args: &BenchArgs, t: &Target) -> anyhow::Result<()> {
    match args.scenario {
        Scenario::PushLatency => push_latency::run(args, t).await,
        Scenario::SyncFeed => sync_feed::run(args, t).await,
        Scenario::LargeGroup => large_group::run(args, t).await,
        Scenario::SeedPeak => harness::run(args, t, &seed_peak::SeedPeak).await,
        Scenario::Relations => harness::run(args, t, &relations::Relations).await,
        Scenario::Saturate => harness::run(args, t, &saturate::Saturate).await,
        Scenario::HotConversation => {
            harness::run(args, t, &hot_conversation::HotConversation).await
        }
        Scenario::ReconnectStorm => harness::run(args, t, &reconnect_storm::ReconnectStorm).await,
        Scenario::GatewayFailover => {
            harness::run(args, t, &gateway_failover::GatewayFailover).await
        }
        Scenario::Connections => connections::run(args, t).await,
        Scenario::Fanout => fanout::run(args, t).await,
        Scenario::Media => media::run(args, t).await,
        Scenario::Push => push_notify::run(args, t).await,
        Scenario::Search => search::run(args, t).await,
        Scenario::E2ee => e2ee::run(args, t).await,
    }
}
