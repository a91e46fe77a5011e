//! The store contract run against PostgreSQL: a fresh database per test.

use std::sync::Arc;

use crate::contention::{self, CommitHold};
use crate::contract;
use anyhow::ensure;
use anyhow::Result;
use parley_store::pg::PgStore;
use parley_store::Store;
use parley_testkit::TestDb;

/// A fresh store and the database under it, which is dropped with this value when the test
/// passed: keep it until the test is done with the store.
struct Fresh {
    store: Arc<dyn Store>,
    _db: TestDb,
}

impl Fresh {
    /// The store, for checks that share it between tasks.
    fn arc(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
}

impl std::ops::Deref for Fresh {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.store
    }
}

async fn store() -> Fresh {
    let (db, store) = pg().await;
    Fresh {
        store: Arc::new(store),
        _db: db,
    }
}

/// A fresh database and a store on it; the database goes when the `TestDb` is dropped.
async fn pg() -> (TestDb, PgStore) {
    let db = TestDb::create().await;
    let store = db.store().await;
    (db, store)
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
    contract::concurrent_replay_one_row(store().await.arc()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_seq_gapless() -> Result<()> {
    contract::seq_gapless(store().await.arc()).await
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
    contract::many_conversations_gapless(store().await.arc()).await
}

#[tokio::test]
async fn tokens_revoke() -> Result<()> {
    contract::tokens_revoke(&*store().await).await
}

#[tokio::test]
async fn password_hashes() -> Result<()> {
    contract::password_hashes(&*store().await).await
}

#[tokio::test]
async fn check_08_threshold_switches_to_pull() -> Result<()> {
    contract::threshold_switches_to_pull(&*store().await).await
}

#[tokio::test]
async fn check_08_member_cannot_remove_others() -> Result<()> {
    contract::member_cannot_remove_others(&*store().await).await
}

#[tokio::test]
async fn check_11_recall_window() -> Result<()> {
    contract::recall_window(&*store().await).await
}

/// Besides the contract, the stored row itself: no body, a recall time, the fingerprint kept.
#[tokio::test]
async fn check_11_recall_erases_body() -> Result<()> {
    let (_db, pg) = pg().await;
    let (conv, seq) = contract::recall_erases_body(&pg).await?;
    let (body, recalled, hash): (Option<String>, bool, Option<String>) = sqlx::query_as(
        "SELECT body, recalled_at IS NOT NULL, request_hash FROM events WHERE conv_id = $1 AND seq = $2",
    )
    .bind(conv.as_str())
    .bind(seq)
    .fetch_one(pg.pool())
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
    contract::recall_idempotent(&*store().await).await
}

#[tokio::test]
async fn check_11_purge_advances_min_seq() -> Result<()> {
    contract::purge_advances_min_seq(&*store().await).await
}

#[tokio::test]
async fn check_11_retry_after_purge_hits_tombstone() -> Result<()> {
    contract::retry_after_purge_hits_tombstone(&*store().await).await
}

#[tokio::test]
async fn check_11_tombstone_expiry() -> Result<()> {
    contract::tombstone_expiry(&*store().await).await
}

/// How long a purge round may take while another transaction holds one conversation's lock:
/// far less than any lock wait would last.
const PURGE_BUSY_ROUND_MS_MAX: u64 = 2_000;

/// The purge never waits behind a busy conversation: while a transaction holds `c-busy`'s row
/// lock (as a send does), a round skips it, reports it busy, and still purges `c-free`; the
/// next round, after the lock is gone, purges `c-busy`.
#[tokio::test]
async fn check_11_purge_never_waits_for_a_busy_conversation() -> Result<()> {
    use chrono::Duration;
    use parley_domain::ConvKind;

    let (_db, pg) = pg().await;
    let ana = contract::user(&pg, "u-ana").await?;
    let mut ids = Vec::new();
    for name in ["c-busy", "c-free"] {
        let mut req = contract::new_conv(&ana, ConvKind::Group, Some(name), &[]);
        req.retention_ms = Some(1_000);
        let conv = pg.create_conversation(&req).await?.conv_id;
        contract::send(&pg, &conv, &ana, "m-1", "x").await?;
        ids.push(conv);
    }
    let now = chrono::Utc::now() + Duration::seconds(10);

    let mut lock = pg.pool().begin().await?;
    sqlx::query("SELECT 1 FROM conversations WHERE conv_id = 'c-busy' FOR UPDATE")
        .execute(&mut *lock)
        .await?;
    let round = tokio::time::timeout(
        std::time::Duration::from_millis(PURGE_BUSY_ROUND_MS_MAX),
        pg.purge_batch(now, 500),
    )
    .await;
    let Ok(report) = round else {
        anyhow::bail!("the purge waited for the busy conversation's lock");
    };
    let report = report?;
    ensure!(
        (
            report.conversations,
            report.conversations_busy,
            report.events_deleted
        ) == (1, 1, 2),
        "round with c-busy locked: {report:?}"
    );
    let busy_min: i64 =
        sqlx::query_scalar("SELECT min_seq FROM conversations WHERE conv_id = 'c-busy'")
            .fetch_one(pg.pool())
            .await?;
    ensure!(
        busy_min == 1,
        "c-busy was cut while locked: min_seq {busy_min}"
    );
    lock.commit().await?;

    let report = pg.purge_batch(now, 500).await?;
    ensure!(
        (
            report.conversations,
            report.conversations_busy,
            report.events_deleted
        ) == (1, 0, 2),
        "round after the lock: {report:?}"
    );
    for conv in &ids {
        let (min, next): (i64, i64) =
            sqlx::query_as("SELECT min_seq, next_seq FROM conversations WHERE conv_id = $1")
                .bind(conv.as_str())
                .fetch_one(pg.pool())
                .await?;
        ensure!(
            min == next && min == 3,
            "{conv}: min_seq {min} next_seq {next}"
        );
    }
    Ok(())
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
    contract::read_monotonic(store().await.arc()).await
}

#[tokio::test]
async fn check_09_unread_respects_membership() -> Result<()> {
    contract::unread_respects_membership(&*store().await).await
}

#[tokio::test]
async fn check_09_own_send_advances_read() -> Result<()> {
    contract::own_send_advances_read(&*store().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_concurrent_mixed_sends_answered_each() -> Result<()> {
    let (_db, pg) = pg().await;
    let pool = pg.pool().clone();
    let conv = contract::concurrent_mixed_sends_answered_each(Arc::new(pg)).await?;
    // Sends committed in one transaction share its timestamp: fewer timestamps than messages
    // show that batches of several sends were committed (SPEC §4, batching).
    let (messages, stamps): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT created_at) FROM events WHERE conv_id = $1 AND kind = 'msg'",
    )
    .bind(conv.as_str())
    .fetch_one(&pool)
    .await?;
    println!("04-concurrent-mixed-sends: {messages} messages in {stamps} transactions");
    ensure!(messages == 49, "messages: {messages}");
    ensure!(stamps < messages, "no two sends were committed together");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_concurrent_sends_to_many_conversations() -> Result<()> {
    let (_db, pg) = pg().await;
    let pool = pg.pool().clone();
    contract::concurrent_sends_to_many_conversations(Arc::new(pg)).await?;
    // A transaction's timestamp shared by messages of several conversations shows batches
    // that span conversations.
    let spanning: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT created_at FROM events WHERE kind = 'msg'
          GROUP BY created_at HAVING count(DISTINCT conv_id) > 1) t",
    )
    .fetch_one(&pool)
    .await?;
    println!(
        "04-concurrent-sends-to-many-conversations: {spanning} transactions spanned conversations"
    );
    ensure!(spanning > 0, "no batch spanned two conversations");
    Ok(())
}

/// Two nodes on one database: each store batches its own sends, so concurrent identical sends
/// on one node are settled in its queue; across nodes only the row lock and the key check
/// settle them. 32 identical sends across two stores -> one row, one dup=false; 200 distinct
/// sends across them -> seqs without a hole. In each round the first send is held inside its
/// COMMIT until a session of the other node is seen blocked by it on the conversation's row
/// lock: the database guard, not a node's queue, settled the round (`contention.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_04_two_nodes_replay_one_row_and_gapless() -> Result<()> {
    let db = TestDb::create().await;
    let nodes = [
        Arc::new(contention::node_store(&db, 0).await?),
        Arc::new(contention::node_store(&db, 1).await?),
    ];
    let ana = contract::user(&*nodes[0], "u-ana").await?;
    let ben = contract::user(&*nodes[0], "u-ben").await?;
    let conv = nodes[0]
        .create_conversation(&contract::new_conv(
            &ana,
            parley_domain::ConvKind::Group,
            Some("c-two-nodes"),
            &[&ben],
        ))
        .await?
        .conv_id;
    let pool = nodes[0].pool().clone();

    // Round 1: identical sends. The first commits last of all, after the other node waited.
    let hold = CommitHold::install(&db, &pool).await?;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (node, conv, ana) = (nodes[i % 2].clone(), conv.clone(), ana.clone());
        tasks.push(tokio::spawn(async move {
            contract::send(&*node, &conv, &ana, "m-same", contention::HELD_BODY).await
        }));
        if i == 0 {
            hold.wait_until_holding(&pool).await?;
        }
    }
    let (blocked, blocker) = contention::wait_for_cross_node_block(&pool).await?;
    ensure!(blocked != blocker, "{blocked} blocked by itself");
    hold.release().await?;
    let mut acks = Vec::new();
    for t in tasks {
        acks.push(t.await??);
    }
    let fresh = acks.iter().filter(|a| !a.dup).count();
    let seqs: std::collections::BTreeSet<i64> = acks.iter().map(|a| a.seq).collect();
    ensure!(
        fresh == 1 && seqs.len() == 1,
        "{fresh} fresh answers, seqs {seqs:?}"
    );

    // Round 2: distinct sends, the first held the same way.
    let hold = CommitHold::install_lock_only(&db).await?;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (node, conv) = (nodes[i % 2].clone(), conv.clone());
        let from = if i % 4 < 2 { ana.clone() } else { ben.clone() };
        let body = if i == 0 { contention::HELD_BODY } else { "x" };
        tasks.push(tokio::spawn(async move {
            contract::send(&*node, &conv, &from, &format!("m-{i}"), body).await
        }));
        if i == 0 {
            hold.wait_until_holding(&pool).await?;
        }
    }
    let (blocked, blocker) = contention::wait_for_cross_node_block(&pool).await?;
    ensure!(blocked != blocker, "{blocked} blocked by itself");
    hold.release().await?;
    let mut seqs = Vec::new();
    for t in tasks {
        let ack = t.await??;
        ensure!(!ack.dup, "a distinct send answered dup");
        seqs.push(ack.seq);
    }
    seqs.sort_unstable();
    let expected: Vec<i64> = (4..204).collect();
    ensure!(seqs == expected, "seqs are not 4..204: {seqs:?}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = 'c-two-nodes'")
        .fetch_one(nodes[0].pool())
        .await?;
    ensure!(rows == 203, "rows: {rows}");
    Ok(())
}

#[tokio::test]
async fn check_10_expired_routes_are_reaped_in_batches() -> Result<()> {
    contract::gateway_leases::expired_routes_are_reaped_in_batches(&*store().await).await
}

#[tokio::test]
async fn check_10_renewed_lease_keeps_its_routes() -> Result<()> {
    contract::gateway_leases::renewed_lease_keeps_its_routes(&*store().await).await
}

#[tokio::test]
async fn check_10_released_gateway_leaves_nothing() -> Result<()> {
    contract::gateway_leases::released_gateway_leaves_nothing(&*store().await).await
}

#[tokio::test]
async fn check_10_gateway_listing_is_sorted() -> Result<()> {
    contract::gateway_leases::gateway_listing_is_sorted(&*store().await).await
}

#[tokio::test]
async fn check_10_device_route_names_the_last_claim() -> Result<()> {
    contract::gateway_leases::device_route_names_the_last_claim(&*store().await).await
}

#[tokio::test]
async fn store_presence_follows_routes_and_conversations() -> Result<()> {
    contract::presence::presence_follows_routes_and_conversations(&*store().await).await
}

#[tokio::test]
async fn store_typing_targets_follow_membership() -> Result<()> {
    contract::presence::typing_targets_follow_membership(&*store().await).await
}

#[tokio::test]
async fn store_reaped_routes_name_their_users() -> Result<()> {
    contract::presence::reaped_routes_name_their_users(&*store().await).await
}

#[tokio::test]
async fn check_12_relations_fold_into_reads() -> Result<()> {
    contract::relations::relations_fold_into_reads(&*store().await).await
}

#[tokio::test]
async fn check_12_hidden_target() -> Result<()> {
    contract::relations::hidden_target_rule(&*store().await).await
}

#[tokio::test]
async fn check_12_edit_keyed_and_recall_erases() -> Result<()> {
    contract::relations::recall_takes_relations(&*store().await).await
}

#[tokio::test]
async fn check_12_purge_takes_relations() -> Result<()> {
    contract::relations::purge_takes_relations(&*store().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_12_relations_resolve_once() -> Result<()> {
    let fresh = store().await;
    contract::relations::concurrent_relations_resolve_once(fresh.arc()).await
}

#[tokio::test]
async fn store_media_rules() -> Result<()> {
    contract::media::media_rules(&*store().await).await
}

#[tokio::test]
async fn store_media_late_member_cannot_read() -> Result<()> {
    contract::media::late_member_cannot_read(&*store().await).await
}

#[tokio::test]
async fn store_purge_takes_media() -> Result<()> {
    contract::media::purge_takes_media(&*store().await).await
}

#[tokio::test]
async fn store_push_outbox_follows_commits() -> Result<()> {
    contract::push::outbox_follows_commits(&*store().await).await
}

#[tokio::test]
async fn store_push_expand_picks_recipients() -> Result<()> {
    contract::push::expand_picks_recipients(&*store().await).await
}

#[tokio::test]
async fn store_push_coalesce_into_latest() -> Result<()> {
    contract::push::coalesce_into_latest(&*store().await).await
}

#[tokio::test]
async fn store_push_claim_reports_state() -> Result<()> {
    contract::push::claim_reports_state(&*store().await).await
}

#[tokio::test]
async fn store_push_lease_guards_reports() -> Result<()> {
    contract::push::lease_guards_reports(&*store().await).await
}

#[tokio::test]
async fn store_push_retry_and_gone() -> Result<()> {
    contract::push::retry_and_gone(&*store().await).await
}

#[tokio::test]
async fn store_push_targets_levels_privacy() -> Result<()> {
    contract::push::targets_levels_privacy(&*store().await).await
}

#[tokio::test]
async fn store_push_read_drops_notification() -> Result<()> {
    contract::push::read_drops_notification(&*store().await).await
}

#[tokio::test]
async fn store_push_dedupe_never_requeues() -> Result<()> {
    let (_db, store) = pg().await;
    let sql = parley_testkit::Sql::Postgres(store.pool().clone());
    contract::push::dedupe_never_requeues(&store, &sql).await
}

#[tokio::test]
async fn store_push_levels_stored_sparsely() -> Result<()> {
    let (_db, store) = pg().await;
    let sql = parley_testkit::Sql::Postgres(store.pool().clone());
    contract::push::levels_stored_sparsely(&store, &sql).await
}

#[tokio::test]
async fn store_search_query_language() -> Result<()> {
    contract::search::query_language(&*store().await).await
}

#[tokio::test]
async fn store_search_visibility_follows_periods() -> Result<()> {
    contract::search::visibility_follows_periods(&*store().await).await
}

#[tokio::test]
async fn store_search_language_per_conversation() -> Result<()> {
    contract::search::language_per_conversation(&*store().await).await
}

/// Besides the contract, the index itself: after a recall, an edit and a purge, exactly one row
/// per message that still has a body.
#[tokio::test]
async fn store_search_index_follows_recall_edit_purge() -> Result<()> {
    let (db, store) = pg().await;
    let conv = contract::search::index_follows_recall_edit_purge(&store).await?;
    let pool = sqlx::PgPool::connect(db.url()).await?;
    let (docs, bodies): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM search_docs WHERE conv_id = $1),
                (SELECT count(*) FROM events WHERE conv_id = $1 AND kind = 'msg'
                   AND body IS NOT NULL AND recalled_at IS NULL)",
    )
    .bind(conv.as_str())
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    ensure!(
        docs == 1 && bodies == 1,
        "index rows outlived their bodies: {docs} docs, {bodies} bodies"
    );
    Ok(())
}

#[tokio::test]
async fn store_mls_commit_writes_joins_and_welcome() -> Result<()> {
    contract::mls::commit_writes_joins_and_welcome(&*store().await).await
}

#[tokio::test]
async fn store_mls_epoch_rule_first_commit_wins() -> Result<()> {
    contract::mls::epoch_rule_first_commit_wins(store().await.arc()).await
}

#[tokio::test]
async fn store_mls_removal_and_kind_rules() -> Result<()> {
    contract::mls::removal_and_kind_rules(&*store().await).await
}

#[tokio::test]
async fn store_mls_key_packages_claimed_once() -> Result<()> {
    contract::mls::key_packages_claimed_once(store().await.arc()).await
}
