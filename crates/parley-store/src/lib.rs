//! The authoritative store of Parley. This is the only crate that speaks SQL.
//!
//! [`Store`] is the storage-neutral contract, implemented once over a backend (`backend.rs`):
//! the write transactions (`flow/`), the reads (`read.rs`, `views.rs`) and the rules they apply
//! (`parley_domain::decide`) are the same for every store. [`pg::PgStore`] supplies statements
//! for PostgreSQL and [`sqlite::SqliteStore`] for an embedded SQLite file. In PostgreSQL every
//! per-conversation write serialises on that conversation's row lock and nothing else
//! serialises globally; SQLite has one writer, so there every write serialises.

mod backend;
pub mod breaks;
pub mod error;
mod flow;
#[cfg(test)]
mod fuzz_tests;
mod mls_types;
mod observer;
mod page;
pub mod pg;
mod presence;
mod push_types;
mod query;
mod read;
mod rows;
mod sql;
pub mod sqlite;
mod store;
mod store_impl;
pub mod token;
mod types;
mod views;

pub use breaks::{Breaks, BreaksError, BREAKS_ENV};
pub use error::StoreError;
pub use mls_types::*;
pub use observer::StoreObserver;
pub use push_types::*;
pub use store::Store;
pub use types::*;
