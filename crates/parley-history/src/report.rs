//! What the checker found: counts by kind, unknown outcomes, and a few examples of each kind.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::anomaly::AnomalyKind;

/// Examples kept per kind: enough to start looking, few enough to read.
pub const EXAMPLES_PER_KIND_MAX: usize = 5;

/// The result of checking one history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Records of what clients did or saw (every record but `member`, `final`, `final_head`).
    pub operations: u64,
    /// Anomalies by kind name; every kind is present, most with 0.
    pub anomalies: BTreeMap<String, u64>,
    /// Sends whose outcome was unknown: `info` completions and invokes never completed.
    pub unknown_outcomes: u64,
    /// Unknown outcomes whose send was found in the final log (committed after all).
    pub recovered: u64,
    /// Up to [`EXAMPLES_PER_KIND_MAX`] examples per kind that occurred.
    pub examples: BTreeMap<String, Vec<Example>>,
}

/// One anomaly: the records that show it and what they show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Example {
    /// Line numbers of the records (1-based, in record order, blank lines not counted).
    pub lines: Vec<usize>,
    pub detail: String,
}

impl Report {
    pub(crate) fn new() -> Report {
        Report {
            anomalies: AnomalyKind::ALL
                .iter()
                .map(|k| (k.as_str().to_owned(), 0))
                .collect(),
            ..Report::default()
        }
    }

    /// The count of one kind.
    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.anomalies.get(kind.as_str()).copied().unwrap_or(0)
    }

    /// Anomalies of every kind.
    pub fn total(&self) -> u64 {
        self.anomalies.values().sum()
    }

    /// The kinds that occurred at least once.
    pub fn kinds(&self) -> Vec<AnomalyKind> {
        AnomalyKind::ALL
            .into_iter()
            .filter(|k| self.count(*k) > 0)
            .collect()
    }

    /// Unknown outcomes not found in the final log.
    pub fn not_recovered(&self) -> u64 {
        self.unknown_outcomes - self.recovered
    }

    /// Counts one anomaly and keeps it as an example while the kind has room.
    pub(crate) fn flag(
        &mut self,
        kind: AnomalyKind,
        lines: Vec<usize>,
        detail: impl FnOnce() -> String,
    ) {
        self.add(kind, 1);
        let examples = self.examples.entry(kind.as_str().to_owned()).or_default();
        if examples.len() < EXAMPLES_PER_KIND_MAX {
            examples.push(Example {
                lines,
                detail: detail(),
            });
        }
    }

    /// Adds to a kind's count without an example (the rest of a run already exemplified).
    pub(crate) fn add(&mut self, kind: AnomalyKind, n: u64) {
        let count = self.anomalies.entry(kind.as_str().to_owned()).or_insert(0);
        *count = count.saturating_add(n);
    }
}
