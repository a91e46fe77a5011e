//! `parley bench`: load against a running server over real sockets, through the client SDK.
//!
//! Scenario `push-latency`: one sender sends over HTTP at a fixed concurrency into one group or
//! round robin into several (`--groups`); a second user's device, a member of each, holds a
//! WebSocket. For every message the report gives the ack latency (send to ack), the push latency (send to push) and the push lag behind the ack (push
//! arrival minus ack arrival), each as percentiles.

mod large_group;
mod push_latency;
mod report;
mod sync_feed;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Commit-to-push latency: sends over HTTP, pushes over WebSocket.
    PushLatency,
    /// The sync feed of a user with many conversations, and a 10,000-event catch-up.
    SyncFeed,
    /// Fanout to a large group, push or pull: send-to-delivery and server CPU per message.
    LargeGroup,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Base URL of the server, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,
    /// The server's admin token: the benchmark creates its own users and devices.
    #[arg(long, env = "PARLEY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: String,
    #[arg(long, value_enum, default_value = "push-latency")]
    pub scenario: Scenario,
    /// Messages to send.
    #[arg(long, default_value_t = 10_000)]
    pub messages: usize,
    /// Sends in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
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
}

pub async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    match args.scenario {
        Scenario::PushLatency => push_latency::run(&args).await,
        Scenario::SyncFeed => sync_feed::run(&args).await,
        Scenario::LargeGroup => large_group::run(&args).await,
    }
}
