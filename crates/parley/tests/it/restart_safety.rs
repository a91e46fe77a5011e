//! Restart safety: everything acked survives `kill -9` of the server. The real binary runs on a
//! data directory (or a PostgreSQL database), a sender sends while the process is killed with
//! SIGKILL, and a new process on the same data must hold every acked message, at its acked seq,
//! in a gapless log.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use parley_client::{AdminClient, Client, NewConversation};
use parley_testkit::{free_addr, test_on_both_stores, wait_ready, ServerProcess, StoreKind};

/// Acked sends to see before the kill: enough that the kill lands in the middle of traffic.
const ACKED_BEFORE_KILL: usize = 150;
/// Sends in flight at once, so some are between commit and ack when the process dies.
const SENDERS: usize = 4;
const CONV: &str = "c-kill";

/// The whole log as `client` sees it: `(seq, client_msg_id, message_id)` of each msg, and the
/// seqs of every event.
async fn read_log(client: &Client) -> Result<(Vec<i64>, BTreeMap<String, (i64, String)>)> {
    let events = client.all_events(CONV).await?;
    let seqs = events.iter().map(|e| e.seq).collect();
    let msgs = events
        .into_iter()
        .filter_map(|e| Some((e.client_msg_id?, (e.seq, e.message_id?))))
        .collect();
    Ok((seqs, msgs))
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_kill_9_keeps_every_acked_send
);
/// Sends run until the server is killed with SIGKILL; after a restart on the same data every
/// acked send is in the log with its acked seq and message id, and the seqs run 1..=head.
async fn check_kill_9_keeps_every_acked_send(store: StoreKind) -> Result<()> {
    let mut server = ServerProcess::start_on(env!("CARGO_BIN_EXE_parley"), store).await;
    let admin = server.admin();
    for user in ["u-ana", "u-ben"] {
        admin.create_user(user, None).await?;
    }
    let ana = admin.device_client(&admin.create_device("u-ana", "d1").await?);
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id(CONV))
        .await?;

    // Senders take keys from one counter and record every ack; they stop at the first error,
    // which the kill causes.
    let acked: Arc<Mutex<BTreeMap<String, (i64, String)>>> = Arc::default();
    let next_key = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = Vec::new();
    for _ in 0..SENDERS {
        let (ana, acked, next_key) = (ana.clone(), acked.clone(), next_key.clone());
        senders.push(tokio::spawn(async move {
            loop {
                let i = next_key.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = format!("m-{i}");
                match ana.send(CONV, &key, &format!("message {i}")).await {
                    Ok(ack) => {
                        let mut acked = acked.lock().unwrap_or_else(|p| p.into_inner());
                        acked.insert(key, (ack.seq, ack.message_id));
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap_or_else(|p| p.into_inner()).len() < ACKED_BEFORE_KILL {
        ensure!(Instant::now() < deadline, "the senders stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill();
    for s in senders {
        s.await?;
    }
    let acked = acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
    ensure!(acked.len() >= ACKED_BEFORE_KILL, "acked {}", acked.len());

    server.restart().await;
    let (seqs, msgs) = read_log(&ana).await?;
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    ensure!(seqs == expected, "the log after restart is not gapless");
    for (key, stored) in &acked {
        ensure!(
            msgs.get(key) == Some(stored),
            "acked {key} at {stored:?} is {:?} after the restart",
            msgs.get(key)
        );
    }
    // The server goes on where it stopped: a new send takes the next seq.
    let ack = ana.send(CONV, "after-restart", "hello again").await?;
    ensure!(
        ack.seq == seqs.len() as i64 + 1 && !ack.dup,
        "first send after the restart: {ack:?}"
    );
    println!(
        "{store}: {} sends acked before SIGKILL, {} messages in the log after the restart",
        acked.len(),
        msgs.len()
    );
    Ok(())
}

/// Without --admin-token the first start generates a token, prints it once and keeps it in the
/// data directory (owner-only); a restart reuses it without printing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_admin_token_is_printed_once_and_reused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let mut tokens = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..2 {
        let addr = free_addr()?;
        let base = format!("http://{addr}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_parley"))
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(&data)
            .env_remove("PARLEY_ADMIN_TOKEN")
            .env_remove("PARLEY_DATABASE_URL")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let ready = wait_ready(&mut child, &base).await;
        let token = std::fs::read_to_string(data.join("admin_token"))?
            .trim()
            .to_owned();
        let admin_works = AdminClient::new(&base, &token)?
            .create_user(&format!("u-{}", tokens.len()), None)
            .await;
        let _ = child.kill();
        let out = child.wait_with_output()?;
        ready?;
        admin_works.context("the kept token does not open the admin endpoints")?;
        tokens.push(token);
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    ensure!(tokens[0] == tokens[1], "the token changed across restarts");
    ensure!(
        tokens[0].len() == 64 && tokens[0].bytes().all(|b| b.is_ascii_hexdigit()),
        "token shape"
    );
    ensure!(
        outputs[0].contains(&tokens[0]),
        "the first start did not print the token: {:?}",
        outputs[0]
    );
    ensure!(
        !outputs[1].contains(&tokens[0]),
        "the second start printed the token again"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("admin_token"))?
            .permissions()
            .mode()
            & 0o777;
        ensure!(mode == 0o600, "token file mode {mode:o}");
        let dir_mode = std::fs::metadata(&data)?.permissions().mode() & 0o777;
        ensure!(dir_mode == 0o700, "data directory mode {dir_mode:o}");
    }
    Ok(())
}

/// A server killed with SIGKILL in the middle of an upload leaves a part file; the next start
/// sweeps it, no media is visible and no blob was written. An upload acked before the kill is
/// served after it (the embedded store, whose media are in its data directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_kill_9_mid_upload_leaves_nothing() -> Result<()> {
    use tokio::io::AsyncWriteExt;

    let mut server = ServerProcess::start_on(env!("CARGO_BIN_EXE_parley"), StoreKind::Sqlite).await;
    let data = server
        .data_dir()
        .context("an embedded server has a data directory")?
        .to_owned();
    let admin = server.admin();
    admin.create_user("u-ana", None).await?;
    let token = admin.create_device("u-ana", "d1").await?;
    let ana = admin.device_client(&token);
    let kept = ana
        .upload(b"acked before the kill".to_vec(), Some("k.txt"), None)
        .await?;

    let mut upload = tokio::net::TcpStream::connect(server.addr()).await?;
    let head = format!(
        "POST /v1/media HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 1000000\r\n\r\n"
    );
    upload.write_all(head.as_bytes()).await?;
    upload.write_all(&[9u8; 200_000]).await?;
    let parts = data.join("media").join("parts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(&parts)?.count() == 0 {
        ensure!(
            Instant::now() < deadline,
            "no part file while the upload runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill();
    ensure!(
        std::fs::read_dir(&parts)?.count() == 1,
        "the killed upload left no part file to sweep"
    );
    server.restart().await;
    ensure!(
        std::fs::read_dir(&parts)?.count() == 0,
        "the part file survived the restart"
    );
    let blobs: usize = std::fs::read_dir(data.join("media").join("blobs"))?
        .flatten()
        .map(|shard| std::fs::read_dir(shard.path()).map_or(0, |d| d.count()))
        .sum();
    ensure!(
        blobs == 1,
        "blobs after the restart: {blobs} (want the acked upload's only)"
    );
    let ana = server.admin().device_client(&token);
    ensure!(
        ana.download(&kept.media_id).await?[..] == b"acked before the kill"[..],
        "the acked upload is gone"
    );
    Ok(())
}
