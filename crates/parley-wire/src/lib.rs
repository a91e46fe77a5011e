//! The JSON that Parley's server and its clients both speak (SPEC §6 and §7): the WebSocket
//! frames, the stable error codes with their HTTP statuses, the close codes, and the answers of
//! send, read, recall and events-after.
//!
//! Each shape is declared once, here, and both sides use it: the server to write it, the SDK to
//! read it. Field names and presence are the public contract. The types hold plain strings and
//! integers rather than the server's parsed ids, so a client decodes whatever a newer server
//! sends: unknown fields are ignored, unknown event kinds and server frames decode as `Other`
//! and `Unknown`. Frames a client sends are the exception: the server refuses their unknown
//! fields, so a misspelt field is an error rather than a silent default.
//!
//! Where the server's own types differ from a client's (a pushed event is the server's domain
//! event; a `req_id` is echoed as whatever JSON the client chose), the shape is generic over
//! that part, with the client's type as the default.
//!
//! No IO, and no other Parley crate: the SDK depends on this crate without pulling in the
//! server's domain.

pub mod answer;
pub mod close;
pub mod error;
pub mod frame;
#[cfg(test)]
mod fuzz_tests;
pub mod mls;
pub mod push;
pub mod search;
pub mod typed;

pub use answer::{
    EditAck, Event, EventKind, EventsPage, Identity, Media, PresenceList, ReactionAck,
    ReactionCount, ReadAck, RecallAck, SendAck, SignedUrls, ThreadSummary, UserPresence,
};
pub use error::{code, ErrorBody, ErrorCode, ErrorDetail};
pub use frame::{ClientFrame, EchoedReqId, FrameError, Request, ServerFrame};
pub use mls::{
    ClaimedKeyPackage, ClaimedKeyPackages, DeviceRef, KeyPackageCount, KeyPackageUpload, MlsAck,
    MlsKind, MlsPost, WelcomeOut,
};
pub use push::{
    NotificationLevel, NotificationSettings, PushPayload, PushRegistration, PushTargetInfo,
    VapidPublicKey, WebPushKeys,
};
pub use search::{Highlight, SearchHit, SearchLanguageSetting, SearchResults};
pub use typed::{Edit, MembershipChange, Message, Reaction, Recall, TypedEvent};
