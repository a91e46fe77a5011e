//! A real Parley server for one test: its own database, the in-process bus, a port chosen by the
//! OS on 127.0.0.1, and a random admin token. Nothing is global, so tests run in parallel.

use std::sync::Arc;

use parley_bus::LocalBus;
use parley_client::{AdminClient, Client};
use parley_server::{AppState, ServerConfig};
use parley_store::pg::PgStore;
use parley_store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db::TestDb;

/// Device id of the clients made by [`TestServer::user_with_device`].
pub const TEST_DEVICE_ID: &str = "d1";

pub struct TestServer {
    db: TestDb,
    store: PgStore,
    bus: LocalBus,
    base_url: String,
    admin_token: String,
    admin: AdminClient,
    shutdown: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server with `config`. An empty `admin_token` (the default) is replaced by a
    /// random one, so the admin endpoints are open to this test only.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable or the port cannot be bound.
    pub async fn start(config: ServerConfig) -> TestServer {
        Self::start_wrapped(config, |pg| Arc::new(pg)).await
    }

    /// Starts a server with the default configuration and a random admin token.
    pub async fn start_default() -> TestServer {
        Self::start(ServerConfig::default()).await
    }

    /// Like [`TestServer::start`], with the store the server uses built by `wrap` from the
    /// test's PostgreSQL store, e.g. to inject failures in front of it. [`TestServer::store`]
    /// still reaches the database directly.
    pub async fn start_wrapped(
        mut config: ServerConfig,
        wrap: impl FnOnce(PgStore) -> Arc<dyn Store>,
    ) -> TestServer {
        let db = TestDb::create().await;
        let store = db.store().await;
        let bus = LocalBus::new();
        if config.admin_token.is_empty() {
            config.admin_token = random_admin_token();
        }
        let admin_token = config.admin_token.clone();
        let state = AppState::new(wrap(store.clone()), Arc::new(bus.clone()), config);

        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("bound listener has no address: {e}"));
        let base_url = format!("http://{addr}");
        let shutdown = CancellationToken::new();
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
            db,
            store,
            bus,
            base_url,
            admin_token,
            admin,
            shutdown,
            task: Some(task),
        }
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

    pub fn db(&self) -> &TestDb {
        &self.db
    }

    /// The server's PostgreSQL store, for direct SQL through [`PgStore::pool`].
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// The bus the server announces committed events on; subscribe to watch them.
    pub fn bus(&self) -> &LocalBus {
        &self.bus
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
    }
}

impl Drop for TestServer {
    /// Stops accepting requests when a test ends without calling [`TestServer::stop`].
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn random_admin_token() -> String {
    format!("adm_{:032x}", rand::random::<u128>())
}
