//! `parley migrate`: apply the schema and exit, for deployments that migrate before rollout.

use anyhow::Context;
use parley_store::pg::PgStore;
use parley_store::Store;

use crate::cli::MigrateArgs;

/// One connection is enough to run migrations in order.
const MIGRATE_POOL_SIZE: u32 = 1;

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let store = PgStore::connect(&args.database_url, MIGRATE_POOL_SIZE)
        .await
        .context("cannot connect to PostgreSQL")?;
    store.migrate().await.context("cannot apply the schema")?;
    tracing::info!("schema is up to date");
    Ok(())
}
