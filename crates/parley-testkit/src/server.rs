//! A real Parley server for one test: its own database (a fresh PostgreSQL database, or a fresh
//! SQLite file in a temporary directory), the in-process bus, a port chosen by the OS on
//! 127.0.0.1, and a random admin token. Nothing is global, so tests run in parallel.
//!
//! [`TestServer::start_gateways`] starts several servers on one PostgreSQL database instead,
//! each a gateway with a [`PgBus`] of its own, as several `parley serve --bus postgres` would;
//! [`TestServer::start_gateways_on`] does the same with a [`NatsBus`] per gateway
//! (`--bus nats`).

use std::fmt;
use std::sync::Arc;

use parley_bus::nats::NatsBus;
use parley_bus::pg::PgBus;
use parley_bus::{EventBus, LocalBus};
use parley_client::{AdminClient, Client};
use parley_server::{AppState, ServerConfig};
use parley_store::pg::PgStore;
use parley_store::sqlite::SqliteStore;
use parley_store::Store;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db::TestDb;
use crate::sql::Sql;

/// Device id of the clients made by [`TestServer::user_with_device`].
pub const TEST_DEVICE_ID: &str = "d1";

/// Which store a test server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Postgres,
    Sqlite,
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Postgres => "postgres",
            Self::Sqlite => "sqlite",
        })
    }
}

/// The bus between the gateways of [`TestServer::start_gateways_on`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayBus {
    /// `PgBus` on the gateways' database.
    Postgres,
    /// `NatsBus` on the NATS server at this URL.
    Nats(String),
}

/// The bus of one gateway and the token that stops it with the server.
struct NodeBus {
    bus: Arc<dyn EventBus>,
    pg: Option<PgBus>,
    shutdown: CancellationToken,
}

/// What holds the test's data: kept as long as the server.
enum Backing {
    Postgres {
        db: TestDb,
        store: PgStore,
    },
    /// The directory is removed when the server is dropped.
    Sqlite {
        _dir: TempDir,
        store: SqliteStore,
    },
}

/// A fresh, migrated store of `kind` and what keeps it alive.
async fn fresh_store(kind: StoreKind) -> (Backing, Arc<dyn Store>, Sql) {
    match kind {
        StoreKind::Postgres => {
            let db = TestDb::create().await;
            let store = db.store().await;
            let sql = Sql::Postgres(store.pool().clone());
            (
                Backing::Postgres {
                    db,
                    store: store.clone(),
                },
                Arc::new(store),
                sql,
            )
        }
        StoreKind::Sqlite => {
            let dir = tempfile::tempdir()
                .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
            let store = SqliteStore::open_dir(dir.path())
                .await
                .unwrap_or_else(|e| panic!("cannot open the embedded store: {e}"));
            if let Err(e) = store.migrate().await {
                panic!("cannot migrate the embedded store: {e}");
            }
            let sql = Sql::open_sqlite(store.path())
                .await
                .unwrap_or_else(|e| panic!("cannot open a probe on the embedded store: {e}"));
            (
                Backing::Sqlite {
                    _dir: dir,
                    store: store.clone(),
                },
                Arc::new(store),
                sql,
            )
        }
    }
}

pub struct TestServer {
    backing: Backing,
    store: Arc<dyn Store>,
    sql: Sql,
    bus: Arc<dyn EventBus>,
    /// The PostgreSQL bus of a gateway of [`TestServer::start_gateways`], stopped with it.
    pg_bus: Option<PgBus>,
    base_url: String,
    admin_token: String,
    admin: AdminClient,
    shutdown: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
    /// The server's media directory (docs/MEDIA.md), removed with the server.
    media_dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts a server on PostgreSQL with `config`. An empty `admin_token` (the default) is
    /// replaced by a random one, so the admin endpoints are open to this test only.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable or the port cannot be bound.
    pub async fn start(config: ServerConfig) -> TestServer {
        Self::start_on(StoreKind::Postgres, config).await
    }

    /// Starts a server on PostgreSQL with the default configuration and a random admin token.
    pub async fn start_default() -> TestServer {
        Self::start(ServerConfig::default()).await
    }

    /// Starts a server on a fresh store of `kind` with `config`.
    ///
    /// # Panics
    /// When the store cannot be created or the port cannot be bound.
    pub async fn start_on(kind: StoreKind, config: ServerConfig) -> TestServer {
        Self::start_wrapped(kind, config, |store| store).await
    }

    /// Like [`TestServer::start_on`], with the store the server uses built by `wrap` from the
    /// test's store, e.g. to inject failures in front of it. [`TestServer::store`] still
    /// reaches the store directly.
    pub async fn start_wrapped(
        kind: StoreKind,
        config: ServerConfig,
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    ) -> TestServer {
        let (backing, store, sql) = fresh_store(kind).await;
        let served = wrap(store.clone());
        Self::launch(backing, store, served, sql, None, config).await
    }

    /// Like [`TestServer::start_on`], with the media kept by the object-store backend (its
    /// local-filesystem store, `file://`) instead of the media directory's own files: what a
    /// deployment with `--media-url` runs.
    pub async fn start_with_object_media(kind: StoreKind, config: ServerConfig) -> TestServer {
        let (backing, store, sql) = fresh_store(kind).await;
        Self::launch_with(backing, store.clone(), store, sql, None, config, true).await
    }

    /// Starts `count` servers on one fresh PostgreSQL database, each a gateway with a
    /// [`PgBus`] of its own, so what a write on one does reaches the devices connected to the
    /// others. They share `config` and one admin token; their gateway ids are the config's
    /// with `-0`, `-1`, … appended.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable, a bus cannot start or a port cannot be bound.
    pub async fn start_gateways(count: usize, config: ServerConfig) -> Vec<TestServer> {
        Self::start_gateways_on(&GatewayBus::Postgres, count, config).await
    }

    /// Like [`TestServer::start_gateways`], on the bus `kind`. On NATS, gateways of parallel
    /// tests share the subjects, so each gateway id gets a random suffix to stay unique.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable, a bus cannot start or a port cannot be bound.
    pub async fn start_gateways_on(
        kind: &GatewayBus,
        count: usize,
        mut config: ServerConfig,
    ) -> Vec<TestServer> {
        let db = TestDb::create().await;
        if matches!(kind, GatewayBus::Nats(_)) {
            config.gateway_id = format!("{}-{:016x}", config.gateway_id, rand::random::<u64>());
        }
        if config.admin_token.is_empty() {
            config.admin_token = random_admin_token();
        }
        let mut servers = Vec::with_capacity(count);
        for node in 0..count {
            let store = db.store().await;
            let sql = Sql::Postgres(store.pool().clone());
            let mut config = config.clone();
            config.gateway_id = format!("{}-{node}", config.gateway_id);
            let shutdown = CancellationToken::new();
            let (bus, pg): (Arc<dyn EventBus>, _) = match kind {
                GatewayBus::Postgres => {
                    let bus = PgBus::start(
                        store.pool().clone(),
                        config.gateway_id.clone(),
                        shutdown.clone(),
                    )
                    .await
                    .unwrap_or_else(|e| {
                        panic!("cannot start the postgres bus of gateway {node}: {e}")
                    });
                    (Arc::new(bus.clone()), Some(bus))
                }
                GatewayBus::Nats(url) => {
                    let bus = NatsBus::start(url, config.gateway_id.clone(), shutdown.clone())
                        .await
                        .unwrap_or_else(|e| {
                            panic!("cannot start the nats bus of gateway {node}: {e}")
                        });
                    (Arc::new(bus), None)
                }
            };
            let backing = Backing::Postgres {
                db: db.clone(),
                store: store.clone(),
            };
            let store: Arc<dyn Store> = Arc::new(store);
            let node_bus = NodeBus { bus, pg, shutdown };
            servers.push(
                Self::launch(backing, store.clone(), store, sql, Some(node_bus), config).await,
            );
        }
        servers
    }

    /// Serves `served` on a fresh port; `store` is what the test reaches directly.
    async fn launch(
        backing: Backing,
        store: Arc<dyn Store>,
        served: Arc<dyn Store>,
        sql: Sql,
        pg: Option<NodeBus>,
        config: ServerConfig,
    ) -> TestServer {
        Self::launch_with(backing, store, served, sql, pg, config, false).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn launch_with(
        backing: Backing,
        store: Arc<dyn Store>,
        served: Arc<dyn Store>,
        sql: Sql,
        pg: Option<NodeBus>,
        mut config: ServerConfig,
        object_media: bool,
    ) -> TestServer {
        if config.admin_token.is_empty() {
            config.admin_token = random_admin_token();
        }
        let admin_token = config.admin_token.clone();
        let (bus, pg_bus, shutdown): (Arc<dyn EventBus>, _, _) = match pg {
            Some(NodeBus { bus, pg, shutdown }) => (bus, pg, shutdown),
            None => (Arc::new(LocalBus::new()), None, CancellationToken::new()),
        };
        let media_dir =
            tempfile::tempdir().unwrap_or_else(|e| panic!("cannot make a media directory: {e}"));
        let opened = if object_media {
            let objects = media_dir.path().join("objects");
            std::fs::create_dir_all(&objects)
                .unwrap_or_else(|e| panic!("cannot make the object directory: {e}"));
            let url = format!("file://{}", objects.display());
            parley_media::MediaBackend::open_url(&url, &media_dir.path().join("parts")).await
        } else {
            parley_media::MediaBackend::open_fs(media_dir.path()).await
        };
        let (media, _) = opened.unwrap_or_else(|e| panic!("cannot open the media storage: {e}"));
        let state = AppState::new(served, bus.clone(), config).with_media(media);

        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("bound listener has no address: {e}"));
        let base_url = format!("http://{addr}");
        // The listener is bound before the task starts, so requests made right away queue in
        // the kernel's backlog instead of being refused.
        let task = tokio::spawn(parley_server::run(
            listener,
            state,
            shutdown.clone().cancelled_owned(),
        ));
        let admin = AdminClient::new(&base_url, &admin_token)
            .unwrap_or_else(|e| panic!("cannot build admin client for {base_url}: {e}"));
        TestServer {
            backing,
            store,
            sql,
            bus,
            pg_bus,
            base_url,
            admin_token,
            admin,
            shutdown,
            task: Some(task),
            media_dir,
        }
    }

    /// Where the server keeps its media: a test looks at the files behind the API.
    pub fn media_dir(&self) -> &std::path::Path {
        self.media_dir.path()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A client of the admin endpoints; clones share one connection pool.
    pub fn admin(&self) -> AdminClient {
        self.admin.clone()
    }

    /// Which store the server runs on.
    pub fn kind(&self) -> StoreKind {
        self.sql.kind()
    }

    /// The server's store, reached directly (not through any wrapper of `start_wrapped`).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Direct SQL on the server's database, whichever the store.
    pub fn sql(&self) -> &Sql {
        &self.sql
    }

    /// The test database of a server on PostgreSQL.
    ///
    /// # Panics
    /// On the embedded store: a test that needs PostgreSQL starts its server with
    /// [`TestServer::start`].
    pub fn db(&self) -> &TestDb {
        match &self.backing {
            Backing::Postgres { db, .. } => db,
            Backing::Sqlite { .. } => panic!("this test server runs on SQLite, not PostgreSQL"),
        }
    }

    /// The PostgreSQL store of a server on PostgreSQL, for PostgreSQL-only checks.
    ///
    /// # Panics
    /// On the embedded store.
    pub fn pg_store(&self) -> &PgStore {
        match &self.backing {
            Backing::Postgres { store, .. } => store,
            Backing::Sqlite { .. } => panic!("this test server runs on SQLite, not PostgreSQL"),
        }
    }

    /// The SQLite store of a server on the embedded store.
    ///
    /// # Panics
    /// On PostgreSQL.
    pub fn sqlite_store(&self) -> &SqliteStore {
        match &self.backing {
            Backing::Sqlite { store, .. } => store,
            Backing::Postgres { .. } => panic!("this test server runs on PostgreSQL, not SQLite"),
        }
    }

    /// The bus the server announces on; subscribe to watch what it announces.
    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.bus
    }

    /// The PostgreSQL bus of a gateway started by [`TestServer::start_gateways`].
    ///
    /// # Panics
    /// On a server with the in-process bus.
    pub fn pg_bus(&self) -> &PgBus {
        match &self.pg_bus {
            Some(bus) => bus,
            None => panic!("this test server runs on the in-process bus, not PgBus"),
        }
    }

    /// A device client with any token, valid or not.
    pub fn client(&self, token: &str) -> Client {
        self.admin.device_client(token)
    }

    /// Creates `user_id` and its device `d1`, and returns a client logged in as that device.
    ///
    /// # Panics
    /// When the admin API refuses, e.g. because the user exists.
    pub async fn user_with_device(&self, user_id: &str) -> Client {
        if let Err(e) = self.admin.create_user(user_id, None).await {
            panic!("admin could not create user {user_id}: {e}");
        }
        self.device(user_id, TEST_DEVICE_ID).await
    }

    /// Issues a token for another device of an existing user and returns its client.
    ///
    /// # Panics
    /// When the admin API refuses, e.g. because the user does not exist.
    pub async fn device(&self, user_id: &str, device_id: &str) -> Client {
        match self.admin.create_device(user_id, device_id).await {
            Ok(token) => self.client(&token),
            Err(e) => panic!("admin could not issue a token for {user_id}/{device_id}: {e}"),
        }
    }

    /// Shuts the server down gracefully and waits until in-flight requests finished.
    ///
    /// # Panics
    /// When the server failed while serving.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("server failed: {e}"),
                Err(e) => panic!("server task failed: {e}"),
            }
        }
        if let Some(bus) = &self.pg_bus {
            bus.stopped().await;
        }
    }
}

impl Drop for TestServer {
    /// Stops accepting requests when a test ends without calling [`TestServer::stop`].
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) fn random_admin_token() -> String {
    format!("adm_{:032x}", rand::random::<u128>())
}
