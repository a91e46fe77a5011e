//! An SDK example running as a process, as a user starts it: its output lines collected as
//! they come, so a test waits for what the example prints rather than for time to pass.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Longest wait for a line an example is expected to print.
pub const LINE_WAIT_MS: u64 = 30_000;

pub struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// The number of lines so far; changes with each line.
    count: watch::Receiver<usize>,
    /// The tasks reading standard output and error; each ends at its stream's end.
    collectors: Vec<JoinHandle<()>>,
}

impl Running {
    /// Starts `program args…` against the server at `url` with a device `token`
    /// (`PARLEY_URL`, `PARLEY_TOKEN`), logging at `info`.
    pub fn start(program: &Path, args: &[&str], url: &str, token: &str) -> Result<Self> {
        let mut child = Command::new(program)
            .args(args)
            .env("PARLEY_URL", url)
            .env("PARLEY_TOKEN", token)
            .env("RUST_LOG", "info")
            // Plain text: the lines are matched and shown in reports.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, count) = watch::channel(0);
        let tx = Arc::new(tx);
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let collectors = vec![
            tokio::spawn(collect(stdout, lines.clone(), tx.clone())),
            tokio::spawn(collect(stderr, lines.clone(), tx)),
        ];
        Ok(Self {
            child,
            lines,
            count,
            collectors,
        })
    }

    /// Every line printed so far, standard output and error interleaved as they came.
    pub fn output(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits for the first line, from the start of the output, that `wanted` accepts.
    pub async fn line(&mut self, wanted: impl Fn(&str) -> bool) -> Result<String> {
        let wait = tokio::time::timeout(Duration::from_millis(LINE_WAIT_MS), async {
            loop {
                if let Some(line) = self.output().into_iter().find(|l| wanted(l)) {
                    return Ok(line);
                }
                if self.count.changed().await.is_err() {
                    bail!("the example ended without printing it");
                }
            }
        });
        match wait.await {
            Ok(found) => found,
            Err(_) => bail!("not printed within {LINE_WAIT_MS} ms: {:#?}", self.output()),
        }
    }

    /// Waits for the example to exit on its own and for everything it printed to be read;
    /// answers whether it succeeded. The exit can be seen before the last lines are read, so
    /// the output is complete only once both streams ended.
    pub async fn finished(&mut self) -> Result<bool> {
        let status = tokio::time::timeout(Duration::from_millis(LINE_WAIT_MS), self.child.wait())
            .await
            .context("the example did not exit")??;
        for collector in self.collectors.drain(..) {
            tokio::time::timeout(Duration::from_millis(LINE_WAIT_MS), collector)
                .await
                .context("the example's output did not end")??;
        }
        Ok(status.success())
    }

    pub async fn stop(&mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

async fn collect(
    stream: impl AsyncRead + Unpin,
    lines: Arc<Mutex<Vec<String>>>,
    count: Arc<watch::Sender<usize>>,
) {
    let mut reader = BufReader::new(stream).lines();
    while let Ok(Some(line)) = reader.next_line().await {
        let n = {
            let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
            lines.push(line);
            lines.len()
        };
        count.send_replace(n);
    }
}
