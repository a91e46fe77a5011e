//! Fetching events-after on the session's own socket (a `sync` frame, SPEC §7).
//!
//! A fetch on the socket costs the server one frame and one store read; over HTTP it costs a
//! request, its authentication and a connection of its own. Every hint of a pull group ends in
//! a fetch, so this is the session's most frequent request. While the driver waits for the
//! answer it keeps reading the socket: frames that arrive meanwhile are kept, in order, and
//! handled once the fetch is done.

use std::collections::VecDeque;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::error::ClientError;
use crate::types::EventsPage;
use crate::ws::connection::Socket;
use crate::ws::frames::{decode_ack, ClientFrame, Request, ServerFrame};

/// Frames kept while one fetch waits for its answer. Beyond this the fetch gives up (the
/// conversation is retried later) rather than buffer without end; the frames stay kept.
pub(crate) const STASH_LEN_MAX: usize = 4_096;

/// What the socket delivered while a fetch waited, in arrival order.
// Nearly every stashed item is a frame (an event), so boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Stashed {
    Frame(ServerFrame),
    /// Anything but a text frame: a close, which ends the connection once it is handled.
    Message(Message),
}

/// The driver's side of fetching on its socket: the request counter it shares with every other
/// request it writes, the frames kept while a fetch waits, and how long a fetch may wait.
pub(crate) struct Link {
    requests_written: u64,
    /// Frames that arrived while a fetch waited for its answer, handled next, in order.
    /// Bounded by `STASH_LEN_MAX`; emptied whenever a connection ends.
    pub stash: VecDeque<Stashed>,
    answer_timeout_ms: u64,
}

impl Link {
    pub fn new(answer_timeout_ms: u64) -> Self {
        Self {
            requests_written: 0,
            stash: VecDeque::new(),
            answer_timeout_ms,
        }
    }

    /// A fresh `req_id` for the next frame written on the socket.
    pub fn next_req_id(&mut self) -> String {
        self.requests_written += 1;
        format!("r{}", self.requests_written)
    }

    /// A fetch on `socket`, keeping what arrives meanwhile in this link's stash.
    pub fn fetch<'a>(&'a mut self, socket: &'a mut Socket) -> SocketFetch<'a> {
        SocketFetch { socket, link: self }
    }
}

/// A fetch on the session's socket, for the driver that owns it: where the sequencer fetches
/// the events that pushes missed.
pub(crate) struct SocketFetch<'a> {
    socket: &'a mut Socket,
    link: &'a mut Link,
}

impl SocketFetch<'_> {
    pub(crate) async fn events_after(
        &mut self,
        conv_id: &str,
        after: i64,
        limit: u32,
        epoch: i64,
    ) -> Result<EventsPage, ClientError> {
        let req_id = self.link.next_req_id();
        let frame = ClientFrame {
            req_id: req_id.clone(),
            request: Request::Sync {
                conv_id: conv_id.to_owned(),
                after,
                limit: Some(limit),
                epoch: Some(epoch),
            },
        };
        let lost = |reason: String| ClientError::Disconnected { reason };
        self.socket
            .send(Message::Text(frame.to_json().into()))
            .await
            .map_err(|e| lost(e.to_string()))?;
        let waited_ms = self.link.answer_timeout_ms;
        let answer = tokio::time::timeout(Duration::from_millis(waited_ms), self.answer(&req_id));
        answer
            .await
            .map_err(|_| ClientError::NoAnswer { waited_ms })?
    }

    /// Reads the socket until the answer to `req_id` arrives, keeping everything else.
    async fn answer(&mut self, req_id: &str) -> Result<EventsPage, ClientError> {
        let lost = |reason: &str| ClientError::Disconnected {
            reason: reason.to_owned(),
        };
        loop {
            if self.link.stash.len() >= STASH_LEN_MAX {
                return Err(lost("too many frames arrived while a fetch waited"));
            }
            let message = match self.socket.next().await {
                None => return Err(lost("the connection closed")),
                Some(Err(e)) => return Err(lost(&e.to_string())),
                Some(Ok(message)) => message,
            };
            let text = match message {
                Message::Text(text) => text,
                // The pong is queued by the protocol layer; flushing sends it now.
                Message::Ping(_) => {
                    self.socket
                        .flush()
                        .await
                        .map_err(|e| lost(&e.to_string()))?;
                    continue;
                }
                Message::Close(_) => {
                    // Handled by the driver after the fetch, which ends the connection there.
                    self.link.stash.push_back(Stashed::Message(message));
                    return Err(lost("the server closed the connection"));
                }
                Message::Binary(_) | Message::Pong(_) | Message::Frame(_) => continue,
            };
            let frame = match ServerFrame::parse(text.as_str()) {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring a frame that does not decode");
                    continue;
                }
            };
            match frame {
                ServerFrame::Ack {
                    req_id: Some(id),
                    fields,
                } if id == req_id => return decode_ack(serde_json::Value::Object(fields)),
                ServerFrame::Error {
                    req_id: Some(id),
                    code,
                    message,
                    ..
                } if id == req_id => return Err(ClientError::from_frame(code, message)),
                other => self.link.stash.push_back(Stashed::Frame(other)),
            }
        }
    }
}
