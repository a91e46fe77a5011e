//! The send decision (SPEC §4, steps 2–5): what one request does, from what the key check read
//! under the conversation's lock. A batch of requests asks once per request, in queue order,
//! also naming a request of the same batch that took the same key before it.
//!
//! The replay check precedes the membership check, so a retry by someone who has since left
//! still learns that the original send committed.

use uuid::Uuid;

use crate::fingerprint::RequestHash;
use crate::rejection::Rejection;

/// A request key as a store keeps it, in the log or in the tombstones of purged messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    pub seq: i64,
    pub message_id: Uuid,
    pub request_hash: RequestHash,
}

/// One row of the key check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheckRow {
    /// The key is in the log.
    Log(StoredRequest),
    /// The key is in the tombstones: its message was purged.
    Tombstone(StoredRequest),
    /// The sender has an open period.
    OpenPeriod,
}

/// What the key check found for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyCheck {
    pub in_log: Option<StoredRequest>,
    pub in_tombstones: Option<StoredRequest>,
    pub sender_is_member: bool,
}

impl KeyCheck {
    /// Adds one row, in whatever order the rows come.
    pub fn record(&mut self, row: KeyCheckRow) {
        match row {
            KeyCheckRow::Log(found) => self.in_log = Some(found),
            KeyCheckRow::Tombstone(found) => self.in_tombstones = Some(found),
            KeyCheckRow::OpenPeriod => self.sender_is_member = true,
        }
    }

    /// The request that took this key, the log before the tombstones (a key can only meet an
    /// older tombstone of its own if that one expired and the key was used again), and whether
    /// it was purged.
    fn prior(&self) -> Option<(&StoredRequest, bool)> {
        self.in_log
            .as_ref()
            .map(|found| (found, false))
            .or_else(|| self.in_tombstones.as_ref().map(|found| (found, true)))
    }
}

/// An earlier request of the same batch that took the same key and is to be written.
#[derive(Debug, Clone, Copy)]
pub struct Earlier<'a> {
    pub index: usize,
    pub request_hash: &'a RequestHash,
}

/// What an accepted request does; refusals are `Rejection`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendDecision {
    /// A new message, at the conversation's next seq.
    Write,
    /// The same request committed before: answer its ack again with `dup = true`.
    Replay {
        seq: i64,
        message_id: Uuid,
        /// The original was purged; the answer comes from its tombstone.
        purged: bool,
    },
    /// The same request as the batch's request `index`: answer that one's ack with `dup`.
    ReplayOfEarlier { index: usize },
}

/// Decides one request from its key check and the earlier request of its batch that took the
/// same key, if any: a stored request first, then the batch's, then the sender's period. A key
/// used for a different request is `IdempotencyMismatch`; a sender without an open period, or
/// a conversation that does not exist (P10), `NotMember`.
pub fn decide(
    check: &KeyCheck,
    earlier: Option<Earlier<'_>>,
    request_hash: &RequestHash,
) -> Result<SendDecision, Rejection> {
    if let Some((found, purged)) = check.prior() {
        if found.request_hash != *request_hash {
            return Err(Rejection::IdempotencyMismatch);
        }
        return Ok(SendDecision::Replay {
            seq: found.seq,
            message_id: found.message_id,
            purged,
        });
    }
    if let Some(earlier) = earlier {
        if earlier.request_hash != request_hash {
            return Err(Rejection::IdempotencyMismatch);
        }
        return Ok(SendDecision::ReplayOfEarlier {
            index: earlier.index,
        });
    }
    if !check.sender_is_member {
        return Err(Rejection::NotMember);
    }
    Ok(SendDecision::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(body: &str) -> RequestHash {
        RequestHash::of_message(body)
    }

    fn stored(seq: i64, body: &str) -> StoredRequest {
        StoredRequest {
            seq,
            message_id: Uuid::from_u128(seq as u128),
            request_hash: hash(body),
        }
    }

    fn check(rows: Vec<KeyCheckRow>) -> KeyCheck {
        let mut c = KeyCheck::default();
        for row in rows {
            c.record(row);
        }
        c
    }

    #[test]
    fn a_member_with_a_new_key_writes_and_a_stranger_is_refused() {
        let member = check(vec![KeyCheckRow::OpenPeriod]);
        assert_eq!(decide(&member, None, &hash("hi")), Ok(SendDecision::Write));
        let stranger = check(vec![]);
        assert_eq!(
            decide(&stranger, None, &hash("hi")),
            Err(Rejection::NotMember)
        );
    }

    #[test]
    fn replay_is_checked_before_membership() {
        // The sender left after the original send: the retry still learns it committed.
        let left = check(vec![KeyCheckRow::Log(stored(7, "hi"))]);
        assert_eq!(
            decide(&left, None, &hash("hi")),
            Ok(SendDecision::Replay {
                seq: 7,
                message_id: Uuid::from_u128(7),
                purged: false
            })
        );
        // Another body under the same key is a mismatch, member or not.
        let mismatch = Err(Rejection::IdempotencyMismatch);
        assert_eq!(decide(&left, None, &hash("other")), mismatch);
        let member = check(vec![
            KeyCheckRow::OpenPeriod,
            KeyCheckRow::Log(stored(7, "hi")),
        ]);
        assert_eq!(decide(&member, None, &hash("other")), mismatch);
    }

    #[test]
    fn a_tombstone_answers_purged_and_the_log_wins_over_it() {
        let purged = check(vec![
            KeyCheckRow::OpenPeriod,
            KeyCheckRow::Tombstone(stored(3, "hi")),
        ]);
        assert_eq!(
            decide(&purged, None, &hash("hi")),
            Ok(SendDecision::Replay {
                seq: 3,
                message_id: Uuid::from_u128(3),
                purged: true
            })
        );
        assert_eq!(
            decide(&purged, None, &hash("no")),
            Err(Rejection::IdempotencyMismatch)
        );
        // Rows in either order: the log's answer is the one given.
        let both = check(vec![
            KeyCheckRow::Tombstone(stored(3, "old")),
            KeyCheckRow::Log(stored(9, "hi")),
        ]);
        assert_eq!(
            decide(&both, None, &hash("hi")),
            Ok(SendDecision::Replay {
                seq: 9,
                message_id: Uuid::from_u128(9),
                purged: false
            })
        );
    }

    #[test]
    fn the_same_key_earlier_in_the_batch_is_a_replay_of_it_or_a_mismatch() {
        let member = check(vec![KeyCheckRow::OpenPeriod]);
        let first = hash("hi");
        let earlier = Earlier {
            index: 2,
            request_hash: &first,
        };
        assert_eq!(
            decide(&member, Some(earlier), &hash("hi")),
            Ok(SendDecision::ReplayOfEarlier { index: 2 })
        );
        assert_eq!(
            decide(&member, Some(earlier), &hash("changed")),
            Err(Rejection::IdempotencyMismatch)
        );
        // A stored request answers before the batch's own.
        let stored_too = check(vec![
            KeyCheckRow::OpenPeriod,
            KeyCheckRow::Log(stored(4, "hi")),
        ]);
        assert!(matches!(
            decide(&stored_too, Some(earlier), &hash("hi")),
            Ok(SendDecision::Replay { seq: 4, .. })
        ));
        // Only accepted requests take a key, so a stranger never has an earlier request.
        let stranger = check(vec![]);
        assert_eq!(
            decide(&stranger, None, &hash("hi")),
            Err(Rejection::NotMember)
        );
    }
}
