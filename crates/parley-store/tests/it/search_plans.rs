//! The plans the databases choose for a search (docs/SEARCH.md): on PostgreSQL at 1,000,000
//! messages in 10,000 conversations, a user in 200 of them, the GIN index answers both a rare
//! and a common word; on SQLite the FTS5 table answers. The data is written straight into the
//! tables (the triggers index it as they index a send), since a million sends through the store
//! would take minutes.

use anyhow::{ensure, Result};
use parley_domain::{SearchOrder, SearchQuery, UserId};
use parley_store::sqlite::SqliteStore;
use parley_store::{SearchRequest, Store};
use parley_testkit::TestDb;
use sqlx::Connection;

/// Messages seeded for the PostgreSQL plan.
const MESSAGES: i64 = 1_000_000;
/// Conversations they are spread over, round robin.
const CONVERSATIONS: i64 = 10_000;
/// The searcher is a member of the first this many conversations.
const SEARCHER_CONVERSATIONS: i64 = 200;

/// The common words of the seeded bodies: message `n` holds `COMMON[n % 10]` and the rarer
/// `word{n % 5000}`.
const BODY_SQL: &str = "(CASE n % 10 WHEN 0 THEN 'hello' WHEN 1 THEN 'lunch' WHEN 2 THEN 'meeting'
     WHEN 3 THEN 'report' WHEN 4 THEN 'link' WHEN 5 THEN 'deploy' WHEN 6 THEN 'coffee'
     WHEN 7 THEN 'review' WHEN 8 THEN 'budget' ELSE 'design' END) || ' word' || (n % 5000)";

/// Users `w0`…`w99` send; `searcher` reads the first `SEARCHER_CONVERSATIONS`. Message `n` is
/// seq `1 + n / CONVERSATIONS` of conversation `c{n % CONVERSATIONS}`.
fn pg_seed_sql() -> Vec<String> {
    let per_conv = MESSAGES / CONVERSATIONS;
    vec![
        "INSERT INTO users (user_id) SELECT 'w' || i FROM generate_series(0, 99) i".into(),
        "INSERT INTO users (user_id) VALUES ('searcher')".into(),
        format!(
            "INSERT INTO conversations (conv_id, kind, next_seq, msg_count, recall_window_ms,
                                        member_count)
             SELECT 'c' || i, 'group', {next}, {per_conv}, 0, 1
               FROM generate_series(0, {last}) i",
            next = per_conv + 1,
            last = CONVERSATIONS - 1
        ),
        format!(
            "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             SELECT 'c' || i, 'w' || (i % 100), 1, 'owner' FROM generate_series(0, {last}) i",
            last = CONVERSATIONS - 1
        ),
        format!(
            "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             SELECT 'c' || i, 'searcher', 1, 'member' FROM generate_series(0, {last}) i",
            last = SEARCHER_CONVERSATIONS - 1
        ),
        format!(
            "INSERT INTO events (conv_id, seq, kind, sender_user, body, created_at, msg_ordinal)
             SELECT 'c' || (n % {CONVERSATIONS}), 1 + n / {CONVERSATIONS}, 'msg',
                    'w' || (n % 100), {BODY_SQL},
                    now() - make_interval(secs => {MESSAGES} - n), 1 + n / {CONVERSATIONS}
               FROM generate_series(0, {last}) n",
            last = MESSAGES - 1
        ),
    ]
}

/// The same shape on SQLite, smaller: `messages` over `conversations`, the searcher in the
/// first `searcher_conversations`.
fn sqlite_seed_sql(messages: i64, conversations: i64, searcher_conversations: i64) -> Vec<String> {
    let at = "'2026-01-01T00:00:00.000000Z'";
    let series = |last: i64| {
        format!("WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < {last})")
    };
    vec![
        format!(
            "INSERT INTO users (user_id, created_at) {} SELECT 'w' || n, {at} FROM s",
            series(99)
        ),
        format!("INSERT INTO users (user_id, created_at) VALUES ('searcher', {at})"),
        format!(
            "INSERT INTO conversations (conv_id, kind, next_seq, recall_window_ms, member_count,
                                        change_seq, created_at)
             {} SELECT 'c' || n, 'group', {next}, 0, 1, 0, {at} FROM s",
            series(conversations - 1),
            next = messages / conversations + 1
        ),
        format!(
            "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             {} SELECT 'c' || n, 'w' || (n % 100), 1, 'owner' FROM s",
            series(conversations - 1)
        ),
        format!(
            "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             {} SELECT 'c' || n, 'searcher', 1, 'member' FROM s",
            series(searcher_conversations - 1)
        ),
        format!(
            "INSERT INTO events (conv_id, seq, kind, sender_user, body, created_at)
             {} SELECT 'c' || (n % {conversations}), 1 + n / {conversations}, 'msg',
                       'w' || (n % 100), {BODY_SQL},
                       strftime('%Y-%m-%dT%H:%M:%S', 1700000000 + n, 'unixepoch') || '.000000Z'
                  FROM s",
            series(messages - 1)
        ),
    ]
}

fn request(q: &str) -> SearchRequest {
    SearchRequest {
        user: UserId::parse("searcher").expect("user id"),
        query: SearchQuery::parse(q).expect("query"),
        order: SearchOrder::Newest,
        cursor: None,
        limit: 21,
    }
}

#[tokio::test]
async fn store_search_plan_uses_the_gin_index_at_1m_messages() -> Result<()> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let pool = sqlx::PgPool::connect(db.url()).await?;
    for sql in pg_seed_sql() {
        sqlx::query(&sql).execute(&pool).await?;
    }
    // What autovacuum does after a bulk load: statistics, and the GIN pending list merged.
    sqlx::query("VACUUM ANALYZE search_docs")
        .execute(&pool)
        .await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    pool.close().await;
    // `word100` is in conversations c100 and c5100, only the first the searcher's; `hello` is
    // in one message in ten everywhere.
    // `hel` and `wor` are prefixes of a word in every tenth and in every message.
    for (q, hits) in [
        ("word100", 21),
        ("hello", 21),
        ("\"hello word10\"", 21),
        ("hel", 21),
        ("wor", 21),
        ("hello wor", 21),
    ] {
        let plan = store.explain_search(&request(q)).await?;
        ensure!(
            plan.contains("search_docs_words") && !plan.contains("Seq Scan on search_docs"),
            "{q}: the GIN index is not used:\n{plan}"
        );
        let found = store.search(&request(q)).await?;
        ensure!(found.len() == hits, "{q}: {} hits", found.len());
        ensure!(
            found.iter().all(|h| {
                let conv: i64 = h.conv_id.as_str()[1..].parse().unwrap_or(i64::MAX);
                conv < SEARCHER_CONVERSATIONS
            }),
            "{q}: a hit outside the searcher's conversations"
        );
        ensure!(
            found.windows(2).all(|w| w[0].at_us >= w[1].at_us),
            "{q}: not newest first"
        );
    }
    Ok(())
}

#[tokio::test]
async fn store_search_plan_uses_fts5_on_sqlite() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_dir(dir.path()).await?;
    store.migrate().await?;
    let mut conn =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", store.path().display())).await?;
    for sql in sqlite_seed_sql(20_000, 200, 20) {
        sqlx::query(&sql).execute(&mut conn).await?;
    }
    conn.close().await?;
    let plan = store.explain_search(&request("word100")).await?;
    ensure!(
        // `w` is each language's FTS5 table; `M` is its MATCH.
        plan.contains("SCAN w VIRTUAL TABLE INDEX 0:M"),
        "FTS5 does not answer:\n{plan}"
    );
    let found = store.search(&request("word100")).await?;
    ensure!(!found.is_empty(), "no hits");
    Ok(())
}
