//! The store contract run against PostgreSQL: a fresh database per test.

mod contract;

use std::sync::Arc;

use anyhow::Result;
use parley_store::Store;
use parley_testkit::TestDb;

async fn store() -> Arc<dyn Store> {
    let db = TestDb::create().await;
    Arc::new(db.store().await)
}

#[tokio::test]
async fn check_04_normal_history() -> Result<()> {
    contract::normal_history(&*store().await).await
}

#[tokio::test]
async fn check_04_non_member_rejected() -> Result<()> {
    contract::non_member_rejected(&*store().await).await
}

#[tokio::test]
async fn check_04_unknown_conv_same_error() -> Result<()> {
    contract::unknown_conv_same_error(&*store().await).await
}

#[tokio::test]
async fn check_04_idempotency_mismatch() -> Result<()> {
    contract::idempotency_mismatch(&*store().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_concurrent_replay_one_row() -> Result<()> {
    contract::concurrent_replay_one_row(store().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_seq_gapless() -> Result<()> {
    contract::seq_gapless(store().await).await
}

#[tokio::test]
async fn check_08_leave_closes_interval() -> Result<()> {
    contract::leave_closes_interval(&*store().await).await
}

#[tokio::test]
async fn history_pages_9_8_7_then_6_5_4() -> Result<()> {
    contract::history_pages(&*store().await).await
}

#[tokio::test]
async fn check_09_read_position_monotonic() -> Result<()> {
    contract::read_position_monotonic(&*store().await).await
}

#[tokio::test]
async fn check_05_old_cleanup_keeps_new_route() -> Result<()> {
    contract::old_cleanup_keeps_new_route(&*store().await).await
}

#[tokio::test]
async fn check_11_periods_bound_reads() -> Result<()> {
    contract::periods_bound_reads(&*store().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_conversations_gapless() -> Result<()> {
    contract::many_conversations_gapless(store().await).await
}

#[tokio::test]
async fn tokens_revoke() -> Result<()> {
    contract::tokens_revoke(&*store().await).await
}

#[tokio::test]
async fn check_07_through_seq_skips_invisible() -> Result<()> {
    contract::through_seq_skips_invisible(&*store().await).await
}

#[tokio::test]
async fn check_07_sync_feed_only_changed() -> Result<()> {
    contract::sync_feed_only_changed(&*store().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_09_read_monotonic() -> Result<()> {
    contract::read_monotonic(store().await).await
}

#[tokio::test]
async fn check_09_unread_respects_membership() -> Result<()> {
    contract::unread_respects_membership(&*store().await).await
}

#[tokio::test]
async fn check_09_own_send_advances_read() -> Result<()> {
    contract::own_send_advances_read(&*store().await).await
}
