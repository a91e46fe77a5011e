//! The write transactions of the store, each written once over the primitives of a backend's
//! transaction type: the flow takes the locks and asks `parley_domain::decide` what to do; a
//! backend supplies its SQL, its binds and its row decoding, nothing else. PostgreSQL keeps its
//! one-statement writes inside its primitives, so a flow makes the same round trips as a
//! hand-written transaction would.
//!
//! The primitives are generic methods returning `Send` futures: a flow over one backend is
//! compiled for it, and a primitive call is a plain call, never a boxed one.

pub(crate) mod admin;
pub(crate) mod create;
pub(crate) mod join;
pub(crate) mod leave;
pub(crate) mod media;
pub(crate) mod membership;
pub(crate) mod mls;
pub(crate) mod mls_keys;
pub(crate) mod push;
pub(crate) mod read_mark;
pub(crate) mod recall;
pub(crate) mod relate;
pub(crate) mod retention;
pub(crate) mod role;
pub(crate) mod route;
pub(crate) mod search;
pub(crate) mod send;

use std::future::Future;

use parley_domain::{ConvId, Period, UserId};

use crate::error::StoreError;
use crate::query::Sql;
use crate::sql;

/// The future every primitive returns.
pub(crate) trait StoreFuture<T>: Future<Output = Result<T, StoreError>> + Send {}

impl<T, F> StoreFuture<T> for F where F: Future<Output = Result<T, StoreError>> + Send {}

/// What every transaction of a backend can do, reading or writing. Dropping one rolls it back.
pub(crate) trait ReadTx: Sql + Sized {
    /// `user`'s membership periods of the conversation, ascending.
    fn periods(&mut self, conv_id: &ConvId, user: &UserId) -> impl StoreFuture<Vec<Period>> {
        sql::periods(self, conv_id, user)
    }
    /// Commits a transaction whose outcome a retry repeats harmlessly (a read, a read mark):
    /// a failure is `Unavailable`.
    fn finish(self) -> impl StoreFuture<()>;
}

/// What every write transaction of a backend can do.
pub(crate) trait WriteTx: ReadTx {
    /// Commits. Any failure is an unknown outcome (P6): the commit may have landed before the
    /// error was raised, and only a retry with the same request key tells the client the truth.
    fn commit_or_unknown(self) -> impl StoreFuture<()>;
}
