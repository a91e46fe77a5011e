//! The test breaks through the real binary: `parley serve` started with `PARLEY_TEST_BREAKS`
//! runs without the named guard (this package's tests build the binary with the test-only
//! feature `test-breaks`, through the test kit's dev-dependency). The store-level controls
//! are in `parley-store/tests/it/break_controls.rs`.

use anyhow::{ensure, Context, Result};
use parley_client::NewConversation;
use parley_store::BREAKS_ENV;
use parley_testkit::{GatewayOptions, ProcessBus, ServerProcess};
use sqlx::PgPool;

const CONV: &str = "c-ack-break";

/// `06-control-ack-before-commit` through a `parley serve` process: with
/// `PARLEY_TEST_BREAKS=ack-before-commit`, a send whose commit fails (a deferred trigger raises
/// at COMMIT) is acked over HTTP all the same, and the acked message is not in the log: the
/// next send gets its seq. Without the break such a send answers `OUTCOME_UNKNOWN`
/// (`parley-store/tests/it/pg_failure.rs`, `06-ack-after-commit` in `parley-server`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_06_control_ack_before_commit_process() -> Result<()> {
    let options = GatewayOptions::new(ProcessBus::Postgres, "gw-ack-break")
        .with_env(BREAKS_ENV, "ack-before-commit");
    let gateways =
        ServerProcess::start_gateways_with(env!("CARGO_BIN_EXE_parley"), 1, &options).await;
    let server = &gateways[0];
    let admin = server.admin();
    for user in ["u-ana", "u-ben"] {
        admin.create_user(user, None).await?;
    }
    let ana = admin.device_client(&admin.create_device("u-ana", "d1").await?);
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id(CONV))
        .await?;
    let db = server.db().context("the gateway runs on PostgreSQL")?;
    let pool = PgPool::connect(db.url()).await?;
    sqlx::query(
        "CREATE FUNCTION fail_poison_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.body = 'poison' THEN RAISE EXCEPTION 'injected failure at commit'; END IF;
         RETURN NULL; END $$",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "CREATE CONSTRAINT TRIGGER fail_poison_at_commit AFTER INSERT ON events
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_poison_at_commit()",
    )
    .execute(&pool)
    .await?;

    let acked = ana
        .send(CONV, "m-poison", "poison")
        .await
        .context("the broken gateway acks before its commit")?;
    // This send takes the conversation's row lock only once the poisoned transaction ended.
    let next = ana.send(CONV, "m-after", "after").await?;
    let log = ana.all_events(CONV).await?;
    let in_log = log
        .iter()
        .any(|e| e.message_id.as_deref() == Some(acked.message_id.as_str()));
    println!(
        "06-control-ack-before-commit (process): acked seq {}, in log: {in_log}, next seq {}",
        acked.seq, next.seq
    );
    ensure!(
        !in_log && next.seq == acked.seq,
        "the control must show the failure: acked seq {} (in log: {in_log}), next seq {}",
        acked.seq,
        next.seq
    );
    Ok(())
}
