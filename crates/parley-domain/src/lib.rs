//! Parley's domain: identifiers and bodies parsed once into newtypes, request fingerprints,
//! events as they appear on the wire, membership periods and the visibility rules over them,
//! and (`decide`) the rules of every write and of the conversation view as pure functions.
//!
//! Nothing here does IO. The store and the server depend on this crate; it depends on neither.

pub mod conversation;
pub mod decide;
pub mod event;
pub mod fingerprint;
#[cfg(test)]
mod fuzz_tests;
pub mod ids;
pub mod limits;
pub mod media;
pub mod membership;
pub mod rejection;
pub mod relations;
pub mod search;

pub use conversation::{ConvKind, ConversationView, DeliveryMode, MemberView};
pub use event::{Event, EventKind, EventsPage};
pub use fingerprint::RequestHash;
pub use ids::{Body, ClientMsgId, ConvId, DeviceId, IdError, UserId};
pub use limits::Limits;
pub use media::{Attachment, MediaId};
pub use membership::{Period, Role};
pub use rejection::Rejection;
pub use relations::{ReactionKey, Relations, SendRelations};
pub use search::{SearchCursor, SearchError, SearchLanguage, SearchOrder, SearchQuery, Snippet};
