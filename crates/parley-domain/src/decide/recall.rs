//! The recall decision (SPEC §4, recall): from the actor's periods and the target as the
//! transaction read them under the conversation's lock.

use chrono::{DateTime, Duration, Utc};

use crate::event::EventKind;
use crate::ids::UserId;
use crate::membership::{is_visible, Period};
use crate::rejection::Rejection;

/// The event at the target seq, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallTarget {
    pub kind: EventKind,
    pub sender: Option<UserId>,
    pub created_at: DateTime<Utc>,
    /// Already recalled (its body erased).
    pub recalled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallDecision {
    /// Append the recall event and erase the target's body.
    Write,
    /// The message was recalled before: answer that recall, even after the window.
    AlreadyRecalled,
}

/// A recall is a write: it needs an open period (P11). Checked before the target is read.
pub fn check_actor(periods: &[Period]) -> Result<(), Rejection> {
    if periods.iter().any(|p| p.to_seq.is_none()) {
        Ok(())
    } else {
        Err(Rejection::NotMember)
    }
}

/// Decides a recall of `target_seq` by `actor` at `now`: the actor needs an open period, the
/// target must be a msg the actor can see, sent by the actor, and no older than the window at
/// `now` (exactly `created_at + window_ms` is still inside it).
pub fn decide(
    periods: &[Period],
    actor: &UserId,
    target_seq: i64,
    target: Option<&RecallTarget>,
    window_ms: i64,
    now: DateTime<Utc>,
) -> Result<RecallDecision, Rejection> {
    check_actor(periods)?;
    let no_such = Rejection::NotFound("no such message");
    let target = target.ok_or(no_such.clone())?;
    if target.kind != EventKind::Msg || !is_visible(periods, target_seq) {
        return Err(no_such);
    }
    if target.sender.as_ref() != Some(actor) {
        return Err(Rejection::NotSender);
    }
    if target.recalled {
        return Ok(RecallDecision::AlreadyRecalled);
    }
    if target.created_at + Duration::milliseconds(window_ms) < now {
        return Err(Rejection::RecallWindowExpired);
    }
    Ok(RecallDecision::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW_MS: i64 = 1_000;

    fn uid(s: &str) -> UserId {
        UserId::parse(s).unwrap()
    }

    fn open(from_seq: i64) -> Period {
        Period {
            from_seq,
            to_seq: None,
        }
    }

    fn closed(from_seq: i64, to_seq: i64) -> Period {
        Period {
            from_seq,
            to_seq: Some(to_seq),
        }
    }

    fn msg_by(sender: &str, at: DateTime<Utc>) -> RecallTarget {
        RecallTarget {
            kind: EventKind::Msg,
            sender: Some(uid(sender)),
            created_at: at,
            recalled: false,
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn the_window_includes_its_last_millisecond() {
        let ana = uid("u-ana");
        let target = msg_by("u-ana", t0());
        let at_edge = t0() + Duration::milliseconds(WINDOW_MS);
        let periods = [open(1)];
        assert_eq!(
            decide(&periods, &ana, 3, Some(&target), WINDOW_MS, at_edge),
            Ok(RecallDecision::Write)
        );
        assert_eq!(
            decide(
                &periods,
                &ana,
                3,
                Some(&target),
                WINDOW_MS,
                at_edge + Duration::milliseconds(1)
            ),
            Err(Rejection::RecallWindowExpired)
        );
    }

    #[test]
    fn an_earlier_recall_answers_even_after_the_window() {
        let ana = uid("u-ana");
        let mut target = msg_by("u-ana", t0());
        target.recalled = true;
        let late = t0() + Duration::days(30);
        assert_eq!(
            decide(&[open(1)], &ana, 3, Some(&target), WINDOW_MS, late),
            Ok(RecallDecision::AlreadyRecalled)
        );
    }

    #[test]
    fn refusals_in_contract_order() {
        let ana = uid("u-ana");
        let bens = msg_by("u-ben", t0());
        let now = t0();
        // Never a member, or left: not a member, before anything about the target.
        assert_eq!(check_actor(&[]), Err(Rejection::NotMember));
        assert_eq!(
            decide(
                &[closed(1, 9)],
                &ana,
                3,
                Some(&msg_by("u-ana", now)),
                WINDOW_MS,
                now
            ),
            Err(Rejection::NotMember)
        );
        // Nothing at the seq, not a msg, or outside the actor's periods: not found.
        let not_found = Err(Rejection::NotFound("no such message"));
        assert_eq!(
            decide(&[open(1)], &ana, 99, None, WINDOW_MS, now),
            not_found
        );
        let mut join = msg_by("u-ana", now);
        join.kind = EventKind::Join;
        assert_eq!(
            decide(&[open(1)], &ana, 1, Some(&join), WINDOW_MS, now),
            not_found
        );
        let own = msg_by("u-ana", now);
        assert_eq!(
            decide(
                &[closed(1, 2), open(6)],
                &ana,
                4,
                Some(&own),
                WINDOW_MS,
                now
            ),
            not_found
        );
        // Another member's message, even a recalled one, is not the actor's to recall.
        assert_eq!(
            decide(&[open(1)], &ana, 3, Some(&bens), WINDOW_MS, now),
            Err(Rejection::NotSender)
        );
        let mut recalled = bens.clone();
        recalled.recalled = true;
        assert_eq!(
            decide(&[open(1)], &ana, 3, Some(&recalled), WINDOW_MS, now),
            Err(Rejection::NotSender)
        );
        // A message from an earlier period of the actor stays recallable.
        assert_eq!(
            decide(
                &[closed(1, 4), open(6)],
                &ana,
                3,
                Some(&own),
                WINDOW_MS,
                now
            ),
            Ok(RecallDecision::Write)
        );
    }
}
