//! Turns pushes, hints and reconnects into an exact, ordered delivery per conversation,
//! fetching whatever the pushes missed through events-after (a `sync` on the socket, `fetch.rs`).
//! Deliveries go to the app's queue through the [`Outlet`], which never makes it wait: what
//! does not fit is left on the server and fetched once the app made room.

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
use crate::ws::outlet::Outlet;
use crate::ws::protocol::{Delivery, Incoming, Shared};

/// Room a page needs beyond its events: a truncation notice.
const PAGE_NOTICE_SLOTS: usize = 1;

/// The session was closed while the sequencer waited for the server.
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
    outlet: Outlet,
    cancel: CancellationToken,
    page_len: u32,
    auto_track_full: bool,
    skip_own_messages: bool,
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
            outlet: Outlet::new(deliveries),
            cancel,
            page_len: options.gap_fill_page_len.max(1),
            auto_track_full: options.auto_track_full,
            skip_own_messages: options.skip_own_messages,
        }
    }

    /// Makes the HTTP calls of catch-ups (`GET /v1/conversations/{id}`) through `client`: the
    /// gateway the session's socket is on now.
    pub(crate) fn use_client(&mut self, client: Client) {
        self.client = client;
    }

    /// Hands the app a notice (read position, connection state) now, or as soon as there is
    /// room; never waits.
    pub(crate) fn notice(&mut self, notice: Delivery) {
        self.outlet.notice(notice);
    }

    /// Whether deliveries wait for the app to make room (see [`Outlet`]).
    pub(crate) fn waiting_for_room(&self) -> bool {
        self.outlet.waiting()
    }

    /// Resolves once the app made room for deliveries to resume.
    pub(crate) fn room_to_resume(&self) -> impl Future<Output = ()> + 'static {
        self.outlet.room_to_resume()
    }

    /// Once there is room again: the held notices go out. The conversations whose events were
    /// left out are stale; the caller catches them up next ([`Sequencer::resync_stale`]).
    pub(crate) fn resume(&mut self) {
        self.outlet.resume();
    }

    /// The session's last deliveries: the held notices, then `last`, waiting for room.
    pub(crate) async fn finish(&mut self, last: Option<Delivery>) {
        self.outlet.finish(last, &self.cancel).await;
    }

    /// A pushed event: delivered when it is the next one, dropped when the app has it,
    /// preceded by the missing events when it lies beyond a gap.
    pub(crate) async fn on_event(
        &mut self,
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
            Verdict::Next => {
                self.deliver_next(event);
                Ok(())
            }
            Verdict::Gap => {
                // The fetched pages normally contain the pushed event itself; it is delivered
                // from the push only if the fill stopped just short of it.
                self.catch_up(fetch, &conv_id, Some(event.seq)).await?;
                self.deliver_next(event);
                Ok(())
            }
        }
    }

    /// New events exist up to `head`: fetch them.
    pub(crate) async fn on_hint(
        &mut self,
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
    pub(crate) async fn resync_all(&mut self, fetch: &mut SocketFetch<'_>) -> Result<(), Stopped> {
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
    pub(crate) async fn resync_stale(
        &mut self,
        fetch: &mut SocketFetch<'_>,
    ) -> Result<(), Stopped> {
        let stale = self.shared.cursors().take_stale();
        for conv_id in stale {
            self.catch_up(fetch, &conv_id, None).await?;
        }
        Ok(())
    }

    /// Delivers a pushed event that is the next of its conversation, if there is room;
    /// otherwise the event stays on the server and its conversation is fetched later.
    fn deliver_next(&mut self, event: Event) {
        if self.outlet.room() == 0 {
            self.starve(&event.conv_id);
            return;
        }
        let accepted = self.shared.cursors().accept(&event.conv_id, event.seq);
        if accepted {
            self.hand_over(event);
        }
    }

    /// Queues an event the cursor moved past, unless it is an own message the app asked to
    /// skip. The caller made room for it.
    fn hand_over(&mut self, event: Event) {
        let incoming = Incoming::new(event, &self.shared.identity);
        if !(self.skip_own_messages && incoming.is_own_message()) {
            self.outlet.put(Delivery::Event(incoming));
        }
    }

    /// An event of `conv_id` was left out for lack of room: fetch the conversation from its
    /// cursor once the app made room.
    fn starve(&mut self, conv_id: &str) {
        self.outlet.starve();
        self.shared.cursors().mark_stale(conv_id);
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
        &mut self,
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

    /// Fetches pages from the cursor towards `target`, each no larger than the room the app's
    /// queue has left; with no room, the conversation waits (stale) for the app to make some.
    async fn fill(
        &mut self,
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
            let room = self.outlet.room();
            if room <= PAGE_NOTICE_SLOTS {
                self.starve(conv_id);
                return Ok(());
            }
            let fits = u32::try_from(room - PAGE_NOTICE_SLOTS).unwrap_or(u32::MAX);
            let limit = self.page_len.min(fits);
            let answer = self
                .cancellable(fetch.events_after(conv_id, from.seq, limit, from.epoch))
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
                self.outlet.put(Delivery::Truncated {
                    conv_id: conv_id.to_owned(),
                });
            }
            for event in outcome.events {
                self.hand_over(event);
            }
            if fill_finished(from.seq, outcome.position.seq, head, target) {
                return Ok(());
            }
        }
    }

    /// The log was rebuilt: restart at the conversation's current epoch with no events.
    async fn restart_epoch(
        &mut self,
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
            // `fill` made room for the page this replaces.
            self.outlet.put(Delivery::EpochChanged {
                conv_id: conv_id.to_owned(),
                epoch: conv.epoch,
            });
        }
        Ok(())
    }

    async fn cancellable<F: Future>(&self, f: F) -> Result<F::Output, Stopped> {
        self.cancel.run_until_cancelled(f).await.ok_or(Stopped)
    }
}
