//! Membership periods and the visibility rules over them (SPEC §1, P3, P11).

use serde::{Deserialize, Serialize};

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Owner,
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Admin => "admin",
            Self::Member => "member",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "owner" => Self::Owner,
            "admin" => Self::Admin,
            "member" => Self::Member,
            _ => return None,
        })
    }

    /// Owners and admins manage membership.
    pub fn manages_members(self) -> bool {
        matches!(self, Self::Owner | Self::Admin)
    }

    /// Whether a holder of this role may remove a member holding `target` (not themselves).
    /// Admins remove plain members only; the owner removes anyone.
    pub fn may_remove(self, target: Role) -> bool {
        match self {
            Self::Owner => true,
            Self::Admin => target == Self::Member,
            Self::Member => false,
        }
    }
}

/// One user's closed or open interval of a conversation log: `[from_seq, to_seq]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub from_seq: i64,
    pub to_seq: Option<i64>,
}

impl Period {
    pub fn contains(&self, seq: i64) -> bool {
        seq >= self.from_seq && self.to_seq.is_none_or(|to| seq <= to)
    }

    /// The part of this period inside `[lo, hi]`, if any.
    pub fn clip(&self, lo: i64, hi: i64) -> Option<(i64, i64)> {
        let a = self.from_seq.max(lo);
        let b = self.to_seq.unwrap_or(i64::MAX).min(hi);
        (a <= b).then_some((a, b))
    }
}

/// Whether `periods` are disjoint with at most one open, the last (P3): what every store's
/// writes keep, since a period opens only at a join of a non-member and closes at their leave.
pub fn periods_disjoint(periods: &[Period]) -> bool {
    let mut sorted = periods.to_vec();
    sorted.sort_unstable_by_key(|p| p.from_seq);
    sorted
        .windows(2)
        .all(|w| w[0].to_seq.is_some_and(|to| to < w[1].from_seq))
}

/// The visible ranges of `periods` inside `[lo, hi]`, ascending. Periods never overlap (P3),
/// so the ranges are disjoint.
pub fn visible_ranges(periods: &[Period], lo: i64, hi: i64) -> Vec<(i64, i64)> {
    debug_assert!(
        periods_disjoint(periods),
        "overlapping periods: {periods:?}"
    );
    let mut out: Vec<(i64, i64)> = periods.iter().filter_map(|p| p.clip(lo, hi)).collect();
    out.sort_unstable();
    out
}

pub fn is_visible(periods: &[Period], seq: i64) -> bool {
    periods.iter().any(|p| p.contains(seq))
}

/// A current member as the ownership rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentMember<U> {
    pub user: U,
    pub role: Role,
    pub from_seq: i64,
}

/// Who owns a group after its owner left: the earliest-joined remaining admin, else the
/// earliest-joined remaining member (SPEC §4). `None` when nobody remains.
pub fn next_owner<U: Clone>(remaining: &[CurrentMember<U>]) -> Option<U> {
    let earliest = |role: Role| {
        remaining
            .iter()
            .filter(|m| m.role == role)
            .min_by_key(|m| m.from_seq)
            .map(|m| m.user.clone())
    };
    earliest(Role::Admin).or_else(|| {
        remaining
            .iter()
            .min_by_key(|m| m.from_seq)
            .map(|m| m.user.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_clip_to_window_and_sort() {
        let ps = [
            Period {
                from_seq: 10,
                to_seq: None,
            },
            Period {
                from_seq: 2,
                to_seq: Some(5),
            },
        ];
        assert_eq!(visible_ranges(&ps, 4, 20), vec![(4, 5), (10, 20)]);
        assert_eq!(visible_ranges(&ps, 6, 9), vec![]);
        assert!(is_visible(&ps, 5) && !is_visible(&ps, 6) && is_visible(&ps, 99));
    }

    #[test]
    fn periods_overlap_only_by_a_bug() {
        let p = |from_seq, to_seq| Period { from_seq, to_seq };
        assert!(periods_disjoint(&[p(9, None), p(2, Some(5))]));
        assert!(periods_disjoint(&[]));
        assert!(!periods_disjoint(&[p(2, Some(5)), p(5, None)]));
        assert!(!periods_disjoint(&[p(2, None), p(9, None)]));
        assert!(!periods_disjoint(&[p(9, Some(12)), p(2, None)]));
    }

    #[test]
    fn ownership_passes_to_earliest_admin_then_member() {
        let m = |user: &str, role, from_seq| CurrentMember {
            user: user.to_owned(),
            role,
            from_seq,
        };
        let rest = [
            m("b", Role::Member, 2),
            m("c", Role::Admin, 5),
            m("d", Role::Admin, 4),
        ];
        assert_eq!(next_owner(&rest).as_deref(), Some("d"));
        let rest = [m("b", Role::Member, 3), m("c", Role::Member, 2)];
        assert_eq!(next_owner(&rest).as_deref(), Some("c"));
        assert_eq!(next_owner::<String>(&[]), None);
    }

    #[test]
    fn admins_remove_only_members() {
        assert!(Role::Owner.may_remove(Role::Admin));
        assert!(Role::Admin.may_remove(Role::Member));
        assert!(!Role::Admin.may_remove(Role::Owner));
        assert!(!Role::Admin.may_remove(Role::Admin));
        assert!(!Role::Member.may_remove(Role::Member));
    }
}
