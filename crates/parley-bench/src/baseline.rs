//! The raw send transaction straight against PostgreSQL: the ceiling the server is measured
//! against.
//!
//! It runs in a scratch schema of its own (created in the database of `--database-url` and
//! dropped afterwards; the server's tables are never touched), with the tables of
//! `parley-store`'s migrations, and executes exactly the statements of the store's send path
//! (`parley_store::pg::SEND_*_SQL`): `BEGIN`, the row lock `FOR NO KEY UPDATE`, the
//! request-key, tombstone and membership check, the insert + counter + read-mark statement,
//! `COMMIT`. Workers each hold one connection and run transactions back to back; each
//! statement is timed, which is where the profile of the send path comes from.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use parley_domain::RequestHash;
use parley_store::pg::{PgStore, SEND_INSERT_SQL, SEND_KEY_CHECK_SQL, SEND_LOCK_SQL};
use parley_store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, Row};

use super::load::BODY;
use super::report::{micros_histogram, percentiles_ms, Percentiles};

/// Prefix of the scratch schemas; nothing else is ever dropped.
const SCRATCH_PREFIX: &str = "parley_bench_base_";
/// Transactions before the clock starts: connections warm, statements prepared.
const WARMUP: Duration = Duration::from_millis(1_000);
/// Users per direct chat of the many-conversation shape.
const DIRECT_MEMBERS: usize = 2;

/// Which conversations the transactions go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Many direct chats, each send to a random one from one of its two members.
    Many { convs: usize },
    /// Every worker sends to one group of which all workers are members.
    One,
}

#[derive(Debug, Clone, Copy)]
pub struct BaselinePlan {
    pub shape: Shape,
    pub concurrency: usize,
    pub duration: Duration,
}

/// Mean time of each statement of the send transaction, as the client sees it (round trip
/// included), in milliseconds.
#[derive(Debug, Default, Clone, Serialize)]
pub struct StatementTimes {
    pub begin: f64,
    pub lock: f64,
    pub check: f64,
    pub insert: f64,
    pub commit: f64,
}

#[derive(Debug, Serialize)]
pub struct BaselineResult {
    pub shape: Shape,
    pub concurrency: usize,
    pub duration_s: f64,
    pub commits: u64,
    pub errors: u64,
    pub tps: f64,
    pub transaction_ms: Percentiles,
    pub statement_mean_ms: StatementTimes,
}

/// A scratch schema, dropped when the run is over. A schema rather than a database: dropping
/// a database forces a checkpoint, which can take seconds after a load run.
struct Scratch {
    admin: PgConnectOptions,
    name: String,
    /// Connections whose `search_path` is the scratch schema only.
    options: PgConnectOptions,
}

impl Scratch {
    async fn create(database_url: &str) -> Result<Scratch> {
        let admin = PgConnectOptions::from_str(database_url)
            .context("--database-url is not a PostgreSQL URL")?;
        let name = format!(
            "{SCRATCH_PREFIX}{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let mut conn = admin
            .connect()
            .await
            .context("cannot connect to --database-url")?;
        sqlx::query(&format!("CREATE SCHEMA \"{name}\""))
            .execute(&mut conn)
            .await
            .with_context(|| format!("cannot create the scratch schema {name}"))?;
        let _ = conn.close().await;
        let options = admin.clone().options([("search_path", name.as_str())]);
        Ok(Scratch {
            admin,
            name,
            options,
        })
    }

    async fn drop_now(self) {
        let dropped = async {
            let mut conn = self.admin.connect().await?;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name))
                .execute(&mut conn)
                .await?;
            conn.close().await
        };
        if let Err(e) = dropped.await {
            tracing::warn!(schema = %self.name, error = %e, "cannot drop the scratch schema");
        }
    }
}

/// Creates the scratch schema, fills it, runs each plan in turn (e.g. each concurrency level
/// of a ramp), and drops it.
pub async fn run_many(database_url: &str, plans: &[BaselinePlan]) -> Result<Vec<BaselineResult>> {
    if plans.iter().any(|p| p.concurrency == 0) {
        bail!("the baseline needs at least one worker");
    }
    let scratch = Scratch::create(database_url).await?;
    let mut results = Vec::with_capacity(plans.len());
    for &plan in plans {
        match run_in(&scratch.options, plan).await {
            Ok(r) => results.push(r),
            Err(e) => {
                scratch.drop_now().await;
                return Err(e);
            }
        }
    }
    scratch.drop_now().await;
    Ok(results)
}

/// Conversation ids and their member ids for `shape`, as filled in by [`fill`].
fn topology(shape: Shape, concurrency: usize) -> (Vec<String>, Vec<Vec<String>>) {
    match shape {
        Shape::Many { convs } => {
            let ids = (0..convs).map(|i| format!("c{i}")).collect();
            let members = (0..convs)
                .map(|i| {
                    (0..DIRECT_MEMBERS)
                        .map(|m| format!("u{}", DIRECT_MEMBERS * i + m))
                        .collect()
                })
                .collect();
            (ids, members)
        }
        Shape::One => (
            vec![format!("hot{concurrency}")],
            vec![(0..concurrency).map(|w| format!("w{w}")).collect()],
        ),
    }
}

/// Users, conversations, membership periods and join events, as the server would have them
/// after creating the conversations.
async fn fill(conn: &mut PgConnection, convs: &[String], members: &[Vec<String>]) -> Result<()> {
    let mut tx = conn.begin().await?;
    for (conv, users) in convs.iter().zip(members) {
        let kind = if users.len() == DIRECT_MEMBERS && conv.starts_with('c') {
            "direct"
        } else {
            "group"
        };
        sqlx::query(
            "INSERT INTO conversations (conv_id, kind, next_seq, recall_window_ms, member_count)
             VALUES ($1, $2, $3, 120000, $4) ON CONFLICT DO NOTHING",
        )
        .bind(conv)
        .bind(kind)
        .bind(users.len() as i64 + 1)
        .bind(users.len() as i32)
        .execute(&mut *tx)
        .await?;
        for (i, user) in users.iter().enumerate() {
            let seq = i as i64 + 1;
            let role = if i == 0 { "owner" } else { "member" };
            sqlx::query("INSERT INTO users (user_id) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(user)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(conv)
            .bind(user)
            .bind(seq)
            .bind(role)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, msg_ordinal)
                 VALUES ($1, $2, 'join', $3, $3, 0) ON CONFLICT DO NOTHING",
            )
            .bind(conv)
            .bind(seq)
            .bind(user)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

#[derive(Default)]
struct WorkerTally {
    commits: u64,
    errors: u64,
    // Microseconds spent in each statement, over the measured transactions.
    begin: u64,
    lock: u64,
    check: u64,
    insert: u64,
    commit: u64,
}

impl WorkerTally {
    /// Counts one committed transaction and the time of each of its statements.
    fn commit(&mut self, [begin, lock, check, insert, commit]: [u64; 5]) {
        self.commits += 1;
        self.begin += begin;
        self.lock += lock;
        self.check += check;
        self.insert += insert;
        self.commit += commit;
    }

    fn add(&mut self, other: &WorkerTally) {
        self.commits += other.commits;
        self.errors += other.errors;
        self.begin += other.begin;
        self.lock += other.lock;
        self.check += other.check;
        self.insert += other.insert;
        self.commit += other.commit;
    }

    /// Mean time of each statement per committed transaction, in milliseconds.
    fn statement_means(&self) -> StatementTimes {
        let mean_ms = |us: u64| {
            if self.commits == 0 {
                0.0
            } else {
                us as f64 / self.commits as f64 / 1000.0
            }
        };
        StatementTimes {
            begin: mean_ms(self.begin),
            lock: mean_ms(self.lock),
            check: mean_ms(self.check),
            insert: mean_ms(self.insert),
            commit: mean_ms(self.commit),
        }
    }
}

/// One send transaction, exactly as `parley_store::pg::send` runs it; returns the time of each
/// statement in microseconds.
async fn send_once(
    conn: &mut PgConnection,
    conv: &str,
    sender: &str,
    key: &str,
    hash: &str,
) -> Result<[u64; 5]> {
    let us = |from: Instant| from.elapsed().as_micros() as u64;
    let t = Instant::now();
    let mut tx = conn.begin().await?;
    let begin = us(t);
    let t = Instant::now();
    let locked = sqlx::query(SEND_LOCK_SQL)
        .bind(conv)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(locked) = locked else {
        bail!("conversation {conv} is missing");
    };
    let seq: i64 = locked.try_get("next_seq")?;
    let msg_ordinal: i64 = locked.try_get::<i64, _>("msg_count")? + 1;
    let lock = us(t);
    let t = Instant::now();
    let found = sqlx::query(SEND_KEY_CHECK_SQL)
        .bind(conv)
        .bind(sender)
        .bind(key)
        .fetch_all(&mut *tx)
        .await?;
    let mut is_member = false;
    for row in &found {
        let src: &str = row.try_get("src")?;
        match src {
            "member" => is_member = true,
            _ => bail!("request key {key} was used before"),
        }
    }
    if !is_member {
        bail!("{sender} is not a member of {conv}");
    }
    let check = us(t);
    let t = Instant::now();
    sqlx::query(SEND_INSERT_SQL)
        .bind(conv)
        .bind(seq)
        .bind(uuid::Uuid::new_v4())
        .bind(sender)
        .bind("bench")
        .bind(key)
        .bind(hash)
        .bind(BODY)
        .bind(msg_ordinal)
        .fetch_one(&mut *tx)
        .await?;
    let insert = us(t);
    let t = Instant::now();
    tx.commit().await?;
    Ok([begin, lock, check, insert, us(t)])
}

/// Runs `plan` in the scratch schema: its tables and conversations, then its workers, each on
/// a connection of its own, warmed up for [`WARMUP`] and measured for the plan's duration.
async fn run_in(options: &PgConnectOptions, plan: BaselinePlan) -> Result<BaselineResult> {
    let pool = PgPoolOptions::new()
        .max_connections(plan.concurrency as u32 + 1)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options.clone())
        .await
        .context("cannot connect to the scratch schema")?;
    PgStore::from_pool(pool.clone())
        .migrate()
        .await
        .context("cannot create the tables in the scratch schema")?;
    let (convs, members) = topology(plan.shape, plan.concurrency);
    {
        let mut conn = pool.acquire().await?;
        fill(&mut conn, &convs, &members).await?;
    }
    let world = Arc::new(Workload {
        plan,
        convs,
        members,
        hash: RequestHash::of_message(BODY).as_str().into(),
        run_id: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        measure_from: Instant::now() + WARMUP,
    });
    let mut workers = Vec::with_capacity(plan.concurrency);
    for w in 0..plan.concurrency {
        let conn = pool.acquire().await?.detach();
        workers.push(tokio::spawn(world.clone().work(w, conn)));
    }
    let stop = world.stop();
    let mut last_end = stop;
    let mut total = WorkerTally::default();
    let mut hist = micros_histogram()?;
    for w in workers {
        let (t, h, ended) = w.await.context("a baseline worker failed")?;
        last_end = last_end.max(ended);
        total.add(&t);
        hist.add(&h)?;
    }
    pool.close().await;
    // Transactions started before `stop` are counted, so the window ends with the last one.
    let measured_s = (last_end - world.measure_from).as_secs_f64();
    Ok(BaselineResult {
        shape: plan.shape,
        concurrency: plan.concurrency,
        duration_s: measured_s,
        commits: total.commits,
        errors: total.errors,
        tps: total.commits as f64 / measured_s,
        transaction_ms: percentiles_ms(&hist),
        statement_mean_ms: total.statement_means(),
    })
}

/// What every worker of one plan shares.
struct Workload {
    plan: BaselinePlan,
    convs: Vec<String>,
    members: Vec<Vec<String>>,
    hash: Arc<str>,
    run_id: String,
    measure_from: Instant,
}

impl Workload {
    fn stop(&self) -> Instant {
        self.measure_from + self.plan.duration
    }

    /// Worker `w`: transactions back to back until the stop, the warm-up ones not counted;
    /// answers its tally, its latencies and when its last transaction ended.
    async fn work(
        self: Arc<Self>,
        w: usize,
        mut conn: PgConnection,
    ) -> (WorkerTally, Histogram<u64>, Instant) {
        let mut rng = StdRng::seed_from_u64(w as u64);
        let mut tally = WorkerTally::default();
        let mut hist = micros_histogram().expect("valid histogram bounds");
        let mut n: u64 = 0;
        while Instant::now() < self.stop() {
            let (conv, sender) = match self.plan.shape {
                Shape::Many { .. } => {
                    let c = rng.gen_range(0..self.convs.len());
                    let m = rng.gen_range(0..self.members[c].len());
                    (&self.convs[c], &self.members[c][m])
                }
                Shape::One => (&self.convs[0], &self.members[0][w]),
            };
            n += 1;
            let key = format!("base-{}-{w}-{n}", self.run_id);
            let t = Instant::now();
            let outcome = send_once(&mut conn, conv, sender, &key, &self.hash).await;
            let took = t.elapsed().as_micros().max(1) as u64;
            if t < self.measure_from {
                continue;
            }
            match outcome {
                Ok(statements) => {
                    tally.commit(statements);
                    let _ = hist.record(took);
                }
                Err(e) => {
                    tally.errors += 1;
                    tracing::debug!(error = %e, "baseline transaction failed");
                }
            }
        }
        let ended = Instant::now();
        let _ = conn.close().await;
        (tally, hist, ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql` with `$1`, `$2`, … replaced by `args`, whitespace collapsed.
    fn substituted(sql: &str, args: &[&str]) -> String {
        let mut out = sql.to_owned();
        for (i, arg) in args.iter().enumerate().rev() {
            out = out.replace(&format!("${}", i + 1), arg);
        }
        normalised(&out)
    }

    fn normalised(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_pgbench_scripts_run_the_statements_of_the_store() {
        let scripts = [
            (
                include_str!("../pgbench/send.sql"),
                "('c' || :i)",
                "('u' || :s)",
            ),
            (
                include_str!("../pgbench/send_hot.sql"),
                "'hot'",
                "('w' || :client_id)",
            ),
        ];
        let hash = format!("'{}'", RequestHash::of_message(BODY).as_str());
        let body = format!("'{BODY}'");
        let key = "('pgb-' || :k)";
        for (script, conv, sender) in scripts {
            let script = normalised(script);
            let statements = [
                substituted(SEND_LOCK_SQL, &[conv]) + " \\gset",
                substituted(SEND_KEY_CHECK_SQL, &[conv, sender, key]) + ";",
                substituted(
                    SEND_INSERT_SQL,
                    &[
                        conv,
                        ":next_seq",
                        "gen_random_uuid()",
                        sender,
                        "'pgbench'",
                        key,
                        &hash,
                        &body,
                        "(:msg_count + 1)",
                    ],
                ) + ";",
            ];
            let mut expected = String::from("BEGIN; ");
            expected.push_str(&statements.join(" "));
            expected.push_str(" COMMIT;");
            assert!(
                script.contains(&expected),
                "the script drifted from parley-store's send statements:\n{script}\nexpected:\n{expected}"
            );
        }
    }

    #[test]
    fn statement_means_are_per_committed_transaction_and_add_up_across_workers() {
        let mut a = WorkerTally::default();
        a.commit([1_000, 2_000, 3_000, 4_000, 5_000]);
        a.commit([3_000, 2_000, 1_000, 0, 5_000]);
        let mut b = WorkerTally {
            errors: 2,
            ..WorkerTally::default()
        };
        b.commit([2_000, 2_000, 2_000, 2_000, 2_000]);
        let mut total = WorkerTally::default();
        total.add(&a);
        total.add(&b);
        assert_eq!((total.commits, total.errors), (3, 2));
        let m = total.statement_means();
        assert_eq!(
            [m.begin, m.lock, m.check, m.insert, m.commit],
            [2.0, 2.0, 2.0, 2.0, 4.0]
        );
        assert_eq!(WorkerTally::default().statement_means().commit, 0.0);
    }

    #[test]
    fn the_shapes_have_the_members_the_workers_use() {
        let (convs, members) = topology(Shape::Many { convs: 3 }, 8);
        assert_eq!(convs, ["c0", "c1", "c2"]);
        assert_eq!(members[2], ["u4", "u5"]);
        let (convs, members) = topology(Shape::One, 4);
        assert_eq!(convs.len(), 1);
        assert_eq!(members[0].len(), 4, "one member per worker");
    }
}
