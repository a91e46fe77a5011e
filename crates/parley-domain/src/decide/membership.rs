//! Membership changes (SPEC §4, §8): who may create, add, remove, leave and set roles, the
//! ownership hand-over when the owner leaves, and the delivery mode at creation and after a
//! join. The stores and the gateways' member caches all apply these, so a group switches to
//! pull at the same join everywhere.

use crate::conversation::{ConvKind, DeliveryMode};
use crate::ids::{ConvId, UserId};
use crate::membership::{next_owner, CurrentMember, Role};
use crate::rejection::Rejection;

/// The id of a new conversation: the pair's one direct id, or the group id the creator chose
/// (generated when absent). A direct chat names exactly one other member.
pub fn new_conv_id(
    kind: ConvKind,
    creator: &UserId,
    others: &[UserId],
    chosen: Option<&ConvId>,
) -> Result<ConvId, Rejection> {
    match kind {
        ConvKind::Direct => {
            let [other] = others else {
                return Err(Rejection::BadRequest(
                    "a direct conversation has exactly one other member".into(),
                ));
            };
            Ok(ConvId::direct(creator, other))
        }
        ConvKind::Encrypted if !others.is_empty() => Err(Rejection::BadRequest(
            "an encrypted conversation starts with its creator alone; members join by Commit"
                .into(),
        )),
        ConvKind::Group | ConvKind::Encrypted => {
            Ok(chosen.cloned().unwrap_or_else(ConvId::generated_group))
        }
    }
}

/// How a new conversation is delivered, and the member count at which it may still switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitialDelivery {
    pub mode: DeliveryMode,
    /// Stored with the conversation: the group's member count at which push becomes pull.
    /// `None` when the creator chose the mode or the conversation is direct. At most
    /// `i32::MAX`, the largest a store keeps.
    pub pull_threshold: Option<u32>,
}

/// The delivery mode at creation: the creator's choice, else `pull` for a group created with
/// at least `pull_threshold` members, else `push`.
pub fn initial_delivery(
    kind: ConvKind,
    chosen: Option<DeliveryMode>,
    members: usize,
    pull_threshold: u32,
) -> InitialDelivery {
    let threshold = pull_threshold.min(i32::MAX as u32);
    match (chosen, kind) {
        (Some(mode), _) => InitialDelivery {
            mode,
            pull_threshold: None,
        },
        (None, ConvKind::Group | ConvKind::Encrypted) => InitialDelivery {
            mode: if members >= pull_threshold as usize {
                DeliveryMode::Pull
            } else {
                DeliveryMode::Push
            },
            pull_threshold: Some(threshold),
        },
        (None, ConvKind::Direct) => InitialDelivery {
            mode: DeliveryMode::Push,
            pull_threshold: None,
        },
    }
}

/// The role of initial member `index` (0 is the creator, who owns a group; a direct chat has
/// no owner).
pub fn initial_role(kind: ConvKind, index: usize) -> Role {
    match (kind, index) {
        (ConvKind::Group | ConvKind::Encrypted, 0) => Role::Owner,
        _ => Role::Member,
    }
}

/// The member count at which a conversation may still switch to pull: its stored threshold
/// while it is push, else none (a mode never switches back).
pub fn switch_threshold(mode: DeliveryMode, stored: Option<u32>) -> Option<u32> {
    stored.filter(|_| mode == DeliveryMode::Push)
}

/// The delivery mode after a join brought the member count to `members`: a push group whose
/// mode the count decides becomes pull at its threshold.
pub fn mode_after_join(
    mode: DeliveryMode,
    pull_threshold: Option<u32>,
    members: usize,
) -> DeliveryMode {
    match (mode, pull_threshold) {
        (DeliveryMode::Push, Some(t)) if members >= t as usize => DeliveryMode::Pull,
        _ => mode,
    }
}

/// The two people a membership change concerns, as the transaction read them after the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parties {
    /// The actor's role in their open period; `None` when they have none.
    pub actor_role: Option<Role>,
    /// Whether the target is a user at all.
    pub target_exists: bool,
    /// The target's role in their open period; `None` when they have none.
    pub target_role: Option<Role>,
}

const FIXED_MEMBERSHIP: &str = "a direct conversation has fixed membership";

/// An add: the actor must be a current owner or admin of a group, the target a user who is not
/// a current member.
pub fn check_add(kind: ConvKind, parties: Parties) -> Result<(), Rejection> {
    let actor = parties.actor_role.ok_or(Rejection::NotMember)?;
    if !parties.target_exists {
        return Err(Rejection::NotFound("no such user"));
    }
    if kind == ConvKind::Direct {
        return Err(Rejection::Forbidden(FIXED_MEMBERSHIP));
    }
    if kind == ConvKind::Encrypted {
        return Err(Rejection::EncryptedConversation);
    }
    if !actor.manages_members() {
        return Err(Rejection::Forbidden("only owners and admins add members"));
    }
    if parties.target_role.is_some() {
        return Err(Rejection::AlreadyMember);
    }
    Ok(())
}

/// A leave (`leaving` = the actor is the target) or a removal: the target must be a current
/// member of a group; anyone may leave, an admin removes plain members, the owner anyone.
/// Answers the target's role, which decides whether ownership passes on.
pub fn check_remove(kind: ConvKind, leaving: bool, parties: Parties) -> Result<Role, Rejection> {
    let actor = parties.actor_role.ok_or(Rejection::NotMember)?;
    let target = if leaving {
        actor
    } else {
        parties
            .target_role
            .ok_or(Rejection::NotFound("no such member"))?
    };
    if kind == ConvKind::Direct {
        return Err(Rejection::Forbidden(FIXED_MEMBERSHIP));
    }
    if kind == ConvKind::Encrypted {
        return Err(Rejection::EncryptedConversation);
    }
    if !leaving && !actor.may_remove(target) {
        return Err(Rejection::Forbidden("this role may not remove that member"));
    }
    Ok(target)
}

/// The roles a request may set: ownership only passes when the owner leaves.
pub fn check_new_role(role: Role) -> Result<(), Rejection> {
    if role == Role::Owner {
        return Err(Rejection::BadRequest("role must be admin or member".into()));
    }
    Ok(())
}

/// A role change: only the owner of a group sets roles, of current members other than the owner.
pub fn check_set_role(kind: ConvKind, parties: Parties, role: Role) -> Result<(), Rejection> {
    check_new_role(role)?;
    let actor = parties.actor_role.ok_or(Rejection::NotMember)?;
    let target = parties
        .target_role
        .ok_or(Rejection::NotFound("no such member"))?;
    if kind == ConvKind::Direct {
        return Err(Rejection::Forbidden(
            "a direct conversation has no roles to set",
        ));
    }
    if actor != Role::Owner {
        return Err(Rejection::Forbidden("only the owner sets roles"));
    }
    if target == Role::Owner {
        return Err(Rejection::Forbidden(
            "the owner's role changes only when the owner leaves",
        ));
    }
    Ok(())
}

/// Who becomes owner when a member holding `leaver_role` leaves: for the owner, the
/// earliest-joined remaining admin, else member (`next_owner`); nobody for anyone else, or
/// when nobody remains.
pub fn owner_after_leave<U: Clone + PartialEq>(
    leaver: &U,
    leaver_role: Role,
    remaining: &[CurrentMember<U>],
) -> Option<U> {
    assert!(
        remaining.iter().all(|m| m.user != *leaver),
        "the leaver is among the remaining members"
    );
    if leaver_role != Role::Owner {
        return None;
    }
    assert!(
        remaining.iter().all(|m| m.role != Role::Owner),
        "a group with two owners"
    );
    next_owner(remaining)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(s: &str) -> UserId {
        UserId::parse(s).unwrap()
    }

    fn parties(actor: Option<Role>, target_exists: bool, target: Option<Role>) -> Parties {
        Parties {
            actor_role: actor,
            target_exists,
            target_role: target,
        }
    }

    const OWNER: Option<Role> = Some(Role::Owner);
    const ADMIN: Option<Role> = Some(Role::Admin);
    const MEMBER: Option<Role> = Some(Role::Member);

    fn forbidden<T: std::fmt::Debug>(r: Result<T, Rejection>) -> bool {
        matches!(r, Err(Rejection::Forbidden(_)))
    }

    #[test]
    fn direct_ids_need_exactly_one_other_and_groups_keep_the_chosen_id() {
        let (a, b, c) = (uid("u-a"), uid("u-b"), uid("u-c"));
        let dm = new_conv_id(ConvKind::Direct, &b, std::slice::from_ref(&a), None).unwrap();
        assert_eq!(dm.as_str(), "dm:u-a:u-b");
        for others in [vec![], vec![a.clone(), c.clone()]] {
            assert!(matches!(
                new_conv_id(ConvKind::Direct, &b, &others, None),
                Err(Rejection::BadRequest(_))
            ));
        }
        let chosen = ConvId::parse_group("c-x").unwrap();
        let g = new_conv_id(ConvKind::Group, &a, &[], Some(&chosen)).unwrap();
        assert_eq!(g, chosen);
        let generated = new_conv_id(ConvKind::Group, &a, &[], None).unwrap();
        assert!(generated.as_str().starts_with("g-"));
    }

    #[test]
    fn the_count_decides_a_groups_mode_unless_chosen() {
        let mode = |kind, chosen, members, t| initial_delivery(kind, chosen, members, t);
        assert_eq!(
            mode(ConvKind::Group, None, 2, 3),
            InitialDelivery {
                mode: DeliveryMode::Push,
                pull_threshold: Some(3)
            }
        );
        // Created at the threshold: pull from the start, the threshold kept as it was asked.
        assert_eq!(
            mode(ConvKind::Group, None, 3, 3),
            InitialDelivery {
                mode: DeliveryMode::Pull,
                pull_threshold: Some(3)
            }
        );
        assert_eq!(
            mode(ConvKind::Group, Some(DeliveryMode::Push), 9, 2),
            InitialDelivery {
                mode: DeliveryMode::Push,
                pull_threshold: None
            }
        );
        // A direct chat is push and never switches, whatever the threshold.
        assert_eq!(
            mode(ConvKind::Direct, None, 2, 1),
            InitialDelivery {
                mode: DeliveryMode::Push,
                pull_threshold: None
            }
        );
        assert_eq!(
            mode(ConvKind::Group, None, 2, u32::MAX).pull_threshold,
            Some(i32::MAX as u32)
        );
    }

    #[test]
    fn the_creator_owns_a_group_only() {
        assert_eq!(initial_role(ConvKind::Group, 0), Role::Owner);
        assert_eq!(initial_role(ConvKind::Group, 1), Role::Member);
        assert_eq!(initial_role(ConvKind::Direct, 0), Role::Member);
    }

    #[test]
    fn a_push_group_switches_at_the_join_that_reaches_its_threshold_and_never_back() {
        use DeliveryMode::{Pull, Push};
        assert_eq!(mode_after_join(Push, Some(3), 2), Push);
        assert_eq!(mode_after_join(Push, Some(3), 3), Pull);
        assert_eq!(mode_after_join(Push, None, 10_000), Push);
        assert_eq!(mode_after_join(Pull, Some(3), 1), Pull);
        assert_eq!(switch_threshold(Push, Some(3)), Some(3));
        assert_eq!(switch_threshold(Pull, Some(3)), None);
        assert_eq!(switch_threshold(Push, None), None);
    }

    #[test]
    fn add_refusals_in_contract_order() {
        let group = ConvKind::Group;
        assert_eq!(
            check_add(group, parties(None, false, None)),
            Err(Rejection::NotMember)
        );
        assert_eq!(
            check_add(ConvKind::Direct, parties(OWNER, false, None)),
            Err(Rejection::NotFound("no such user"))
        );
        assert!(forbidden(check_add(
            ConvKind::Direct,
            parties(MEMBER, true, MEMBER)
        )));
        assert!(forbidden(check_add(group, parties(MEMBER, true, None))));
        assert_eq!(
            check_add(group, parties(ADMIN, true, MEMBER)),
            Err(Rejection::AlreadyMember)
        );
        assert_eq!(check_add(group, parties(ADMIN, true, None)), Ok(()));
        assert_eq!(check_add(group, parties(OWNER, true, None)), Ok(()));
    }

    #[test]
    fn anyone_leaves_a_group_and_removals_follow_the_roles() {
        let group = ConvKind::Group;
        // Leaving: the target is the actor, whatever the read said of the target.
        assert_eq!(
            check_remove(group, true, parties(MEMBER, true, None)),
            Ok(Role::Member)
        );
        assert_eq!(
            check_remove(group, true, parties(OWNER, true, OWNER)),
            Ok(Role::Owner)
        );
        assert_eq!(
            check_remove(group, true, parties(None, true, None)),
            Err(Rejection::NotMember)
        );
        // Removing: a member nobody, an admin members only, the owner anyone.
        assert!(forbidden(check_remove(
            group,
            false,
            parties(MEMBER, true, MEMBER)
        )));
        assert!(forbidden(check_remove(
            group,
            false,
            parties(MEMBER, true, OWNER)
        )));
        assert!(forbidden(check_remove(
            group,
            false,
            parties(ADMIN, true, OWNER)
        )));
        assert!(forbidden(check_remove(
            group,
            false,
            parties(ADMIN, true, ADMIN)
        )));
        assert_eq!(
            check_remove(group, false, parties(ADMIN, true, MEMBER)),
            Ok(Role::Member)
        );
        assert_eq!(
            check_remove(group, false, parties(OWNER, true, ADMIN)),
            Ok(Role::Admin)
        );
        // A target without an open period is not found, before the direct-chat rule.
        assert_eq!(
            check_remove(ConvKind::Direct, false, parties(OWNER, true, None)),
            Err(Rejection::NotFound("no such member"))
        );
    }

    #[test]
    fn direct_chats_are_fixed() {
        let direct = ConvKind::Direct;
        assert!(forbidden(check_remove(
            direct,
            true,
            parties(MEMBER, true, MEMBER)
        )));
        assert!(forbidden(check_remove(
            direct,
            false,
            parties(MEMBER, true, MEMBER)
        )));
        assert!(forbidden(check_add(direct, parties(MEMBER, true, None))));
        assert!(forbidden(check_set_role(
            direct,
            parties(MEMBER, true, MEMBER),
            Role::Admin
        )));
    }

    #[test]
    fn only_the_owner_sets_roles_and_never_the_owners() {
        let group = ConvKind::Group;
        assert!(matches!(
            check_set_role(group, parties(OWNER, true, MEMBER), Role::Owner),
            Err(Rejection::BadRequest(_))
        ));
        // The bad role is refused first, even for a stranger.
        assert!(matches!(
            check_set_role(group, parties(None, false, None), Role::Owner),
            Err(Rejection::BadRequest(_))
        ));
        assert_eq!(
            check_set_role(group, parties(None, true, MEMBER), Role::Admin),
            Err(Rejection::NotMember)
        );
        assert_eq!(
            check_set_role(group, parties(OWNER, true, None), Role::Admin),
            Err(Rejection::NotFound("no such member"))
        );
        assert!(forbidden(check_set_role(
            group,
            parties(ADMIN, true, MEMBER),
            Role::Admin
        )));
        assert!(forbidden(check_set_role(
            group,
            parties(OWNER, true, OWNER),
            Role::Member
        )));
        assert_eq!(
            check_set_role(group, parties(OWNER, true, ADMIN), Role::Member),
            Ok(())
        );
        assert_eq!(check_new_role(Role::Admin), Ok(()));
    }

    #[test]
    fn ownership_passes_only_when_the_owner_leaves() {
        let m = |user: &str, role, from_seq| CurrentMember {
            user: user.to_owned(),
            role,
            from_seq,
        };
        let leaver = "own".to_owned();
        let admins_and_members = [
            m("b", Role::Member, 2),
            m("c", Role::Admin, 5),
            m("d", Role::Admin, 4),
        ];
        assert_eq!(
            owner_after_leave(&leaver, Role::Owner, &admins_and_members).as_deref(),
            Some("d")
        );
        let members_only = [m("b", Role::Member, 3), m("c", Role::Member, 2)];
        assert_eq!(
            owner_after_leave(&leaver, Role::Owner, &members_only).as_deref(),
            Some("c")
        );
        assert_eq!(owner_after_leave(&leaver, Role::Owner, &[]), None);
        assert_eq!(owner_after_leave(&leaver, Role::Admin, &members_only), None);
    }

    #[test]
    #[should_panic(expected = "the leaver is among the remaining members")]
    fn the_leaver_cannot_remain() {
        let me = CurrentMember {
            user: "own".to_owned(),
            role: Role::Member,
            from_seq: 1,
        };
        owner_after_leave(&"own".to_owned(), Role::Owner, &[me]);
    }
}
