//! The test database kit against the machine's PostgreSQL.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use parley_testkit::{
    keep_on_err, TestDb, STALE_AFTER_S, TEST_DATABASE_URL_DEFAULT, TEST_DATABASE_URL_ENV,
    TEST_DB_PREFIX,
};
use sqlx::{Connection, PgConnection};

/// Set in the child process of [`a_panicking_test_keeps_its_database`]: that test then plays
/// the failing test instead.
const CHILD_ENV: &str = "PARLEY_TESTKIT_PANICKING_CHILD";
/// What the child prints before the name of its database.
const CHILD_DB_LINE: &str = "child database: ";

/// A connection to the server's maintenance database, which no test drops.
async fn server() -> Result<PgConnection> {
    let url = std::env::var(TEST_DATABASE_URL_ENV)
        .unwrap_or_else(|_| TEST_DATABASE_URL_DEFAULT.to_owned());
    Ok(PgConnection::connect(&url).await?)
}

/// Longest wait for a dropped database to be gone: the server finishes a `DROP DATABASE` after
/// its client stopped waiting, once a checkpoint is done, which on a busy server takes seconds.
const GONE_WAIT_MS: u64 = 60_000;
/// Pause between two looks at the catalog.
const GONE_POLL_MS: u64 = 50;

/// Waits until `name` no longer exists, for at most `GONE_WAIT_MS`; false if it still does.
async fn gone(conn: &mut PgConnection, name: &str) -> Result<bool> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(GONE_WAIT_MS);
    while exists(conn, name).await? {
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(GONE_POLL_MS)).await;
    }
    Ok(true)
}

async fn drop_db(conn: &mut PgConnection, name: &str) -> Result<()> {
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(conn)
        .await?;
    Ok(())
}

async fn exists(conn: &mut PgConnection, name: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(conn)
        .await?;
    Ok(n == 1)
}

#[tokio::test]
async fn each_test_gets_its_own_empty_database() -> Result<()> {
    let a = TestDb::create().await;
    let b = TestDb::create().await;
    ensure!(a.name() != b.name(), "two tests share {}", a.name());
    ensure!(a.name().starts_with(TEST_DB_PREFIX));
    let mut conn = PgConnection::connect(a.url()).await?;
    let current: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await?;
    ensure!(current == a.name(), "url leads to {current}");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&mut conn)
    .await?;
    ensure!(tables == 0, "a fresh database has {tables} tables");
    Ok(())
}

#[tokio::test]
async fn store_comes_migrated() -> Result<()> {
    let db = TestDb::create().await;
    let store = db.store().await;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM conversations")
        .fetch_one(store.pool())
        .await?;
    ensure!(n == 0);
    Ok(())
}

/// A left-over database older than the limit goes at the next create; a recent one stays,
/// because another test process may be using it.
#[tokio::test]
async fn stale_databases_are_dropped_recent_ones_kept() -> Result<()> {
    let db = TestDb::create().await;
    let mut conn = PgConnection::connect(db.url()).await?;
    let now_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let suffix = rand::random::<u32>();
    let stale = format!(
        "{TEST_DB_PREFIX}{}_{suffix:08x}",
        now_s - STALE_AFTER_S - 60
    );
    let recent = format!("{TEST_DB_PREFIX}{}_{suffix:08x}", now_s - 60);
    for name in [&stale, &recent] {
        sqlx::query(&format!("CREATE DATABASE \"{name}\" TEMPLATE template0"))
            .execute(&mut conn)
            .await?;
    }
    // Even a connection to the stale database does not keep it alive (WITH (FORCE)). Tests
    // running in parallel create databases too, so one of them may have dropped it already.
    let stale_url = db.url().replace(db.name(), &stale);
    let holder = PgConnection::connect(&stale_url).await.ok();

    let _next = TestDb::create().await;
    ensure!(!exists(&mut conn, &stale).await?, "{stale} survived");
    ensure!(exists(&mut conn, &recent).await?, "{recent} was dropped");

    drop(holder);
    sqlx::query(&format!("DROP DATABASE \"{recent}\" WITH (FORCE)"))
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// A passed test leaves nothing: the database goes with the last clone of its `TestDb`, even
/// with a store still connected to it.
#[tokio::test]
async fn a_passing_test_drops_its_database() -> Result<()> {
    let mut conn = server().await?;
    let db = TestDb::create().await;
    let name = db.name().to_owned();
    let store = db.store().await;
    let clone = db.clone();
    drop(db);
    ensure!(
        exists(&mut conn, &name).await?,
        "{name} went with a clone still held"
    );
    drop(clone);
    ensure!(gone(&mut conn, &name).await?, "{name} survived its test");
    drop(store);
    Ok(())
}

/// A test that returns `Err` does not panic; inside `keep_on_err` its database is kept, and
/// dropped when it returns `Ok`.
#[tokio::test]
async fn keep_on_err_keeps_the_database_of_an_err_only() -> Result<()> {
    let mut conn = server().await?;
    let mut names = Vec::new();
    for fail in [true, false] {
        let outcome = keep_on_err(async {
            let db = TestDb::create().await;
            names.push(db.name().to_owned());
            if fail {
                bail!("this test fails");
            }
            Ok(())
        })
        .await;
        ensure!(outcome.is_err() == fail, "keep_on_err changed the outcome");
    }
    let [failed, passed] = names.as_slice() else {
        bail!("expected two databases, got {names:?}");
    };
    ensure!(
        gone(&mut conn, passed).await?,
        "{passed} survived its passed test"
    );
    let kept = exists(&mut conn, failed).await?;
    drop_db(&mut conn, failed).await?;
    ensure!(kept, "{failed} of the failed test was dropped");
    Ok(())
}

/// A test that panics keeps its database. The panic is played by this test in a child process
/// (the panic marks the whole process as failed, which would keep the databases of the tests
/// running next to it).
#[tokio::test]
async fn a_panicking_test_keeps_its_database() -> Result<()> {
    if std::env::var_os(CHILD_ENV).is_some() {
        let db = TestDb::create().await;
        println!("{CHILD_DB_LINE}{}", db.name());
        panic!("the child fails on purpose, holding {}", db.name());
    }
    let exe = std::env::current_exe()?;
    let output = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "a_panicking_test_keeps_its_database",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let name = stdout
        .lines()
        .find_map(|l| {
            l.split_once(CHILD_DB_LINE)
                .map(|(_, n)| n.trim().to_owned())
        })
        .with_context(|| format!("the child printed no database: {stdout}"))?;
    ensure!(!output.status.success(), "the child passed: {stdout}");
    let mut conn = server().await?;
    let kept = exists(&mut conn, &name).await?;
    drop_db(&mut conn, &name).await?;
    ensure!(kept, "{name} of the panicking test was dropped");
    Ok(())
}
