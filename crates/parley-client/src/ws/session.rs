//! The app-facing side of a realtime session: [`Realtime`] (deliveries plus requests) and
//! [`RealtimeHandle`] (requests only, cheap to clone into other tasks).

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use url::Url;

use crate::client::Client;
use crate::error::ClientError;
use crate::request::SendOptions;
use crate::retry::RetryPolicy;
use crate::types::{EditAck, EventsPage, Identity, ReactionAck, ReadAck, SendAck};
use crate::ws::connection::{self, Socket};
use crate::ws::cursor::Position;
use crate::ws::driver::Driver;
use crate::ws::frames::{decode_ack, Request};
use crate::ws::gateways::Gateways;
use crate::ws::options::RealtimeOptions;
use crate::ws::protocol::{Command, Delivery, Shared, StopReason};

struct Inner {
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    /// Stops the background task once the last handle is gone.
    _stop_on_drop: DropGuard,
    task: Mutex<Option<JoinHandle<()>>>,
    answer_timeout_ms: u64,
    retry: RetryPolicy,
}

/// Requests on a realtime session. Clones share the session. Answers never wait behind the
/// delivery queue: a request made from the loop that takes deliveries is answered even while
/// thousands of deliveries wait unread (see [`Realtime::next`]).
#[derive(Clone)]
pub struct RealtimeHandle {
    inner: Arc<Inner>,
}

impl fmt::Debug for RealtimeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RealtimeHandle")
            .field("stopped", &self.inner.shared.stop_reason())
            .finish_non_exhaustive()
    }
}

/// A device's realtime session: one WebSocket at a time, kept open, replaced when it drops,
/// and an ordered stream of what arrived. See the [module documentation](crate::ws).
#[derive(Debug)]
pub struct Realtime {
    handle: RealtimeHandle,
    deliveries: mpsc::Receiver<Delivery>,
}

impl Realtime {
    /// Learns who the client is ([`Client::whoami`], asked once per client), opens the
    /// device's connection and starts the task that keeps it. The first connection is made
    /// here, so a bad token (401) or an unreachable server is an error now rather than a silent
    /// retry loop. With several [`RealtimeOptions::gateways`], each is tried once, from a
    /// random one on, and the error is the last one's when none answers.
    pub async fn connect(client: &Client, options: RealtimeOptions) -> Result<Self, ClientError> {
        Self::connect_tracking(client, options, &[]).await
    }

    /// [`Realtime::connect`] with `tracked` conversations, each `(conv_id, epoch, cursor)` as
    /// in [`RealtimeHandle::track`], tracked before the first frame is read. A device that
    /// moves to another server with the cursors of its old session needs this: tracked after
    /// the connect, a push arriving first would start its conversation at the pushed event,
    /// and the later `track` would deliver that event again.
    pub async fn connect_tracking(
        client: &Client,
        options: RealtimeOptions,
        tracked: &[(&str, i64, i64)],
    ) -> Result<Self, ClientError> {
        let mut gateways = Gateways::starting_anywhere(client, &options.gateways)?;
        let (identity, socket) = first_connection(&mut gateways, &options).await?;
        let (commands_tx, commands_rx) = mpsc::channel(options.command_queue_len_max.max(1));
        let (deliveries_tx, deliveries_rx) = mpsc::channel(options.delivery_queue_len_max.max(1));
        let gateway = gateways.current().base_url().clone();
        let shared = Arc::new(Shared::new(identity, gateway));
        for &(conv_id, epoch, seq) in tracked {
            shared.cursors().track(conv_id, Position { epoch, seq });
        }
        if !tracked.is_empty() {
            // The permit waits for the driver, which catches the conversations up first.
            shared.wake.notify_one();
        }
        let cancel = CancellationToken::new();
        let inner = Inner {
            commands: commands_tx,
            shared: shared.clone(),
            cancel: cancel.clone(),
            _stop_on_drop: cancel.clone().drop_guard(),
            task: Mutex::new(None),
            answer_timeout_ms: options.answer_timeout_ms,
            retry: options.retry,
        };
        let driver = Driver::new(
            gateways,
            options,
            shared,
            commands_rx,
            deliveries_tx,
            cancel,
        );
        *inner.task.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(tokio::spawn(driver.run(socket)));
        Ok(Self {
            handle: RealtimeHandle {
                inner: Arc::new(inner),
            },
            deliveries: deliveries_rx,
        })
    }

    /// The next delivery; `None` once the session stopped and everything was taken.
    ///
    /// Replying from the loop that takes deliveries is safe:
    /// `while let Some(d) = rt.next().await { rt.send(..).await }` gets its answer however many
    /// deliveries wait. The session keeps reading the socket while the queue is full; events
    /// that do not fit stay on the server and are fetched from the cursor once the app has
    /// taken half the queue, so nothing is lost and memory stays bounded.
    pub async fn next(&mut self) -> Option<Delivery> {
        self.deliveries.recv().await
    }

    /// A handle for requests from other tasks; the session runs while any handle or this
    /// value lives.
    pub fn handle(&self) -> RealtimeHandle {
        self.handle.clone()
    }
}

/// The session's requests are those of its handle: [`RealtimeHandle::send`],
/// [`RealtimeHandle::mark_read`], [`RealtimeHandle::track`] and the rest are called on the
/// session itself as well.
impl Deref for Realtime {
    type Target = RealtimeHandle;

    fn deref(&self) -> &RealtimeHandle {
        &self.handle
    }
}

/// Asks who the client is and opens its socket on the first gateway of the ring that answers
/// both, leaving the ring there. Only errors that another gateway might not give (a timeout, a
/// refused or dropped connection, 503) move on to the next; a refusal such as 401 is final.
async fn first_connection(
    gateways: &mut Gateways,
    options: &RealtimeOptions,
) -> Result<(Identity, Socket), ClientError> {
    let mut tried = 0;
    loop {
        let client = gateways.current();
        let opened = async {
            let identity = client.whoami().await?;
            let socket = connection::open(client, options.handshake_timeout_ms).await?;
            Ok::<_, ClientError>((identity, socket))
        };
        match opened.await {
            Ok(opened) => return Ok(opened),
            Err(e) if e.is_retryable() && tried + 1 < gateways.len() => {
                let gateway = client.base_url();
                tracing::debug!(error = %e.redacted(), %gateway, "gateway unavailable; trying the next");
                tried += 1;
                gateways.advance();
            }
            Err(e) => return Err(e),
        }
    }
}

impl RealtimeHandle {
    /// Sends a message over the WebSocket and waits for the server's ack (committed). After a
    /// dropped connection, a missing answer or an unknown outcome it resends with the same
    /// `client_msg_id` once the session is connected again, within the session's retry budget
    /// ([`RealtimeOptions::retry`]: 20 s by default, which rides out a 10 s server restart), so
    /// the answer may be `dup: true` with the original seq. Refusals come back as
    /// [`ClientError::Api`] with the server's code. Safe to call from the loop that takes
    /// deliveries (see [`Realtime::next`]).
    pub async fn send(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
    ) -> Result<SendAck, ClientError> {
        self.send_with(conv_id, client_msg_id, body, &SendOptions::default())
            .await
    }

    /// [`RealtimeHandle::send`] of a message with relations: a reply, a reply in a thread,
    /// mentions (docs/RELATIONS.md; errors as [`crate::Client::send_with`]). Resent like a
    /// plain send, with the same key and options.
    pub async fn send_with(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
        options: &SendOptions,
    ) -> Result<SendAck, ClientError> {
        self.inner
            .retry
            .run(|| {
                self.request(Request::Send {
                    conv_id: conv_id.to_owned(),
                    client_msg_id: client_msg_id.to_owned(),
                    body: body.to_owned(),
                    reply_to: options.reply_to,
                    thread_root: options.thread_root,
                    mentions: options.mentions.clone(),
                    attachments: options.attachments.clone(),
                })
            })
            .await
    }

    /// Gives the caller's message at `seq` a new body (an `edit` frame), resent like
    /// [`RealtimeHandle::send`]: `client_msg_id` keys the edit as it keys a send, so a resend
    /// answers `dup: true`. Errors as [`crate::Client::edit`].
    pub async fn edit(
        &self,
        conv_id: &str,
        seq: i64,
        client_msg_id: &str,
        body: &str,
    ) -> Result<EditAck, ClientError> {
        self.inner
            .retry
            .run(|| {
                self.request(Request::Edit {
                    conv_id: conv_id.to_owned(),
                    seq,
                    client_msg_id: client_msg_id.to_owned(),
                    body: body.to_owned(),
                })
            })
            .await
    }

    /// One page of a search (a `search` frame), answered like [`crate::Client::search`]. A
    /// search writes nothing, so it is resent like a sync.
    pub async fn search(
        &self,
        search: &crate::SearchOptions,
    ) -> Result<parley_wire::SearchResults, ClientError> {
        self.inner
            .retry
            .run(|| {
                self.request(Request::Search {
                    q: search.q.clone(),
                    conv_id: search.conv_id.clone(),
                    from: search.from.clone(),
                    limit: search.limit,
                    cursor: search.cursor.clone(),
                    order: search.order().map(str::to_owned),
                })
            })
            .await
    }

    /// Adds the caller's reaction `key` to the message at `seq` (a `react` frame). Resent
    /// like a send, which is safe: a reaction the caller has answers `changed: false`.
    pub async fn react(
        &self,
        conv_id: &str,
        seq: i64,
        key: &str,
    ) -> Result<ReactionAck, ClientError> {
        self.reaction(conv_id, seq, key, false).await
    }

    /// Takes the caller's reaction `key` back (a `react` frame with `remove: true`). Resent
    /// like a send; a resend of a removal that committed answers `changed: false`.
    pub async fn unreact(
        &self,
        conv_id: &str,
        seq: i64,
        key: &str,
    ) -> Result<ReactionAck, ClientError> {
        self.reaction(conv_id, seq, key, true).await
    }

    async fn reaction(
        &self,
        conv_id: &str,
        seq: i64,
        key: &str,
        remove: bool,
    ) -> Result<ReactionAck, ClientError> {
        self.inner
            .retry
            .run(|| {
                self.request(Request::React {
                    conv_id: conv_id.to_owned(),
                    seq,
                    key: key.to_owned(),
                    remove,
                })
            })
            .await
    }

    /// Moves the user's read position forward to `seq`; the user's other devices are told.
    /// Resent like [`RealtimeHandle::send`], which is safe because the position only moves
    /// forward.
    pub async fn mark_read(&self, conv_id: &str, seq: i64) -> Result<ReadAck, ClientError> {
        self.inner
            .retry
            .run(|| {
                self.request(Request::Read {
                    conv_id: conv_id.to_owned(),
                    seq,
                })
            })
            .await
    }

    /// Events-after over the WebSocket, one attempt. The session's own gap filling does not
    /// need it; it is here for apps that want one connection for everything.
    pub async fn sync(
        &self,
        conv_id: &str,
        after: i64,
        limit: Option<u32>,
        epoch: Option<i64>,
    ) -> Result<EventsPage, ClientError> {
        self.request(Request::Sync {
            conv_id: conv_id.to_owned(),
            after,
            limit,
            epoch,
        })
        .await
    }

    /// Tells the other members of `conv_id` that the user is typing (SPEC §7, ephemeral).
    /// Fire and forget: nothing answers an accepted frame, a refusal (`NOT_MEMBER`) is not
    /// reported, and the server relays at most one per second per device and conversation,
    /// so calling it on every keystroke is fine. Errs only when the session stopped.
    pub async fn typing(&self, conv_id: &str) -> Result<(), ClientError> {
        self.inner
            .commands
            .send(Command::Fire(Request::Typing {
                conv_id: conv_id.to_owned(),
            }))
            .await
            .map_err(|_| self.stopped())
    }

    /// One application ping; answers the time until its pong, queueing included.
    pub async fn ping(&self) -> Result<Duration, ClientError> {
        let started = Instant::now();
        self.request::<Value>(Request::Ping).await?;
        Ok(started.elapsed())
    }

    /// Tracks `conv_id` from `cursor`, the last seq the app has in `epoch` (0: none). Events
    /// after the cursor are fetched soon, and from then on the conversation is delivered
    /// exactly: no loss, no repeat, in seq order. Tracking again replaces the cursor.
    pub fn track(&self, conv_id: &str, epoch: i64, cursor: i64) {
        let position = Position { epoch, seq: cursor };
        self.inner.shared.cursors().track(conv_id, position);
        self.inner.shared.wake.notify_one();
    }

    /// Stops tracking: later pushes of the conversation start tracking it afresh.
    pub fn untrack(&self, conv_id: &str) {
        self.inner.shared.cursors().untrack(conv_id);
    }

    /// `(epoch, seq)` of a tracked conversation: the last seq handed to the delivery queue.
    pub fn cursor(&self, conv_id: &str) -> Option<(i64, i64)> {
        let position = self.inner.shared.cursors().position(conv_id)?;
        Some((position.epoch, position.seq))
    }

    /// Drops the current connection and connects again at once, e.g. after the device's
    /// network changed and the old connection may be dead without knowing it.
    pub async fn reconnect(&self) -> Result<(), ClientError> {
        self.inner
            .commands
            .send(Command::Reconnect)
            .await
            .map_err(|_| self.stopped())
    }

    /// Whether a connection is open now. False between a [`Delivery::Disconnected`] and the
    /// next [`Delivery::Reconnected`] (the flag changes before the delivery is read), and once
    /// the session stopped.
    pub fn is_connected(&self) -> bool {
        self.inner.shared.is_connected()
    }

    /// The base URL of the gateway the session's connection is on (the last one while
    /// disconnected): one of [`RealtimeOptions::gateways`], or the client's base URL.
    pub fn gateway(&self) -> Url {
        self.inner.shared.gateway()
    }

    /// The user and device of the session, as the server named them at connect.
    pub fn identity(&self) -> &Identity {
        &self.inner.shared.identity
    }

    /// Why the session stopped; `None` while it runs.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.inner.shared.stop_reason()
    }

    /// Closes the connection and stops the session; deliveries already queued can still be
    /// taken. Requests in flight fail with [`ClientError::SessionStopped`].
    pub async fn close(&self) {
        self.inner.cancel.cancel();
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "the realtime task ended abnormally");
            }
        }
    }

    /// One attempt of a request: queued for the background task, which writes it with a fresh
    /// `req_id` once connected. The wait covers queueing and the answer.
    async fn request<T: DeserializeOwned>(&self, request: Request) -> Result<T, ClientError> {
        let waited_ms = self.inner.answer_timeout_ms;
        let attempt = async {
            let (reply, answer) = oneshot::channel();
            self.inner
                .commands
                .send(Command::Request { request, reply })
                .await
                .map_err(|_| self.stopped())?;
            answer.await.map_err(|_| self.stopped())?
        };
        let fields = tokio::time::timeout(Duration::from_millis(waited_ms), attempt)
            .await
            .map_err(|_| ClientError::NoAnswer { waited_ms })??;
        decode_ack(fields)
    }

    fn stopped(&self) -> ClientError {
        ClientError::SessionStopped {
            reason: self.stop_reason().unwrap_or(StopReason::Closed),
        }
    }
}
