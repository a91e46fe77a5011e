//! The test breaks through the real binary: `parley serve` started with `PARLEY_TEST_BREAKS`
//! runs without the named guard (this package's tests build the binary with the test-only
//! feature `test-breaks`, through the test kit's dev-dependency). The store-level controls
//! are in `parley-store/tests/it/break_controls.rs`.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures::StreamExt;
use parley_client::NewConversation;
use parley_store::BREAKS_ENV;
use parley_testkit::{GatewayOptions, ProcessBus, ServerProcess, StoreKind};
use sqlx::PgPool;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const CONV: &str = "c-ack-break";
/// Longest wait for an observable step (a route claimed, a socket closed and cleaned up).
const STEP_WAIT_MS: u64 = 5_000;
/// Pause between two looks at the route table or the metrics while waiting.
const POLL_INTERVAL_MS: u64 = 20;
/// The gauge of WebSockets being served; a socket leaves it after its cleanup, route release
/// included.
const OPEN_SOCKETS: &str = "parley_open_connections{kind=\"websocket\"}";

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

/// One gateway process on PostgreSQL with `breaks` in its environment (none when empty).
async fn gateway(breaks: &str, prefix: &str) -> ServerProcess {
    let mut options = GatewayOptions::new(ProcessBus::Postgres, prefix);
    if !breaks.is_empty() {
        options = options.with_env(BREAKS_ENV, breaks);
    }
    let mut gateways =
        ServerProcess::start_gateways_with(env!("CARGO_BIN_EXE_parley"), 1, &options).await;
    gateways.remove(0)
}

/// Polls `probe` until it answers `Some`, for at most `STEP_WAIT_MS`.
async fn until<T, F, Fut>(what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_millis(STEP_WAIT_MS);
    loop {
        if let Some(found) = probe().await? {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not seen within {STEP_WAIT_MS} ms");
        }
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
    }
}

/// The connection the route of `u-ana`'s device `d1` names.
async fn route(pool: &PgPool) -> Result<Option<String>> {
    Ok(sqlx::query_scalar(
        "SELECT conn_id FROM routes WHERE user_id = 'u-ana' AND device_id = 'd1'",
    )
    .fetch_optional(pool)
    .await?)
}

/// The WebSockets `server` is serving, from its metrics.
async fn open_sockets(server: &ServerProcess) -> Result<f64> {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", server.base_url()))
        .bearer_auth(server.admin_token())
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(OPEN_SOCKETS)?.trim().parse().ok())
        .unwrap_or(0.0))
}

/// A WebSocket of the device whose token is `token`.
async fn connect(
    server: &ServerProcess,
    token: &str,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
> {
    let url = format!("{}/v1/ws", server.base_url().replacen("http", "ws", 1));
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

/// The route of the device after its older connection was replaced by a newer one and the
/// older one's cleanup finished, and the newer connection's id, on a gateway with `breaks`.
async fn route_after_old_cleanup(breaks: &str, prefix: &str) -> Result<(Option<String>, String)> {
    let server = gateway(breaks, prefix).await;
    let admin = server.admin();
    admin.create_user("u-ana", None).await?;
    let token = admin.create_device("u-ana", "d1").await?;
    let pool = PgPool::connect(server.db().context("on PostgreSQL")?.url()).await?;
    let mut old = connect(&server, &token).await?;
    let first = until("the first route", || route(&pool)).await?;
    let _new = connect(&server, &token).await?;
    let second = until("the second route", || async {
        Ok(route(&pool).await?.filter(|conn| *conn != first))
    })
    .await?;
    // The old connection is kicked; it is read to its end, then its cleanup (route release
    // included) ends before the gauge lets go of it.
    let drained = tokio::time::timeout(Duration::from_millis(STEP_WAIT_MS), async {
        while let Some(Ok(_)) = old.next().await {}
    })
    .await;
    ensure!(drained.is_ok(), "the old connection was not closed");
    until("the old connection's cleanup", || async {
        Ok((open_sockets(&server).await? == 1.0).then_some(()))
    })
    .await?;
    Ok((route(&pool).await?, second))
}

/// `05-control-cleanup-without-compare-and-delete` through a `parley serve` process: with
/// `PARLEY_TEST_BREAKS=cleanup-without-cad`, the kicked connection's cleanup deletes the newer
/// connection's route, which `05-old-cleanup-keeps-new-route` forbids; the same steps on a
/// gateway without the break keep it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_05_control_cleanup_without_compare_and_delete_process() -> Result<()> {
    let (kept, new) = route_after_old_cleanup("", "gw-cad-guarded").await?;
    println!("05-control-cleanup-without-compare-and-delete (process, guarded): {kept:?}");
    ensure!(
        kept.as_deref() == Some(new.as_str()),
        "without the break the new route must stay: {kept:?}, new {new}"
    );
    let (kept, new) = route_after_old_cleanup("cleanup-without-cad", "gw-cad-broken").await?;
    println!("05-control-cleanup-without-compare-and-delete (process): {kept:?}, new {new}");
    ensure!(
        kept.is_none(),
        "the control must show the failure: the route after the old cleanup is {kept:?}"
    );
    Ok(())
}

/// `parley serve` in a child process on a fresh store of its own, with `breaks` in its
/// environment (none when empty); killed when dropped. The test kit's [`ServerProcess`] takes
/// an environment only for gateways on PostgreSQL, and the search control runs on both stores.
struct Serve {
    child: std::process::Child,
    base_url: String,
    admin_token: String,
    _db: Option<parley_testkit::TestDb>,
    _dir: tempfile::TempDir,
}

impl Serve {
    async fn start(kind: StoreKind, breaks: &str) -> Result<Serve> {
        let addr = parley_testkit::free_addr()?;
        let base_url = format!("http://{addr}");
        let admin_token = format!("admin-{:016x}", rand::random::<u64>());
        let dir = tempfile::tempdir()?;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parley"));
        command
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--admin-token")
            .arg(&admin_token)
            .arg("--data-dir")
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        if !breaks.is_empty() {
            command.env(BREAKS_ENV, breaks);
        }
        let db = match kind {
            StoreKind::Postgres => {
                let db = parley_testkit::TestDb::create().await;
                command.arg("--database-url").arg(db.url());
                Some(db)
            }
            StoreKind::Sqlite => None,
        };
        let child = command.spawn().context("cannot start parley serve")?;
        let mut serve = Serve {
            child,
            base_url,
            admin_token,
            _db: db,
            _dir: dir,
        };
        parley_testkit::wait_ready(&mut serve.child, &serve.base_url).await?;
        Ok(serve)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The outcome of the verify check `id` against a `parley serve` on `kind` with `breaks`.
async fn verify_check(
    kind: StoreKind,
    breaks: &str,
    id: &str,
) -> Result<parley_verify::CheckResult> {
    let server = Serve::start(kind, breaks).await?;
    let target =
        parley_verify::Target::connect(&server.base_url, &server.admin_token, None).await?;
    let result = parley_verify::run_one(target, id)
        .await
        .with_context(|| format!("no verify check {id}"))?;
    println!(
        "{id} ({kind:?}, breaks {breaks:?}): {} {:?}\n  {}",
        result.status.as_str(),
        result.reason,
        result.transcript.join("\n  ")
    );
    Ok(result)
}

/// `15-control-search-ignores-periods` through `parley serve` on each store: with
/// `PARLEY_TEST_BREAKS=search-ignores-periods` the verify check `15-outside-periods-not-found`
/// fails, the member finding the messages sent before he joined and after he left; on a server
/// without the break it passes. The store-level control is `break_controls.rs`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_15_control_search_ignores_periods_process() -> Result<()> {
    const CHECK: &str = "15-outside-periods-not-found";
    for kind in [StoreKind::Postgres, StoreKind::Sqlite] {
        let guarded = verify_check(kind, "", CHECK).await?;
        ensure!(
            guarded.status == parley_verify::Status::Pass,
            "{kind:?}: without the break the check must pass: {:?}",
            guarded.reason
        );
        let broken = verify_check(kind, "search-ignores-periods", CHECK).await?;
        let reason = broken.reason.unwrap_or_default();
        ensure!(
            broken.status == parley_verify::Status::Fail
                && reason.starts_with("outside his periods ben found seq 2 sent before he joined and seq 6 sent after he left"),
            "{kind:?}: the check should fail on the messages outside the periods, got {} {reason:?}",
            broken.status.as_str()
        );
    }
    Ok(())
}

/// `16-control-mls-any-epoch` through `parley serve` on each store: with
/// `PARLEY_TEST_BREAKS=mls-any-epoch` the verify check `16-stale-epoch-refused` fails, the
/// application message made in epoch 0 being accepted after the commit to epoch 1; on a server
/// without the break it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_16_control_mls_any_epoch_process() -> Result<()> {
    const CHECK: &str = "16-stale-epoch-refused";
    for kind in [StoreKind::Postgres, StoreKind::Sqlite] {
        let guarded = verify_check(kind, "", CHECK).await?;
        ensure!(
            guarded.status == parley_verify::Status::Pass,
            "{kind:?}: without the break the check must pass: {:?}",
            guarded.reason
        );
        let broken = verify_check(kind, "mls-any-epoch", CHECK).await?;
        let reason = broken.reason.unwrap_or_default();
        ensure!(
            broken.status == parley_verify::Status::Fail
                && reason.starts_with("the stale application message of epoch 0 was accepted"),
            "{kind:?}: the check should fail on the accepted stale message, got {} {reason:?}",
            broken.status.as_str()
        );
    }
    Ok(())
}
