//! `parley serve --demo`: the printed logins work, the seeded conversations are there, a second
//! start writes nothing twice, and the demo refuses PostgreSQL.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use parley_client::Client;
use parley_testkit::{free_addr, wait_ready, PROCESS_START_WAIT_MS};

/// A `serve --demo` process on the embedded store in `dir`, and the lines it printed on
/// standard output (read by a thread so the pipe never fills).
struct Demo {
    child: Child,
    base_url: String,
    stdout: mpsc::Receiver<String>,
}

impl Demo {
    async fn start(dir: &std::path::Path) -> Result<Self> {
        let addr = free_addr()?;
        let mut child = Command::new(env!("CARGO_BIN_EXE_parley"))
            .args([
                "serve",
                "--demo",
                "--listen",
                &addr.to_string(),
                "--data-dir",
            ])
            .arg(dir)
            .env_remove("PARLEY_DATABASE_URL")
            .env_remove("PARLEY_ADMIN_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start parley serve --demo")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let base_url = format!("http://{addr}");
        wait_ready(&mut child, &base_url).await?;
        Ok(Self {
            child,
            base_url,
            stdout: rx,
        })
    }

    /// Lines printed until the banner's last line, or an error when it never comes.
    fn banner(&self) -> Result<String> {
        let mut text = String::new();
        loop {
            let line = self
                .stdout
                .recv_timeout(Duration::from_millis(PROCESS_START_WAIT_MS))
                .context("the demo banner was not printed")?;
            text.push_str(&line);
            text.push('\n');
            if line.contains("cai") {
                return Ok(text);
            }
        }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (conv_id, head) of every conversation `user` sees, sorted.
async fn heads(base_url: &str, user: &str, password: &str) -> Result<Vec<(String, i64)>> {
    let (client, _) = Client::login(base_url, user, password, None).await?;
    let mut heads: Vec<_> = client
        .list_conversations(None)
        .await?
        .conversations
        .into_iter()
        .map(|c| (c.conv_id, c.head))
        .collect();
    heads.sort();
    Ok(heads)
}

#[tokio::test]
async fn demo_prints_logins_that_work_and_seeds_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let demo = Demo::start(dir.path()).await?;
    let banner = demo.banner()?;
    ensure!(
        banner.contains(&format!("{}/", demo.base_url)),
        "banner lacks the URL: {banner}"
    );
    for (user, password) in [
        ("ana", "parley-ana"),
        ("ben", "parley-ben"),
        ("cai", "parley-cai"),
    ] {
        ensure!(banner.contains(password), "banner lacks {user}'s login");
    }
    let first = heads(&demo.base_url, "ana", "parley-ana").await?;
    ensure!(
        first == vec![("demo-welcome".to_owned(), 6), ("dm:ana:ben".to_owned(), 4)],
        "seeded conversations: {first:?}"
    );
    // The group's three members and their messages: ben sees the same heads.
    ensure!(heads(&demo.base_url, "ben", "parley-ben").await? == first);
    demo.stop();

    let again = Demo::start(dir.path()).await?;
    ensure!(
        heads(&again.base_url, "ana", "parley-ana").await? == first,
        "a second start wrote the seed again"
    );
    again.stop();
    Ok(())
}

#[test]
fn demo_refuses_postgres() -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_parley"))
        .args([
            "serve",
            "--demo",
            "--database-url",
            "postgres://postgres@127.0.0.1:5432/postgres",
        ])
        .output()?;
    ensure!(!out.status.success(), "serve --demo started on PostgreSQL");
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(err.contains("--demo"), "error does not name --demo: {err}");
    Ok(())
}
