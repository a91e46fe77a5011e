//! Incremental sync (SPEC §5, sync feed): what a device keeps between sessions, and the
//! catch-up that brings it level with the server after any time away.
//!
//! A [`SyncState`] (`state.rs`) holds the feed's sync token and, per conversation, a
//! [`ConvSync`] (`conv.rs`): the log's epoch, the events-after cursor, the read position, the
//! unread count and the head. The events themselves (`sink.rs`) go either to an in-memory log
//! per conversation ([`SyncState::new`], convenient for tests and small apps) or to the app's
//! own storage through an [`EventSink`] ([`SyncState::with_sink`]).
//!
//! [`Client::catch_up`] (`catch_up.rs`) makes one feed call with the state's token, then
//! fetches events-after for every conversation the feed lists whose head lies beyond its
//! cursor, in pages of 500. The rules that make the result exact are those of the one cursor
//! the realtime session follows too (`cursor.rs`):
//!
//! - the cursor moves to each page's `through_seq`, never to its last event, so seqs the user
//!   cannot see (outside their membership periods) never look like a gap;
//! - events at or below what the state already has are dropped, so no seq is stored twice and
//!   each conversation's events strictly increase;
//! - a `truncated` answer (the cursor lay below `min_seq`) restarts the conversation's log from
//!   that answer; `EPOCH_CHANGED` restarts it at the new epoch from seq 0;
//! - read positions and unread counts come from the feed (the server counts unread, never the
//!   device), and a read position never moves back (P8).
//!
//! The token advances only when every listed conversation was caught up. After a failure the
//! next call asks with the old token again and resumes each conversation from its cursor; no
//! event is fetched twice into the state.
//!
//! ## With a realtime session
//!
//! [`crate::Realtime`] pushes events while connected. Feed its deliveries to
//! [`SyncState::apply_delivery`]: events that extend a conversation's log exactly are taken,
//! `read` deliveries move the read position ([`SyncState::apply_read`]), and the answer says
//! when a catch-up is due: after [`crate::Delivery::Reconnected`] (pushes sent while no
//! connection existed are gone) and after a delivery the state cannot place (a gap, a
//! truncation, an epoch change). [`SyncState::track_in`] starts the session at the state's
//! cursors.
//!
//! ```no_run
//! # async fn demo(client: parley_client::Client) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Realtime, RealtimeOptions, SyncState};
//!
//! let mut state = SyncState::new();
//! let report = client.catch_up(&mut state).await?;
//! println!("{} conversations changed, {} events", report.changed.len(), report.events);
//!
//! let mut rt = Realtime::connect(&client, RealtimeOptions::default()).await?;
//! state.track_in(&rt.handle());
//! while let Some(delivery) = rt.next().await {
//!     if state.apply_delivery(&delivery) {
//!         client.catch_up(&mut state).await?;
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`Client::catch_up`]: crate::Client::catch_up

mod catch_up;
mod conv;
mod fetch;
mod read;
mod sink;
mod state;

pub use catch_up::{
    CatchUpOptions, CatchUpReport, CATCH_UP_CONCURRENCY_DEFAULT, EVENTS_PAGE_LEN_MAX,
};
pub use conv::ConvSync;
pub use fetch::{EPOCH_RESETS_MAX, PAGES_SLACK};
pub use sink::{EventSink, Restart};
pub use state::{SavedSync, SyncState};
