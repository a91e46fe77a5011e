//! The background task of a session: it owns the socket, writes requests and matches their
//! answers, keeps the connection alive, and replaces it when it drops.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::error::ClientError;
use crate::ws::connection::{self, on_close, Ended, Silence, Socket};
use crate::ws::fetch::{Link, Stashed};
use crate::ws::frames::{ClientFrame, Request, ServerFrame};
use crate::ws::gateways::Gateways;
use crate::ws::options::RealtimeOptions;
use crate::ws::protocol::{Command, Delivery, Reply, Shared, StopReason};
use crate::ws::sequencer::{Sequencer, Stopped};

/// Longest wait for the server to acknowledge our close frame when the app closes the session.
const CLOSE_WAIT_MS: u64 = 1_000;

pub(crate) struct Driver {
    /// The gateways to connect to; the current one is the gateway of the open connection.
    gateways: Gateways,
    options: RealtimeOptions,
    shared: Arc<Shared>,
    sequencer: Sequencer,
    commands: mpsc::Receiver<Command>,
    cancel: CancellationToken,
    /// Written requests waiting for their answer, by `req_id`. Bounded by
    /// `requests_in_flight_max`; emptied whenever a connection ends.
    pending: HashMap<String, Reply>,
    /// Request ids and the frames kept while a fetch waits (`fetch.rs`).
    link: Link,
}

impl Driver {
    pub(crate) fn new(
        gateways: Gateways,
        options: RealtimeOptions,
        shared: Arc<Shared>,
        commands: mpsc::Receiver<Command>,
        deliveries: mpsc::Sender<Delivery>,
        cancel: CancellationToken,
    ) -> Self {
        let sequencer = Sequencer::new(
            gateways.current().clone(),
            &options,
            shared.clone(),
            deliveries,
            cancel.clone(),
        );
        let link = Link::new(options.answer_timeout_ms);
        Self {
            gateways,
            options,
            shared,
            sequencer,
            commands,
            cancel,
            pending: HashMap::new(),
            link,
        }
    }

    /// Serves connections until the session stops: after each lost one, reconnects (to the
    /// next gateway when the last one may be gone) and catches every tracked conversation up
    /// from its cursor, since pushes sent meanwhile are gone.
    pub(crate) async fn run(mut self, first: Socket) {
        let mut socket = first;
        let reason = loop {
            let (move_on, why) = match self.serve(socket).await {
                Ended::Stop(reason) => break reason,
                Ended::Lost(why) => (true, why),
                Ended::Renew(why) => (false, why),
            };
            tracing::info!(reason = %why, "realtime connection lost; reconnecting");
            self.shared.set_connected(false);
            // Frames of the lost connection: the resync below covers their events.
            self.link.stash.clear();
            // Requests written and unanswered learn that their outcome is unknown; `send` and
            // `mark_read` resend them with the same key once connected again (`session.rs`),
            // and the server's idempotency answers a send that did commit with its first seq.
            self.fail_pending(|| ClientError::Disconnected {
                reason: why.clone(),
            });
            self.sequencer
                .notice(Delivery::Disconnected { reason: why });
            socket = match self.reconnect(move_on).await {
                Ok(socket) => socket,
                Err(reason) => break reason,
            };
            let gateway = self.gateways.current().clone();
            tracing::info!(gateway = %gateway.base_url(), "realtime connection restored");
            self.shared.set_gateway(gateway.base_url().clone());
            // Catch-ups go to the gateway the socket is on, which is known to be alive.
            self.sequencer.use_client(gateway);
            self.shared.set_connected(true);
            self.sequencer.notice(Delivery::Reconnected);
            let mut fetch = self.link.fetch(&mut socket);
            if self.sequencer.resync_all(&mut fetch).await.is_err() {
                break StopReason::Closed;
            }
        };
        self.finish(reason).await;
    }

    /// Reads and writes one connection until it ends. The socket is dropped on return, so a
    /// lost connection is not kept open (and pushed to) while the session waits to reconnect.
    async fn serve(&mut self, mut socket: Socket) -> Ended {
        let socket = &mut socket;
        let period = Duration::from_millis(self.options.ping_interval_ms.max(1));
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut silence = Silence::new();
        loop {
            if let Some(kept) = self.link.stash.pop_front() {
                let started = Instant::now();
                let ended = match kept {
                    Stashed::Frame(frame) => self.on_frame(socket, frame).await,
                    Stashed::Message(message) => self.on_message(socket, message).await,
                };
                if let Some(ended) = ended {
                    return ended;
                }
                silence.busy_for(started.elapsed());
                continue;
            }
            let room = self.pending.len() < self.options.requests_in_flight_max.max(1);
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    let close = socket.close(None);
                    // Best effort: the session ends whether or not the server answers.
                    let _ = tokio::time::timeout(Duration::from_millis(CLOSE_WAIT_MS), close).await;
                    return Ended::Stop(StopReason::Closed);
                }
                message = socket.next() => {
                    silence.heard();
                    let started = Instant::now();
                    let ended = match message {
                        None => Some(Ended::Lost("the connection closed".into())),
                        Some(Err(e)) => Some(Ended::Lost(e.to_string())),
                        Some(Ok(message)) => self.on_message(socket, message).await,
                    };
                    if let Some(ended) = ended {
                        return ended;
                    }
                    silence.busy_for(started.elapsed());
                }
                command = self.commands.recv(), if room => {
                    if let Err(ended) = self.on_command(socket, command).await {
                        return ended;
                    }
                }
                _ = ping.tick() => {
                    if let Err(ended) = self.keep_alive(socket, &mut silence).await {
                        return ended;
                    }
                }
                () = self.shared.wake.notified() => {
                    if let Err(ended) = self.resync_stale(socket, &mut silence).await {
                        return ended;
                    }
                }
                () = self.sequencer.room_to_resume(), if self.sequencer.waiting_for_room() => {
                    if let Err(ended) = self.resume(socket, &mut silence).await {
                        return ended;
                    }
                }
            }
        }
    }

    async fn on_command(
        &mut self,
        socket: &mut Socket,
        command: Option<Command>,
    ) -> Result<(), Ended> {
        match command {
            // Every handle is gone.
            None => Err(Ended::Stop(StopReason::Closed)),
            Some(Command::Reconnect) => Err(Ended::Renew("reconnect asked by the app".into())),
            Some(Command::Request { request, reply }) => {
                self.write_request(socket, request, reply).await
            }
            Some(Command::Fire(request)) => {
                let frame = ClientFrame {
                    req_id: self.link.next_req_id(),
                    request,
                };
                write(socket, &frame).await
            }
        }
    }

    /// Once per ping interval: gives up on a silent connection, pings, forgets requests whose
    /// callers gave up, and retries conversations whose catch-up failed.
    async fn keep_alive(
        &mut self,
        socket: &mut Socket,
        silence: &mut Silence,
    ) -> Result<(), Ended> {
        let silence_max = Duration::from_millis(self.options.silence_max_ms);
        if silence.exceeds(silence_max) {
            let why = format!("nothing heard for {} ms", silence_max.as_millis());
            return Err(Ended::Lost(why));
        }
        self.pending.retain(|_, reply| !reply.is_closed());
        let ping = ClientFrame {
            req_id: self.link.next_req_id(),
            request: Request::Ping,
        };
        write(socket, &ping).await?;
        self.resync_stale(socket, silence).await
    }

    async fn resync_stale(
        &mut self,
        socket: &mut Socket,
        silence: &mut Silence,
    ) -> Result<(), Ended> {
        let started = Instant::now();
        let mut fetch = self.link.fetch(socket);
        self.sequencer
            .resync_stale(&mut fetch)
            .await
            .map_err(|Stopped| Ended::Stop(StopReason::Closed))?;
        silence.busy_for(started.elapsed());
        Ok(())
    }

    /// The app made room in its queue: held notices go out, and conversations whose events
    /// were left out are fetched.
    async fn resume(&mut self, socket: &mut Socket, silence: &mut Silence) -> Result<(), Ended> {
        self.sequencer.resume();
        self.resync_stale(socket, silence).await
    }

    async fn on_message(&mut self, socket: &mut Socket, message: Message) -> Option<Ended> {
        match message {
            Message::Text(text) => match ServerFrame::parse(text.as_str()) {
                Ok(frame) => self.on_frame(socket, frame).await,
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring a frame that does not decode");
                    None
                }
            },
            // The pong is queued by the protocol layer; flushing sends it now rather than with
            // the next write.
            Message::Ping(_) => socket
                .flush()
                .await
                .err()
                .map(|e| Ended::Lost(e.to_string())),
            Message::Close(frame) => Some(on_close(frame.as_ref())),
            Message::Binary(_) | Message::Pong(_) | Message::Frame(_) => None,
        }
    }

    async fn on_frame(&mut self, socket: &mut Socket, frame: ServerFrame) -> Option<Ended> {
        let mut fetch = self.link.fetch(socket);
        let delivered = match frame {
            ServerFrame::Ack { req_id, fields } => {
                self.answer(req_id, Ok(Value::Object(fields)));
                Ok(())
            }
            ServerFrame::Pong { req_id } => {
                self.answer(req_id, Ok(Value::Null));
                Ok(())
            }
            ServerFrame::Error {
                req_id: Some(req_id),
                code,
                message,
                ..
            } => {
                self.answer(Some(req_id), Err(ClientError::from_frame(code, message)));
                Ok(())
            }
            ServerFrame::Error {
                req_id: None, code, ..
            } => {
                tracing::warn!(code, "the server refused a frame without a req_id");
                Ok(())
            }
            ServerFrame::Event { event } => self.sequencer.on_event(&mut fetch, event).await,
            ServerFrame::Hint { conv_id, head } => {
                self.sequencer.on_hint(&mut fetch, &conv_id, head).await
            }
            ServerFrame::Read { conv_id, read_seq } => {
                self.sequencer.notice(Delivery::Read { conv_id, read_seq });
                Ok(())
            }
            ServerFrame::Typing {
                conv_id,
                user_id,
                expires_ms,
            } => {
                self.sequencer.notice(Delivery::Typing {
                    conv_id,
                    user_id,
                    expires_ms,
                });
                Ok(())
            }
            ServerFrame::Presence {
                user_id,
                online,
                last_seen,
            } => {
                self.sequencer.notice(Delivery::Presence {
                    user_id,
                    online,
                    last_seen,
                });
                Ok(())
            }
            ServerFrame::Kicked => return Some(Ended::Stop(StopReason::Kicked)),
            ServerFrame::Unknown => Ok(()),
        };
        delivered
            .err()
            .map(|Stopped| Ended::Stop(StopReason::Closed))
    }

    /// Hands an answer to the request it belongs to. Answers nobody waits for (keepalive
    /// pongs, requests whose caller gave up) are dropped.
    fn answer(&mut self, req_id: Option<String>, result: Result<Value, ClientError>) {
        if let Some(reply) = req_id.and_then(|id| self.pending.remove(&id)) {
            // The caller may have given up meanwhile; nothing to do then.
            let _ = reply.send(result);
        }
    }

    async fn write_request(
        &mut self,
        socket: &mut Socket,
        request: Request,
        reply: Reply,
    ) -> Result<(), Ended> {
        if reply.is_closed() {
            // The caller gave up while the request waited in the queue.
            return Ok(());
        }
        let req_id = self.link.next_req_id();
        let frame = ClientFrame {
            req_id: req_id.clone(),
            request,
        };
        // Registered before writing, so a failed write is reported to the caller as a lost
        // connection (outcome unknown) like any other.
        self.pending.insert(req_id, reply);
        write(socket, &frame).await
    }

    fn fail_pending(&mut self, error: impl Fn() -> ClientError) {
        for (_, reply) in self.pending.drain() {
            let _ = reply.send(Err(error()));
        }
    }

    /// Connects again after a jittered pause that grows with each round of the gateway ring
    /// that failed (`gateways.rs`), starting at the next gateway when `move_on`, and moving to
    /// the next after each failed attempt. A refused token (401) means the device was revoked
    /// while away.
    async fn reconnect(&mut self, move_on: bool) -> Result<Socket, StopReason> {
        if move_on {
            self.gateways.advance();
        }
        let mut failures: u32 = 0;
        loop {
            failures = failures.saturating_add(1);
            if self
                .options
                .reconnect_attempts_max
                .is_some_and(|max| failures > max)
            {
                return Err(StopReason::Unreachable);
            }
            let pause_ms = self.gateways.pause_ms(
                self.options.reconnect_backoff_first_ms,
                self.options.reconnect_backoff_max_ms,
                failures,
            );
            let pause = tokio::time::sleep(Duration::from_millis(pause_ms));
            if self.cancel.run_until_cancelled(pause).await.is_none() {
                return Err(StopReason::Closed);
            }
            let open = connection::open(self.gateways.current(), self.options.handshake_timeout_ms);
            match self.cancel.run_until_cancelled(open).await {
                None => return Err(StopReason::Closed),
                Some(Ok(socket)) => return Ok(socket),
                Some(Err(e)) if e.status() == Some(401) => return Err(StopReason::Revoked),
                Some(Err(e)) => {
                    let gateway = self.gateways.current().base_url();
                    tracing::debug!(error = %e.redacted(), %gateway, failures, pause_ms, "reconnect failed");
                    self.gateways.advance();
                }
            }
        }
    }

    /// Ends the session: every waiting request learns why, and the app gets the final notice.
    async fn finish(mut self, reason: StopReason) {
        tracing::info!(%reason, "realtime session stopped");
        self.shared.set_connected(false);
        self.shared.set_stopped(reason);
        self.commands.close();
        let stopped = || ClientError::SessionStopped { reason };
        self.fail_pending(stopped);
        while let Ok(command) = self.commands.try_recv() {
            if let Command::Request { reply, .. } = command {
                let _ = reply.send(Err(stopped()));
            }
        }
        let notice = match reason {
            StopReason::Kicked => Some(Delivery::Kicked),
            StopReason::Revoked => Some(Delivery::Revoked),
            StopReason::Unreachable => Some(Delivery::Unreachable),
            StopReason::Closed => None,
        };
        // The app may close without reading them; either way the session ends.
        self.sequencer.finish(notice).await;
    }
}

async fn write(socket: &mut Socket, frame: &ClientFrame) -> Result<(), Ended> {
    socket
        .send(Message::Text(frame.to_json().into()))
        .await
        .map_err(|e| Ended::Lost(e.to_string()))
}
