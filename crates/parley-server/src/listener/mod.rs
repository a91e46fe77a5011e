//! The accept loop and the life of each HTTP connection, with the time limits and caps that
//! keep one client from holding what everyone needs (`ConnectionLimits`).
//!
//! - Admission (`admission`): a cap per client address and one for the process, lowered to
//!   stay below the open-file limit (`open_files`). A connection that finds the process full
//!   while no idle one can make room waits up to `ADMISSION_WAIT_MS` for room, a bounded
//!   number at a time. A refused connection gets a 503 `UNAVAILABLE` with `Retry-After`,
//!   written without waiting, and is closed.
//! - Request head and keep-alive (`head_timer`): run by hyper's own head timer, with the
//!   connection's deadlines.
//! - Request body (`body_deadline`): the whole body by a deadline set at its head.
//! - WebSocket handshake and close: in `gateway::socket`, which owns the upgraded socket.
//!
//! Shutdown stops the accept loop, closes connections that wait for a request head at once,
//! and lets those with a request in progress answer it before they close.

mod activity;
mod admission;
mod answers;
mod body_deadline;
mod head_timer;
mod io;
pub mod open_files;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::config::ConnectionLimits;

/// The peer address of the connection a request came on, in the request's extensions: the
/// key of the per-address login throttle. Absent when the router is served some other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub std::net::IpAddr);
use activity::Activity;
use admission::Admission;
use body_deadline::DeadlineBody;
use head_timer::HeadTimer;

/// Pause after an accept error that is not about one connection (out of files, out of
/// memory), so the loop does not spin while the cause lasts.
const ACCEPT_ERROR_PAUSE_MS: u64 = 50;
/// Longest a connection waits for room when the process is full. Displaced idle connections
/// close within a few polls, so a burst of accepts finds room well within this; a client
/// still refused after it is told to retry in a second.
const ADMISSION_WAIT_MS: u64 = 1_000;
/// Most connections waiting for room at once. Each holds a file descriptor from the reserve
/// below the open-file limit, so at most half of that reserve is used for waiting.
const ADMISSION_WAITERS_MAX: usize = 64;

/// Serves `router` on `listener` until `shutdown` completes, then waits at most `drain` for
/// requests in progress to be answered.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &ConnectionLimits,
    open_gauge: Gauge,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let open_files = open_files::soft_limit();
    let cap = open_files::connection_cap(limits.connections_max, open_files);
    tracing::info!(
        connections_max = cap,
        per_address_max = limits.connections_per_address_max,
        open_files = ?open_files,
        "connection caps"
    );
    let gate = Gate {
        admission: Admission::new(cap, limits.connections_per_address_max, open_gauge),
        waiters: Waiters::new(waiters_max(open_files, cap)),
        refusals: Arc::new(Refusals::new()),
        router,
        timeouts: Timeouts::new(limits),
        stop: CancellationToken::new(),
        connections: TaskTracker::new(),
    };
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    on_accept_error(e).await;
                    continue;
                }
            },
        };
        gate.take(tcp, peer.ip());
    }
    drop(listener);
    gate.stop.cancel();
    gate.connections.close();
    if tokio::time::timeout(drain, gate.connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = gate.connections.len(),
            "requests still in progress at the end of the shutdown drain"
        );
    }
}

/// Connections that may wait for room at once: half the descriptors kept below the open-file
/// limit, at most `ADMISSION_WAITERS_MAX`.
fn waiters_max(open_files: Option<u64>, cap: usize) -> usize {
    open_files.map_or(ADMISSION_WAITERS_MAX, |limit| {
        let reserve = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(cap);
        (reserve / 2).min(ADMISSION_WAITERS_MAX)
    })
}

/// Where accepted connections are admitted, made to wait or refused, and handed their task.
struct Gate {
    admission: Arc<Admission>,
    waiters: Waiters,
    refusals: Arc<Refusals>,
    router: Router,
    timeouts: Timeouts,
    stop: CancellationToken,
    connections: TaskTracker,
}

impl Gate {
    fn take(&self, tcp: TcpStream, address: std::net::IpAddr) {
        match self.admission.admit(address) {
            Ok(ticket) => {
                self.connections
                    .spawn(start_connection(tcp, ticket, self.world()));
            }
            Err(answers::Refusal::Full) => match self.waiters.try_enter() {
                Some(place) => {
                    self.connections.spawn(admit_later(
                        tcp,
                        address,
                        place,
                        self.admission.clone(),
                        self.refusals.clone(),
                        self.world(),
                    ));
                }
                None => self.refusals.send(&tcp, answers::Refusal::Full),
            },
            Err(reason) => self.refusals.send(&tcp, reason),
        }
    }

    fn world(&self) -> ConnectionWorld {
        ConnectionWorld {
            router: self.router.clone(),
            timeouts: self.timeouts,
            stop: self.stop.clone(),
        }
    }
}

/// What every connection's task is given: the routes, its time limits and the shutdown.
struct ConnectionWorld {
    router: Router,
    timeouts: Timeouts,
    stop: CancellationToken,
}

/// A connection that found the process full: it waits a while for room (holding a place
/// among the bounded waiters), then is served or refused.
async fn admit_later(
    tcp: TcpStream,
    address: std::net::IpAddr,
    place: WaiterPlace,
    admission: Arc<Admission>,
    refusals: Arc<Refusals>,
    world: ConnectionWorld,
) {
    let wait = Duration::from_millis(ADMISSION_WAIT_MS);
    let admitted = admission.admit_within(address, wait).await;
    drop(place);
    match admitted {
        Ok(ticket) => start_connection(tcp, ticket, world).await,
        Err(reason) => refusals.send(&tcp, reason),
    }
}

/// Serves one admitted connection.
async fn start_connection(tcp: TcpStream, ticket: admission::Ticket, world: ConnectionWorld) {
    // Nagle's algorithm is off: answers and frames are small, and latency matters more than
    // the packet count.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    let activity = ticket.activity().clone();
    let address = ClientAddress(ticket.address());
    let io = io::ConnIo::new(tcp, ticket, world.timeouts.write_stall);
    serve_connection(
        io,
        activity,
        address,
        world.router,
        world.timeouts,
        world.stop,
    )
    .await;
}

/// Counts the connections waiting for room, under a bound.
struct Waiters {
    waiting: Arc<AtomicUsize>,
    max: usize,
}

/// One place among the waiters, given back when dropped.
struct WaiterPlace(Arc<AtomicUsize>);

impl Drop for WaiterPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Waiters {
    fn new(max: usize) -> Self {
        Self {
            waiting: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A place among the waiters, or `None` when as many wait as may.
    fn try_enter(&self) -> Option<WaiterPlace> {
        let max = self.max;
        self.waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| WaiterPlace(self.waiting.clone()))
    }
}

/// The durations every connection uses, copied into each connection's task.
#[derive(Clone, Copy)]
struct Timeouts {
    header: Duration,
    body: Duration,
    media_body: Duration,
    keepalive_idle: Duration,
    write_stall: Duration,
}

/// Longest any connection timeout is taken to be: a deadline is an instant, and an instant
/// too far ahead does not exist. A week is longer than any useful setting.
const TIMEOUT_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;

impl Timeouts {
    fn new(limits: &ConnectionLimits) -> Self {
        let ms = |v: u64| Duration::from_millis(v.clamp(1, TIMEOUT_MS_MAX));
        Self {
            header: ms(limits.header_timeout_ms),
            body: ms(limits.body_timeout_ms),
            media_body: ms(limits.media_body_timeout_ms),
            keepalive_idle: ms(limits.keepalive_idle_ms),
            write_stall: ms(limits.write_stall_timeout_ms),
        }
    }
}

/// One HTTP connection, until it ends, is upgraded, is displaced or the server stops. A
/// connection that waits for a request head when asked to go is closed at once; one with a
/// request in progress answers it first.
async fn serve_connection(
    io: io::ConnIo,
    activity: Arc<Activity>,
    address: ClientAddress,
    router: Router,
    timeouts: Timeouts,
    stop: CancellationToken,
) {
    let body_timeout = timeouts.body;
    let media_body_timeout = timeouts.media_body;
    let service = router.map_request(move |req: Request<Incoming>| {
        // An upload's body is a file, given longer than a request's (docs/MEDIA.md).
        let upload = req.method() == axum::http::Method::POST && req.uri().path() == "/v1/media";
        let timeout = if upload {
            media_body_timeout
        } else {
            body_timeout
        };
        let deadline = Instant::now() + timeout;
        let mut req = req.map(|body| Body::new(DeadlineBody::new(body, deadline)));
        req.extensions_mut().insert(address);
        req
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(HeadTimer::new(
            activity.clone(),
            timeouts.header,
            timeouts.keepalive_idle,
        ))
        // The value only switches the timer on; `HeadTimer` sets the deadlines.
        .header_read_timeout(timeouts.header);
    let conn = builder
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = activity.asked_to_leave(), if !closing => {}
            () = stop.cancelled(), if !closing => {}
        }
        // Both the head wait and this check run on this task: no head can complete between
        // them, so a connection found waiting has no request to lose.
        if activity.waiting_for_head() {
            return;
        }
        conn.as_mut().graceful_shutdown();
        closing = true;
    }
}

/// The refusal answers, built once.
struct Refusals {
    full: Vec<u8>,
    per_address: Vec<u8>,
}

impl Refusals {
    fn new() -> Self {
        Self {
            full: answers::refusal(answers::Refusal::Full),
            per_address: answers::refusal(answers::Refusal::PerAddress),
        }
    }

    /// Writes the refusal if the socket takes it at once, then closes the socket. Nothing
    /// waits on a refused client: the answer is smaller than any socket buffer.
    fn send(&self, tcp: &TcpStream, reason: answers::Refusal) {
        let answer = match reason {
            answers::Refusal::Full => &self.full,
            answers::Refusal::PerAddress => &self.per_address,
        };
        if let Err(e) = tcp.try_write(answer) {
            tracing::debug!(error = %e, "refusal not written");
        }
        tracing::debug!(?reason, "connection refused");
    }
}

async fn on_accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
    // These concern one connection that is already gone; the next accept is unaffected.
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted) {
        return;
    }
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_PAUSE_MS)).await;
}
