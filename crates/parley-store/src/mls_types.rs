//! What the store takes and answers for end-to-end encrypted conversations (docs/E2EE.md).

use parley_domain::event::WelcomeDevice;
use parley_domain::{ClientMsgId, ConvId, DeviceId, Event, EventKind, RequestHash, UserId};

/// Unclaimed ordinary KeyPackages a device may hold: enough for a device to be added to many
/// groups while offline, few enough that one device cannot fill the directory.
pub const KEY_PACKAGES_PER_DEVICE_MAX: u32 = 1000;

/// An MLS write of a member (`POST /v1/conversations/{conv_id}/mls`), parsed and checked for
/// shape by the edge; the store checks the rest under the conversation's lock.
#[derive(Debug, Clone)]
pub struct MlsRequest {
    pub conv_id: ConvId,
    pub sender_user: UserId,
    pub sender_device: DeviceId,
    pub client_msg_id: ClientMsgId,
    /// `MlsApplication`, `MlsProposal` or `MlsCommit`.
    pub kind: EventKind,
    /// The epoch the message was made in.
    pub epoch: i64,
    /// Standard base64 of the MLS message.
    pub message: String,
    /// A Commit's Welcome: its base64 message and the devices it is for.
    pub welcome: Option<(String, Vec<WelcomeDevice>)>,
    /// Users a Commit adds to the conversation, and removes from it.
    pub add_users: Vec<UserId>,
    pub remove_users: Vec<UserId>,
    pub request_hash: RequestHash,
}

/// An MLS write's answer, and the events it committed (to announce), in seq order.
#[derive(Debug, Clone)]
pub struct MlsOutcome {
    pub conv_id: ConvId,
    pub seq: i64,
    pub message_id: uuid::Uuid,
    pub dup: bool,
    /// The conversation's epoch after the write.
    pub epoch: i64,
    pub welcome_seq: Option<i64>,
    /// Empty for a replay.
    pub events: Vec<Event>,
}

/// A device's KeyPackages to store: ordinary ones and, optionally, a new last-resort one.
#[derive(Debug, Clone)]
pub struct KeyPackageBatch {
    pub user_id: UserId,
    pub device_id: DeviceId,
    /// Standard base64, checked by the edge.
    pub key_packages: Vec<String>,
    pub last_resort: Option<String>,
}

/// What a device holds in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPackageStock {
    pub stored: u32,
    pub available: u32,
    pub last_resort: bool,
}

/// One package a claim handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedPackage {
    pub device_id: String,
    pub key_package: String,
    pub last_resort: bool,
}
