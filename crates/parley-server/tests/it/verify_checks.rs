//! The checks of `parley verify`, run by id against a test server on each store: the cargo
//! tests and the product share one copy of each check's logic (`parley_verify`). A check that
//! needs the database runs on PostgreSQL with the test database's URL; on the embedded store
//! only the checks that need nothing but the API run.

use anyhow::{ensure, Context, Result};
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use parley_verify::{Status, Target};

/// Purge interval of the servers the retention checks run against: short, so the background
/// job acts within the check.
pub const PURGE_INTERVAL_MS: u64 = 50;

/// Runs the verify check `id` against `server` and fails unless it passed.
pub async fn passes_on(server: &TestServer, id: &str) -> Result<()> {
    let database_url = match server.kind() {
        StoreKind::Postgres => Some(server.db().url().to_owned()),
        StoreKind::Sqlite => None,
    };
    let target = Target::connect(server.base_url(), server.admin_token(), database_url)
        .await
        .context("verify cannot reach the test server")?;
    let result = parley_verify::run_one(target, id)
        .await
        .with_context(|| format!("no verify check {id}"))?;
    println!(
        "{id}: {} {} ({} ms)\n  {}",
        result.status.as_str(),
        result.observed,
        result.duration_ms,
        result.transcript.join("\n  ")
    );
    ensure!(
        result.status == Status::Pass,
        "{id}: {} {:?}",
        result.status.as_str(),
        result.reason
    );
    Ok(())
}

/// Runs the verify check `id` against a fresh server on `store` with `config`.
pub async fn passes_with(store: StoreKind, config: ServerConfig, id: &str) -> Result<()> {
    let server = TestServer::start_on(store, config).await;
    passes_on(&server, id).await
}

/// Runs the verify check `id` against a fresh server on `store` with the defaults, except a
/// short purge interval, and `http://` push endpoints accepted (the push service of a chapter
/// 14 check runs on this machine) with a short coalescing interval.
pub async fn passes(store: StoreKind, id: &str) -> Result<()> {
    let config = ServerConfig {
        purge_interval_ms: PURGE_INTERVAL_MS,
        push: parley_server::push::PushConfig {
            allow_http: true,
            coalesce_ms: 1_000,
            ..parley_server::push::PushConfig::default()
        },
        ..ServerConfig::default()
    };
    passes_with(store, config, id).await
}

/// One test per check on both stores: `verify_on_both_stores!(test_name, "check-id")`.
macro_rules! verify_on_both_stores {
    ($name:ident, $id:literal) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() -> ::anyhow::Result<()> {
                super::passes(::parley_testkit::StoreKind::Postgres, $id).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() -> ::anyhow::Result<()> {
                super::passes(::parley_testkit::StoreKind::Sqlite, $id).await
            }
        }
    };
}

/// One test per check that needs the database, on PostgreSQL.
macro_rules! verify_on_postgres {
    ($name:ident, $id:literal) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() -> ::anyhow::Result<()> {
            passes(::parley_testkit::StoreKind::Postgres, $id).await
        }
    };
}

verify_on_both_stores!(verify_04_normal_history, "04-normal-history");
verify_on_both_stores!(verify_04_non_member_rejected, "04-non-member-rejected");
verify_on_both_stores!(
    verify_04_unknown_conv_same_error,
    "04-unknown-conv-same-error"
);
verify_on_both_stores!(verify_04_idempotency_mismatch, "04-idempotency-mismatch");
verify_on_both_stores!(
    verify_04_concurrent_sends_to_many_conversations,
    "04-concurrent-sends-to-many-conversations"
);
verify_on_both_stores!(
    verify_04_hot_conversation_write_ceiling,
    "04-hot-conversation-write-ceiling"
);
verify_on_both_stores!(verify_05_kick_old_connection, "05-kick-old-connection");
verify_on_both_stores!(
    verify_05_revoked_token_closes_socket,
    "05-revoked-token-closes-socket"
);
verify_on_both_stores!(
    verify_05_reissued_token_closes_socket,
    "05-reissued-token-closes-socket"
);
verify_on_both_stores!(
    verify_05_old_cleanup_keeps_new_route,
    "05-old-cleanup-keeps-new-route"
);
verify_on_both_stores!(
    verify_07_read_state_across_devices,
    "07-read-state-across-devices"
);
verify_on_both_stores!(
    verify_09_read_position_monotonic,
    "09-read-position-monotonic"
);
verify_on_both_stores!(verify_11_periods_bound_reads, "11-periods-bound-reads");
verify_on_both_stores!(
    verify_07_through_seq_skips_invisible,
    "07-through-seq-skips-invisible"
);
verify_on_both_stores!(
    verify_04_concurrent_mixed_sends_answered_each,
    "04-concurrent-mixed-sends-answered-each"
);
verify_on_both_stores!(verify_06_push_to_all_devices, "06-push-to-all-devices");
verify_on_both_stores!(verify_06_retry_after_lost_ack, "06-retry-after-lost-ack");
verify_on_both_stores!(
    verify_07_offline_device_catches_up,
    "07-offline-device-catches-up"
);
verify_on_both_stores!(
    verify_07_sync_feed_only_changed,
    "07-sync-feed-only-changed"
);
verify_on_both_stores!(verify_08_leave_closes_interval, "08-leave-closes-interval");
verify_on_both_stores!(
    verify_08_member_cannot_remove_others,
    "08-member-cannot-remove-others"
);
verify_on_both_stores!(
    verify_09_own_send_advances_read,
    "09-own-send-advances-read"
);
verify_on_both_stores!(verify_09_read_monotonic, "09-read-monotonic");
verify_on_both_stores!(
    verify_09_unread_respects_membership,
    "09-unread-respects-membership"
);
verify_on_both_stores!(
    verify_10_gateway_listing_is_sorted,
    "10-gateway-listing-is-sorted"
);
verify_on_both_stores!(verify_11_recall_erases_body, "11-recall-erases-body");
verify_on_both_stores!(verify_11_recall_idempotent, "11-recall-idempotent");
verify_on_both_stores!(verify_11_recall_window, "11-recall-window");

/// `11-tombstone-expiry` on a server whose tombstones live one second.
mod verify_11_tombstone_expiry {
    use super::*;

    async fn on(store: StoreKind) -> Result<()> {
        let config = ServerConfig {
            purge_interval_ms: PURGE_INTERVAL_MS,
            tombstone_ttl_ms: 1_000,
            ..ServerConfig::default()
        };
        passes_with(store, config, "11-tombstone-expiry").await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() -> Result<()> {
        on(StoreKind::Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() -> Result<()> {
        on(StoreKind::Sqlite).await
    }
}

verify_on_postgres!(verify_04_history_uses_pk, "04-history-uses-pk");
verify_on_postgres!(
    verify_04_control_check_then_insert_duplicates,
    "04-control-check-then-insert-duplicates"
);
verify_on_postgres!(verify_04_control_sequence_gaps, "04-control-sequence-gaps");
verify_on_postgres!(
    verify_04_stuck_transaction_bounded,
    "04-stuck-transaction-bounded"
);
verify_on_postgres!(
    verify_07_epoch_invalidates_cursor,
    "07-epoch-invalidates-cursor"
);
verify_on_postgres!(verify_06_ack_after_commit, "06-ack-after-commit");
verify_on_postgres!(
    verify_11_purge_never_waits_for_a_busy_conversation,
    "11-purge-never-waits-for-a-busy-conversation"
);

/// Without a database URL, every check that needs one is NOT_RUN with that reason, and the
/// checks with no code in verify say so: none is missing from the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_without_database_lists_every_check() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let target = Target::connect(server.base_url(), server.admin_token(), None).await?;
    let options = parley_verify::RunOptions {
        only: vec![
            "04-normal-history".into(),
            "04-history-uses-pk".into(),
            "10-graceful-drain".into(),
        ],
        ..parley_verify::RunOptions::default()
    };
    let result = parley_verify::run(target, &options).await;
    ensure!(result.checks.len() == parley_verify::registry().len());
    let status = |id: &str| {
        result
            .checks
            .iter()
            .find(|c| c.id == id)
            .map(|c| (c.status, c.reason.clone().unwrap_or_default()))
    };
    ensure!(status("04-normal-history").map(|s| s.0) == Some(Status::Pass));
    ensure!(
        status("04-history-uses-pk") == Some((Status::NotRun, "needs --database-url".into())),
        "{:?}",
        status("04-history-uses-pk")
    );
    let drain = status("10-graceful-drain");
    ensure!(
        drain
            == Some((
                Status::NotRun,
                "not implemented in verify (it needs 2 gateways)".into()
            )),
        "{drain:?}"
    );
    ensure!(result.server.store == "sqlite" && result.server.bus == "local");
    ensure!(result.counts.pass == 1 && result.counts.fail == 0);
    Ok(())
}

/// `06-slow-consumer-isolated` on a server with a short outbound queue, so few messages
/// overflow it.
mod verify_06_slow_consumer_isolated {
    use super::*;

    async fn on(store: StoreKind) -> Result<()> {
        let config = ServerConfig {
            outbound_queue_len_max: 8,
            ..ServerConfig::default()
        };
        passes_with(store, config, "06-slow-consumer-isolated").await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() -> Result<()> {
        on(StoreKind::Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() -> Result<()> {
        on(StoreKind::Sqlite).await
    }
}

/// Pull threshold of the server the threshold check runs against: a small group reaches it.
const SMALL_PULL_THRESHOLD: u32 = 5;

mod verify_08_threshold_switches_to_pull {
    use super::*;

    async fn on(store: StoreKind) -> Result<()> {
        let config = ServerConfig {
            pull_threshold: SMALL_PULL_THRESHOLD,
            ..ServerConfig::default()
        };
        passes_with(store, config, "08-threshold-switches-to-pull").await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() -> Result<()> {
        on(StoreKind::Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() -> Result<()> {
        on(StoreKind::Sqlite).await
    }
}

/// Every check verify implements runs as a cargo test: here, or from the tests whose logic
/// moved into it.
#[test]
fn every_implemented_check_runs_as_a_test() {
    let sources = [
        include_str!("verify_checks.rs"),
        include_str!("http_concurrency.rs"),
        include_str!("sync_and_read.rs"),
        include_str!("recall_retention.rs"),
        include_str!("group_fanout.rs"),
        include_str!("access_matrix.rs"),
    ];
    let missing: Vec<&str> = parley_verify::registry()
        .iter()
        .filter(|c| c.run.is_some())
        .map(|c| c.id)
        .filter(|id| !sources.iter().any(|s| s.contains(&format!("\"{id}\""))))
        .collect();
    assert!(
        missing.is_empty(),
        "verify checks no test runs: {missing:?}"
    );
}

verify_on_both_stores!(
    verify_12_relations_fold_into_reads,
    "12-relations-fold-into-reads"
);
verify_on_both_stores!(verify_12_hidden_target, "12-hidden-target");
verify_on_both_stores!(
    verify_12_edit_keyed_and_recall_erases,
    "12-edit-keyed-and-recall-erases"
);
verify_on_both_stores!(
    verify_12_relations_resolve_once,
    "12-relations-resolve-once"
);
verify_on_both_stores!(
    verify_12_relations_pushed_and_caught_up,
    "12-relations-pushed-and-caught-up"
);
verify_on_both_stores!(verify_12_thread_pages, "12-thread-pages");
verify_on_both_stores!(verify_12_mentions_counted, "12-mentions-counted");
verify_on_both_stores!(verify_13_upload_stored_once, "13-upload-stored-once");
verify_on_both_stores!(
    verify_13_media_served_to_readers,
    "13-media-served-to-readers"
);
verify_on_both_stores!(verify_13_recall_stops_serving, "13-recall-stops-serving");
verify_on_both_stores!(verify_13_signed_urls, "13-signed-urls");
verify_on_both_stores!(verify_14_webpush_delivered, "14-webpush-delivered");
verify_on_both_stores!(verify_14_outbox_after_commit, "14-outbox-after-commit");
verify_on_both_stores!(verify_14_no_push_after_read, "14-no-push-after-read");
verify_on_both_stores!(verify_14_muted_silent, "14-muted-silent");
verify_on_both_stores!(
    verify_15_nonmember_finds_nothing,
    "15-nonmember-finds-nothing"
);
verify_on_both_stores!(
    verify_15_outside_periods_not_found,
    "15-outside-periods-not-found"
);
verify_on_both_stores!(verify_15_recalled_not_found, "15-recalled-not-found");
verify_on_both_stores!(verify_15_purged_not_found, "15-purged-not-found");
verify_on_both_stores!(
    verify_15_edit_matches_current_body,
    "15-edit-matches-current-body"
);
verify_on_both_stores!(verify_15_search_over_websocket, "15-search-over-websocket");
verify_on_both_stores!(verify_16_commit_first_wins, "16-commit-first-wins");
verify_on_both_stores!(verify_16_stale_epoch_refused, "16-stale-epoch-refused");
verify_on_both_stores!(
    verify_16_welcome_only_named_devices,
    "16-welcome-only-named-devices"
);
verify_on_both_stores!(
    verify_16_membership_follows_commits,
    "16-membership-follows-commits"
);
verify_on_both_stores!(
    verify_16_key_packages_claimed_once,
    "16-key-packages-claimed-once"
);
