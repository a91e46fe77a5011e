//! The NATS subjects of the bus: heads on `parley.conv.<shard>` by conversation, notices on
//! `parley.user.<shard>` by user, each of [`SHARDS`] shards.
//!
//! A shard is a stable hash (FNV-1a, 32 bits) of the id modulo [`SHARDS`]: it never changes
//! between versions or processes, so gateways of different builds agree on where a
//! conversation's heads go.

use parley_domain::{ConvId, UserId};

use crate::Notice;

/// Shards of conversations and of users. Enough that a gateway interested in a few shards
/// receives a small part of the traffic, few enough that a gateway interested in every shard
/// holds a handful of subscriptions, not one per conversation.
pub const SHARDS: u32 = 64;
/// The subject every gateway subscribes to in this first step: all shards of both kinds.
pub const ALL_SUBJECTS: &str = "parley.>";

/// The shard of an id: FNV-1a of its bytes, modulo [`SHARDS`].
pub fn shard_of(id: &str) -> u32 {
    const FNV_OFFSET: u32 = 0x811c_9dc5;
    const FNV_PRIME: u32 = 0x0100_0193;
    let hash = id.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(FNV_PRIME)
    });
    hash % SHARDS
}

/// The subject of a conversation's heads.
pub fn conv_subject(conv_id: &ConvId) -> String {
    format!("parley.conv.{}", shard_of(conv_id.as_str()))
}

/// The subject of a user's notices.
pub fn user_subject(user_id: &UserId) -> String {
    format!("parley.user.{}", shard_of(user_id.as_str()))
}

/// The subject of a notice: by the user it concerns, so a user's notices keep their order.
pub fn notice_subject(notice: &Notice) -> String {
    user_subject(notice.user_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        // Fixed values: a change of hash would split gateways of two versions.
        assert_eq!(shard_of(""), 0x811c_9dc5 % SHARDS);
        assert_eq!(shard_of("a"), 0xe40c_292c % SHARDS);
        let used: std::collections::HashSet<u32> =
            (0..1_000).map(|i| shard_of(&format!("c-{i}"))).collect();
        assert_eq!(used.len(), SHARDS as usize, "1,000 ids use every shard");
        assert!(used.iter().all(|s| *s < SHARDS));
    }

    #[test]
    fn subjects_name_the_kind_and_the_shard() {
        let c = ConvId::from_trusted("c-1".into());
        assert_eq!(conv_subject(&c), format!("parley.conv.{}", shard_of("c-1")));
        let u = UserId::from_trusted("u-ana".into());
        assert_eq!(
            user_subject(&u),
            format!("parley.user.{}", shard_of("u-ana"))
        );
    }
}
