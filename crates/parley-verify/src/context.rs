//! What a check works with: the deployment (`Target`) and its own scratch namespace and
//! transcript (`Ctx`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use parley_client::{AdminClient, Client, Method};
use serde_json::Value;
use sqlx::{Connection, PgConnection};

use crate::error::{CheckError, VerifyError};

/// Longest line kept in a transcript, in bytes: enough for a request and its answer's head.
const NOTE_LEN_MAX: usize = 400;
/// Lines kept per check's transcript: the report stays readable.
const NOTES_LEN_MAX: usize = 60;
/// The reason of every check that needs the database when none was given.
pub const NEEDS_DATABASE: &str = "needs --database-url";

/// The deployment under test.
pub struct Target {
    pub base_url: String,
    pub admin_token: String,
    pub admin: AdminClient,
    /// PostgreSQL of the deployment, for the checks that read or lock rows.
    pub database_url: Option<String>,
    /// `verify-<8 hex digits>`: every user and conversation id of this run starts with it.
    pub run_tag: String,
    /// `GET /v1/admin/server` as the server answered it.
    pub server: Value,
    /// Scratch users created by this run (`--cleanup` revokes their devices without a
    /// database).
    pub(crate) scratch_users: Mutex<Vec<(String, Vec<String>)>>,
    next_prefix: AtomicU64,
}

impl Target {
    /// Reads the server's description with the admin token; fails when the server cannot be
    /// reached or the token is refused.
    pub async fn connect(
        base_url: &str,
        admin_token: &str,
        database_url: Option<String>,
    ) -> Result<Arc<Target>, VerifyError> {
        let admin = AdminClient::new(base_url, admin_token)?;
        let answer = admin
            .raw(Method::GET, "/v1/admin/server")
            .response()
            .await?;
        if answer.status != 200 {
            return Err(VerifyError::Description(format!(
                "GET /v1/admin/server answered {}: {}",
                answer.status, answer.text
            )));
        }
        if !answer.json["limits"].is_object() {
            return Err(VerifyError::Description(answer.text));
        }
        let run_tag = format!("verify-{:08x}", rand::random::<u32>());
        Ok(Arc::new(Target {
            base_url: base_url.trim_end_matches('/').to_owned(),
            admin_token: admin_token.to_owned(),
            admin,
            database_url,
            run_tag,
            server: answer.json,
            scratch_users: Mutex::new(Vec::new()),
            next_prefix: AtomicU64::new(1),
        }))
    }

    /// A limit as the server reported it.
    pub fn limit(&self, name: &str) -> Option<i64> {
        self.server["limits"][name].as_i64()
    }

    /// The store the server reported: `postgres` or `sqlite`.
    pub fn store(&self) -> &str {
        self.server["store"].as_str().unwrap_or("unknown")
    }

    fn remember(&self, user: &str, device: Option<&str>) {
        let Ok(mut users) = self.scratch_users.lock() else {
            return;
        };
        match users.iter_mut().find(|(u, _)| u == user) {
            Some((_, devices)) => devices.extend(device.map(str::to_owned)),
            None => users.push((
                user.to_owned(),
                device.map(str::to_owned).into_iter().collect(),
            )),
        }
    }
}

/// One check's view of the target: ids in a namespace of its own and a transcript.
pub struct Ctx {
    pub target: Arc<Target>,
    prefix: String,
    transcript: Mutex<Vec<String>>,
}

impl Ctx {
    pub fn new(target: Arc<Target>) -> Ctx {
        let n = target.next_prefix.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}-{n}", target.run_tag);
        Ctx {
            target,
            prefix,
            transcript: Mutex::new(Vec::new()),
        }
    }

    /// A scratch id: `verify-<run>-<n>-<name>`.
    pub fn id(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// Records a line of what was sent or received, cut to a readable length.
    pub fn note(&self, line: impl Into<String>) {
        let mut line: String = line.into();
        if line.len() > NOTE_LEN_MAX {
            let mut cut = NOTE_LEN_MAX;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        if let Ok(mut t) = self.transcript.lock() {
            if t.len() < NOTES_LEN_MAX {
                t.push(line);
            } else if t.len() == NOTES_LEN_MAX {
                t.push("… (transcript cut)".into());
            }
        }
    }

    pub fn transcript(&self) -> Vec<String> {
        self.transcript
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    /// Creates the scratch user `name` with device `d1`; answers the device's client.
    pub async fn user(&self, name: &str) -> Result<Client, CheckError> {
        let user_id = self.id(name);
        self.target.admin.create_user(&user_id, None).await?;
        self.target.remember(&user_id, None);
        self.device(name, "d1").await
    }

    /// A new device of the scratch user `name` (created by [`Ctx::user`]).
    pub async fn device(&self, name: &str, device_id: &str) -> Result<Client, CheckError> {
        let user_id = self.id(name);
        let token = self.target.admin.create_device(&user_id, device_id).await?;
        self.target.remember(&user_id, Some(device_id));
        self.note(format!("admin: user {user_id} device {device_id} issued"));
        Ok(self.target.admin.device_client(&token))
    }

    /// A connection to the deployment's database; `NotRun` without `--database-url`.
    pub async fn db(&self) -> Result<PgConnection, CheckError> {
        let Some(url) = &self.target.database_url else {
            return Err(CheckError::NotRun(NEEDS_DATABASE.into()));
        };
        Ok(PgConnection::connect(url).await?)
    }

    /// The PostgreSQL-only checks refuse to run on the embedded store.
    pub fn needs_postgres(&self) -> Result<(), CheckError> {
        if self.target.store() != "postgres" {
            return Err(CheckError::NotRun(format!(
                "needs a PostgreSQL store; the server reports {}",
                self.target.store()
            )));
        }
        Ok(())
    }
}
