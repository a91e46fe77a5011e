//! `parley user add` and `parley user passwd`: accounts with passwords in the server's own
//! store, for an operator on the server's machine. The store is the one `parley serve` would
//! pick (`--database-url`, else the embedded store in `--data-dir`) and the schema is applied
//! first, like `serve` does. The password comes from the first line of standard input with
//! `--password-stdin`, else from `PARLEY_PASSWORD`; it is hashed here (argon2id, the server's
//! parameters) and never printed or logged.

use std::io::BufRead;

use anyhow::{bail, Context};
use parley_domain::{Rejection, UserId};
use parley_server::accounts::password::hash_blocking;
use parley_server::accounts::Password;
use parley_store::StoreError;

use crate::cli::{UserCommand, UserStoreArgs, IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT};
use crate::serve::open_store;

/// The environment variable a password is read from without `--password-stdin`.
pub const PASSWORD_ENV: &str = "PARLEY_PASSWORD";
/// One connection is enough for a migration and one statement.
const USER_POOL_SIZE: u32 = 1;

pub async fn run(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Add(args) => {
            let user_id = parse_user(&args.user_id)?;
            if let Some(name) = &args.display_name {
                parley_domain::ids::storable_text("--display-name", name)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            let hash = password_hash(&args.store).await?;
            let opened = open(&args.store).await?;
            match opened
                .store()
                .create_user_with_password(&user_id, args.display_name.as_deref(), &hash)
                .await
            {
                Ok(_) => {}
                Err(StoreError::Rejected(Rejection::AlreadyExists(_))) => {
                    bail!("user {user_id} already exists; use `parley user passwd` to change its password")
                }
                Err(e) => return Err(e).context("cannot create the user"),
            }
            println!("created user {user_id}");
        }
        UserCommand::Passwd(args) => {
            let user_id = parse_user(&args.user_id)?;
            let hash = password_hash(&args.store).await?;
            let opened = open(&args.store).await?;
            match opened.store().set_password_hash(&user_id, &hash).await {
                Ok(()) => {}
                Err(StoreError::Rejected(Rejection::NotFound(_))) => {
                    bail!("no such user: {user_id}; use `parley user add` to create it")
                }
                Err(e) => return Err(e).context("cannot set the password"),
            }
            println!("password of {user_id} set");
        }
    }
    Ok(())
}

fn parse_user(raw: &str) -> anyhow::Result<UserId> {
    UserId::parse(raw).map_err(|e| anyhow::anyhow!("invalid user id {raw:?}: {e}"))
}

/// Opens the store as `serve` would and applies the schema.
async fn open(args: &UserStoreArgs) -> anyhow::Result<crate::serve::OpenedStore> {
    let opened = open_store(
        args.database_url.as_deref(),
        &args.data_dir,
        USER_POOL_SIZE,
        IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT,
    )
    .await?;
    opened
        .store()
        .migrate()
        .await
        .context("cannot apply the schema")?;
    Ok(opened)
}

/// Reads the password, checks the API's length rule and hashes it off the async workers.
async fn password_hash(args: &UserStoreArgs) -> anyhow::Result<String> {
    let text = if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("cannot read the password from standard input")?;
        line.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        match std::env::var(PASSWORD_ENV) {
            Ok(text) => text,
            Err(_) => bail!(
                "give the password on standard input with --password-stdin, or in {PASSWORD_ENV}"
            ),
        }
    };
    let password = Password::parse("the password", text).map_err(|e| anyhow::anyhow!("{e}"))?;
    tokio::task::spawn_blocking(move || hash_blocking(password.as_bytes()))
        .await
        .context("the hashing task failed")?
        .context("cannot hash the password")
}
