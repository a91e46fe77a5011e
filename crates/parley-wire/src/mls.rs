//! End-to-end encrypted conversations (docs/E2EE.md): the key-package directory, the MLS write
//! of `POST /v1/conversations/{conv_id}/mls` and the `mls` frame, and its answer. MLS messages
//! travel as standard base64 of their TLS encoding; the server never parses them.

use serde::{Deserialize, Serialize};

/// `POST /v1/devices/me/key-packages`: a batch of KeyPackages and, optionally, a new
/// last-resort one.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyPackageUpload {
    /// Base64 `KeyPackage` messages, 1 to 100 (none when only `last_resort` is given).
    #[serde(default)]
    pub key_packages: Vec<String>,
    /// Base64 `KeyPackage` kept and handed out when the device has no other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resort: Option<String>,
}

/// What a device holds in the directory.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPackageCount {
    /// Packages stored by this request (0 on a `GET`).
    #[serde(default)]
    pub stored: u32,
    /// Unclaimed ordinary packages of the device.
    pub available: u32,
    /// The device has a last-resort package.
    pub last_resort: bool,
}

/// One device's package, handed out by a claim.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedKeyPackage {
    pub user_id: String,
    pub device_id: String,
    /// Base64 `KeyPackage`.
    pub key_package: String,
    /// The device's last-resort package, which stays in the directory.
    pub last_resort: bool,
}

/// `POST /v1/users/{user_id}/key-packages/claim`: one package per device that has one.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedKeyPackages {
    pub key_packages: Vec<ClaimedKeyPackage>,
}

/// The kind of an MLS message a member posts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MlsKind {
    Application,
    Proposal,
    Commit,
}

impl MlsKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Application => "application",
            Self::Proposal => "proposal",
            Self::Commit => "commit",
        }
    }
}

/// A device a Welcome is for.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRef {
    pub user_id: String,
    pub device_id: String,
}

/// The Welcome that goes with a Commit adding devices.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WelcomeOut {
    /// Base64 `MLSMessage` holding the Welcome.
    pub message: String,
    /// The devices it is for: 1 to 100.
    pub devices: Vec<DeviceRef>,
}

/// `POST /v1/conversations/{conv_id}/mls`, and the fields of the `mls` frame.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlsPost {
    pub client_msg_id: String,
    pub kind: MlsKind,
    /// The epoch the message was made in; it must be the conversation's current one.
    pub epoch: i64,
    /// Base64 `MLSMessage`.
    pub message: String,
    /// A Commit's Welcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub welcome: Option<WelcomeOut>,
    /// Users a Commit adds to the group (their first device joins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_users: Vec<String>,
    /// Users a Commit removes from the group (their last device leaves).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_users: Vec<String>,
}

/// The answer of an MLS write.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MlsAck {
    pub conv_id: String,
    pub seq: i64,
    pub message_id: String,
    /// True when this request key was already committed: the stored answer is returned.
    pub dup: bool,
    /// The conversation's epoch after the write.
    pub epoch: i64,
    /// The seq of the Commit's Welcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub welcome_seq: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_mls_post_reads_its_documented_shape_and_refuses_unknown_fields() {
        let post: MlsPost = serde_json::from_value(json!({
            "client_msg_id": "m1", "kind": "commit", "epoch": 3, "message": "AAEC",
            "welcome": {"message": "AQ==", "devices": [{"user_id": "bo", "device_id": "d1"}]},
            "add_users": ["bo"]}))
        .unwrap();
        assert_eq!((post.kind, post.epoch), (MlsKind::Commit, 3));
        assert_eq!(post.welcome.unwrap().devices[0].device_id, "d1");
        assert!(serde_json::from_value::<MlsPost>(json!({
            "client_msg_id": "m1", "kind": "commit", "epoch": 3, "message": "AAEC", "bodyy": 1}))
        .is_err());
        assert!(serde_json::from_value::<MlsPost>(json!({
            "client_msg_id": "m1", "kind": "welcome", "epoch": 3, "message": "AAEC"}))
        .is_err());
    }
}
