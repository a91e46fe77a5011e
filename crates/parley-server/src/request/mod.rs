//! The request layer: a send, read, sync or recall arrives over HTTP (a JSON body with path and
//! query) or as a WebSocket frame, and either way becomes one validated request of this module,
//! which then runs through `service` (or the store, for reads).
//!
//! Both transports parse each field with the same function of `fields`, in SPEC §6's order:
//! authentication (401, before anything here), size limits (413: an oversized message body is
//! found on the loose JSON, before the strict parse), parsing (400; 415 for a body not declared
//! JSON), the rate limit (429, `rate_limit.rs`: only a well-formed request spends a token), and
//! only then the store (404, 403, 409). A refused request never reaches the store, so it writes
//! nothing.

pub mod fields;
pub mod frame;
pub mod mls;

mod events;
#[cfg(test)]
mod fuzz_tests;
pub mod read;
mod recall;
pub mod relate;
pub mod search;
pub mod send;

pub use events::{History, ReadEvents, SyncAfter};
pub use frame::FrameRequest;
pub use read::MarkRead;
pub use recall::Recall;
pub use relate::{EditMessage, React};
pub use search::{SearchFields, SearchMessages};
pub use send::SendMessage;
