//! Side effects of a write that are not log events, announced so that every gateway applies
//! them to the connections it holds.

use parley_domain::{ConvId, DeviceId, Role, UserId};

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
}

impl Notice {
    /// The user whose connections the notice concerns.
    pub fn user_id(&self) -> &UserId {
        match self {
            Self::ReadMoved { user_id, .. }
            | Self::DeviceRevoked { user_id, .. }
            | Self::RoleChanged { user_id, .. }
            | Self::RouteTaken { user_id, .. } => user_id,
        }
    }
}
