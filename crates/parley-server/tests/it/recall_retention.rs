//! Recall and retention over HTTP and WebSocket (chapter 11): the recall endpoint and its
//! push, the background purge, and retries answered from tombstones. The checks' logic is
//! `parley_verify`'s (`parley verify` runs the same against a deployment).

use anyhow::Result;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind};

use crate::verify_checks::PURGE_INTERVAL_MS;

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_recall_over_http
);
/// 11-recall-window, 11-recall-erases-body and 11-recall-idempotent over HTTP: the recall
/// answers `{seq, target_seq}`, its event is pushed like any other, the target reads as
/// recalled without a body and its stored body is gone; recalling again answers the same recall
/// and pushes nothing; another member gets NOT_SENDER, a join NOT_FOUND, a bad seq BAD_REQUEST;
/// past the conversation's own window the answer is RECALL_WINDOW_EXPIRED.
async fn check_11_recall_over_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "11-recall-over-http").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_purge_advances_min_seq_http
);
/// 11-purge-advances-min-seq with the server's own background job: events past the
/// conversation's retention disappear, `min_seq` rises to `next_seq`, reads say `truncated`,
/// the head stays, and the next send continues the sequence (P1).
async fn check_11_purge_advances_min_seq_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "11-purge-advances-min-seq").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_retry_after_purge_hits_tombstone_http
);
/// 11-retry-after-purge-hits-tombstone over HTTP and WebSocket: after the background purge, a
/// retry with the same body answers `dup: true, purged: true` with the original seq and
/// message id; another body is 409 IDEMPOTENCY_MISMATCH; nothing is written.
async fn check_11_retry_after_purge_hits_tombstone_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "11-retry-after-purge-hits-tombstone").await
}

/// Tombstone life of the expiry test: long enough to be seen, short enough to pass in the test.
const TOMBSTONE_TTL_MS: u64 = 1_000;

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_tombstone_expiry_in_background
);
/// 11-tombstone-expiry with the server's own job: the purge moves the key into a tombstone,
/// the job deletes the tombstone once it is older than `TOMBSTONE_TTL_MS`, and from then on the
/// key is free: the same request is a new message (clients retry for far less than the TTL,
/// whose default is seven days).
async fn check_11_tombstone_expiry_in_background(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        purge_interval_ms: PURGE_INTERVAL_MS,
        tombstone_ttl_ms: TOMBSTONE_TTL_MS,
        ..ServerConfig::default()
    };
    crate::verify_checks::passes_with(store, config, "11-tombstone-expiry-in-background").await
}
