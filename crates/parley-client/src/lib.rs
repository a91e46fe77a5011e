//! Client SDK of Parley.
//!
//! [`Client`] acts as one device and covers every device endpoint of the HTTP contract;
//! [`AdminClient`] creates users and issues device tokens. Answers are typed ([`types`]), errors
//! carry the HTTP status and the stable error code ([`ClientError`]), and
//! [`Client::send_with_retry`] turns an unknown send outcome into a known one by resending the
//! same request key. [`RawRequest`] reaches the server outside the typed API. [`Realtime`]
//! ([`ws`]) keeps the device's WebSocket and delivers every event exactly once, in order.
//! [`SyncState`] and [`Client::catch_up`] ([`sync`]) bring a device that was away level with
//! the server: one feed call, then events-after for each conversation that changed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), parley_client::ClientError> {
//! use parley_client::{AdminClient, NewConversation};
//!
//! let admin = AdminClient::new("http://127.0.0.1:8080", "admin-secret")?;
//! admin.create_user("ana", None).await?;
//! admin.create_user("ben", None).await?;
//! let ana = admin.device_client(&admin.create_device("ana", "phone").await?);
//!
//! let chat = ana.create_conversation(&NewConversation::direct("ben")).await?;
//! let ack = ana.send_with_retry(&chat.conv_id, "m-1", "hello").await?;
//! let page = ana.events_after(&chat.conv_id, 0, None, Some(chat.epoch)).await?;
//! assert_eq!(page.events.last().map(|e| e.seq), Some(ack.seq));
//! # Ok(())
//! # }
//! ```

mod admin;
mod client;
mod cursor;
pub mod error;
#[cfg(test)]
mod fixtures;
mod http;
mod raw;
mod request;
mod retry;
pub mod sync;
pub mod types;
pub mod ws;

pub use admin::AdminClient;
pub use client::Client;
pub use error::{code, ClientError};
pub use http::{ClientOptions, CONNECT_TIMEOUT_MS_DEFAULT, REQUEST_TIMEOUT_MS_DEFAULT};
pub use raw::{RawRequest, RawResponse};
pub use request::NewConversation;
pub use retry::{
    RetryPolicy, ATTEMPTS_MAX_DEFAULT, BACKOFF_FIRST_MS_DEFAULT, BACKOFF_MAX_MS_DEFAULT,
};
pub use sync::{CatchUpOptions, CatchUpReport, ConvSync, EventSink, Restart, SavedSync, SyncState};
pub use types::{
    ConvKind, Conversation, ConversationList, DeliveryMode, DeviceToken, Event, EventKind,
    EventsPage, Member, MembershipSeq, ReadAck, RecallAck, Role, RoleChange, SendAck, User,
};
pub use ws::{Delivery, Realtime, RealtimeHandle, RealtimeOptions, StopReason};

/// The HTTP method type used by [`Client::raw`], re-exported so tests need no direct reqwest
/// dependency.
pub use reqwest::Method;
