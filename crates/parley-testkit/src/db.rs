//! A brand-new PostgreSQL database per test, so tests never see each other's rows and can run
//! in parallel against one server.
//!
//! Databases are not dropped when a test ends: the store and the pools of a test outlive the
//! `TestDb` value, and a failed test's rows are worth reading. Instead every `create` drops the
//! test databases older than `STALE_AFTER_S`, whose creation time is part of their name.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parley_store::pg::PgStore;
use parley_store::Store;
use sqlx::{Connection, PgConnection};
use url::Url;

/// The variable naming the PostgreSQL server that hosts test databases.
pub const TEST_DATABASE_URL_ENV: &str = "PARLEY_TEST_DATABASE_URL";
/// The machine's own PostgreSQL, as `scripts/test.sh` starts it.
pub const TEST_DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// Prefix of every test database; nothing else is ever dropped.
pub const TEST_DB_PREFIX: &str = "parley_t_";
/// Age after which a test database counts as left over: longer than any test run.
pub const STALE_AFTER_S: u64 = 2 * 60 * 60;
/// Connections of the store a test gets: enough for the concurrency checks, small enough that
/// parallel tests stay within PostgreSQL's default 100 connections.
pub const STORE_POOL_SIZE_DEFAULT: u32 = 16;
/// Longest wait for the server: an unreachable one fails the test quickly and loudly.
const CONNECT_TIMEOUT_MS: u64 = 10_000;

/// A database created for one test. Its name is `parley_t_<unix seconds>_<random hex>`.
#[derive(Debug, Clone)]
pub struct TestDb {
    name: String,
    url: String,
}

impl TestDb {
    /// Creates a fresh, empty database on the server of `PARLEY_TEST_DATABASE_URL`.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable or refuses: the tests need it and are never skipped.
    pub async fn create() -> TestDb {
        let server_url = std::env::var(TEST_DATABASE_URL_ENV)
            .unwrap_or_else(|_| TEST_DATABASE_URL_DEFAULT.to_owned());
        let mut conn = connect(&server_url).await;
        drop_stale(&mut conn, unix_now_s()).await;

        let name = new_name(unix_now_s(), rand::random::<u32>());
        // template0 is never connected to, so parallel creates do not trip over a busy template.
        let create = format!("CREATE DATABASE \"{name}\" TEMPLATE template0");
        if let Err(e) = sqlx::query(&create).execute(&mut conn).await {
            panic!(
                "cannot create test database {name} on {}: {e}. The role of {TEST_DATABASE_URL_ENV} \
                 needs the CREATEDB privilege.",
                redacted(&server_url)
            );
        }
        // Closing is a courtesy to the server; the database exists either way.
        let _ = conn.close().await;
        let url = database_url(&server_url, &name)
            .unwrap_or_else(|e| panic!("{TEST_DATABASE_URL_ENV} is not a URL: {e}"));
        TestDb { name, url }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of this database, e.g. for `parley serve --database-url`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A store on this database with the schema applied.
    pub async fn store(&self) -> PgStore {
        self.store_with_pool_size(STORE_POOL_SIZE_DEFAULT).await
    }

    /// Like [`TestDb::store`], with `pool_size` connections.
    pub async fn store_with_pool_size(&self, pool_size: u32) -> PgStore {
        let store = PgStore::connect(&self.url, pool_size)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to test database {}: {e}", self.name));
        if let Err(e) = store.migrate().await {
            panic!("cannot migrate test database {}: {e}", self.name);
        }
        store
    }
}

async fn connect(server_url: &str) -> PgConnection {
    let attempt = PgConnection::connect(server_url);
    let outcome = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), attempt).await;
    let reason = match outcome {
        Ok(Ok(conn)) => return conn,
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {CONNECT_TIMEOUT_MS} ms"),
    };
    panic!(
        "\n\nPostgreSQL is REQUIRED by Parley's tests and is not reachable at {}: {reason}\n\
         Start it (scripts/test.sh starts this machine's cluster), or set {TEST_DATABASE_URL_ENV} \
         to a server where the role may CREATE DATABASE.\n\n",
        redacted(server_url)
    );
}

/// Drops test databases older than `STALE_AFTER_S`. Best effort: another test process may be
/// dropping the same one, and a failure here must not fail the test that merely noticed it.
async fn drop_stale(conn: &mut PgConnection, now_s: u64) {
    let pattern = format!("{}%", TEST_DB_PREFIX.replace('_', "\\_"));
    let names: Vec<String> =
        match sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE $1")
            .bind(pattern)
            .fetch_all(&mut *conn)
            .await
        {
            Ok(names) => names,
            Err(_) => return,
        };
    for name in names {
        let stale = created_at_s(&name).is_some_and(|t| now_s.saturating_sub(t) > STALE_AFTER_S);
        if stale {
            let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            if let Err(e) = sqlx::query(&drop).execute(&mut *conn).await {
                eprintln!("note: could not drop stale test database {name}: {e}");
            }
        }
    }
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn new_name(now_s: u64, suffix: u32) -> String {
    format!("{TEST_DB_PREFIX}{now_s}_{suffix:08x}")
}

/// The creation time embedded in a test database's name; `None` for names this kit did not make.
fn created_at_s(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(TEST_DB_PREFIX)?;
    let (secs, suffix) = rest.split_once('_')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    secs.parse().ok()
}

/// `server_url` with its database replaced by `name`; host, credentials and options are kept.
fn database_url(server_url: &str, name: &str) -> Result<String, url::ParseError> {
    let mut url = Url::parse(server_url)?;
    url.set_path(&format!("/{name}"));
    Ok(url.into())
}

/// The URL without its password, fit for a panic message.
fn redacted(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.into()
        }
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_creation_time() {
        let name = new_name(1_700_000_000, 0xab);
        assert_eq!(name, "parley_t_1700000000_000000ab");
        assert_eq!(created_at_s(&name), Some(1_700_000_000));
        assert_eq!(created_at_s("parley_t_x_00"), None);
        assert_eq!(created_at_s("parley_t_1700000000"), None);
        assert_eq!(created_at_s("parley"), None);
    }

    #[test]
    fn database_urls_keep_host_and_options() {
        let u = database_url(
            "postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable",
            "x",
        )
        .unwrap();
        assert_eq!(u, "postgres://u:p@127.0.0.1:5432/x?sslmode=disable");
        assert_eq!(
            redacted(&u),
            "postgres://u:***@127.0.0.1:5432/x?sslmode=disable"
        );
    }
}
