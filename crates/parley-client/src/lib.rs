//! Client SDK of Parley. An echo bot, which answers every message of someone else in every
//! chat it is in:
//!
//! ```no_run
//! # async fn bot(token: &str) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Client, Delivery, Realtime, RealtimeOptions};
//!
//! let client = Client::new("http://127.0.0.1:8080", token)?;
//! let options = RealtimeOptions { skip_own_messages: true, ..RealtimeOptions::default() };
//! let mut rt = Realtime::connect(&client, options).await?;
//! while let Some(delivery) = rt.next().await {
//!     let Delivery::Event(event) = delivery else { continue };
//!     let Some(text) = event.text() else { continue };
//!     let key = format!("echo-{}", event.seq); // a retried reply is stored once
//!     rt.send(&event.conv_id, &key, &format!("echo: {text}")).await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The session tracks each chat from its first pushed event, skips the bot's own messages,
//! answers the reply even while deliveries wait unread, reconnects and catches up after the
//! server restarts, and retries the reply with the same key for up to 20 s. The runnable
//! version, with logs, is `examples/echo_bot.rs`; `examples/chat.rs` sends and follows a
//! conversation from the command line:
//!
//! ```sh
//! PARLEY_URL=http://127.0.0.1:8080 PARLEY_TOKEN=<device token> \
//!     cargo run -p parley-client --example echo_bot
//! ```
//!
//! ## The parts
//!
//! [`Client`] acts as one device and covers every device endpoint of the HTTP contract, plus
//! [`Client::whoami`]; [`AdminClient`] creates users and issues device tokens. Answers are
//! typed ([`types`]; an [`Event`] also has [`Event::text`] and a typed view,
//! [`Event::typed`]), errors carry the HTTP status and the stable error code
//! ([`ClientError`]), and [`Client::send_with_retry`] turns an unknown send outcome into a
//! known one by resending the same request key within a time budget ([`retry`]).
//! [`Client::all_events`] and [`Client::event_pages`] read a whole conversation page by page.
//! [`RawRequest`] reaches the server outside the typed API. [`Realtime`] ([`ws`]) keeps the
//! device's WebSocket and delivers every event exactly once, in order, saying which are the
//! caller's own and when the connection is lost or back. [`SyncState`] and
//! [`Client::catch_up`] ([`sync`]) bring a device that was away level with the server: one
//! feed call, then events-after for each conversation that changed. [`Client::search`] (and
//! [`RealtimeHandle::search`] over the socket) finds messages by words, phrases, `from:` and
//! `in:`, a page at a time ([`SearchOptions::after`] continues from a cursor; docs/SEARCH.md).
//!
//! With the feature `e2ee`, `e2ee::E2ee` makes a device a member of end-to-end encrypted
//! conversations (docs/E2EE.md): MLS groups (RFC 9420, on openmls) whose keys stay in a local
//! key store, so the server orders and delivers opaque messages it cannot read.
//!
//! ```no_run
//! # async fn demo() -> Result<(), parley_client::ClientError> {
//! use parley_client::{new_client_msg_id, AdminClient, NewConversation};
//!
//! let admin = AdminClient::new("http://127.0.0.1:8080", "admin-secret")?;
//! admin.create_user("ana", None).await?;
//! admin.create_user("ben", None).await?;
//! let ana = admin.device_client(&admin.create_device("ana", "phone").await?);
//!
//! let chat = ana.create_conversation(&NewConversation::direct("ben")).await?;
//! let ack = ana.send_with_retry(&chat.conv_id, &new_client_msg_id(), "hello").await?;
//! let log = ana.all_events(&chat.conv_id).await?;
//! assert_eq!(log.last().map(|e| e.seq), Some(ack.seq));
//! # Ok(())
//! # }
//! ```

mod admin;
mod client;
mod cursor;
#[cfg(feature = "e2ee")]
pub mod e2ee;
pub mod error;
#[cfg(test)]
mod fixtures;
mod http;
pub mod media;
mod pages;
pub mod push;
mod raw;
pub mod relations;
mod request;
pub mod retry;
pub mod search;
pub mod sync;
pub mod types;
pub mod ws;

pub use admin::AdminClient;
pub use client::{Client, ThreadCursor};
pub use error::{code, ClientError};
pub use http::{ClientOptions, CONNECT_TIMEOUT_MS_DEFAULT, REQUEST_TIMEOUT_MS_DEFAULT};
pub use raw::{RawRequest, RawResponse};
pub use request::{new_client_msg_id, NewConversation, SendOptions};
pub use retry::{
    RetryPolicy, ATTEMPTS_MAX_DEFAULT, BACKOFF_FIRST_MS_DEFAULT, BACKOFF_MAX_MS_DEFAULT,
    RETRY_BUDGET_MS_DEFAULT,
};
pub use search::SearchOptions;
pub use sync::{
    CatchUpOptions, CatchUpReport, ConvSync, EventSink, Restart, SavedSync, SyncState,
    EVENTS_PAGE_LEN_MAX,
};
pub use types::{
    ConvKind, Conversation, ConversationList, DeliveryMode, DeviceToken, Edit, EditAck, Event,
    EventKind, EventsPage, Identity, Member, MembershipChange, MembershipSeq, Message,
    PresenceList, Reaction, ReactionAck, ReactionCount, ReadAck, Recall, RecallAck, Role,
    RoleChange, SendAck, ThreadSummary, TypedEvent, User, UserPresence,
};
pub use ws::{Delivery, Incoming, Realtime, RealtimeHandle, RealtimeOptions, StopReason};

/// The HTTP method type used by [`Client::raw`], re-exported so tests need no direct reqwest
/// dependency.
pub use parley_wire::{
    Highlight, Media, PushPayload, PushTargetInfo, SearchHit, SearchResults, SignedUrls,
};
pub use reqwest::Method;
