//! Test support for Parley: [`TestDb`] gives every test a brand-new PostgreSQL database, and
//! [`TestServer`] runs a real server on it at `127.0.0.1:<free port>` with clients ready to use.
//!
//! PostgreSQL is required. When it is unreachable the kit panics with what is missing; tests are
//! never skipped silently.

mod db;
mod server;

pub use db::{
    TestDb, STALE_AFTER_S, STORE_POOL_SIZE_DEFAULT, TEST_DATABASE_URL_DEFAULT,
    TEST_DATABASE_URL_ENV, TEST_DB_PREFIX,
};
pub use parley_server::ServerConfig;
pub use server::{TestServer, TEST_DEVICE_ID};
