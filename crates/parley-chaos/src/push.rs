//! The run's push service: one `TestPushService` (a real Web Push endpoint on 127.0.0.1 that
//! checks VAPID and decrypts, from `parley-push`), the `push_service_down` fault's switch, and
//! the wait for owed notifications after a schedule.
//!
//! Gateways in network namespaces of the lab's own (`netns.rs`) have a loopback of their own,
//! where the service's endpoints (`http://127.0.0.1:PORT/push/NAME`) would not answer. So in
//! each namespace the lab listens on 127.0.0.1:PORT itself (a socket made on a thread moved
//! into the namespace with `setns`) and forwards every connection to the service on the host's
//! loopback: the endpoints, and so the VAPID audience the gateways sign, are the same
//! everywhere.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use parley_history::Record;
use parley_push::receiver::{Mode, TestPushService};
use parley_push::WebPushSubscription;
use tokio::task::JoinSet;

use crate::push_check::{self, Notification, Observer, PushReport};

/// The gateways' coalescing interval (`--push-coalesce-ms`): short, so a schedule of seconds
/// sends many notifications, and the last of a burst follows within a fraction of a second.
pub const PUSH_COALESCE_MS: u64 = 200;
/// The gateways' lease on claimed notifications (`--push-lease-ms`): the server's shortest (a
/// send's 10 s timeout and its report). A notification whose claim or report a fault cut (a
/// terminated connection, a killed gateway) stays leased this long before another claim
/// takes it; the default minute would hold a schedule's check that long.
pub const PUSH_LEASE_MS: u64 = 12_000;
/// Longest wait, after a schedule quiesced, for the notifications still owed: a lease cut by
/// the last fault, then the retry backoff (1 s doubling) of a send that met a 503 or a
/// timeout, with room to spare on a loaded machine.
pub const PUSH_SETTLE_MS_MAX: u64 = PUSH_LEASE_MS + 18_000;
/// Pause between two looks at what arrived while waiting.
const SETTLE_POLL_MS: u64 = 250;

/// The push service of the run and its forwarders into the gateways' namespaces.
pub struct PushLab {
    service: TestPushService,
    port: u16,
    down: AtomicBool,
    forwarders: JoinSet<()>,
}

impl PushLab {
    /// Starts the service on the host's loopback and, for each namespace in `namespaces`, a
    /// forwarder from 127.0.0.1 of that namespace to it.
    pub async fn start(namespaces: &[PathBuf]) -> Result<PushLab> {
        let service = TestPushService::start()
            .await
            .context("starting the push service")?;
        let port = service
            .url()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .context("the push service's port")?;
        let mut forwarders = JoinSet::new();
        for ns in namespaces {
            let listener = listen_in_netns(ns, port)
                .with_context(|| format!("listening on 127.0.0.1:{port} in {}", ns.display()))?;
            forwarders.spawn(forward(
                listener,
                SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            ));
        }
        Ok(PushLab {
            service,
            port,
            down: AtomicBool::new(false),
            forwarders,
        })
    }

    /// The service's port on 127.0.0.1 (the host's and every gateway namespace's).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A new subscription called `name`, as a browser would make it.
    pub fn subscribe(&self, name: &str) -> WebPushSubscription {
        self.service.subscribe(name)
    }

    /// The `push_service_down` fault: 503 to everything until [`up`](Self::up).
    pub fn down(&self) {
        self.service.set_mode(Mode::Down);
        self.down.store(true, Ordering::SeqCst);
    }

    /// Takes notifications again; answers whether the service was down.
    pub fn up(&self) -> bool {
        self.service.set_mode(Mode::Up);
        self.down.swap(false, Ordering::SeqCst)
    }

    /// Every POST that reached the service, refused ones included.
    pub fn attempts(&self) -> u64 {
        self.service.attempts()
    }

    /// Every notification the service took, with its time after `since`.
    pub fn notifications(&self, since: Instant) -> Vec<Notification> {
        self.service
            .received()
            .into_iter()
            .map(|r| Notification {
                conv: r.payload["conv_id"].as_str().unwrap_or_default().to_owned(),
                seq: r.payload["seq"].as_i64().unwrap_or(0),
                kind: r.payload["kind"].as_str().unwrap_or_default().to_owned(),
                at_ms: r.at.saturating_duration_since(since).as_millis() as u64,
                device: r.name,
            })
            .collect()
    }

    /// Waits, up to [`PUSH_SETTLE_MS_MAX`], until every observer got the notifications it is
    /// owed (`read_seqs`: the server's read positions at the end), then judges the schedule.
    /// Answers the report and every notification its observers received.
    pub async fn settle(
        &self,
        observers: &[Observer],
        records: &[Record],
        read_seqs: &HashMap<(String, String), i64>,
        since: Instant,
    ) -> (PushReport, Vec<Notification>) {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(PUSH_SETTLE_MS_MAX);
        loop {
            let received: Vec<Notification> = self
                .notifications(since)
                .into_iter()
                .filter(|n| observers.iter().any(|o| o.device == n.device))
                .collect();
            let mut report = push_check::check(observers, records, read_seqs, &received);
            let owed = report.expected > report.delivered;
            if !owed || Instant::now() >= deadline {
                report.settle_ms = started.elapsed().as_millis() as u64;
                return (report, received);
            }
            tokio::time::sleep(Duration::from_millis(SETTLE_POLL_MS)).await;
        }
    }
}

impl Drop for PushLab {
    fn drop(&mut self) {
        self.forwarders.abort_all();
        self.service.shutdown();
    }
}

/// A listening socket on 127.0.0.1:`port` of the network namespace `ns`. `setns` moves only
/// the calling thread, so a thread of its own makes the socket and ends; the socket stays in
/// the namespace it was made in.
fn listen_in_netns(ns: &Path, port: u16) -> Result<tokio::net::TcpListener> {
    let ns = ns.to_owned();
    let listener = std::thread::spawn(move || -> Result<std::net::TcpListener> {
        let file = std::fs::File::open(&ns).with_context(|| format!("opening {}", ns.display()))?;
        // SAFETY: setns only reads the descriptor, which `file` keeps open across the call,
        // and changes the network namespace of this thread alone, which makes one socket and
        // ends.
        let status = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if status != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))??;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}

/// Forwards every connection `listener` accepts to `to`, until aborted.
async fn forward(listener: tokio::net::TcpListener, to: SocketAddr) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(SETTLE_POLL_MS)).await;
            continue;
        };
        connections.spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                // Either side closing ends both; errors only mean a connection was cut.
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        // Reap finished connections so the set stays small.
        while connections.try_join_next().is_some() {}
    }
}
