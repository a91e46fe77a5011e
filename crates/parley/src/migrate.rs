//! `parley migrate`: apply the schema and exit, for deployments that migrate before rollout.
//! Like `serve`, it uses PostgreSQL when given a URL and the embedded store otherwise.

use anyhow::Context;

use crate::cli::{MigrateArgs, IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT};
use crate::serve::open_store;

/// One connection is enough to run migrations in order.
const MIGRATE_POOL_SIZE: u32 = 1;

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let store = open_store(
        args.database_url.as_deref(),
        &args.data_dir,
        MIGRATE_POOL_SIZE,
        IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT,
    )
    .await?;
    store
        .store()
        .migrate()
        .await
        .context("cannot apply the schema")?;
    tracing::info!("schema is up to date");
    Ok(())
}
