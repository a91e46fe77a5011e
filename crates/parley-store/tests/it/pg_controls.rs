//! PostgreSQL-specific checks of SPEC §12: the seed's negative control of a database sequence
//! (`04-control-sequence-gaps`), the plans of the range reads and of the batched send, and the
//! reaper's `SKIP LOCKED`. The controls that run Parley's own send and route paths with one
//! guard removed are in `break_controls.rs`.

use anyhow::{ensure, Result};
use parley_store::pg::{
    EVENTS_AFTER_ONE_PERIOD_SQL, EVENTS_RANGE_ASC_SQL, EVENTS_RANGE_DESC_SQL,
    SEND_BATCH_INSERT_SQL, SEND_BATCH_KEY_CHECK_SQL, SEND_BATCH_LOCK_SQL,
};
use parley_testkit::TestDb;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};

/// A database sequence with 3 of 10 transactions rolled back: 7 rows with max 10. The counter
/// row of the real path rolls back with its transaction; a sequence does not.
#[tokio::test]
async fn check_04_control_sequence_gaps() -> Result<()> {
    let db = TestDb::create().await;
    let pool = PgPool::connect(db.url()).await?;
    sqlx::query("CREATE SEQUENCE control_seq")
        .execute(&pool)
        .await?;
    sqlx::query("CREATE TABLE control_seq_events (seq bigint PRIMARY KEY)")
        .execute(&pool)
        .await?;
    for i in 1..=10 {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO control_seq_events VALUES (nextval('control_seq'))")
            .execute(&mut *tx)
            .await?;
        if [3, 6, 9].contains(&i) {
            tx.rollback().await?;
        } else {
            tx.commit().await?;
        }
    }
    let row = sqlx::query("SELECT count(*) AS n, max(seq) AS m FROM control_seq_events")
        .fetch_one(&pool)
        .await?;
    let (n, m): (i64, i64) = (row.try_get("n")?, row.try_get("m")?);
    println!("04-control-sequence-gaps: rows = {n}, max = {m}");
    ensure!(
        n == 7 && m == 10,
        "expected 7 rows with max 10, got {n} rows with max {m}"
    );
    Ok(())
}

/// Representative data: conversations and events per conversation for the plan check.
const PLAN_CONVERSATIONS: i64 = 1_000;
const PLAN_EVENTS_PER_CONVERSATION: i64 = 100;

/// A fresh database with representative data: 1,000 analysed conversations of 100 events,
/// seven members each with one open period.
async fn representative_data() -> Result<TestDb> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let pool = store.pool();
    sqlx::query(
        "INSERT INTO conversations (conv_id, kind, next_seq, recall_window_ms)
         SELECT 'c-' || c, 'group', $2 + 1, 120000 FROM generate_series(1, $1) AS c",
    )
    .bind(PLAN_CONVERSATIONS)
    .bind(PLAN_EVENTS_PER_CONVERSATION)
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, message_id, sender_user, client_msg_id, request_hash, body, msg_ordinal)
         SELECT 'c-' || c, s, 'msg', gen_random_uuid(), 'u-' || (s % 7), 'm-' || s, 'h', repeat('x', 40), s
         FROM generate_series(1, $1) AS c, generate_series(1, $2) AS s",
    )
    .bind(PLAN_CONVERSATIONS)
    .bind(PLAN_EVENTS_PER_CONVERSATION)
    .execute(pool)
    .await?;
    // Seven members per conversation, each with one open period from seq 1.
    sqlx::query("INSERT INTO users (user_id) SELECT 'u-' || u FROM generate_series(0, 6) AS u")
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
         SELECT 'c-' || c, 'u-' || u, 1, 'member'
         FROM generate_series(1, $1) AS c, generate_series(0, 6) AS u",
    )
    .bind(PLAN_CONVERSATIONS)
    .execute(pool)
    .await?;
    // A reaction on every tenth message, so the one-statement read's probe of the reactions
    // is planned over a table of representative size too.
    sqlx::query(
        "INSERT INTO reactions (conv_id, target_seq, reaction_key, user_id, seq)
         SELECT 'c-' || c, s, '👍', 'u-1', s FROM generate_series(1, $1) AS c,
                generate_series(1, $2, 10) AS s",
    )
    .bind(PLAN_CONVERSATIONS)
    .bind(PLAN_EVENTS_PER_CONVERSATION)
    .execute(pool)
    .await?;
    sqlx::query("ANALYZE").execute(pool).await?;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(pool)
        .await?;
    ensure!(n >= 100_000, "representative data: {n} events");
    Ok(db)
}

/// The range reads' plans use the `(conv_id, seq)` primary key on 100,000 analysed events over
/// 1,000 conversations.
#[tokio::test]
async fn check_04_history_uses_pk() -> Result<()> {
    let db = representative_data().await?;
    let store = db.store().await;
    let pool = store.pool();

    for sql in [EVENTS_RANGE_ASC_SQL, EVENTS_RANGE_DESC_SQL] {
        let mut conn = pool.acquire().await?;
        let explain = format!("EXPLAIN (FORMAT JSON) {sql}");
        let plan: serde_json::Value = sqlx::query_scalar(&explain)
            // A typical page: 50 events from a cursor in a conversation with more after it.
            .bind("c-500")
            .bind(11i64)
            .bind(100i64)
            .bind(50i64)
            .fetch_one(&mut *conn)
            .await?;
        let top = &plan[0]["Plan"];
        let mut nodes = Vec::new();
        collect_nodes(top, &mut nodes);
        let uses_pk = nodes.iter().any(|(_, index)| index == "events_pkey");
        let seq_scan = nodes.iter().any(|(node, _)| node == "Seq Scan");
        println!(
            "04-history-uses-pk: top node = {}, nodes = {nodes:?}",
            top["Node Type"]
        );
        ensure!(
            uses_pk && !seq_scan,
            "range read does not use the primary key: {plan}"
        );
    }

    // The one-statement events-after read: the same primary-key range scan, inside the join.
    let explain = format!("EXPLAIN (FORMAT JSON) {EVENTS_AFTER_ONE_PERIOD_SQL}");
    let plan: serde_json::Value = sqlx::query_scalar(&explain)
        .bind("c-500")
        .bind("u-3")
        .bind(12i64)
        .bind(50i64)
        .fetch_one(pool)
        .await?;
    let mut nodes = Vec::new();
    collect_nodes(&plan[0]["Plan"], &mut nodes);
    println!("04-history-uses-pk (events after, one statement): nodes = {nodes:?}");
    let uses_pk = nodes.iter().any(|(_, index)| index == "events_pkey");
    let seq_scan = nodes.iter().any(|(node, _)| node == "Seq Scan");
    ensure!(
        uses_pk && !seq_scan,
        "one-statement events-after does not use the primary key: {plan}"
    );
    Ok(())
}

/// Every plan node with the index it uses ("" when none), depth first.
fn collect_nodes(node: &serde_json::Value, out: &mut Vec<(String, String)>) {
    let name = node["Node Type"].as_str().unwrap_or_default().to_owned();
    let index = node["Index Name"].as_str().unwrap_or_default().to_owned();
    out.push((name, index));
    if let Some(children) = node["Plans"].as_array() {
        for child in children {
            collect_nodes(child, out);
        }
    }
}

/// The batched send's statements reach the log, the tombstones, the periods and the
/// conversations only through their indexes, on 100,000 analysed events and 10,000 tombstones,
/// for a batch of 16 requests over 16 conversations: under the plan for the given values and
/// under the generic plan a prepared statement may switch to after a few executions.
#[tokio::test]
async fn send_batch_statements_use_indexes() -> Result<()> {
    let db = representative_data().await?;
    let store = db.store().await;
    let pool = store.pool();
    sqlx::query(
        "INSERT INTO idem_tombstones (conv_id, sender_user, client_msg_id, request_hash, seq, message_id)
         SELECT 'c-' || (t % 1000 + 1), 'u-' || (t % 7), 'm-old-' || t, 'h', t, gen_random_uuid()
         FROM generate_series(1, 10000) AS t",
    )
    .execute(pool)
    .await?;
    sqlx::query("ANALYZE").execute(pool).await?;
    let statements = [
        (
            "lock",
            SEND_BATCH_LOCK_SQL,
            "(text[])",
            "(ARRAY['c-1', 'c-2'])",
        ),
        (
            "key check",
            SEND_BATCH_KEY_CHECK_SQL,
            "(text[], text[], text[])",
            "(ARRAY['c-1', 'c-2'], ARRAY['u-1', 'u-2'], ARRAY['m-1', 'm-old-5'])",
        ),
        (
            "insert",
            SEND_BATCH_INSERT_SQL,
            "(text[], bigint[], uuid[], text[], text[], text[], text[], text[], bigint[], \
              text[], bigint[], bigint[], text[], text[], bigint[], text[])",
            "(ARRAY['c-1'], ARRAY[101::bigint], ARRAY[gen_random_uuid()], ARRAY['u-1'], \
              ARRAY['d1'], ARRAY['m-new'], ARRAY['h'], ARRAY['x'], ARRAY[101::bigint], \
              ARRAY['c-1'], ARRAY[101::bigint], ARRAY[101::bigint], ARRAY['c-1'], \
              ARRAY['u-1'], ARRAY[101::bigint], ARRAY['(0,1)'])",
        ),
    ];
    for generic in [false, true] {
        let mut conn = pool.acquire().await?;
        let mode = if generic {
            "force_generic_plan"
        } else {
            "force_custom_plan"
        };
        sqlx::raw_sql(&format!("SET plan_cache_mode = {mode}"))
            .execute(&mut *conn)
            .await?;
        for (i, (name, sql, types, args)) in statements.iter().enumerate() {
            sqlx::raw_sql(&format!("PREPARE s{i}{types} AS {sql}"))
                .execute(&mut *conn)
                .await?;
            let plan: serde_json::Value =
                sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) EXECUTE s{i}{args}"))
                    .fetch_one(&mut *conn)
                    .await?;
            let mut scans = Vec::new();
            collect_scans(&plan[0]["Plan"], &mut scans);
            println!("send batch {name} ({mode}): {scans:?}");
            let full = scans.iter().find(|(node, _, relation)| {
                node == "Seq Scan"
                    && [
                        "events",
                        "idem_tombstones",
                        "membership_periods",
                        "conversations",
                    ]
                    .contains(&relation.as_str())
            });
            ensure!(
                full.is_none(),
                "{name} ({mode}) scans a whole table: {plan}"
            );
        }
    }
    Ok(())
}

/// Every plan node as (node type, index, relation), depth first.
fn collect_scans(node: &serde_json::Value, out: &mut Vec<(String, String, String)>) {
    let field = |k: &str| node[k].as_str().unwrap_or_default().to_owned();
    out.push((
        field("Node Type"),
        field("Index Name"),
        field("Relation Name"),
    ));
    if let Some(children) = node["Plans"].as_array() {
        for child in children {
            collect_scans(child, out);
        }
    }
}

/// Route convergence on PostgreSQL: a route whose row another transaction holds is skipped by
/// the reaper (`SKIP LOCKED`), which neither waits for it nor deletes it; the next batch after
/// the lock is gone takes it. Without `SKIP LOCKED` the first call would wait for the lock and
/// run into the timeout.
#[tokio::test]
async fn check_10_reaper_skips_locked_routes() -> Result<()> {
    use parley_domain::{DeviceId, UserId};
    use parley_store::{Route, Store};

    let db = TestDb::create().await;
    let store = db.store().await;
    store.renew_gateway("gw-dead", -1_000).await?;
    for user in ["u0", "u1", "u2"] {
        let route = Route {
            user_id: UserId::parse(user)?,
            device_id: DeviceId::parse("d1")?,
            gateway_id: "gw-dead".into(),
            conn_id: format!("c-{user}"),
        };
        store.claim_route(&route).await?;
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await?;
    let mut holder = pool.begin().await?;
    sqlx::query("SELECT 1 FROM routes WHERE user_id = 'u0' FOR UPDATE")
        .execute(&mut *holder)
        .await?;
    let reaped =
        tokio::time::timeout(std::time::Duration::from_secs(5), store.reap_routes(10)).await??;
    ensure!(reaped == 2, "the two unlocked routes, not {reaped}");
    holder.rollback().await?;
    ensure!(store.reap_routes(10).await? == 1, "the released route");
    ensure!(
        store.gateway_leases().await?.is_empty(),
        "the expired gateway row is gone with its last route"
    );
    Ok(())
}
