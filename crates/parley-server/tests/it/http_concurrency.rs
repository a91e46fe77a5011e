//! The first seed's concurrency checks through the HTTP server (not the store): concurrent
//! identical sends resolve to one row, and concurrent distinct sends leave a gapless log. The
//! checks' logic is `parley_verify`'s (`parley verify` runs the same against a deployment); on
//! PostgreSQL they also count rows by SQL.

use anyhow::Result;
use parley_testkit::{test_on_both_stores, StoreKind};

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    check_04_concurrent_replay_one_row_http
);
/// 04-concurrent-replay-one-row over HTTP: 32 identical sends of one device at once.
async fn check_04_concurrent_replay_one_row_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "04-concurrent-replay-one-row").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    check_04_seq_gapless_http
);
/// 04-seq-gapless over HTTP: 200 distinct sends at once from four members.
async fn check_04_seq_gapless_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "04-seq-gapless").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    check_04_mixed_replays_and_distinct_sends_http
);
/// Replays and distinct sends mixed at once: each request key still maps to exactly one event
/// and the log stays gapless.
async fn check_04_mixed_replays_and_distinct_sends_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "04-mixed-replays-and-distinct-sends").await
}
