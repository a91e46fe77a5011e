//! The authoritative store of Parley. This is the only crate that speaks SQL.
//!
//! [`Store`] is the storage-neutral contract; [`pg::PgStore`] implements it on PostgreSQL.
//! Every per-conversation write serialises on that conversation's row lock; nothing else
//! serialises globally.

pub mod error;
pub mod pg;
mod store;
pub mod token;
mod types;

pub use error::StoreError;
pub use store::Store;
pub use types::*;
