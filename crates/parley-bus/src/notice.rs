//! Side effects of a write that are not log events, announced so that every gateway applies
//! them to the connections it holds.

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, DeviceId, Role, UserId};

/// Most recipients one typing or presence notice names. The announcing gateway splits a longer
/// list into several notices, so that each fits a PostgreSQL notification (user ids are at
/// most 64 bytes: 64 of them stay below 4.5 KiB).
pub const NOTICE_RECIPIENTS_LEN_MAX: usize = 64;

/// A side effect every gateway must learn of. New kinds are added as variants; the codec tags
/// each one on the wire by its kind, and a receiver skips kinds it does not know, so gateways
/// of two versions can share a bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A user's read position in a conversation moved (P8). The user's other devices are told;
    /// `origin_device` is the one that moved it and knows already.
    ReadMoved {
        user_id: UserId,
        conv_id: ConvId,
        read_seq: i64,
        origin_device: DeviceId,
    },
    /// A device's token was revoked or re-issued: its open connections close (4003).
    DeviceRevoked {
        user_id: UserId,
        device_id: DeviceId,
    },
    /// A member's role changed. Roles change no visibility, so no frame is pushed for it; it is
    /// announced so that a gateway that keeps roles can keep them right.
    RoleChanged {
        conv_id: ConvId,
        user_id: UserId,
        role: Role,
    },
    /// A device's route was claimed by a newer connection, replacing the route that named
    /// `conn_id` on gateway `gateway_id`. That gateway closes exactly that connection (4001,
    /// chapter 05); every other gateway, and every other connection, is left alone. It is
    /// announced only when the replaced route was on another gateway than the claim: a
    /// gateway kicks its own connections without the bus.
    RouteTaken {
        user_id: UserId,
        device_id: DeviceId,
        gateway_id: String,
        conn_id: String,
    },
    /// `user_id` is typing in `conv_id` (ephemeral, SPEC §7). Every gateway pushes a `typing`
    /// frame to its connections of the `recipients`: the conversation's other current members
    /// that were online when the announcing gateway checked, at most
    /// [`NOTICE_RECIPIENTS_LEN_MAX`] per notice.
    Typing {
        conv_id: ConvId,
        user_id: UserId,
        recipients: Vec<UserId>,
    },
    /// `user_id` came online (first route) or went offline (last route gone, `last_seen` set).
    /// Every gateway pushes a `presence` frame to its connections of the `recipients`: the
    /// user's online co-members of direct and push conversations, at most
    /// [`NOTICE_RECIPIENTS_LEN_MAX`] per notice.
    Presence {
        user_id: UserId,
        online: bool,
        last_seen: Option<DateTime<Utc>>,
        recipients: Vec<UserId>,
    },
}

impl Notice {
    /// The user whose connections the notice concerns.
    pub fn user_id(&self) -> &UserId {
        match self {
            Self::ReadMoved { user_id, .. }
            | Self::DeviceRevoked { user_id, .. }
            | Self::RoleChanged { user_id, .. }
            | Self::RouteTaken { user_id, .. }
            | Self::Typing { user_id, .. }
            | Self::Presence { user_id, .. } => user_id,
        }
    }
}
