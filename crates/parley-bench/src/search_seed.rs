//! The search scenario's data (`search.rs`): users, conversations, membership periods and
//! messages written straight into the server's own database by a few `INSERT … SELECT`
//! statements, so a million messages take minutes instead of hours through the API. The
//! search triggers index every message as they would in production (PostgreSQL: the statement
//! trigger `events_search_insert`, once per statement; SQLite: the row trigger of that name).
//!
//! The layout (`Layout`): `conversations` groups of five members each, `messages` spread over
//! them round robin (message `i` is the `i / conversations`-th of conversation
//! `i % conversations`), sent over the past year in order of `i`. The searcher and a colleague
//! (`mate`) are members of the first `searcher_conversations`; every other member is one of a
//! pool of users. Every conversation's counters are what the messages make them: `next_seq`,
//! `msg_count` and each event's `msg_ordinal` (PostgreSQL), `member_count`, a read mark per
//! sender at its last message, the join events at seqs 1–5 before the messages.
//!
//! Bodies are [`WORDS_PER_MESSAGE`] words of a vocabulary of [`VOCABULARY`] made-up words
//! (four syllables of [`SYLLABLES`], letters only): word rank `1 + floor(V · u^6)` for a
//! uniform `u`, so rank 1 is about one word in six and the high ranks are rare
//! ([`share_of_messages`]).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context, Result};
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};

use crate::progress::phase;

/// Made-up words of the bodies.
pub const VOCABULARY: u32 = 50_000;
/// Words of each seeded body.
pub const WORDS_PER_MESSAGE: u32 = 8;
/// Exponent of the rank draw: rank `1 + floor(V · u^SKEW)`.
const SKEW: i32 = 6;
/// Sixteen syllables of two letters: a word is four of them, its rank's base-16 digits, the
/// lowest first (so words of ranks equal modulo 256 share their first four letters).
const SYLLABLES: &str = "kalominepusarivoteguzefiyahocube";
/// Members of every seeded conversation.
pub const MEMBERS: u32 = 5;
/// Messages of one seeding statement: progress, and a bounded transition table.
const CHUNK: u64 = 100_000;
/// The seeded messages' span, ending an hour before the run.
const SPAN_S: i64 = 365 * 24 * 3600;

/// The word of `rank` (1..=VOCABULARY).
pub fn word(rank: u32) -> String {
    let s = SYLLABLES.as_bytes();
    (0..4)
        .map(|d| {
            let digit = ((rank >> (4 * d)) & 15) as usize;
            std::str::from_utf8(&s[2 * digit..2 * digit + 2]).unwrap_or("ka")
        })
        .collect()
}

/// The SQL of [`word`] over an integer column `r` (both stores: `substr`, `/`, `%`).
fn word_sql(r: &str) -> String {
    (0..4)
        .map(|d| {
            format!(
                "substr('{SYLLABLES}', 2 * (({r} / {}) % 16) + 1, 2)",
                16u32.pow(d)
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The SQL of a body: the words of ranks `r0 … r7`, space-separated.
fn body_sql() -> String {
    (0..WORDS_PER_MESSAGE)
        .map(|j| word_sql(&format!("r{j}")))
        .collect::<Vec<_>>()
        .join(" || ' ' || ")
}

/// The chance that one word draw is `rank`.
pub fn draw_share(rank: u32) -> f64 {
    let v = f64::from(VOCABULARY);
    let p = 1.0 / f64::from(SKEW);
    (f64::from(rank) / v).powf(p) - (f64::from(rank - 1) / v).powf(p)
}

/// The expected share of messages holding the word of `rank`.
pub fn share_of_messages(rank: u32) -> f64 {
    1.0 - (1.0 - draw_share(rank)).powi(WORDS_PER_MESSAGE as i32)
}

/// The most frequent rank at which the searcher's messages are expected to hold the word at
/// most `hits` times: the rare word.
pub fn rank_expecting(searcher_messages: f64, hits: f64) -> u32 {
    (1..=VOCABULARY)
        .find(|&r| searcher_messages * share_of_messages(r) <= hits)
        .unwrap_or(VOCABULARY)
}

/// A random body of the vocabulary's distribution (the send load's).
pub fn random_body(rng: &mut impl rand::Rng) -> String {
    (0..WORDS_PER_MESSAGE)
        .map(|_| {
            let u: f64 = rng.gen();
            word(1 + (f64::from(VOCABULARY) * u.powi(SKEW)).floor() as u32)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Who and what is seeded.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Prefix of every seeded id.
    pub tag: String,
    pub messages: u64,
    pub conversations: u64,
    pub searcher_conversations: u64,
    /// Users of the pool the other members are drawn from.
    pub pool: u64,
    /// The searcher and the colleague (created through the API, with a device each).
    pub searcher: String,
    pub mate: String,
    /// Microseconds since the epoch of message 0; message `i` is `i · step_us` later.
    pub start_us: i64,
    pub step_us: i64,
}

impl Layout {
    pub fn new(
        tag: &str,
        messages: u64,
        conversations: u64,
        searcher_conversations: u64,
    ) -> Result<Self> {
        ensure!(
            conversations >= 1 && messages >= conversations,
            "at least one message per conversation is needed"
        );
        ensure!(
            (1..=conversations).contains(&searcher_conversations),
            "the searcher's conversations must be 1 to --search-conversations"
        );
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let end_us = now_us - 3_600_000_000;
        let start_us = end_us - SPAN_S * 1_000_000;
        Ok(Layout {
            tag: tag.to_owned(),
            messages,
            conversations,
            searcher_conversations,
            pool: (conversations / 5).max(8),
            searcher: format!("{tag}-me"),
            mate: format!("{tag}-mate"),
            start_us,
            step_us: (SPAN_S * 1_000_000 / messages as i64).max(1),
        })
    }

    pub fn conv_id(&self, c: u64) -> String {
        format!("{}-c{c}", self.tag)
    }

    /// Messages of the searcher's conversations.
    pub fn searcher_messages(&self) -> u64 {
        (0..self.searcher_conversations)
            .map(|c| self.messages_of(c))
            .sum()
    }

    pub fn messages_of(&self, c: u64) -> u64 {
        self.messages / self.conversations + u64::from(c < self.messages % self.conversations)
    }

    /// The SQL of the user in member slot `j` (0..5) of conversation `c` (integer columns).
    fn member_sql(&self, c: &str, j: &str) -> String {
        format!(
            "CASE WHEN {c} < {s} AND {j} = 0 THEN '{me}' WHEN {c} < {s} AND {j} = 1 THEN '{mate}'
                  ELSE '{tag}-u' || (({c} * 4 + {j}) % {pool}) END",
            s = self.searcher_conversations,
            me = self.searcher,
            mate = self.mate,
            tag = self.tag,
            pool = self.pool,
        )
    }

    /// The SQL of messages in conversation `c` (an integer column).
    fn count_sql(&self, c: &str) -> String {
        format!(
            "({} + CASE WHEN {c} < {} THEN 1 ELSE 0 END)",
            self.messages / self.conversations,
            self.messages % self.conversations
        )
    }
}

/// What seeding took and left.
#[derive(Debug, Clone)]
pub struct Seeded {
    pub seed_s: f64,
    pub analyze_s: f64,
    pub msg_events: i64,
    pub indexed_docs: i64,
}

/// Seeds the server's PostgreSQL database at `url`, in one session (its temporary table of
/// word ranks goes with it), then `VACUUM ANALYZE`s the tables a search reads.
pub async fn seed_postgres(url: &str, l: &Layout) -> Result<Seeded> {
    let mut db = PgConnection::connect(url)
        .await
        .context("connecting to the server's database (--database-url)")?;
    let started = Instant::now();
    let t0 = format!(
        "(timestamptz 'epoch' + {} * interval '1 microsecond')",
        l.start_us
    );
    let created = format!("({t0} - interval '1 hour')");
    db.execute(
        format!(
            "INSERT INTO users (user_id, created_at)
             SELECT '{tag}-u' || u, {created} FROM generate_series(0, {last}) u",
            tag = l.tag,
            last = l.pool - 1
        )
        .as_str(),
    )
    .await
    .context("seeding users")?;
    db.execute(
        format!(
            "INSERT INTO conversations (conv_id, kind, title, delivery_mode, next_seq,
                 recall_window_ms, member_count, msg_count, created_at)
             SELECT '{tag}-c' || c, 'group', 'search bench ' || c, 'push',
                    {members} + 1 + {count}, 120000, {members}, {count}, {created}
               FROM generate_series(0, {last}) c",
            tag = l.tag,
            members = MEMBERS,
            count = l.count_sql("c"),
            last = l.conversations - 1
        )
        .as_str(),
    )
    .await
    .context("seeding conversations")?;
    db.execute(
        format!(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at, msg_ordinal)
               SELECT '{tag}-c' || c, j + 1, 'join', {creator}, {member}, {created}, 0
                 FROM generate_series(0, {last}) c, generate_series(0, {mlast}) j
             )
             INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             SELECT '{tag}-c' || c, {member}, j + 1, CASE WHEN j = 0 THEN 'owner' ELSE 'member' END
               FROM generate_series(0, {last}) c, generate_series(0, {mlast}) j",
            tag = l.tag,
            creator = l.member_sql("c", "0"),
            member = l.member_sql("c", "j"),
            last = l.conversations - 1,
            mlast = MEMBERS - 1
        )
        .as_str(),
    )
    .await
    .context("seeding members")?;
    let ranks: String = (0..WORDS_PER_MESSAGE)
        .map(|j| format!(", 1 + floor({VOCABULARY} * power(random(), {SKEW}))::int AS r{j}"))
        .collect();
    db.execute(
        format!(
            "CREATE TEMPORARY TABLE seed_ranks AS
             SELECT i, floor(random() * {MEMBERS})::int AS s{ranks}
               FROM generate_series(0, {last}::bigint) i",
            last = l.messages - 1
        )
        .as_str(),
    )
    .await
    .context("drawing the words")?;
    let mut from = 0;
    while from < l.messages {
        let to = (from + CHUNK).min(l.messages);
        phase(&format!("seeding messages {from}..{to} of {}", l.messages));
        let mut tx = db.begin().await?;
        (&mut *tx)
            .execute(
                format!(
                "INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                                     client_msg_id, request_hash, body, created_at, msg_ordinal)
                 SELECT '{tag}-c' || (i % {n}), {members} + 1 + i / {n}, 'msg', gen_random_uuid(),
                        {sender}, 'd1', 'seed-' || i, md5('seed-' || i), {body},
                        {t0} + i * {step} * interval '1 microsecond', i / {n} + 1
                   FROM seed_ranks WHERE i >= {from} AND i < {to}",
                tag = l.tag,
                n = l.conversations,
                members = MEMBERS,
                sender = l.member_sql(&format!("(i % {})", l.conversations), "s"),
                body = body_sql(),
                step = l.step_us,
            )
                .as_str(),
            )
            .await
            .context("seeding messages")?;
        (&mut *tx)
            .execute(forget_outbox_sql(l).as_str())
            .await
            .context("removing the seeded messages' outbox rows")?;
        tx.commit().await?;
        from = to;
    }
    db.execute("DROP TABLE seed_ranks").await?;
    db.execute(
        format!(
            "INSERT INTO read_marks (conv_id, user_id, read_seq)
             SELECT conv_id, sender_user, max(seq) FROM events
              WHERE conv_id LIKE '{tag}-c%' AND kind = 'msg' GROUP BY conv_id, sender_user",
            tag = l.tag
        )
        .as_str(),
    )
    .await
    .context("seeding read marks")?;
    let seed_s = started.elapsed().as_secs_f64();
    phase("VACUUM ANALYZE of the tables a search reads");
    let started = Instant::now();
    db.execute(
        "VACUUM (ANALYZE) users, conversations, membership_periods, events, search_docs, read_marks",
    )
    .await
    .context("VACUUM ANALYZE")?;
    let analyze_s = started.elapsed().as_secs_f64();
    let like = format!("{}-c%", l.tag);
    let msg_events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id LIKE $1 AND kind = 'msg'")
            .bind(&like)
            .fetch_one(&mut db)
            .await?;
    let indexed_docs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM search_docs WHERE conv_id LIKE $1")
            .bind(&like)
            .fetch_one(&mut db)
            .await?;
    db.close().await?;
    Ok(Seeded {
        seed_s,
        analyze_s,
        msg_events,
        indexed_docs,
    })
}

/// Seeded messages are history: their outbox rows (written by the push trigger) go in the
/// transaction that wrote them, as if expanded long ago, so the server's push worker never
/// sees them.
fn forget_outbox_sql(l: &Layout) -> String {
    format!("DELETE FROM push_outbox WHERE conv_id LIKE '{}-c%'", l.tag)
}

/// The database file of a server's data directory.
pub fn sqlite_file(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join(parley_store::sqlite::DB_FILE_NAME)
}

/// A connection to the embedded store's file beside the running server: WAL, so the server's
/// readers go on; a long busy timeout, so the seed waits for the server's writer.
pub async fn sqlite_connect(data_dir: &Path) -> Result<SqliteConnection> {
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(sqlite_file(data_dir))
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(60));
    SqliteConnection::connect_with(&opts)
        .await
        .context("opening the server's embedded store (--search-data-dir)")
}

/// The time text of the embedded store (`2024-01-02T03:04:05.123456Z`) of an integer column of
/// microseconds.
fn sqlite_time(us: &str) -> String {
    format!(
        "(strftime('%Y-%m-%dT%H:%M:%S', {us} / 1000000, 'unixepoch') || '.' || printf('%06d', {us} % 1000000) || 'Z')"
    )
}

/// Seeds the embedded store of the server whose data directory is `data_dir`, beside it, in
/// transactions of [`CHUNK`] messages; the row trigger indexes each message into FTS5.
pub async fn seed_sqlite(data_dir: &Path, l: &Layout) -> Result<Seeded> {
    let mut db = sqlite_connect(data_dir).await?;
    let started = Instant::now();
    let created_us = l.start_us - 3_600_000_000;
    let created = sqlite_time(&created_us.to_string());
    let series = |last: u64| {
        format!("WITH RECURSIVE s(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM s WHERE x < {last})")
    };
    let mut tx = db.begin().await?;
    (&mut *tx)
        .execute("UPDATE change_clock SET last = last + 1 WHERE id = 1")
        .await?;
    (&mut *tx).execute(
        format!(
            "{series} INSERT INTO users (user_id, created_at) SELECT '{tag}-u' || x, {created} FROM s",
            series = series(l.pool - 1),
            tag = l.tag
        )
        .as_str(),
    )
    .await
    .context("seeding users")?;
    (&mut *tx)
        .execute(
            format!(
                "{series} INSERT INTO conversations (conv_id, kind, title, delivery_mode, next_seq,
                 recall_window_ms, member_count, change_seq, created_at)
             SELECT '{tag}-c' || x, 'group', 'search bench ' || x, 'push', {members} + 1 + {count},
                    120000, {members}, (SELECT last FROM change_clock WHERE id = 1), {created}
               FROM s",
                series = series(l.conversations - 1),
                tag = l.tag,
                members = MEMBERS,
                count = l.count_sql("x"),
            )
            .as_str(),
        )
        .await
        .context("seeding conversations")?;
    let pairs = format!(
        "{series}, j(y) AS (SELECT 0 UNION ALL SELECT y + 1 FROM j WHERE y < {mlast})",
        series = series(l.conversations - 1),
        mlast = MEMBERS - 1
    );
    (&mut *tx)
        .execute(
            format!(
            "{pairs} INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at)
             SELECT '{tag}-c' || x, y + 1, 'join', {creator}, {member}, {created} FROM s, j",
            tag = l.tag,
            creator = l.member_sql("x", "0"),
            member = l.member_sql("x", "y"),
        )
            .as_str(),
        )
        .await
        .context("seeding join events")?;
    (&mut *tx)
        .execute(
            format!(
                "{pairs} INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
             SELECT '{tag}-c' || x, {member}, y + 1, CASE WHEN y = 0 THEN 'owner' ELSE 'member' END
               FROM s, j",
                tag = l.tag,
                member = l.member_sql("x", "y"),
            )
            .as_str(),
        )
        .await
        .context("seeding members")?;
    tx.commit().await?;
    let draws: String = (0..WORDS_PER_MESSAGE)
        .map(|j| format!(", (random() & 2147483647) / 2147483648.0 AS u{j}"))
        .collect();
    db.execute(
        format!(
            "CREATE TEMPORARY TABLE seed_draws AS {series}
             SELECT x AS i, abs(random()) % {MEMBERS} AS s{draws} FROM s",
            series = series(l.messages - 1)
        )
        .as_str(),
    )
    .await
    .context("drawing the words")?;
    let ranks: String = (0..WORDS_PER_MESSAGE)
        .map(|j| {
            let power = vec![format!("u{j}"); SKEW as usize].join(" * ");
            format!(", 1 + CAST({VOCABULARY} * {power} AS INTEGER) AS r{j}")
        })
        .collect();
    db.execute(
        format!("CREATE TEMPORARY TABLE seed_ranks AS SELECT i, s{ranks} FROM seed_draws").as_str(),
    )
    .await?;
    db.execute("DROP TABLE seed_draws").await?;
    let uuid = "lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-a' || substr(h, 18, 3) || '-' || substr(h, 21, 12))";
    let mut from = 0;
    while from < l.messages {
        let to = (from + CHUNK).min(l.messages);
        phase(&format!("seeding messages {from}..{to} of {}", l.messages));
        let mut tx = db.begin().await?;
        (&mut *tx)
            .execute(
                format!(
                "INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                                     client_msg_id, request_hash, body, created_at)
                 SELECT '{tag}-c' || (i % {n}), {members} + 1 + i / {n}, 'msg', {uuid},
                        {sender}, 'd1', 'seed-' || i, lower(hex(randomblob(32))), {body},
                        {time}
                   FROM (SELECT *, hex(randomblob(16)) AS h FROM seed_ranks
                          WHERE i >= {from} AND i < {to} ORDER BY i)",
                tag = l.tag,
                n = l.conversations,
                members = MEMBERS,
                sender = l.member_sql(&format!("(i % {})", l.conversations), "s"),
                body = body_sql(),
                time = sqlite_time(&format!("({} + i * {})", l.start_us, l.step_us)),
            )
                .as_str(),
            )
            .await
            .context("seeding messages")?;
        (&mut *tx)
            .execute(forget_outbox_sql(l).as_str())
            .await
            .context("removing the seeded messages' outbox rows")?;
        tx.commit().await?;
        from = to;
    }
    db.execute("DROP TABLE seed_ranks").await?;
    db.execute(
        format!(
            "INSERT INTO read_marks (conv_id, user_id, read_seq, updated_at, change_seq)
             SELECT conv_id, sender_user, max(seq), max(created_at),
                    (SELECT last FROM change_clock WHERE id = 1)
               FROM events WHERE conv_id LIKE '{tag}-c%' AND kind = 'msg'
              GROUP BY conv_id, sender_user",
            tag = l.tag
        )
        .as_str(),
    )
    .await
    .context("seeding read marks")?;
    let seed_s = started.elapsed().as_secs_f64();
    phase("ANALYZE");
    let started = Instant::now();
    db.execute("ANALYZE").await.context("ANALYZE")?;
    let analyze_s = started.elapsed().as_secs_f64();
    let like = format!("{}-c%", l.tag);
    let msg_events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id LIKE $1 AND kind = 'msg'")
            .bind(&like)
            .fetch_one(&mut db)
            .await?;
    let indexed_docs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM search_docs WHERE conv_id LIKE $1")
            .bind(&like)
            .fetch_one(&mut db)
            .await?;
    db.close().await?;
    Ok(Seeded {
        seed_s,
        analyze_s,
        msg_events,
        indexed_docs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_four_syllables_of_letters_and_distinct() {
        let (a, b) = (word(1), word(2));
        assert_eq!(a.len(), 8);
        assert!(a.bytes().all(|c| c.is_ascii_lowercase()));
        assert_ne!(a, b);
        assert_eq!(&word(30)[..4], &word(30 + 256)[..4]);
        assert_ne!(word(30), word(30 + 256));
    }

    #[test]
    fn the_draw_is_skewed_and_sums_to_one() {
        let total: f64 = (1..=VOCABULARY).map(draw_share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!(draw_share(1) > 0.15 && draw_share(1000) < 1e-4);
        let r = rank_expecting(20_000.0, 8.0);
        assert!(20_000.0 * share_of_messages(r) <= 8.0);
        assert!(20_000.0 * share_of_messages(r - 1) > 8.0);
    }
}
