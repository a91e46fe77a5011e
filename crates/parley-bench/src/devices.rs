//! Simulated devices: one SDK realtime session per online device, tracking each of its
//! conversations from the head at creation. A reader task per device takes the session's
//! deliveries (the SDK wants them read from their own task) and records each event as
//! `(conversation, seq, arrival time)`.
//!
//! With several gateways, device `d` connects to gateway `d % n`, and a device whose
//! connection drops moves on, as a client with a list of gateways does: its reader closes the
//! session, takes what the session still had queued, and opens one on the next gateway that
//! tracks every conversation from the old session's cursors, so the device resyncs by cursor
//! and is handed nothing twice. Sends cut off by the move are resent on the new session with
//! the same `client_msg_id` ([`DeviceHandle::send`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{stream, StreamExt, TryStreamExt};
use parley_client::{
    Client, ClientError, Delivery, Realtime, RealtimeHandle, RealtimeOptions, SendAck, StopReason,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::world::World;

/// WebSocket handshakes in flight while the devices come online.
const CONNECTS_IN_FLIGHT: usize = 32;
/// Longest wait for a reader to hand over its log once its session was closed.
const READER_STOP_WAIT_MS: u64 = 10_000;
/// A connect storm has settled when no device received a presence frame for this long.
const SETTLE_QUIET_MS: u64 = 500;
/// Longest wait for a connect storm to settle; the load starts then anyway.
const SETTLE_MAX_MS: u64 = 30_000;
/// Longest a send cut off by a move waits for the device's next session.
const MOVE_WAIT_MS: u64 = 60_000;
/// Longest a device tries to reach another gateway before it counts as stopped.
const MOVE_DEADLINE_MS: u64 = 60_000;
/// Pause after a round in which no gateway took the device, doubling up to the maximum.
const MOVE_BACKOFF_FIRST_MS: u64 = 100;
const MOVE_BACKOFF_MAX_MS: u64 = 2_000;

/// One event as a device received it.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub conv: u32,
    pub seq: i64,
    pub at: Instant,
}

/// Everything one device saw, in arrival order.
#[derive(Debug, Default)]
pub struct DeviceLog {
    pub received: Vec<Received>,
    /// Arrival times of `Reconnected` notices, and the moments the device was connected
    /// again on another gateway.
    pub reconnected: Vec<Instant>,
    /// Sessions that ended for good (kicked, revoked, unreachable).
    pub stopped: Vec<String>,
    /// A client of the gateway the device moved to last; `None` if it never moved. Its final
    /// sync goes there.
    pub moved_to: Option<Client>,
}

/// Counters the load phase reads while it runs.
#[derive(Debug, Default)]
pub struct Counters {
    pub events: AtomicU64,
    pub reconnects: AtomicU64,
    /// Presence frames received: the server announces each device's arrival to its peers.
    pub presence: AtomicU64,
}

/// A device's realtime session as the load sees it: the session in use now, which a move to
/// another gateway replaces. Clones share the device.
#[derive(Clone)]
pub struct DeviceHandle {
    session: watch::Receiver<RealtimeHandle>,
}

impl DeviceHandle {
    /// [`RealtimeHandle::send`] on the device's session; a send cut off because the device
    /// moved (its session was closed) is resent on the next session with the same
    /// `client_msg_id`, so the server answers a committed one with its seq (`dup: true`).
    pub async fn send(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
    ) -> Result<SendAck, ClientError> {
        let mut session = self.session.clone();
        loop {
            let handle = session.borrow_and_update().clone();
            let answer = handle.send(conv_id, client_msg_id, body).await;
            let cut_off = matches!(
                answer,
                Err(ClientError::SessionStopped {
                    reason: StopReason::Closed
                })
            );
            if !cut_off {
                return answer;
            }
            // Closed for a move, a new session follows; closed at the end of the run, the
            // reader ends and no session follows.
            let next =
                tokio::time::timeout(Duration::from_millis(MOVE_WAIT_MS), session.changed()).await;
            if !matches!(next, Ok(Ok(()))) {
                return answer;
            }
        }
    }

    /// Drops the current connection and connects again at once (a device with several
    /// gateways moves to the next one).
    pub async fn reconnect(&self) -> Result<(), ClientError> {
        let handle = self.current();
        handle.reconnect().await
    }

    /// The session in use now.
    pub fn current(&self) -> RealtimeHandle {
        self.session.borrow().clone()
    }
}

/// How a device moves to another gateway.
struct Mover {
    urls: Arc<[String]>,
    /// Index of the gateway the device is on.
    at: usize,
    token: String,
    /// Ids of the device's conversations.
    convs: Vec<String>,
    /// Set when the run closes the devices: no more moves.
    closing: CancellationToken,
}

impl Mover {
    /// A session on the next gateway that answers (its own last), tracking every conversation
    /// from `old`'s cursors; `None` when none answered within [`MOVE_DEADLINE_MS`] or the
    /// devices are being closed.
    async fn move_on(&mut self, old: &RealtimeHandle) -> Option<(Realtime, Client)> {
        let positions: Vec<(&str, i64, i64)> = self
            .convs
            .iter()
            .filter_map(|c| old.cursor(c).map(|(epoch, seq)| (c.as_str(), epoch, seq)))
            .collect();
        let n = self.urls.len();
        let deadline = Instant::now() + Duration::from_millis(MOVE_DEADLINE_MS);
        let mut pause_ms = MOVE_BACKOFF_FIRST_MS;
        loop {
            for k in 1..=n {
                if self.closing.is_cancelled() {
                    return None;
                }
                let at = (self.at + k) % n;
                let Ok(client) = Client::new(&self.urls[at], &self.token) else {
                    continue;
                };
                let opened = Realtime::connect_tracking(&client, device_options(), &positions);
                if let Ok(rt) = opened.await {
                    self.at = at;
                    return Some((rt, client));
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            pause_ms = (pause_ms * 2).min(MOVE_BACKOFF_MAX_MS);
        }
    }
}

pub struct Devices {
    pub handles: Vec<DeviceHandle>,
    readers: Vec<JoinHandle<DeviceLog>>,
    pub counters: Arc<Counters>,
    closing: CancellationToken,
}

/// Realtime options of a simulated device: the SDK's defaults.
pub fn device_options() -> RealtimeOptions {
    RealtimeOptions::default()
}

impl Devices {
    /// Connects every online device of `world` and tracks its conversations. `urls` are the
    /// gateways the world's clients were spread over (device `d` on `urls[d % n]`); with more
    /// than one, a device whose connection drops moves to the next.
    pub async fn connect(
        world: &World,
        urls: &[String],
        on_step: &(dyn Fn() + Sync),
    ) -> Result<Devices> {
        let conv_index: Arc<HashMap<String, u32>> = Arc::new(
            world
                .convs
                .iter()
                .enumerate()
                .map(|(i, c)| (c.id.clone(), i as u32))
                .collect(),
        );
        let counters = Arc::new(Counters::default());
        let sessions: Vec<Realtime> = stream::iter(world.clients.iter().enumerate())
            .map(|(d, client)| async move {
                let rt = Realtime::connect(client, device_options()).await;
                on_step();
                let rt = rt.with_context(|| format!("connecting device {d}"))?;
                for &c in &world.device_convs[d] {
                    let conv = &world.convs[c as usize];
                    rt.track(&conv.id, conv.epoch, conv.start);
                }
                Ok::<_, anyhow::Error>(rt)
            })
            .buffered(CONNECTS_IN_FLIGHT)
            .try_collect()
            .await?;
        let urls: Arc<[String]> = urls.into();
        let closing = CancellationToken::new();
        let mut handles = Vec::with_capacity(sessions.len());
        let mut readers = Vec::with_capacity(sessions.len());
        for (d, rt) in sessions.into_iter().enumerate() {
            let (session, current) = watch::channel(rt.handle());
            handles.push(DeviceHandle { session: current });
            let mover = (urls.len() > 1).then(|| Mover {
                urls: urls.clone(),
                at: d % urls.len(),
                token: world.clients[d].token().to_owned(),
                convs: world.device_convs[d]
                    .iter()
                    .map(|&c| world.convs[c as usize].id.clone())
                    .collect(),
                closing: closing.clone(),
            });
            readers.push(tokio::spawn(read_deliveries(
                rt,
                Reader {
                    recorder: Recorder {
                        conv_index: conv_index.clone(),
                        counters: counters.clone(),
                    },
                    session,
                    mover,
                },
            )));
        }
        Ok(Devices {
            handles,
            readers,
            counters,
            closing,
        })
    }

    /// Waits until the presence frames of the devices' own arrival stopped coming (none for
    /// [`SETTLE_QUIET_MS`], at most [`SETTLE_MAX_MS`]) and answers how long that took. A run
    /// that measures a steady load starts after the connect storm it caused, which the
    /// `reconnect-storm` scenario measures on its own.
    pub async fn settle(&self) -> Duration {
        let start = Instant::now();
        let quiet = Duration::from_millis(SETTLE_QUIET_MS);
        let mut seen = self.counters.presence.load(Ordering::Relaxed);
        let mut seen_at = start;
        while start.elapsed() < Duration::from_millis(SETTLE_MAX_MS) {
            tokio::time::sleep(quiet / 5).await;
            let now = self.counters.presence.load(Ordering::Relaxed);
            if now != seen {
                (seen, seen_at) = (now, Instant::now());
            } else if seen_at.elapsed() >= quiet {
                break;
            }
        }
        start.elapsed()
    }

    /// Closes every session and collects what each device received.
    pub async fn close(self) -> Vec<DeviceLog> {
        self.closing.cancel();
        stream::iter(self.handles.iter())
            .for_each_concurrent(CONNECTS_IN_FLIGHT, |h| async move {
                h.current().close().await;
            })
            .await;
        let mut logs = Vec::with_capacity(self.readers.len());
        for reader in self.readers {
            let wait = Duration::from_millis(READER_STOP_WAIT_MS);
            logs.push(match tokio::time::timeout(wait, reader).await {
                Ok(Ok(log)) => log,
                _ => DeviceLog {
                    stopped: vec!["the reader did not stop".into()],
                    ..DeviceLog::default()
                },
            });
        }
        logs
    }
}

/// Records deliveries in a device's log.
struct Recorder {
    conv_index: Arc<HashMap<String, u32>>,
    counters: Arc<Counters>,
}

/// What a device's reader needs besides its session.
struct Reader {
    recorder: Recorder,
    /// Publishes the device's session to its [`DeviceHandle`]s.
    session: watch::Sender<RealtimeHandle>,
    /// `Some` with several gateways.
    mover: Option<Mover>,
}

impl Recorder {
    fn record(&self, log: &mut DeviceLog, delivery: Delivery, at: Instant) {
        match delivery {
            Delivery::Event(event) => {
                if let Some(&conv) = self.conv_index.get(&event.conv_id) {
                    log.received.push(Received {
                        conv,
                        seq: event.seq,
                        at,
                    });
                    self.counters.events.fetch_add(1, Ordering::Relaxed);
                }
            }
            Delivery::Reconnected => {
                log.reconnected.push(at);
                self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
            }
            Delivery::Presence { .. } => {
                self.counters.presence.fetch_add(1, Ordering::Relaxed);
            }
            Delivery::Kicked => log.stopped.push("kicked".into()),
            Delivery::Revoked => log.stopped.push("revoked".into()),
            Delivery::Unreachable => log.stopped.push("unreachable".into()),
            // Read positions, truncations, epoch changes, disconnections: the log is verified
            // afterwards.
            _ => {}
        }
    }
}

async fn read_deliveries(mut rt: Realtime, mut reader: Reader) -> DeviceLog {
    let mut log = DeviceLog::default();
    while let Some(delivery) = rt.next().await {
        let at = Instant::now();
        let lost = matches!(delivery, Delivery::Disconnected { .. });
        reader.recorder.record(&mut log, delivery, at);
        let Some(mover) = reader.mover.as_mut().filter(|_| lost) else {
            continue;
        };
        // The old session stops first, so its cursors stay where its last queued event is.
        rt.close().await;
        while let Some(queued) = rt.next().await {
            reader.recorder.record(&mut log, queued, Instant::now());
        }
        let Some((next, client)) = mover.move_on(&rt).await else {
            log.stopped.push("no gateway took the device".into());
            break;
        };
        rt = next;
        reader.session.send_replace(rt.handle());
        log.reconnected.push(Instant::now());
        reader
            .recorder
            .counters
            .reconnects
            .fetch_add(1, Ordering::Relaxed);
        log.moved_to = Some(client);
        if mover.closing.is_cancelled() {
            // The devices were closed while this one moved: close the new session too, and
            // read it out.
            rt.close().await;
        }
    }
    log
}
