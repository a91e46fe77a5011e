//! Turns pushes, hints and reconnects into an exact, ordered delivery per conversation,
//! fetching whatever the pushes missed through events-after (a `sync` on the socket, `fetch.rs`).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::{code, ClientError};
use crate::types::Event;
use crate::ws::cursor::{fill_finished, Position, Verdict};
use crate::ws::fetch::SocketFetch;
use crate::ws::options::RealtimeOptions;
use crate::ws::protocol::{Delivery, Shared};

/// The session was closed while the sequencer waited (for the app, or for the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stopped;

enum FillError {
    Stopped,
    Failed(ClientError),
}

impl From<Stopped> for FillError {
    fn from(_: Stopped) -> Self {
        Self::Stopped
    }
}

pub(crate) struct Sequencer {
    client: Client,
    shared: Arc<Shared>,
    deliveries: mpsc::Sender<Delivery>,
    cancel: CancellationToken,
    page_len: u32,
    auto_track_full: bool,
}

impl Sequencer {
    pub(crate) fn new(
        client: Client,
        options: &RealtimeOptions,
        shared: Arc<Shared>,
        deliveries: mpsc::Sender<Delivery>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            client,
            shared,
            deliveries,
            cancel,
            page_len: options.gap_fill_page_len.max(1),
            auto_track_full: options.auto_track_full,
        }
    }

    /// Queues `delivery` for the app, waiting while the queue is full: that wait is what stops
    /// the session from reading the socket when the app falls behind. An app that dropped its
    /// receiver simply gets nothing more.
    pub(crate) async fn deliver(&self, delivery: Delivery) -> Result<(), Stopped> {
        tokio::select! {
            biased;
            _ = self.deliveries.send(delivery) => Ok(()),
            () = self.cancel.cancelled() => Err(Stopped),
        }
    }

    /// A pushed event: delivered when it is the next one, dropped when the app has it,
    /// preceded by the missing events when it lies beyond a gap.
    pub(crate) async fn on_event(
        &self,
        fetch: &mut SocketFetch<'_>,
        event: Event,
    ) -> Result<(), Stopped> {
        let conv_id = event.conv_id.clone();
        let mut verdict = self.shared.cursors().verdict(&conv_id, event.seq);
        if verdict == Verdict::Untracked {
            self.adopt(&conv_id, event.seq).await?;
            verdict = self.shared.cursors().verdict(&conv_id, event.seq);
        }
        match verdict {
            Verdict::Untracked | Verdict::Seen => Ok(()),
            Verdict::Next => self.deliver_next(event).await,
            Verdict::Gap => {
                // The fetched pages normally contain the pushed event itself; it is delivered
                // from the push only if the fill stopped just short of it.
                self.catch_up(fetch, &conv_id, Some(event.seq)).await?;
                self.deliver_next(event).await
            }
        }
    }

    /// New events exist up to `head`: fetch them.
    pub(crate) async fn on_hint(
        &self,
        fetch: &mut SocketFetch<'_>,
        conv_id: &str,
        head: i64,
    ) -> Result<(), Stopped> {
        let untracked = self.shared.cursors().position(conv_id).is_none();
        if untracked {
            self.adopt(conv_id, head).await?;
        }
        self.catch_up(fetch, conv_id, Some(head)).await
    }

    /// Catches every tracked conversation up to its head, after a new connection replaced a
    /// lost one: pushes sent while no connection existed are gone.
    pub(crate) async fn resync_all(&self, fetch: &mut SocketFetch<'_>) -> Result<(), Stopped> {
        let tracked = {
            let mut cursors = self.shared.cursors();
            cursors.take_stale();
            cursors.tracked()
        };
        for conv_id in tracked {
            self.catch_up(fetch, &conv_id, None).await?;
        }
        Ok(())
    }

    /// Catches up the conversations that were newly tracked or whose last fetch failed.
    pub(crate) async fn resync_stale(&self, fetch: &mut SocketFetch<'_>) -> Result<(), Stopped> {
        let stale = self.shared.cursors().take_stale();
        for conv_id in stale {
            self.catch_up(fetch, &conv_id, None).await?;
        }
        Ok(())
    }

    async fn deliver_next(&self, event: Event) -> Result<(), Stopped> {
        let accepted = self.shared.cursors().accept(&event.conv_id, event.seq);
        if accepted {
            self.deliver(Delivery::Event(event)).await?;
        }
        Ok(())
    }

    /// Starts tracking a conversation the app never mentioned, at its current epoch: just
    /// before `seq` by default, or before its first stored event with `auto_track_full`.
    async fn adopt(&self, conv_id: &str, seq: i64) -> Result<(), Stopped> {
        let conv = match self
            .cancellable(self.client.get_conversation(conv_id))
            .await?
        {
            Ok(conv) => conv,
            Err(e) => {
                let error = e.redacted();
                tracing::warn!(conv_id, error, "cannot start tracking a conversation");
                return Ok(());
            }
        };
        let first_seq = if self.auto_track_full {
            conv.min_seq
        } else {
            seq
        };
        let position = Position::before(conv.epoch, first_seq);
        self.shared.cursors().adopt(conv_id, position);
        Ok(())
    }

    /// Fills `conv_id` up to `target` (its head when `None`). A failed fetch leaves the cursor
    /// where the last good page put it and marks the conversation stale, so it is retried at
    /// the next ping; a conversation the user cannot read at all is no longer tracked.
    pub(crate) async fn catch_up(
        &self,
        fetch: &mut SocketFetch<'_>,
        conv_id: &str,
        target: Option<i64>,
    ) -> Result<(), Stopped> {
        match self.fill(fetch, conv_id, target).await {
            Ok(()) => Ok(()),
            Err(FillError::Stopped) => Err(Stopped),
            Err(FillError::Failed(e)) if e.code() == Some(code::NOT_MEMBER) => {
                tracing::warn!(conv_id, "not a member: no longer tracking the conversation");
                self.shared.cursors().untrack(conv_id);
                Ok(())
            }
            Err(FillError::Failed(e)) => {
                let error = e.redacted();
                tracing::warn!(conv_id, error, "catching up failed; retrying later");
                self.shared.cursors().mark_stale(conv_id);
                Ok(())
            }
        }
    }

    async fn fill(
        &self,
        fetch: &mut SocketFetch<'_>,
        conv_id: &str,
        target: Option<i64>,
    ) -> Result<(), FillError> {
        loop {
            let Some(from) = self.shared.cursors().position(conv_id) else {
                return Ok(());
            };
            if target.is_some_and(|t| from.seq >= t) {
                return Ok(());
            }
            let answer = self
                .cancellable(fetch.events_after(conv_id, from.seq, self.page_len, from.epoch))
                .await?;
            let page = match answer {
                Ok(page) => page,
                Err(e) if e.code() == Some(code::EPOCH_CHANGED) => {
                    self.restart_epoch(conv_id, from, e).await?;
                    continue;
                }
                Err(e) => return Err(FillError::Failed(e)),
            };
            let head = page.head;
            let outcome = self.shared.cursors().apply_page(conv_id, from, page);
            // `None`: the app re-tracked the conversation meanwhile; start over from there.
            let Some(outcome) = outcome else { continue };
            if outcome.truncated {
                self.deliver(Delivery::Truncated {
                    conv_id: conv_id.to_owned(),
                })
                .await?;
            }
            for event in outcome.events {
                self.deliver(Delivery::Event(event)).await?;
            }
            if fill_finished(from.seq, outcome.position.seq, head, target) {
                return Ok(());
            }
        }
    }

    /// The log was rebuilt: restart at the conversation's current epoch with no events.
    async fn restart_epoch(
        &self,
        conv_id: &str,
        from: Position,
        refusal: ClientError,
    ) -> Result<(), FillError> {
        let conv = self
            .cancellable(self.client.get_conversation(conv_id))
            .await?
            .map_err(FillError::Failed)?;
        if conv.epoch == from.epoch {
            // The two answers disagree; asking again at once would loop.
            return Err(FillError::Failed(refusal));
        }
        let reset = self.shared.cursors().reset_epoch(conv_id, from, conv.epoch);
        if reset {
            self.deliver(Delivery::EpochChanged {
                conv_id: conv_id.to_owned(),
                epoch: conv.epoch,
            })
            .await?;
        }
        Ok(())
    }

    async fn cancellable<F: Future>(&self, f: F) -> Result<F::Output, Stopped> {
        self.cancel.run_until_cancelled(f).await.ok_or(Stopped)
    }
}
