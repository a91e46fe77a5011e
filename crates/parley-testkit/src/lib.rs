//! Test support for Parley: [`TestDb`] gives every test a brand-new PostgreSQL database, and
//! [`TestServer`] runs a real server at `127.0.0.1:<free port>` with clients ready to use, on
//! PostgreSQL or on the embedded SQLite store ([`StoreKind`]). [`Sql`] reaches either database
//! directly, and [`test_on_both_stores!`] runs one test function once per store.
//! [`ServerProcess`] runs `parley serve` as a child process that a test kills with SIGKILL and
//! restarts on the same data and port; [`parley_binary`] and [`example_binary`] build the
//! executables such tests run.
//!
//! PostgreSQL is required. When it is unreachable the kit panics with what is missing; tests are
//! never skipped silently.

mod binaries;
mod db;
mod process;
mod server;
mod sql;

pub use binaries::{example_binary, parley_binary};
pub use process::{
    free_addr, wait_ready, GatewayOptions, ProcessBus, ServerProcess, PROCESS_START_WAIT_MS,
};
pub use sql::{Column, Sql, SqlArg, WriteLock};

pub use db::{
    keep_on_err, TestDb, STALE_AFTER_S, STORE_POOL_SIZE_DEFAULT, TEST_DATABASE_URL_DEFAULT,
    TEST_DATABASE_URL_ENV, TEST_DB_PREFIX, TEST_KEEP_DB_ENV,
};
pub use parley_server::ServerConfig;
pub use server::{GatewayBus, StoreKind, TestServer, TEST_DEVICE_ID};

/// Runs the async test function `$name(store: StoreKind) -> anyhow::Result<()>` once on
/// PostgreSQL and once on the embedded store, as the tests `$name::postgres` and
/// `$name::sqlite`. The attributes given (e.g. `#[tokio::test(flavor = "multi_thread")]`) are
/// put on both; without any, `#[tokio::test]`. Each runs inside [`keep_on_err`], so a test
/// that returns `Err` keeps its database for reading and one that passes drops it.
///
/// ```text
/// parley_testkit::test_on_both_stores!(sends_are_acked);
/// async fn sends_are_acked(store: StoreKind) -> anyhow::Result<()> {
///     let server = TestServer::start_on(store, ServerConfig::default()).await;
///     // ...
///     Ok(())
/// }
/// ```
#[macro_export]
macro_rules! test_on_both_stores {
    ($name:ident) => {
        $crate::test_on_both_stores!(#[tokio::test] $name);
    };
    ($(#[$attr:meta])+ $name:ident) => {
        mod $name {
            $(#[$attr])+
            async fn postgres() -> ::anyhow::Result<()> {
                $crate::keep_on_err(super::$name($crate::StoreKind::Postgres)).await
            }

            $(#[$attr])+
            async fn sqlite() -> ::anyhow::Result<()> {
                $crate::keep_on_err(super::$name($crate::StoreKind::Sqlite)).await
            }
        }
    };
}
