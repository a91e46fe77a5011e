//! The search scenario (`--scenario search`; docs/PERFORMANCE.md, "Search"): message search
//! over a large log, through the server and straight against the store, and what the index
//! costs the sends, in one run against one server.
//!
//! 1. **Seed** (`search_seed.rs`): `--search-messages` messages (1,000,000) in
//!    `--search-conversations` groups (10,000) written straight into the server's own database
//!    (PostgreSQL: `--database-url`; the embedded store: `--search-data-dir`, the server's data
//!    directory), the searcher a member of `--search-member-of` of them (200); the search
//!    triggers index them as they would any message; then `VACUUM ANALYZE` (`ANALYZE`).
//! 2. **Verify**: every seeded message indexed; each query's first page through the API equals
//!    the store's; the rare word's hits read back through the events API with their words; a
//!    message sent through the API into a seeded conversation gets the next seq and is found.
//! 3. **Search**: each query (a rare word, a common word, a prefix, a phrase, `from:` alone) at
//!    each of `--search-in-flight` (1, 16), `--search-count` searches (closed loop) through the
//!    SDK (`Client::search`, HTTP), and the same `SearchRequest` the server makes (the page
//!    plus one) through `Store::search` on a store of this process opened on the same database:
//!    the raw baseline. Raw and HTTP alternate in halves (raw, HTTP, raw, HTTP), so drift on a
//!    shared machine falls on both. Ratios: throughput HTTP ÷ raw and latency raw ÷ HTTP (p50,
//!    p99), so 1 is "as fast as the raw query"; goal ≥ [`SEARCH_RATIO_GOAL`] (the throughput's).
//! 4. **Sends with indexing on and off**: `--search-send-messages` sends per arm into fresh groups
//!    (created through the API, `--concurrency` in flight, bodies of the same vocabulary), the
//!    insert trigger switched off for the off arm (PostgreSQL: `ALTER TABLE events DISABLE
//!    TRIGGER events_search_insert`; SQLite: `DROP TRIGGER`, created again from its saved SQL),
//!    `--search-send-rounds` rounds of both arms in the order on, off, then off, on. Before each
//!    arm `GET /v1/admin/server` must say `search.indexing` `in_transaction` or `off`. The trigger
//!    is on again at the end, whatever the outcome. Messages of the off arms stay unindexed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use parley_client::{AdminClient, Client, ClientOptions, Method, SearchOptions};
use parley_domain::search::SEARCH_LIMIT_DEFAULT;
use parley_domain::{SearchOrder, SearchQuery, UserId};
use parley_store::pg::PgStore;
use parley_store::sqlite::SqliteStore;
use parley_store::{SearchRequest, Store};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};

use crate::fixtures::{run_tag, user_with_device};
use crate::media::load_average;
use crate::online_groups::OnlineGroups;
use crate::progress::phase;
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::search_seed::{self as seed, Layout, Seeded};
use crate::target::Target;
use crate::BenchArgs;

/// Goal of HTTP search throughput against the raw `Store::search` (the "≥ 0.8× raw").
pub const SEARCH_RATIO_GOAL: f64 = 0.8;
/// Goal of send throughput with indexing on against off (indexing costs at most 15 %).
pub const SEND_RATIO_GOAL: f64 = 0.85;
/// Connections of the raw baseline's PostgreSQL pool: the server's default `--pool-size`.
const RAW_POOL_SIZE: u32 = 16;
/// Hits the rare word is expected to have among the searcher's messages.
const RARE_HITS_EXPECTED: f64 = 8.0;
/// Rank of the common word (about one message in seven holds it).
const COMMON_RANK: u32 = 2;
/// The prefix is the first four letters of this rank's word: every rank equal to it modulo
/// 256 shares them (about 195 words).
const PREFIX_RANK: u32 = 30;
/// Rare-word hits read back through the events API.
const READ_BACK_MAX: usize = 5;
/// Groups (of two) the send arms send into, round robin.
const SEND_GROUPS: usize = 16;
/// Pause after switching the trigger, before an arm's sends.
const SWITCH_SETTLE_MS: u64 = 500;
/// Longest wait for one search through the SDK.
const SEARCH_TIMEOUT_MS: u64 = 300_000;
/// The insert trigger of the search index, in both stores.
const TRIGGER: &str = "events_search_insert";

/// The options of the search scenario; the send arms' sends in flight are `--concurrency`.
#[derive(Args, Debug, Clone)]
pub struct SearchArgs {
    /// Messages seeded into the server's database (search).
    #[arg(long = "search-messages", default_value_t = 1_000_000)]
    pub search_messages: u64,
    /// Group conversations the seeded messages are spread over, five members each (search).
    #[arg(long = "search-conversations", default_value_t = 10_000)]
    pub search_conversations: u64,
    /// Seeded conversations the searcher is a member of (search).
    #[arg(long = "search-member-of", default_value_t = 200)]
    pub search_member_of: u64,
    /// Searches in flight, each level measured for every query (search).
    #[arg(long = "search-in-flight", value_delimiter = ',', default_values_t = [1usize, 16])]
    pub search_in_flight: Vec<usize>,
    /// Searches of each query at each level, through HTTP and again raw (search).
    #[arg(long = "search-count", default_value_t = 200)]
    pub search_count: usize,
    /// Sends of each arm of each round, indexing on and off (search).
    #[arg(long = "search-send-messages", default_value_t = 4_000)]
    pub search_send_messages: usize,
    /// Rounds of the two send arms: on, off, then off, on, … (search).
    #[arg(long = "search-send-rounds", default_value_t = 2)]
    pub search_send_rounds: usize,
    /// The embedded store's server: its data directory, seeded beside it (search). Without
    /// it, --database-url is the server's own PostgreSQL database.
    #[arg(long = "search-data-dir")]
    pub search_data_dir: Option<PathBuf>,
}

/// The server's database.
enum Db {
    Postgres(String),
    Sqlite(PathBuf),
}

impl Db {
    fn of(args: &BenchArgs) -> Result<Db> {
        match (&args.search.search_data_dir, &args.database_url) {
            (Some(_), Some(_)) => {
                bail!("--search-data-dir (embedded store) and --database-url (PostgreSQL) exclude each other")
            }
            (Some(dir), None) => Ok(Db::Sqlite(dir.clone())),
            (None, Some(url)) => Ok(Db::Postgres(url.clone())),
            (None, None) => bail!(
                "search seeds the server's own database: --database-url (PostgreSQL) or --search-data-dir (embedded)"
            ),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Db::Postgres(_) => "postgres",
            Db::Sqlite(_) => "sqlite",
        }
    }

    async fn seed(&self, layout: &Layout) -> Result<Seeded> {
        match self {
            Db::Postgres(url) => seed::seed_postgres(url, layout).await,
            Db::Sqlite(dir) => seed::seed_sqlite(dir, layout).await,
        }
    }

    async fn store(&self) -> Result<Box<dyn Store>> {
        Ok(match self {
            Db::Postgres(url) => Box::new(
                PgStore::connect(url, RAW_POOL_SIZE)
                    .await
                    .context("opening the raw baseline's store")?,
            ),
            Db::Sqlite(dir) => Box::new(
                SqliteStore::open_dir(dir)
                    .await
                    .context("opening the raw baseline's embedded store")?,
            ),
        })
    }
}

/// One query of the run.
#[derive(Debug, Clone)]
struct Query {
    name: &'static str,
    q: String,
}

fn queries(l: &Layout) -> Vec<Query> {
    let rare = seed::rank_expecting(l.searcher_messages() as f64, RARE_HITS_EXPECTED);
    vec![
        Query {
            name: "rare_word",
            q: seed::word(rare),
        },
        Query {
            name: "common_word",
            q: seed::word(COMMON_RANK),
        },
        Query {
            name: "prefix",
            q: seed::word(PREFIX_RANK)[..4].to_owned(),
        },
        Query {
            name: "phrase",
            q: format!("\"{} {}\"", seed::word(1), seed::word(COMMON_RANK)),
        },
        Query {
            name: "from_filter",
            q: format!("from:{}", l.mate),
        },
    ]
}

/// The request the server makes of its store for a first page of `q` by `user`.
fn store_request(user: &str, q: &str) -> Result<SearchRequest> {
    Ok(SearchRequest {
        user: UserId::parse(user)?,
        query: SearchQuery::parse(q).with_context(|| format!("parsing the query {q:?}"))?,
        order: SearchOrder::Newest,
        cursor: None,
        limit: SEARCH_LIMIT_DEFAULT + 1,
    })
}

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let s = &args.search;
    ensure!(
        !s.search_in_flight.is_empty()
            && s.search_in_flight.iter().all(|&c| c > 0)
            && s.search_count > 0,
        "--search-in-flight needs levels of at least 1 and --search-count at least 1"
    );
    let db = Db::of(args)?;
    target.check_ready().await?;
    let load_before = load_average();
    let tag = format!("sb{}", run_tag(6));
    let layout = Layout::new(
        &tag,
        s.search_messages,
        s.search_conversations,
        s.search_member_of,
    )?;
    let admin = target.admin()?;
    // The searcher's client waits as long as a search may take under load (the SDK's default
    // of 10 s is shorter than a common word's search at 16 in flight on two cores).
    let long = ClientOptions {
        request_timeout_ms: SEARCH_TIMEOUT_MS,
        ..ClientOptions::default()
    };
    let searcher = AdminClient::with_options(target.url(), &target.admin_token, long)?
        .device_client(&user_with_device(&admin, &layout.searcher).await?);
    user_with_device(&admin, &layout.mate).await?;

    phase(&format!(
        "seeding {} messages in {} conversations ({} of them the searcher's) into the server's {} database",
        layout.messages,
        layout.conversations,
        layout.searcher_conversations,
        db.kind()
    ));
    let seeded = db.seed(&layout).await?;
    println!(
        "seeded in {:.1} s, analyzed in {:.1} s: {} messages, {} indexed",
        seeded.seed_s, seeded.analyze_s, seeded.msg_events, seeded.indexed_docs
    );
    let store = db.store().await?;
    let queries = queries(&layout);

    phase("verifying the seeded data through the API");
    let verified = verify(&layout, &seeded, &queries, &searcher, &*store).await?;

    let mut measured = Vec::new();
    for query in &queries {
        measured.push(measure_query(s, &layout, query, &searcher, &*store).await?);
    }

    let sends = send_arms(args, target, &db, &admin).await?;
    let report = report(&Report {
        args,
        db: &db,
        layout: &layout,
        seeded: &seeded,
        verified,
        measured,
        sends,
        load: (load_before, load_average()),
    });
    println!("{}", summary(&report));
    publish(&args.out, &report)?;
    let errors = report["errors"].as_u64().unwrap_or(0);
    if report["verify"]["ok"] != json!(true) {
        bail!("the seeded data did not verify (see verify in the report)");
    }
    if errors > 0 {
        bail!("{errors} errors (see the report)");
    }
    Ok(())
}

/// The verification's findings.
async fn verify(
    l: &Layout,
    seeded: &Seeded,
    queries: &[Query],
    searcher: &Client,
    store: &dyn Store,
) -> Result<Value> {
    let mut failures: Vec<String> = Vec::new();
    if seeded.msg_events != l.messages as i64 {
        failures.push(format!(
            "{} message events seeded, {} asked for",
            seeded.msg_events, l.messages
        ));
    }
    if seeded.indexed_docs != seeded.msg_events {
        failures.push(format!(
            "{} of {} seeded messages indexed",
            seeded.indexed_docs, seeded.msg_events
        ));
    }
    let mut first_pages = serde_json::Map::new();
    for query in queries {
        let raw = store.search(&store_request(&l.searcher, &query.q)?).await?;
        let page = searcher
            .search(&SearchOptions::new(&query.q))
            .await
            .with_context(|| format!("searching {:?}", query.q))?;
        let raw_keys: Vec<(String, i64)> = raw
            .iter()
            .take(SEARCH_LIMIT_DEFAULT as usize)
            .map(|h| (h.conv_id.as_str().to_owned(), h.seq))
            .collect();
        let http_keys: Vec<(String, i64)> = page
            .hits
            .iter()
            .map(|h| (h.conv_id.clone(), h.seq))
            .collect();
        if raw_keys != http_keys {
            failures.push(format!(
                "{}: the API's first page differs from the store's",
                query.name
            ));
        }
        if page.hits.is_empty() {
            failures.push(format!("{}: no hit", query.name));
        }
        if page.next_cursor.is_some() != (raw.len() > SEARCH_LIMIT_DEFAULT as usize) {
            failures.push(format!(
                "{}: next_cursor disagrees with the store",
                query.name
            ));
        }
        first_pages.insert(query.name.to_owned(), json!(page.hits.len()));
    }

    // The rare word's hits, read back through the events API.
    let rare = &queries[0].q;
    let page = searcher.search(&SearchOptions::new(rare)).await?;
    let mut read_back = 0;
    for hit in page.hits.iter().take(READ_BACK_MAX) {
        let events = searcher
            .events_after(&hit.conv_id, hit.seq - 1, Some(1), None)
            .await
            .context("reading a hit back through the events API")?;
        match events.events.first() {
            Some(e)
                if e.seq == hit.seq
                    && e.body
                        .as_deref()
                        .is_some_and(|b| b.split(' ').any(|w| w == rare))
                    && e.sender_user.as_deref() == Some(hit.sender.as_str()) =>
            {
                read_back += 1
            }
            other => failures.push(format!(
                "hit {}#{} read back as {other:?}",
                hit.conv_id, hit.seq
            )),
        }
    }

    // A send into a seeded conversation takes the next seq, and is found.
    let conv = l.conv_id(0);
    let marker = format!("zq{}", l.tag);
    let ack = searcher
        .send_with_retry(
            &conv,
            &format!("{}-verify", l.tag),
            &format!("verify {marker}"),
        )
        .await
        .context("sending into a seeded conversation")?;
    let expected_seq = (seed::MEMBERS as u64 + 1 + l.messages_of(0)) as i64;
    if ack.seq != expected_seq {
        failures.push(format!(
            "a send into a seeded conversation took seq {}, not {expected_seq}",
            ack.seq
        ));
    }
    let found = searcher.search(&SearchOptions::new(&marker)).await?;
    let sent_found = found.hits.len() == 1 && found.hits[0].seq == ack.seq;
    if !sent_found {
        failures.push(format!(
            "the message sent into a seeded conversation was found {} times",
            found.hits.len()
        ));
    }
    Ok(json!({
        "ok": failures.is_empty(),
        "failures": failures,
        "first_page_hits": first_pages,
        "rare_hits_read_back": read_back,
        "sent_seq": ack.seq,
        "sent_seq_expected": expected_seq,
        "sent_found": sent_found,
    }))
}

/// One path's searches at one level.
struct Round {
    latency: Histogram<u64>,
    wall: Duration,
    searches: usize,
    errors: u64,
    hits: Option<usize>,
}

impl Round {
    fn new() -> Result<Self> {
        Ok(Round {
            latency: micros_histogram()?,
            wall: Duration::ZERO,
            searches: 0,
            errors: 0,
            hits: None,
        })
    }

    /// Searches answered per second of the round's wall time (failed ones do not count).
    fn per_s(&self) -> f64 {
        self.latency.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn json(&self) -> Value {
        json!({
            "searches": self.searches,
            "errors": self.errors,
            "wall_s": self.wall.as_secs_f64(),
            "searches_per_s": self.per_s(),
            "latency_ms": percentiles_ms(&self.latency),
            "hits": self.hits,
        })
    }
}

/// `n` searches, `c` in flight, closed loop; `search` answers the hit count.
async fn closed_loop<F, Fut>(round: &mut Round, n: usize, c: usize, search: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<usize>>,
{
    let started = Instant::now();
    let done: Vec<(Duration, Result<usize>)> = futures::stream::iter(0..n)
        .map(|_| {
            let fut = search();
            async move {
                let t = Instant::now();
                let r = fut.await;
                (t.elapsed(), r)
            }
        })
        .buffer_unordered(c)
        .collect()
        .await;
    round.wall += started.elapsed();
    round.searches += n;
    for (d, r) in done {
        match r {
            Ok(hits) => {
                record(&mut round.latency, d);
                round.hits = Some(hits);
            }
            Err(e) => {
                round.errors += 1;
                tracing::warn!(error = format!("{e:#}"), "a search failed");
            }
        }
    }
}

async fn measure_query(
    s: &SearchArgs,
    l: &Layout,
    query: &Query,
    searcher: &Client,
    store: &dyn Store,
) -> Result<Value> {
    let req = store_request(&l.searcher, &query.q)?;
    let opts = SearchOptions::new(&query.q);
    let http = || async {
        Ok(searcher
            .search(&opts)
            .await
            .context("a search through the API")?
            .hits
            .len())
    };
    let raw = || async { Ok(store.search(&req).await.context("a raw search")?.len()) };
    let mut levels = Vec::new();
    for &c in &s.search_in_flight {
        phase(&format!(
            "{} ({}): {} searches at {c} in flight, raw and through HTTP",
            query.name, query.q, s.search_count
        ));
        let warm = c.max(4);
        closed_loop(&mut Round::new()?, warm, c, raw).await;
        closed_loop(&mut Round::new()?, warm, c, http).await;
        let (mut r, mut h) = (Round::new()?, Round::new()?);
        let half = s.search_count / 2;
        for n in [half, s.search_count - half] {
            if n > 0 {
                closed_loop(&mut r, n, c, raw).await;
                closed_loop(&mut h, n, c, http).await;
            }
        }
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        let throughput_ratio = ratio(h.per_s(), r.per_s());
        let (hp, rp) = (percentiles_ms(&h.latency), percentiles_ms(&r.latency));
        levels.push(json!({
            "in_flight": c,
            "http": h.json(),
            "raw": r.json(),
            "throughput_ratio_http_to_raw": throughput_ratio,
            "p50_ratio_raw_to_http": ratio(rp.p50, hp.p50),
            "p99_ratio_raw_to_http": ratio(rp.p99, hp.p99),
            "goal_met": throughput_ratio.map(|x| x >= SEARCH_RATIO_GOAL),
        }));
    }
    Ok(json!({"name": query.name, "q": query.q, "levels": levels}))
}

/// The switch of the index's insert trigger.
enum Trigger {
    Postgres(PgConnection),
    Sqlite {
        db: SqliteConnection,
        create_sql: String,
    },
}

impl Trigger {
    async fn open(db: &Db) -> Result<Trigger> {
        Ok(match db {
            Db::Postgres(url) => Trigger::Postgres(PgConnection::connect(url).await?),
            Db::Sqlite(dir) => {
                let mut db = seed::sqlite_connect(dir).await?;
                let create_sql: String = sqlx::query_scalar(
                    "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = $1",
                )
                .bind(TRIGGER)
                .fetch_optional(&mut db)
                .await?
                .with_context(|| format!("the embedded store has no trigger {TRIGGER}"))?;
                Trigger::Sqlite { db, create_sql }
            }
        })
    }

    async fn set(&mut self, on: bool) -> Result<()> {
        match self {
            Trigger::Postgres(c) => {
                let verb = if on { "ENABLE" } else { "DISABLE" };
                c.execute(format!("ALTER TABLE events {verb} TRIGGER {TRIGGER}").as_str())
                    .await?;
            }
            Trigger::Sqlite { db, create_sql } => {
                let present: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = $1",
                )
                .bind(TRIGGER)
                .fetch_one(&mut *db)
                .await?;
                if on && present == 0 {
                    db.execute(create_sql.as_str()).await?;
                } else if !on && present == 1 {
                    db.execute(format!("DROP TRIGGER {TRIGGER}").as_str())
                        .await?;
                }
            }
        }
        Ok(())
    }
}

/// What `GET /v1/admin/server` says of the search index's indexing.
async fn reported_indexing(admin: &AdminClient) -> Result<String> {
    let (status, body) = admin
        .raw(Method::GET, "/v1/admin/server")
        .send()
        .await
        .context("GET /v1/admin/server")?;
    ensure!(status == 200, "GET /v1/admin/server answered {status}");
    Ok(body["search"]["indexing"]
        .as_str()
        .unwrap_or("(none)")
        .to_owned())
}

/// One arm's sends, summed over its rounds.
struct Arm {
    ack: Histogram<u64>,
    wall: Duration,
    sends: usize,
    errors: u64,
    per_round: Vec<f64>,
}

impl Arm {
    fn new() -> Result<Self> {
        Ok(Arm {
            ack: micros_histogram()?,
            wall: Duration::ZERO,
            sends: 0,
            errors: 0,
            per_round: Vec::new(),
        })
    }

    fn per_s(&self) -> f64 {
        self.sends as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn json(&self) -> Value {
        json!({
            "sends": self.sends,
            "errors": self.errors,
            "wall_s": self.wall.as_secs_f64(),
            "sends_per_s": self.per_s(),
            "sends_per_s_by_round": self.per_round,
            "ack_ms": percentiles_ms(&self.ack),
        })
    }
}

async fn send_arms(
    args: &BenchArgs,
    target: &Target,
    db: &Db,
    admin: &AdminClient,
) -> Result<Value> {
    let s = &args.search;
    let groups = OnlineGroups::create(args, target, "ss", SEND_GROUPS, 2).await?;
    let mut trigger = Trigger::open(db).await?;
    let outcome = arms(args, s, &groups, &mut trigger, admin).await;
    let restored = trigger
        .set(true)
        .await
        .context("switching indexing on again");
    let back_on = reported_indexing(admin).await;
    let (on, off, reported) = outcome?;
    restored?;
    let back_on = back_on?;
    let ratio = on.per_s() / off.per_s().max(1e-9);
    let reported_ok = reported
        .iter()
        .all(|(arm, said)| said == if arm == "on" { "in_transaction" } else { "off" })
        && back_on == "in_transaction";
    Ok(json!({
        "sends_in_flight": args.concurrency,
        "groups": SEND_GROUPS,
        "rounds": s.search_send_rounds,
        "on": on.json(),
        "off": off.json(),
        "throughput_ratio_on_to_off": ratio,
        "goal": SEND_RATIO_GOAL,
        "goal_met": ratio >= SEND_RATIO_GOAL,
        "indexing_reported": reported
            .iter()
            .map(|(arm, said)| json!({"arm": arm, "search_indexing": said}))
            .collect::<Vec<_>>(),
        "indexing_reported_after": back_on,
        "indexing_reported_matches": reported_ok,
    }))
}

type ArmsOutcome = (Arm, Arm, Vec<(String, String)>);

async fn arms(
    args: &BenchArgs,
    s: &SearchArgs,
    groups: &OnlineGroups,
    trigger: &mut Trigger,
    admin: &AdminClient,
) -> Result<ArmsOutcome> {
    let (mut on, mut off) = (Arm::new()?, Arm::new()?);
    let mut reported = Vec::new();
    let mut rng = StdRng::seed_from_u64(args.seed);
    for round in 0..s.search_send_rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for indexing in order {
            let name = if indexing { "on" } else { "off" };
            trigger.set(indexing).await?;
            reported.push((name.to_owned(), reported_indexing(admin).await?));
            tokio::time::sleep(Duration::from_millis(SWITCH_SETTLE_MS)).await;
            phase(&format!(
                "sends, indexing {name} (round {}): {} at {} in flight",
                round + 1,
                s.search_send_messages,
                args.concurrency
            ));
            let bodies: Vec<String> = (0..s.search_send_messages)
                .map(|_| seed::random_body(&mut rng))
                .collect();
            let arm = if indexing { &mut on } else { &mut off };
            send_round(
                groups,
                &bodies,
                args.concurrency,
                &format!("r{round}{name}"),
                arm,
            )
            .await;
        }
    }
    Ok((on, off, reported))
}

async fn send_round(groups: &OnlineGroups, bodies: &[String], c: usize, key: &str, arm: &mut Arm) {
    let n = bodies.len();
    let started = Instant::now();
    let done: Vec<(Duration, bool)> = futures::stream::iter(0..n)
        .map(|i| {
            let g = i % groups.conv_ids.len();
            let (sender, conv) = (&groups.senders[g], &groups.conv_ids[g]);
            let id = format!("{key}-{i}");
            async move {
                let t = Instant::now();
                let ok = sender.send_with_retry(conv, &id, &bodies[i]).await.is_ok();
                (t.elapsed(), ok)
            }
        })
        .buffer_unordered(c.max(1))
        .collect()
        .await;
    let wall = started.elapsed();
    arm.wall += wall;
    arm.sends += n;
    arm.per_round.push(n as f64 / wall.as_secs_f64().max(1e-9));
    for (d, ok) in done {
        if ok {
            record(&mut arm.ack, d);
        } else {
            arm.errors += 1;
        }
    }
}

struct Report<'a> {
    args: &'a BenchArgs,
    db: &'a Db,
    layout: &'a Layout,
    seeded: &'a Seeded,
    verified: Value,
    measured: Vec<Value>,
    sends: Value,
    load: (Option<f64>, Option<f64>),
}

fn report(r: &Report<'_>) -> Value {
    let l = r.layout;
    let levels = || {
        r.measured
            .iter()
            .flat_map(|q| q["levels"].as_array().cloned().unwrap_or_default())
    };
    let worst = levels()
        .filter_map(|lv| lv["throughput_ratio_http_to_raw"].as_f64())
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let search_errors: u64 = levels()
        .map(|lv| {
            lv["http"]["errors"].as_u64().unwrap_or(0) + lv["raw"]["errors"].as_u64().unwrap_or(0)
        })
        .sum();
    let send_errors = r.sends["on"]["errors"].as_u64().unwrap_or(0)
        + r.sends["off"]["errors"].as_u64().unwrap_or(0);
    let mismatch = u64::from(r.sends["indexing_reported_matches"] != json!(true));
    json!({
        "scenario": "search",
        "store": r.db.kind(),
        "load_average_1m_before": r.load.0,
        "load_average_1m_after": r.load.1,
        "seed": {
            "messages": l.messages,
            "conversations": l.conversations,
            "searcher_conversations": l.searcher_conversations,
            "searcher_messages": l.searcher_messages(),
            "members_per_conversation": seed::MEMBERS,
            "user_pool": l.pool,
            "vocabulary": seed::VOCABULARY,
            "words_per_message": seed::WORDS_PER_MESSAGE,
            "seed_s": r.seeded.seed_s,
            "analyze_s": r.seeded.analyze_s,
            "msg_events": r.seeded.msg_events,
            "indexed_docs": r.seeded.indexed_docs,
            "searcher": l.searcher,
        },
        "verify": r.verified,
        "search": {
            "searches_per_level": r.args.search.search_count,
            "in_flight": r.args.search.search_in_flight,
            "page_len": SEARCH_LIMIT_DEFAULT,
            "raw_baseline": "Store::search of the request the server makes (the page plus one), on a store of the bench process opened on the server's database",
            "queries": r.measured,
            "goal": SEARCH_RATIO_GOAL,
            "worst_throughput_ratio_http_to_raw": worst,
            "goal_met": worst.map(|w| w >= SEARCH_RATIO_GOAL),
        },
        "send": r.sends,
        "errors": search_errors + send_errors + mismatch,
    })
}

/// The readable end-of-run summary.
fn summary(r: &Value) -> String {
    let f = |v: &Value, digits: usize| {
        v.as_f64()
            .map_or("-".to_owned(), |x| format!("{x:.digits$}"))
    };
    let seed = &r["seed"];
    let mut lines = vec![
        format!(
            "search on {}: {} messages in {} conversations, the searcher in {} ({} messages); seeded in {} s, analyzed in {} s",
            r["store"],
            seed["messages"],
            seed["conversations"],
            seed["searcher_conversations"],
            seed["searcher_messages"],
            f(&seed["seed_s"], 1),
            f(&seed["analyze_s"], 1)
        ),
        format!("verify: ok {} {}", r["verify"]["ok"], r["verify"]["failures"]),
        "query            in flight  HTTP p50 / p99 ms   raw p50 / p99 ms    HTTP/s   raw/s  ratio (tput, p50, p99)  hits".to_owned(),
    ];
    for q in r["search"]["queries"].as_array().into_iter().flatten() {
        for lv in q["levels"].as_array().into_iter().flatten() {
            let (h, w) = (&lv["http"], &lv["raw"]);
            lines.push(format!(
                "{:<16} {:>9}  {:>7} / {:>7}   {:>7} / {:>7}  {:>7} {:>7}  {} {} {}  {}",
                q["name"].as_str().unwrap_or("?"),
                lv["in_flight"],
                f(&h["latency_ms"]["p50"], 2),
                f(&h["latency_ms"]["p99"], 2),
                f(&w["latency_ms"]["p50"], 2),
                f(&w["latency_ms"]["p99"], 2),
                f(&h["searches_per_s"], 0),
                f(&w["searches_per_s"], 0),
                f(&lv["throughput_ratio_http_to_raw"], 2),
                f(&lv["p50_ratio_raw_to_http"], 2),
                f(&lv["p99_ratio_raw_to_http"], 2),
                h["hits"]
            ));
        }
    }
    let s = &r["send"];
    lines.push(format!(
        "search goal (HTTP ≥ {} × raw throughput) met: {} (worst {})",
        r["search"]["goal"],
        r["search"]["goal_met"],
        f(&r["search"]["worst_throughput_ratio_http_to_raw"], 2)
    ));
    lines.push(format!(
        "sends with indexing on: {}/s (ack p99 {} ms), off: {}/s (ack p99 {} ms); on ÷ off {} (goal ≥ {}: {}); /v1/admin/server agreed: {}",
        f(&s["on"]["sends_per_s"], 0),
        f(&s["on"]["ack_ms"]["p99"], 1),
        f(&s["off"]["sends_per_s"], 0),
        f(&s["off"]["ack_ms"]["p99"], 1),
        f(&s["throughput_ratio_on_to_off"], 3),
        s["goal"],
        s["goal_met"],
        s["indexing_reported_matches"]
    ));
    lines.push(format!("errors: {}", r["errors"]));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_parse_and_the_queries_are_valid() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        Cli::command().debug_assert();
        let cli = Cli::parse_from([
            "bench",
            "--url",
            "http://127.0.0.1:1",
            "--admin-token",
            "t",
            "--scenario",
            "search",
            "--search-messages",
            "20000",
            "--search-conversations",
            "200",
            "--search-member-of",
            "20",
            "--search-in-flight",
            "1,4",
        ]);
        assert_eq!(cli.bench.scenario, crate::Scenario::Search);
        let s = &cli.bench.search;
        assert_eq!(
            (
                s.search_messages,
                s.search_conversations,
                s.search_member_of
            ),
            (20_000, 200, 20)
        );
        assert_eq!(s.search_in_flight, vec![1, 4]);
        let l = Layout::new(
            "sbabc",
            s.search_messages,
            s.search_conversations,
            s.search_member_of,
        )
        .expect("a layout");
        assert_eq!(l.searcher_messages(), 2_000);
        for q in queries(&l) {
            let req = store_request(&l.searcher, &q.q).expect("a valid request");
            assert_eq!(req.limit, SEARCH_LIMIT_DEFAULT + 1);
        }
    }
}
