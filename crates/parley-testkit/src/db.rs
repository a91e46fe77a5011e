//! A brand-new PostgreSQL database per test, so tests never see each other's rows and can run
//! in parallel against one server.
//!
//! A test drops its database when it passes and keeps it when it fails, so the rows of a failure
//! can be read. The database goes when the last clone of its [`TestDb`] is dropped (a
//! [`TestServer`](crate::TestServer) or [`ServerProcess`](crate::ServerProcess) holds one), with
//! `WITH (FORCE)` so the pools still open on it do not hold it. It is kept instead when:
//!
//! - the thread dropping it is unwinding from a panic, or any thread of this process panicked
//!   since the first database was created (a failed assertion, in the test or in a task it
//!   spawned; under `cargo test`, where tests share a process, one failure keeps the databases
//!   of the tests that end after it);
//! - it is dropped inside [`keep_on_err`] and the future given to it returns `Err`: a test that
//!   returns `Err` does not panic, so only a scope around it can tell that it failed.
//!   [`test_on_both_stores!`](crate::test_on_both_stores) runs its tests in that scope; a plain
//!   `#[tokio::test] async fn … -> Result<()>` can wrap its body in it;
//! - `PARLEY_TEST_KEEP_DB` is set to anything but `0` or empty, to keep every database of a run.
//!
//! A plain `#[tokio::test]` returning `Err` outside `keep_on_err` cannot be told from a pass
//! and drops its database (about a hundred such tests use one); run it again with
//! `PARLEY_TEST_KEEP_DB=1` to read its rows. The drop waits at most `DROP_ANSWER_WAIT_MS` for
//! PostgreSQL's answer and leaves the rest (a checkpoint) to the server.
//!
//! A kept database, or one whose process was killed, is dropped by a later `create` once it is
//! older than `STALE_AFTER_S`; its creation time is part of its name.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parley_store::pg::PgStore;
use parley_store::Store;
use sqlx::{Connection, PgConnection};
use url::Url;

/// The variable naming the PostgreSQL server that hosts test databases.
pub const TEST_DATABASE_URL_ENV: &str = "PARLEY_TEST_DATABASE_URL";
/// The machine's own PostgreSQL, as `scripts/test.sh` starts it.
pub const TEST_DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The variable that keeps every test database of a run, passed or failed, when set to anything
/// but `0` or empty.
pub const TEST_KEEP_DB_ENV: &str = "PARLEY_TEST_KEEP_DB";
/// Prefix of every test database; nothing else is ever dropped.
pub const TEST_DB_PREFIX: &str = "parley_t_";
/// Age after which a test database counts as left over: longer than any test run.
pub const STALE_AFTER_S: u64 = 2 * 60 * 60;
/// Connections of the store a test gets: enough for the concurrency checks, small enough that
/// parallel tests stay within PostgreSQL's default 100 connections.
pub const STORE_POOL_SIZE_DEFAULT: u32 = 16;
/// Longest wait for the server: an unreachable one fails the test quickly and loudly.
const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Longest a passed test waits for the answer to its `DROP DATABASE`. The statement waits for
/// a checkpoint, which takes seconds on a server busy with other tests (11 s measured on this
/// machine's shared cluster, 0.2 s on an idle one); the server finishes it even after the
/// client stopped waiting, so a test does not pay for that wait. A drop that did not happen
/// leaves the database to the stale sweep of a later run.
const DROP_ANSWER_WAIT_MS: u64 = 1_000;

/// Set once any thread of this process panicked after the first database was created.
static PANICKED: AtomicBool = AtomicBool::new(false);
/// Installs the hook that sets [`PANICKED`], once per process.
static PANIC_HOOK: Once = Once::new();

tokio::task_local! {
    /// Databases whose last clone was dropped inside [`keep_on_err`]; it decides their fate.
    static DEFERRED: Arc<Mutex<Vec<Doomed>>>;
}

/// A database created for one test. Its name is `parley_t_<unix seconds>_<random hex>`. Clones
/// share it; it is dropped with the last of them, when the test passed (see the module's
/// documentation).
#[derive(Debug, Clone)]
pub struct TestDb {
    inner: Arc<Owned>,
}

/// The one owner of a database, shared by the clones of a [`TestDb`].
#[derive(Debug)]
struct Owned {
    name: String,
    url: String,
    /// The URL of the server's maintenance database, where the drop runs.
    server_url: String,
}

/// A database to drop, once its test is known to have passed.
#[derive(Debug)]
struct Doomed {
    name: String,
    server_url: String,
}

impl TestDb {
    /// Creates a fresh, empty database on the server of `PARLEY_TEST_DATABASE_URL`.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable or refuses: the tests need it and are never skipped.
    pub async fn create() -> TestDb {
        watch_for_panics();
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
        TestDb {
            inner: Arc::new(Owned {
                name,
                url,
                server_url,
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The URL of this database, e.g. for `parley serve --database-url`.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// A store on this database with the schema applied. The store does not keep the database:
    /// keep this `TestDb` as long as the store is used.
    pub async fn store(&self) -> PgStore {
        self.store_with_pool_size(STORE_POOL_SIZE_DEFAULT).await
    }

    /// Like [`TestDb::store`], with `pool_size` connections.
    pub async fn store_with_pool_size(&self, pool_size: u32) -> PgStore {
        let store = PgStore::connect(self.url(), pool_size)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to test database {}: {e}", self.name()));
        if let Err(e) = store.migrate().await {
            panic!("cannot migrate test database {}: {e}", self.name());
        }
        store
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let name = &self.name;
        if std::thread::panicking() || PANICKED.load(Ordering::SeqCst) {
            eprintln!("note: kept test database {name} of a failed test");
            return;
        }
        if keep_all() {
            eprintln!("note: kept test database {name} ({TEST_KEEP_DB_ENV} is set)");
            return;
        }
        let mut doomed = Some(Doomed {
            name: name.clone(),
            server_url: self.server_url.clone(),
        });
        // Inside `keep_on_err` the scope decides, once it knows whether the test passed.
        let _outside_any_scope = DEFERRED.try_with(|deferred| {
            if let Some(db) = doomed.take() {
                lock(deferred).push(db);
            }
        });
        if let Some(db) = doomed {
            drop_now(&db);
        }
    }
}

/// Runs `test`, a test body that reports failure as `Err`, and decides the fate of the
/// databases dropped inside it: dropped when it returned `Ok`, kept when it returned `Err` (or
/// panicked). Databases still held when it returns are not its business.
pub async fn keep_on_err<T, E>(test: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let deferred = Arc::new(Mutex::new(Vec::new()));
    let outcome = DEFERRED.scope(deferred.clone(), test).await;
    let doomed = std::mem::take(&mut *lock(&deferred));
    for db in doomed {
        if outcome.is_ok() && !PANICKED.load(Ordering::SeqCst) && !keep_all() {
            drop_now(&db);
        } else {
            eprintln!("note: kept test database {} of a failed test", db.name);
        }
    }
    outcome
}

/// Sets [`PANICKED`] on every panic of this process, then reports it as before.
fn watch_for_panics() {
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn keep_all() -> bool {
    std::env::var(TEST_KEEP_DB_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The list of deferred drops, whether or not a panic poisoned its lock.
fn lock(deferred: &Mutex<Vec<Doomed>>) -> std::sync::MutexGuard<'_, Vec<Doomed>> {
    deferred
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Drops `db` now, on a thread of its own with a runtime of its own: `Drop` is synchronous and
/// may run on a runtime's thread. Best effort: a failure leaves the database to the stale sweep.
fn drop_now(db: &Doomed) {
    let name = db.name.clone();
    let server_url = db.server_url.clone();
    let dropper = std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => return Err(format!("no runtime: {e}")),
        };
        runtime.block_on(async {
            let connecting = PgConnection::connect(&server_url);
            let mut conn =
                match tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connecting)
                    .await
                {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => return Err(e.to_string()),
                    Err(_) => return Err(format!("no connection within {CONNECT_TIMEOUT_MS} ms")),
                };
            let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            let dropping = sqlx::query(&drop).execute(&mut conn);
            match tokio::time::timeout(Duration::from_millis(DROP_ANSWER_WAIT_MS), dropping).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                // Sent, and still waiting for its checkpoint: the server completes it.
                Err(_) => Ok(()),
            }
        })
    });
    let outcome = dropper
        .join()
        .unwrap_or_else(|_| Err("the dropping thread panicked".to_owned()));
    if let Err(e) = outcome {
        eprintln!(
            "note: could not drop test database {}: {e}; a later run drops it",
            db.name
        );
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
