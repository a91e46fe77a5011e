//! The store contract run against the embedded SQLite store: a fresh database file in a
//! temporary directory per test. The test names are those of `pg_contract.rs`.

use std::sync::Arc;

use crate::contract;
use anyhow::{ensure, Result};
use parley_store::sqlite::SqliteStore;
use parley_store::Store;
use sqlx::Connection;
use tempfile::TempDir;

/// A migrated store on a new file, and the directory that holds it (removed when dropped, so it
/// must outlive the test's use of the store).
async fn store() -> Result<(Arc<dyn Store>, TempDir)> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_dir(dir.path()).await?;
    store.migrate().await?;
    Ok((Arc::new(store), dir))
}

#[tokio::test]
async fn check_04_normal_history() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::normal_history(&*store).await
}

#[tokio::test]
async fn check_04_non_member_rejected() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::non_member_rejected(&*store).await
}

#[tokio::test]
async fn check_04_unknown_conv_same_error() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::unknown_conv_same_error(&*store).await
}

#[tokio::test]
async fn check_04_idempotency_mismatch() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::idempotency_mismatch(&*store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_concurrent_replay_one_row() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::concurrent_replay_one_row(store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_seq_gapless() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::seq_gapless(store).await
}

#[tokio::test]
async fn check_08_leave_closes_interval() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::leave_closes_interval(&*store).await
}

#[tokio::test]
async fn history_pages_9_8_7_then_6_5_4() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::history_pages(&*store).await
}

#[tokio::test]
async fn check_09_read_position_monotonic() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::read_position_monotonic(&*store).await
}

#[tokio::test]
async fn check_05_old_cleanup_keeps_new_route() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::old_cleanup_keeps_new_route(&*store).await
}

#[tokio::test]
async fn check_11_periods_bound_reads() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::periods_bound_reads(&*store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_conversations_gapless() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::many_conversations_gapless(store).await
}

#[tokio::test]
async fn tokens_revoke() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::tokens_revoke(&*store).await
}

#[tokio::test]
async fn password_hashes() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::password_hashes(&*store).await
}

#[tokio::test]
async fn check_07_through_seq_skips_invisible() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::through_seq_skips_invisible(&*store).await
}

#[tokio::test]
async fn check_07_sync_feed_only_changed() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::sync_feed_only_changed(&*store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_09_read_monotonic() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::read_monotonic(store).await
}

#[tokio::test]
async fn check_09_unread_respects_membership() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::unread_respects_membership(&*store).await
}

#[tokio::test]
async fn check_09_own_send_advances_read() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::own_send_advances_read(&*store).await
}

#[tokio::test]
async fn check_08_threshold_switches_to_pull() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::threshold_switches_to_pull(&*store).await
}

#[tokio::test]
async fn check_08_member_cannot_remove_others() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::member_cannot_remove_others(&*store).await
}

#[tokio::test]
async fn check_11_recall_window() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::recall_window(&*store).await
}

/// Besides the contract, the stored row itself: no body, a recall time, the fingerprint kept.
#[tokio::test]
async fn check_11_recall_erases_body() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sqlite = SqliteStore::open_dir(dir.path()).await?;
    sqlite.migrate().await?;
    let (conv, seq) = contract::recall_erases_body(&sqlite).await?;
    let mut probe =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", sqlite.path().display()))
            .await?;
    let (body, recalled, hash): (Option<String>, bool, Option<String>) = sqlx::query_as(
        "SELECT body, recalled_at IS NOT NULL, request_hash FROM events WHERE conv_id = $1 AND seq = $2",
    )
    .bind(conv.as_str())
    .bind(seq)
    .fetch_one(&mut probe)
    .await?;
    ensure!(
        body.is_none(),
        "the stored body survived the recall: {body:?}"
    );
    ensure!(recalled, "recalled_at is not set");
    ensure!(hash.is_some(), "the request hash was erased too");
    Ok(())
}

#[tokio::test]
async fn check_11_recall_idempotent() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::recall_idempotent(&*store).await
}

#[tokio::test]
async fn check_11_purge_advances_min_seq() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::purge_advances_min_seq(&*store).await
}

#[tokio::test]
async fn check_11_retry_after_purge_hits_tombstone() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::retry_after_purge_hits_tombstone(&*store).await
}

#[tokio::test]
async fn check_11_tombstone_expiry() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::tombstone_expiry(&*store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_concurrent_mixed_sends_answered_each() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::concurrent_mixed_sends_answered_each(store).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_concurrent_sends_to_many_conversations() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::concurrent_sends_to_many_conversations(store).await?;
    Ok(())
}

#[tokio::test]
async fn check_10_expired_routes_are_reaped_in_batches() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::gateway_leases::expired_routes_are_reaped_in_batches(&*store).await
}

#[tokio::test]
async fn check_10_renewed_lease_keeps_its_routes() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::gateway_leases::renewed_lease_keeps_its_routes(&*store).await
}

#[tokio::test]
async fn check_10_released_gateway_leaves_nothing() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::gateway_leases::released_gateway_leaves_nothing(&*store).await
}

#[tokio::test]
async fn check_10_gateway_listing_is_sorted() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::gateway_leases::gateway_listing_is_sorted(&*store).await
}

#[tokio::test]
async fn check_10_device_route_names_the_last_claim() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::gateway_leases::device_route_names_the_last_claim(&*store).await
}

#[tokio::test]
async fn store_presence_follows_routes_and_conversations() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::presence::presence_follows_routes_and_conversations(&*store).await
}

#[tokio::test]
async fn store_typing_targets_follow_membership() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::presence::typing_targets_follow_membership(&*store).await
}

#[tokio::test]
async fn store_reaped_routes_name_their_users() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::presence::reaped_routes_name_their_users(&*store).await
}

#[tokio::test]
async fn check_12_relations_fold_into_reads() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::relations::relations_fold_into_reads(&*store).await
}

#[tokio::test]
async fn check_12_hidden_target() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::relations::hidden_target_rule(&*store).await
}

#[tokio::test]
async fn check_12_edit_keyed_and_recall_erases() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::relations::recall_takes_relations(&*store).await
}

#[tokio::test]
async fn check_12_purge_takes_relations() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::relations::purge_takes_relations(&*store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_12_relations_resolve_once() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::relations::concurrent_relations_resolve_once(store).await
}

#[tokio::test]
async fn store_media_rules() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::media::media_rules(&*store).await
}

#[tokio::test]
async fn store_media_late_member_cannot_read() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::media::late_member_cannot_read(&*store).await
}

#[tokio::test]
async fn store_purge_takes_media() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::media::purge_takes_media(&*store).await
}

#[tokio::test]
async fn store_push_outbox_follows_commits() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::outbox_follows_commits(&*store).await
}

#[tokio::test]
async fn store_push_expand_picks_recipients() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::expand_picks_recipients(&*store).await
}

#[tokio::test]
async fn store_push_coalesce_into_latest() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::coalesce_into_latest(&*store).await
}

#[tokio::test]
async fn store_push_claim_reports_state() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::claim_reports_state(&*store).await
}

#[tokio::test]
async fn store_push_lease_guards_reports() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::lease_guards_reports(&*store).await
}

#[tokio::test]
async fn store_push_retry_and_gone() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::retry_and_gone(&*store).await
}

#[tokio::test]
async fn store_push_targets_levels_privacy() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::targets_levels_privacy(&*store).await
}

#[tokio::test]
async fn store_push_read_drops_notification() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::push::read_drops_notification(&*store).await
}

/// A migrated store on a new file, and a pool of the test's own on that file.
async fn store_and_sql() -> Result<(SqliteStore, parley_testkit::Sql, TempDir)> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_dir(dir.path()).await?;
    store.migrate().await?;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(store.path())
        .busy_timeout(std::time::Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    Ok((store, parley_testkit::Sql::Sqlite(pool), dir))
}

#[tokio::test]
async fn store_push_dedupe_never_requeues() -> Result<()> {
    let (store, sql, _dir) = store_and_sql().await?;
    contract::push::dedupe_never_requeues(&store, &sql).await
}

#[tokio::test]
async fn store_push_levels_stored_sparsely() -> Result<()> {
    let (store, sql, _dir) = store_and_sql().await?;
    contract::push::levels_stored_sparsely(&store, &sql).await
}

#[tokio::test]
async fn store_search_query_language() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::search::query_language(&*store).await
}

#[tokio::test]
async fn store_search_visibility_follows_periods() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::search::visibility_follows_periods(&*store).await
}

#[tokio::test]
async fn store_search_language_per_conversation() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::search::language_per_conversation(&*store).await
}

/// Besides the contract, the index itself: after a recall, an edit and a purge, exactly one row
/// per message that still has a body, in `search_docs` and in the FTS5 table of its language.
#[tokio::test]
async fn store_search_index_follows_recall_edit_purge() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let sqlite = SqliteStore::open_dir(dir.path()).await?;
    sqlite.migrate().await?;
    let conv = contract::search::index_follows_recall_edit_purge(&sqlite).await?;
    let mut probe =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", sqlite.path().display()))
            .await?;
    let (docs, words, bodies): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM search_docs WHERE conv_id = $1),
                (SELECT count(*) FROM search_words_simple) + (SELECT count(*) FROM search_words_english),
                (SELECT count(*) FROM events WHERE conv_id = $1 AND kind = 'msg'
                   AND body IS NOT NULL AND recalled_at IS NULL)",
    )
    .bind(conv.as_str())
    .fetch_one(&mut probe)
    .await?;
    ensure!(
        docs == 1 && words == 1 && bodies == 1,
        "index rows outlived their bodies: {docs} docs, {words} word rows, {bodies} bodies"
    );
    Ok(())
}

#[tokio::test]
async fn store_mls_commit_writes_joins_and_welcome() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::mls::commit_writes_joins_and_welcome(&*store).await
}

#[tokio::test]
async fn store_mls_epoch_rule_first_commit_wins() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::mls::epoch_rule_first_commit_wins(store).await
}

#[tokio::test]
async fn store_mls_removal_and_kind_rules() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::mls::removal_and_kind_rules(&*store).await
}

#[tokio::test]
async fn store_mls_key_packages_claimed_once() -> Result<()> {
    let (store, _dir) = store().await?;
    contract::mls::key_packages_claimed_once(store).await
}
