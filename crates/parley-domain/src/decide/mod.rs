//! The rules of every write and of the conversation view, as pure functions of what a store
//! read under the conversation's lock (or in one read snapshot). Each store runs its statements
//! and asks these functions what to do, so a rule is written once and both stores keep it.
//!
//! Refusals come back as [`Rejection`](crate::Rejection)s in the order the contract fixes
//! (SPEC §4, §6): the first rule that fails is the answer. A breach of an invariant that only a
//! bug could cause (a seq that does not follow the counter, overlapping periods) panics instead.

pub mod counter;
pub mod membership;
pub mod recall;
pub mod relate;
pub mod retention;
pub mod send;
pub mod view;

pub use counter::{LogCounter, Slot};
