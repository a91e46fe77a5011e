//! Logs and metrics of the real binary (issue 14, item 6): with `--log-format json` every line
//! is a JSON object, a send can be followed by its conversation, and neither its body nor a
//! token reaches the log; the text format writes no colour codes into a pipe; the metrics
//! listener (`--metrics-listen`) serves the scrape without a token.

use std::process::{Child, Command, Output, Stdio};

use anyhow::{ensure, Context, Result};
use parley_client::{AdminClient, NewConversation};
use parley_testkit::{free_addr, wait_ready};

/// A message body no log line may contain.
const BODY: &str = "body-that-must-stay-out-of-the-log";
const ADMIN_TOKEN: &str = "admin-token-that-must-stay-out-of-the-log";

/// `parley serve` on the embedded store in `dir`, logging at debug for the server crate so
/// the request path's lines are written.
fn spawn(dir: &std::path::Path, listen: &str, extra: &[&str]) -> Result<Child> {
    let data = dir.to_str().context("utf-8 path")?;
    Ok(Command::new(env!("CARGO_BIN_EXE_parley"))
        .args(["serve", "--data-dir", data, "--listen", listen])
        .args(["--admin-token", ADMIN_TOKEN])
        .args(extra)
        .env("RUST_LOG", "info,parley_server=debug,tower_http=debug")
        .env_remove("PARLEY_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

/// Stops the child and answers what it wrote.
fn stop(mut child: Child) -> Result<Output> {
    child.kill()?;
    Ok(child.wait_with_output()?)
}

/// A user, a device token and a conversation; answers the token after one send.
async fn send_one(base_url: &str) -> Result<String> {
    let admin = AdminClient::new(base_url, ADMIN_TOKEN)?;
    admin.create_user("u-ana", None).await?;
    admin.create_user("u-ben", None).await?;
    let token = admin.create_device("u-ana", "d1").await?;
    let ana = admin.device_client(&token);
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-logged"))
        .await?;
    ana.send("c-logged", "k-1", BODY).await?;
    Ok(token)
}

#[tokio::test]
async fn json_logs_follow_a_send_without_its_body_or_token() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let addr = free_addr()?;
    let metrics_addr = free_addr()?;
    let base_url = format!("http://{addr}");
    let mut child = spawn(
        dir.path(),
        &addr.to_string(),
        &[
            "--log-format",
            "json",
            "--metrics-listen",
            &metrics_addr.to_string(),
        ],
    )?;
    let sent = async {
        wait_ready(&mut child, &base_url).await?;
        let token = send_one(&base_url).await?;
        // The metrics listener answers without a token.
        let scrape = reqwest::get(format!("http://{metrics_addr}/metrics")).await?;
        ensure!(
            scrape.status() == 200,
            "metrics listener: {}",
            scrape.status()
        );
        let text = scrape.text().await?;
        ensure!(
            text.lines()
                .any(|l| l == "parley_sends_total{outcome=\"written\"} 1"),
            "no written send in the scrape:\n{text}"
        );
        Ok(token)
    }
    .await;
    let output = stop(child)?;
    let token = sent?;
    let stdout = String::from_utf8(output.stdout)?;
    let lines: Vec<&str> = stdout.lines().collect();
    ensure!(!lines.is_empty(), "no log lines");
    for line in &lines {
        let parsed: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("not JSON: {line}"))?;
        ensure!(parsed.is_object(), "not an object: {line}");
        ensure!(!line.contains(BODY), "the body was logged: {line}");
        ensure!(
            !line.contains(&token),
            "the device token was logged: {line}"
        );
        ensure!(
            !line.contains(ADMIN_TOKEN),
            "the admin token was logged: {line}"
        );
        ensure!(!line.contains('\u{1b}'), "an escape code: {line}");
    }
    // The store's answer to the send, in the send's span, names the conversation and device.
    let committed = lines
        .iter()
        .find(|l| l.contains("send committed"))
        .with_context(|| format!("no line of the committed send in:\n{stdout}"))?;
    ensure!(
        committed.contains("\"conv_id\":\"c-logged\"") && committed.contains("\"device\":\"d1\""),
        "the send's line lacks its conversation or device: {committed}"
    );
    Ok(())
}

#[tokio::test]
async fn text_logs_into_a_pipe_have_no_colour_codes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let addr = free_addr()?;
    let base_url = format!("http://{addr}");
    let mut child = spawn(dir.path(), &addr.to_string(), &["--log-format", "text"])?;
    let sent = async {
        wait_ready(&mut child, &base_url).await?;
        send_one(&base_url).await
    }
    .await;
    let output = stop(child)?;
    sent?;
    let stdout = String::from_utf8(output.stdout)?;
    ensure!(
        stdout.contains("c-logged"),
        "no line of the send:\n{stdout}"
    );
    ensure!(
        !stdout.contains('\u{1b}'),
        "escape codes in a pipe:\n{stdout}"
    );
    Ok(())
}
