//! Histories of Parley client runs and the checker that finds anomalies in them.
//!
//! A history is what clients did and saw, one record per JSON line ([`record`]): sends with
//! their outcomes (Jepsen style: `invoke`, then `ok`, `fail` or `info` for an unknown outcome),
//! deliveries, reads, read positions, reconnects; what each device was expected to receive;
//! and the final log of every conversation, read at the end, which is the authority.
//! [`check`] judges a history and returns a [`Report`]: anomalies counted by [`AnomalyKind`]
//! (lost writes, duplicates, gaps, skipped and reordered deliveries, reads going back,
//! phantoms, read positions going back, failures that committed), the unknown outcomes and how
//! many of them were found committed, and a few examples of each kind.
//!
//! Used by `parley chaos`, `parley bench` and the tests. Pure: no IO beyond reading and
//! writing the lines ([`read_history`], [`write_history`]). The record format and every
//! kind's definition are in `docs/HISTORY.md`.

pub mod anomaly;
mod check;
pub mod jsonl;
pub mod record;
pub mod report;

pub use anomaly::AnomalyKind;
pub use check::check;
pub use jsonl::{read_history, write_history, write_record, HistoryError};
pub use record::Record;
pub use report::{Example, Report, EXAMPLES_PER_KIND_MAX};
