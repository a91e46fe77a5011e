//! The rules of the writes that name an earlier message (docs/RELATIONS.md): a reply, a thread
//! reply, an edit, a reaction. Each names its target by seq; a target the actor cannot see
//! answers exactly like one that does not exist (the hidden-target rule, as for a recall).

use crate::event::EventKind;
use crate::ids::UserId;
use crate::membership::{is_visible, Period};
use crate::rejection::Rejection;
use crate::relations::{SendRelations, REACTION_KEYS_PER_MESSAGE_MAX};

/// The event at a target seq, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetMessage {
    pub kind: EventKind,
    pub sender: Option<UserId>,
    pub recalled: bool,
    /// The thread the target is a reply in.
    pub thread_root: Option<i64>,
}

const NO_SUCH_MESSAGE: Rejection = Rejection::NotFound("no such message");

/// A target must be a `msg` the actor can see (else `NotFound`, whether it exists or not) and
/// not recalled (`Recalled`).
pub fn check_target<'t>(
    periods: &[Period],
    target_seq: i64,
    target: Option<&'t TargetMessage>,
) -> Result<&'t TargetMessage, Rejection> {
    let target = target.ok_or(NO_SUCH_MESSAGE)?;
    if target.kind != EventKind::Msg || !is_visible(periods, target_seq) {
        return Err(NO_SUCH_MESSAGE);
    }
    if target.recalled {
        return Err(Rejection::Recalled);
    }
    Ok(target)
}

/// The targets of a send's `reply_to` and `thread_root`, checked after the send was decided a
/// write (so a retry is still answered from its key first). A thread's root may not itself be
/// a reply in a thread: threads are one level deep, as in Slack and Zulip.
pub fn check_send_targets(
    periods: &[Period],
    rel: &SendRelations,
    reply_target: Option<&TargetMessage>,
    thread_target: Option<&TargetMessage>,
) -> Result<(), Rejection> {
    if let Some(root) = rel.thread_root {
        let target = check_target(periods, root, thread_target)?;
        if target.thread_root.is_some() {
            return Err(Rejection::BadRequest(
                "thread_root names a reply in a thread; threads are one level deep".into(),
            ));
        }
    }
    if let Some(reply_to) = rel.reply_to {
        check_target(periods, reply_to, reply_target)?;
    }
    Ok(())
}

/// An edit, once its key was found new and its author a member: only the message's sender may
/// edit it, and not once it was recalled.
pub fn check_edit(
    periods: &[Period],
    actor: &UserId,
    target_seq: i64,
    target: Option<&TargetMessage>,
) -> Result<(), Rejection> {
    let found = target.ok_or(NO_SUCH_MESSAGE)?;
    if found.kind != EventKind::Msg || !is_visible(periods, target_seq) {
        return Err(NO_SUCH_MESSAGE);
    }
    if found.sender.as_ref() != Some(actor) {
        return Err(Rejection::NotSender);
    }
    if found.recalled {
        return Err(Rejection::Recalled);
    }
    Ok(())
}

/// What the reactions of a message hold for one user and key, read under the lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReactionState {
    /// The seq of the `react` event of this user with this key, if they reacted.
    pub mine: Option<i64>,
    /// Whether anyone reacted with this key.
    pub key_present: bool,
    /// How many distinct keys the message has.
    pub keys: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReactDecision {
    /// Append a `react` or `unreact` event.
    Write,
    /// Nothing to change: the user had reacted with this key already (the seq of that
    /// reaction), or had not when taking it back (`None`).
    Unchanged(Option<i64>),
}

/// Decides a reaction `added` (PUT) or taken back (DELETE): the actor needs an open period and
/// a visible, unrecalled message; one reaction per user and key, so both are idempotent.
pub fn decide_react(
    periods: &[Period],
    target_seq: i64,
    target: Option<&TargetMessage>,
    state: ReactionState,
    added: bool,
) -> Result<ReactDecision, Rejection> {
    check_actor(periods)?;
    check_target(periods, target_seq, target)?;
    match (added, state.mine) {
        (true, Some(seq)) => Ok(ReactDecision::Unchanged(Some(seq))),
        (false, None) => Ok(ReactDecision::Unchanged(None)),
        (true, None) if !state.key_present && state.keys >= REACTION_KEYS_PER_MESSAGE_MAX => Err(
            Rejection::LimitReached("a message has at most 64 distinct reaction keys"),
        ),
        _ => Ok(ReactDecision::Write),
    }
}

/// Every relation write needs an open period (P11).
pub fn check_actor(periods: &[Period]) -> Result<(), Rejection> {
    if periods.iter().any(|p| p.to_seq.is_none()) {
        Ok(())
    } else {
        Err(Rejection::NotMember)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(s: &str) -> UserId {
        UserId::parse(s).unwrap()
    }

    fn open(from_seq: i64) -> Period {
        Period {
            from_seq,
            to_seq: None,
        }
    }

    fn msg(sender: &str) -> TargetMessage {
        TargetMessage {
            kind: EventKind::Msg,
            sender: Some(uid(sender)),
            recalled: false,
            thread_root: None,
        }
    }

    #[test]
    fn a_hidden_target_answers_like_a_missing_one() {
        let periods = [open(5)];
        let ana = msg("ana");
        let hidden = check_target(&periods, 3, Some(&ana)).cloned();
        let missing = check_target(&periods, 3, None).cloned();
        assert_eq!(hidden, Err(NO_SUCH_MESSAGE));
        assert_eq!(hidden, missing);
        let join = TargetMessage {
            kind: EventKind::Join,
            ..msg("ana")
        };
        assert_eq!(check_target(&periods, 6, Some(&join)), Err(NO_SUCH_MESSAGE));
    }

    #[test]
    fn a_recalled_message_cannot_be_the_target() {
        let recalled = TargetMessage {
            recalled: true,
            ..msg("ana")
        };
        assert_eq!(
            check_target(&[open(1)], 3, Some(&recalled)),
            Err(Rejection::Recalled)
        );
        assert_eq!(
            check_edit(&[open(1)], &uid("ana"), 3, Some(&recalled)),
            Err(Rejection::Recalled)
        );
    }

    #[test]
    fn only_the_sender_edits() {
        let periods = [open(1)];
        assert_eq!(
            check_edit(&periods, &uid("ben"), 3, Some(&msg("ana"))),
            Err(Rejection::NotSender)
        );
        assert_eq!(
            check_edit(&periods, &uid("ana"), 3, Some(&msg("ana"))),
            Ok(())
        );
    }

    #[test]
    fn threads_are_one_level_deep() {
        let rel = SendRelations {
            thread_root: Some(4),
            ..SendRelations::default()
        };
        let reply = TargetMessage {
            thread_root: Some(3),
            ..msg("ana")
        };
        assert!(matches!(
            check_send_targets(&[open(1)], &rel, None, Some(&reply)),
            Err(Rejection::BadRequest(_))
        ));
        assert_eq!(
            check_send_targets(&[open(1)], &rel, None, Some(&msg("ana"))),
            Ok(())
        );
    }

    #[test]
    fn reactions_are_idempotent_and_bounded() {
        let periods = [open(1)];
        let target = msg("ana");
        let state = ReactionState {
            mine: Some(7),
            key_present: true,
            keys: 1,
        };
        assert_eq!(
            decide_react(&periods, 3, Some(&target), state, true),
            Ok(ReactDecision::Unchanged(Some(7)))
        );
        assert_eq!(
            decide_react(&periods, 3, Some(&target), state, false),
            Ok(ReactDecision::Write)
        );
        let none = ReactionState::default();
        assert_eq!(
            decide_react(&periods, 3, Some(&target), none, false),
            Ok(ReactDecision::Unchanged(None))
        );
        let full = ReactionState {
            keys: REACTION_KEYS_PER_MESSAGE_MAX,
            ..none
        };
        assert!(matches!(
            decide_react(&periods, 3, Some(&target), full, true),
            Err(Rejection::LimitReached(_))
        ));
        let closed = [Period {
            from_seq: 1,
            to_seq: Some(9),
        }];
        assert_eq!(
            decide_react(&closed, 3, Some(&target), none, true),
            Err(Rejection::NotMember)
        );
    }
}
