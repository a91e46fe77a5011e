//! The kinds of anomaly the checker reports. Their names are a public contract: they are the
//! keys of the `anomalies` object of a chaos run's `summary.json`.

use serde::{Deserialize, Serialize};

/// One kind of anomaly. The definitions are in `docs/HISTORY.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// An acked send whose client_msg_id is not at the acked seq of the final log.
    LostWrite,
    /// An event of the final log that a device was expected to receive, never delivered to it,
    /// and above everything it was delivered (the tail never came).
    Undelivered,
    /// A seq delivered twice to one device as new; one client_msg_id at two seqs of the final
    /// log or of two acks; two different events at one seq of the final log.
    Duplicated,
    /// A seq missing from the final log between its `min_seq` and its head.
    SeqGap,
    /// An event a device was expected to receive, never delivered to it, below a seq it was
    /// delivered: its deliveries jumped over it.
    SkippedDelivery,
    /// A delivery below a seq already delivered to the same device in that conversation.
    Reordered,
    /// A read answer whose head, or whose through_seq, is below one the same device saw before.
    ReadBackwards,
    /// A delivered or read seq that the final log does not hold, or holds as another message.
    Phantom,
    /// A user's read position observed below one observed before.
    ReadPositionBackwards,
    /// A send whose every attempt failed definitely, found in the final log.
    FailedButCommitted,
}

impl AnomalyKind {
    /// Every kind, in the order of their names.
    pub const ALL: [AnomalyKind; 10] = [
        AnomalyKind::Duplicated,
        AnomalyKind::FailedButCommitted,
        AnomalyKind::LostWrite,
        AnomalyKind::Phantom,
        AnomalyKind::ReadBackwards,
        AnomalyKind::ReadPositionBackwards,
        AnomalyKind::Reordered,
        AnomalyKind::SeqGap,
        AnomalyKind::SkippedDelivery,
        AnomalyKind::Undelivered,
    ];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::LostWrite => "lost_write",
            AnomalyKind::Undelivered => "undelivered",
            AnomalyKind::Duplicated => "duplicated",
            AnomalyKind::SeqGap => "seq_gap",
            AnomalyKind::SkippedDelivery => "skipped_delivery",
            AnomalyKind::Reordered => "reordered",
            AnomalyKind::ReadBackwards => "read_backwards",
            AnomalyKind::Phantom => "phantom",
            AnomalyKind::ReadPositionBackwards => "read_position_backwards",
            AnomalyKind::FailedButCommitted => "failed_but_committed",
        }
    }
}

impl std::fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names_and_all_is_sorted_by_name() {
        for kind in AnomalyKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        let names: Vec<_> = AnomalyKind::ALL.iter().map(|k| k.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }
}
