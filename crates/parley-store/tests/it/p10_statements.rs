//! P10 in time as well as in answers: for every call that names a conversation, a user who never
//! had a period and a conversation that does not exist run the same statements, in the same
//! order, on both stores. A path that stopped one query early for a missing conversation would
//! answer measurably sooner, which tells a prober the conversation does not exist.
//!
//! Statements are counted from sqlx's statement log. The stores under test log theirs at TRACE,
//! every other store of the process at sqlx's default (DEBUG), so tests running beside this one
//! add nothing to the record.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use anyhow::{ensure, Result};
use chrono::Utc;
use parley_domain::{ConvId, ConvKind, Role, UserId};
use parley_store::pg::PgStore;
use parley_store::sqlite::SqliteStore;
use parley_store::{EventsQuery, Store, StoreError};
use parley_testkit::TestDb;
use sqlx::ConnectOptions;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

use crate::contract::{cid, new_conv, send, uid, user};

/// The level the stores under test log their statements at, and the only level recorded.
const PROBE_LEVEL: log::LevelFilter = log::LevelFilter::Trace;
/// sqlx logs a statement slower than this at the slow level; the probe sets that level to the
/// probe's too, so a slow statement is not lost from the record.
const SLOW_STATEMENT_MS: u64 = 1_000;

static RECORDED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records the text of each statement logged at `PROBE_LEVEL`.
struct Recorder;

#[derive(Default)]
struct StatementText {
    summary: String,
    full: String,
}

impl Visit for StatementText {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_owned(),
            "db.statement" => self.full = value.trim().to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" && self.summary.is_empty() {
            self.summary = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() != "sqlx::query" || *meta.level() != Level::TRACE {
            return;
        }
        let mut text = StatementText::default();
        event.record(&mut text);
        // The full text is left empty when the summary is the whole statement.
        let statement = if text.full.is_empty() {
            text.summary
        } else {
            text.full
        };
        // A pooled SQLite connection opened on first use sets its pragmas then: that is the
        // pool's doing, not the call's, and no call of the store runs a pragma itself.
        if statement.starts_with("PRAGMA") {
            return;
        }
        RECORDED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(statement);
    }
}

fn install_recorder() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = Registry::default().with(Recorder);
        if let Err(e) = tracing::subscriber::set_global_default(subscriber) {
            panic!("cannot install the statement recorder: {e}");
        }
    });
}

/// The statements recorded since the last call.
fn take_recorded() -> Vec<String> {
    std::mem::take(&mut *RECORDED.lock().unwrap_or_else(PoisonError::into_inner))
}

fn probe<T: ConnectOptions>(options: T) -> T {
    options
        .log_statements(PROBE_LEVEL)
        .log_slow_statements(PROBE_LEVEL, Duration::from_millis(SLOW_STATEMENT_MS))
}

async fn pg_probe(db: &TestDb) -> Result<PgStore> {
    // Migrated by the test kit's own store, whose statements are not recorded.
    db.store().await;
    let options: sqlx::postgres::PgConnectOptions = db.url().parse()?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(probe(options))
        .await?;
    Ok(PgStore::from_pool(pool))
}

type Answer<'a> = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>;
/// One call naming a conversation, made by a user who never had a period in it.
type Call = for<'a> fn(&'a dyn Store, &'a ConvId, &'a UserId) -> Answer<'a>;

fn calls() -> Vec<(&'static str, Call)> {
    fn after(after: i64, epoch: Option<i64>) -> EventsQuery {
        EventsQuery::After { after, epoch }
    }
    vec![
        ("send", |s, c, u| {
            Box::pin(async move { send(s, c, u, "m-probe", "let me in").await.map(drop) })
        }),
        ("events after", |s, c, u| {
            Box::pin(async move { s.events(c, u, after(0, None), 50).await.map(drop) })
        }),
        ("events after with epoch", |s, c, u| {
            Box::pin(async move { s.events(c, u, after(3, Some(1)), 2).await.map(drop) })
        }),
        ("history", |s, c, u| {
            Box::pin(async move {
                let q = EventsQuery::Before { before: Some(6) };
                s.events(c, u, q, 2).await.map(drop)
            })
        }),
        ("newest page", |s, c, u| {
            Box::pin(async move {
                let q = EventsQuery::Before { before: None };
                s.events(c, u, q, 50).await.map(drop)
            })
        }),
        ("conversation", |s, c, u| {
            Box::pin(async move { s.get_conversation(c, u).await.map(drop) })
        }),
        ("mark read", |s, c, u| {
            Box::pin(async move { s.mark_read(c, u, 3).await.map(drop) })
        }),
        ("recall", |s, c, u| {
            Box::pin(async move { s.recall(c, u, 3, Utc::now()).await.map(drop) })
        }),
        ("add member", |s, c, u| {
            Box::pin(async move { s.add_member(c, u, &uid("u-dan")).await.map(drop) })
        }),
        ("remove member", |s, c, u| {
            Box::pin(async move { s.remove_member(c, u, &uid("u-ben")).await.map(drop) })
        }),
        ("leave", |s, c, u| {
            Box::pin(async move { s.remove_member(c, u, u).await.map(drop) })
        }),
        ("set role", |s, c, u| {
            Box::pin(async move { s.set_role(c, u, &uid("u-ben"), Role::Admin).await.map(drop) })
        }),
    ]
}

/// Runs every call as `u-cai` on a group it never joined and on a conversation that does not
/// exist, and compares the answers and the statements.
async fn same_statements(store: &dyn Store, which: &str) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    user(store, "u-dan").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-1"), &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m-1", "hi").await?;
    let missing = cid("c-missing");
    let mut differing = Vec::new();
    for (name, call) in calls() {
        take_recorded();
        let hidden = format!("{:?}", call(store, &conv, &cai).await.err());
        let for_hidden = take_recorded();
        let absent = format!("{:?}", call(store, &missing, &cai).await.err());
        let for_absent = take_recorded();
        ensure!(
            hidden == absent && hidden.contains("NotMember"),
            "{which} {name}: {hidden} vs {absent}"
        );
        ensure!(!for_hidden.is_empty(), "{which} {name}: nothing recorded");
        if for_hidden != for_absent {
            differing.push(format!(
                "{name}: never a member ran {for_hidden:#?}\nunknown conversation ran {for_absent:#?}"
            ));
        }
    }
    ensure!(
        differing.is_empty(),
        "{which}: statements differ\n{}",
        differing.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn p10_never_member_and_unknown_conversation_run_the_same_statements() -> Result<()> {
    install_recorder();
    let db = TestDb::create().await;
    let pg = pg_probe(&db).await?;
    let on_pg = same_statements(&pg, "postgres").await;

    let dir = tempfile::tempdir()?;
    let sqlite = SqliteStore::open_with(&dir.path().join("parley.db"), probe).await?;
    sqlite.migrate().await?;
    let on_sqlite = same_statements(&sqlite, "sqlite").await;
    sqlite.close().await;
    // Both stores are checked before either failure is reported.
    match (on_pg, on_sqlite) {
        (Err(pg), Err(sqlite)) => Err(pg.context(sqlite)),
        (pg, sqlite) => pg.and(sqlite),
    }
}
