//! The write transactions of the store, each written once over the primitives of a backend's
//! transaction type: the flow takes the locks and asks `parley_domain::decide` what to do; a
//! backend supplies its SQL, its binds and its row decoding, nothing else. PostgreSQL keeps its
//! one-statement writes inside its primitives, so a flow makes the same round trips as a
//! hand-written transaction would.
//!
//! The primitives are generic methods returning `Send` futures: a flow over one backend is
//! compiled for it, and a primitive call is a plain call, never a boxed one.

pub(crate) mod create;
pub(crate) mod join;
pub(crate) mod leave;
pub(crate) mod membership;
pub(crate) mod role;
pub(crate) mod send;

use std::future::Future;

use crate::error::StoreError;

/// The future every primitive returns.
pub(crate) trait StoreFuture<T>: Future<Output = Result<T, StoreError>> + Send {}

impl<T, F> StoreFuture<T> for F where F: Future<Output = Result<T, StoreError>> + Send {}

/// What every write transaction of a backend can do. Dropping one rolls it back.
pub(crate) trait WriteTx: Send + Sized {
    /// Commits. Any failure is an unknown outcome (P6): the commit may have landed before the
    /// error was raised, and only a retry with the same request key tells the client the truth.
    fn commit_or_unknown(self) -> impl StoreFuture<()>;
}
