//! What the connections and fanout scenarios share: push groups whose every member holds a
//! device on a real WebSocket, each socket in a task of its own that timestamps the event
//! frames of messages as they arrive.
//!
//! The sockets are raw tokio-tungstenite clients with a small read buffer, so that thousands of
//! them fit in the load generator, and they decode only the fields of an event frame that a
//! delivery needs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::{SinkExt, StreamExt};
use parley_client::{Client, DeliveryMode, NewConversation};
use serde::Deserialize;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::fixtures::{self, bounded, run_tag, Socket};
use crate::target::Target;
use crate::BenchArgs;

/// Read buffer of one client socket: the frames it reads are small, and 16,000 sockets with
/// the default of 128 KiB would take 2 GiB of the load generator.
const CLIENT_READ_BUFFER_BYTES: usize = 4 * 1024;
/// How long one socket may take from connect to the answer of its first ping.
const CONNECT_TIMEOUT_MS: u64 = 30_000;
/// Descriptors the load generator keeps for its HTTP clients, beyond one per socket.
pub const CLIENT_FILES_RESERVE: u64 = 512;

/// The groups: `conv_ids[k]` has the members `k * group_size ..`, whose first member's
/// client (`senders[k]`) sends into it; `tokens[i]` is member `i`'s device token.
pub struct OnlineGroups {
    pub group_size: usize,
    pub conv_ids: Vec<String>,
    pub senders: Vec<Client>,
    pub tokens: Vec<String>,
    pub setup_s: f64,
}

impl OnlineGroups {
    /// Creates `groups * group_size` users with a device each and `groups` push groups of
    /// `group_size` members, `--setup-concurrency` requests at once.
    pub async fn create(
        args: &BenchArgs,
        target: &Target,
        prefix: &str,
        groups: usize,
        group_size: usize,
    ) -> Result<OnlineGroups> {
        if groups == 0 || group_size < 2 {
            bail!("at least one group of at least two members is needed");
        }
        let concurrency = args.large_group.setup_concurrency;
        let tag = run_tag(6);
        let admin = target.admin()?;
        let names: Vec<String> = (0..groups * group_size)
            .map(|i| format!("{prefix}{tag}-{i}"))
            .collect();
        let started = Instant::now();
        crate::progress::phase(&format!("creating {} users with a device", names.len()));
        let tokens: Vec<String> = bounded(names.len(), concurrency, |i| {
            let (admin, name) = (&admin, &names[i]);
            async move { fixtures::user_with_device(admin, name).await }
        })
        .await?;
        crate::progress::phase(&format!("creating {groups} push groups of {group_size}"));
        let conv_ids: Vec<String> = (0..groups).map(|k| format!("{prefix}{tag}-g{k}")).collect();
        let senders: Vec<Client> = (0..groups)
            .map(|k| admin.device_client(&tokens[k * group_size]))
            .collect();
        bounded(groups, concurrency, |k| {
            let members = &names[k * group_size + 1..(k + 1) * group_size];
            let (sender, conv_id) = (&senders[k], &conv_ids[k]);
            async move {
                let group = NewConversation::group(members.iter().map(String::as_str))
                    .with_conv_id(conv_id)
                    .with_delivery_mode(DeliveryMode::Push);
                sender
                    .create_conversation(&group)
                    .await
                    .context("creating a group")?;
                Ok(())
            }
        })
        .await?;
        Ok(OnlineGroups {
            group_size,
            conv_ids,
            senders,
            tokens,
            setup_s: started.elapsed().as_secs_f64(),
        })
    }

    /// The group of member `i`.
    pub fn group_of(&self, i: usize) -> usize {
        i / self.group_size
    }
}

/// Quiet time that counts as settled: no presence frame for this long.
const SETTLE_QUIET_MS: u64 = 500;
/// Longest wait for the presence frames of the connects to settle.
const SETTLE_MAX_MS: u64 = 120_000;

/// What one socket saw: the seq and arrival time of each message's event frame.
pub type Deliveries = Vec<(i64, Instant)>;

/// Every member's socket, connected and answering, each read by a task of its own.
pub struct Sockets {
    pub delivered: Arc<AtomicU64>,
    /// Every other text frame (presence above all: each connect is announced to the
    /// member's peers).
    pub others: Arc<AtomicU64>,
    stop: CancellationToken,
    readers: Vec<JoinHandle<Result<Deliveries>>>,
}

impl Sockets {
    /// Connects one socket per token, `concurrency` handshakes at once; a socket counts as
    /// connected once the server answered a ping on it, so the connection is registered. Each
    /// socket is read from then on, so the server's pings are answered while the others
    /// connect.
    pub async fn connect(url: &str, tokens: &[String], concurrency: usize) -> Result<Sockets> {
        let (delivered, stop) = (Arc::new(AtomicU64::new(0)), CancellationToken::new());
        let others = Arc::new(AtomicU64::new(0));
        let readers = bounded(tokens.len(), concurrency, |i| {
            let (token, stop) = (&tokens[i], stop.clone());
            let counts = (delivered.clone(), others.clone());
            async move {
                let limit = Duration::from_millis(CONNECT_TIMEOUT_MS);
                let socket = tokio::time::timeout(limit, ready_socket(url, token))
                    .await
                    .context("a socket took too long to connect")??;
                Ok(tokio::spawn(read(socket, counts, stop)))
            }
        })
        .await?;
        Ok(Sockets {
            delivered,
            others,
            stop,
            readers,
        })
    }

    /// Waits until no frame other than a message arrived for `SETTLE_QUIET_MS`, at most
    /// `SETTLE_MAX_MS`: the presence frames of the connects are out of the way before a
    /// measurement. Answers how long it waited and how many such frames came in all.
    pub async fn settle(&self) -> (Duration, u64) {
        let started = Instant::now();
        let quiet = Duration::from_millis(SETTLE_QUIET_MS);
        let mut seen = self.others.load(Ordering::Relaxed);
        let mut since = Instant::now();
        while started.elapsed() < Duration::from_millis(SETTLE_MAX_MS) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = self.others.load(Ordering::Relaxed);
            if now != seen {
                (seen, since) = (now, Instant::now());
            } else if since.elapsed() >= quiet {
                break;
            }
        }
        (started.elapsed(), seen)
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Waits until `expected` deliveries arrived or `limit` passed; answers whether they did.
    pub async fn wait_for(&self, expected: u64, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.delivered() < expected {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// Closes every socket and answers what each saw, in the order of the tokens.
    pub async fn stop(self) -> Result<Vec<Deliveries>> {
        self.stop.cancel();
        let mut out = Vec::with_capacity(self.readers.len());
        for r in self.readers {
            out.push(r.await??);
        }
        Ok(out)
    }
}

async fn ready_socket(url: &str, token: &str) -> Result<Socket> {
    let mut req = fixtures::ws_url(url).into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER_BYTES);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(req, Some(config), true)
        .await
        .context("a device WebSocket")?;
    let ping = json!({"type": "ping", "req_id": "ready"}).to_string();
    ws.send(Message::Text(ping.into())).await?;
    while let Some(msg) = ws.next().await {
        if let Message::Text(t) = msg? {
            if t.as_str().contains("\"pong\"") {
                return Ok(ws);
            }
        }
    }
    bail!("a device WebSocket closed before its first pong")
}

/// The parts of `{type:"event", event:{seq, kind, …}}` a delivery needs.
#[derive(Deserialize)]
struct EventFrame<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    event: Option<EventHead<'a>>,
}

#[derive(Deserialize)]
struct EventHead<'a> {
    seq: i64,
    kind: &'a str,
}

/// The seq of a message's event frame; `None` for any other frame.
fn message_seq(text: &str) -> Option<i64> {
    let frame: EventFrame<'_> = serde_json::from_str(text).ok()?;
    let event = frame.event?;
    (frame.kind == "event" && event.kind == "msg").then_some(event.seq)
}

async fn read(
    ws: Socket,
    (delivered, others): (Arc<AtomicU64>, Arc<AtomicU64>),
    stop: CancellationToken,
) -> Result<Deliveries> {
    let (mut sink, mut stream) = ws.split();
    let mut seen = Deliveries::new();
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => break,
            msg = stream.next() => msg,
        };
        let Some(Ok(msg)) = msg else {
            bail!("a device's WebSocket closed during the run");
        };
        let at = Instant::now();
        if let Message::Text(text) = msg {
            if let Some(seq) = message_seq(text.as_str()) {
                seen.push((seq, at));
                delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                others.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let _ = sink.close().await;
    Ok(seen)
}

/// Fails unless this process may open `sockets` more files than it holds now, with a
/// reserve; the limit is read from `/proc/self/limits` (`ulimit -n` raises it).
pub fn check_open_files(sockets: usize) -> Result<()> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(soft) = soft {
        let needed = sockets as u64 + CLIENT_FILES_RESERVE;
        if soft < needed {
            bail!("{sockets} sockets need an open-file limit of {needed}, this process has {soft} (raise it with ulimit -n)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_message_events_count_as_deliveries() {
        let msg = r#"{"type":"event","event":{"conv_id":"g","seq":7,"kind":"msg","body":"x"}}"#;
        assert_eq!(message_seq(msg), Some(7));
        let join = r#"{"type":"event","event":{"conv_id":"g","seq":8,"kind":"join"}}"#;
        assert_eq!(message_seq(join), None);
        assert_eq!(message_seq(r#"{"type":"pong","req_id":"ready"}"#), None);
        assert_eq!(message_seq("not json"), None);
    }
}
