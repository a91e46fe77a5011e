//! `parley user add` and `parley user passwd` on the store a running server uses: the
//! password set on the command line logs in over HTTP; adding an existing user and changing
//! the password of an unknown one fail with a clear message.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use anyhow::{ensure, Context, Result};
use parley_testkit::{test_on_both_stores, ServerProcess, StoreKind};
use serde_json::json;

/// Runs `parley user <args>` on the server's store, with `stdin` as standard input and
/// `PARLEY_PASSWORD` set to `env_password` when given.
fn user_command(
    server: &ServerProcess,
    args: &[&str],
    stdin: &str,
    env_password: Option<&str>,
) -> Result<Output> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_parley"));
    command
        .arg("user")
        .args(args)
        .env_remove("PARLEY_DATABASE_URL")
        .env_remove("PARLEY_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match (server.db(), server.data_dir()) {
        (Some(db), _) => command.env("PARLEY_DATABASE_URL", db.url()),
        (None, Some(dir)) => command.arg("--data-dir").arg(dir),
        (None, None) => anyhow::bail!("the server has no store to point at"),
    };
    if let Some(password) = env_password {
        command.env("PARLEY_PASSWORD", password);
    }
    let mut child = command.spawn().context("cannot start parley user")?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(stdin.as_bytes())?;
    Ok(child.wait_with_output()?)
}

async fn login_status(server: &ServerProcess, user: &str, password: &str) -> Result<u16> {
    let r = server
        .admin()
        .raw(parley_client::Method::POST, "/v1/auth/login")
        .without_auth()
        .json(&json!({"user_id": user, "password": password}))
        .response()
        .await?;
    Ok(r.status)
}

test_on_both_stores!(check_user_add_and_passwd);
async fn check_user_add_and_passwd(store: StoreKind) -> Result<()> {
    let server = ServerProcess::start_on(env!("CARGO_BIN_EXE_parley"), store).await;
    let add = [
        "add",
        "u-cli",
        "--display-name",
        "From the shell",
        "--password-stdin",
    ];
    let out = user_command(&server, &add, "first password\n", None)?;
    ensure!(
        out.status.success(),
        "user add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        !printed.contains("first password"),
        "the password was printed"
    );
    ensure!(login_status(&server, "u-cli", "first password").await? == 200);

    let out = user_command(&server, &add, "other password\n", None)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "a second add succeeded");
    ensure!(err.contains("already exists"), "second add: {err}");
    ensure!(login_status(&server, "u-cli", "first password").await? == 200);

    let out = user_command(&server, &["passwd", "u-nobody"], "", Some("some password"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "passwd of an unknown user succeeded");
    ensure!(err.contains("no such user"), "passwd unknown: {err}");

    let out = user_command(
        &server,
        &["passwd", "u-cli", "--password-stdin"],
        "short\n",
        None,
    )?;
    ensure!(!out.status.success(), "a short password was accepted");

    let out = user_command(&server, &["passwd", "u-cli"], "", Some("second password"))?;
    ensure!(
        out.status.success(),
        "user passwd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(login_status(&server, "u-cli", "first password").await? == 401);
    ensure!(login_status(&server, "u-cli", "second password").await? == 200);
    Ok(())
}
