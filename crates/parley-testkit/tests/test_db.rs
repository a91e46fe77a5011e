//! The test database kit against the machine's PostgreSQL.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Result};
use parley_testkit::{TestDb, STALE_AFTER_S, TEST_DB_PREFIX};
use sqlx::{Connection, PgConnection};

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
