//! The close codes the server ends a WebSocket with (SPEC §7). Other closes use the standard
//! codes of RFC 6455 (1000 normal, 1009 too big).

/// A newer connection of the same device took over; a `kicked` frame comes first.
pub const CLOSE_KICKED: u16 = 4001;
/// The device's token was revoked or re-issued.
pub const CLOSE_REVOKED: u16 = 4003;
/// The client read too slowly and the server's outbound queue filled up; it must resync.
pub const CLOSE_TOO_SLOW: u16 = 4008;
/// The server is shutting down.
pub const CLOSE_GOING_AWAY: u16 = 1001;
