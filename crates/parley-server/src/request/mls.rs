//! End-to-end encrypted conversations (docs/E2EE.md): the MLS write
//! (`POST /v1/conversations/{conv_id}/mls`) and the KeyPackage directory. Every MLS message is
//! opaque here: it is checked to be base64 of a bounded size and stored as sent.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use parley_domain::event::WelcomeDevice;
use parley_domain::{ClientMsgId, ConvId, EventKind, RequestHash, UserId};
use parley_store::{DeviceIdentity, KeyPackageBatch, MlsRequest};
use parley_wire::{
    ClaimedKeyPackage, ClaimedKeyPackages, KeyPackageCount, KeyPackageUpload, MlsAck, MlsKind,
    MlsPost,
};

use super::fields;
use crate::error::ApiError;
use crate::rate_limit::LimitKind;
use crate::state::AppState;

/// Largest MLS message, decoded: a Commit adding a hundred devices with their KeyPackages.
pub const MLS_MESSAGE_BYTES_MAX: usize = 512 * 1024;
/// Largest KeyPackage, decoded: a package is a few hundred bytes; extensions leave room.
pub const KEY_PACKAGE_BYTES_MAX: usize = 16 * 1024;
/// Most KeyPackages of one upload.
pub const KEY_PACKAGE_BATCH_LEN_MAX: usize = 100;
/// Most devices one Welcome names, and most users one Commit adds or removes.
pub const WELCOME_DEVICES_MAX: usize = 100;

/// Checks that `raw` is standard base64 of 1 to `max` bytes, and answers it as sent.
fn opaque(field: &str, raw: &str, max: usize) -> Result<String, ApiError> {
    // Base64 holds 3 bytes in 4 characters: a longer text cannot decode to `max` bytes.
    if raw.len() > max.div_ceil(3) * 4 {
        return Err(ApiError::bad_request(format!(
            "{field} is longer than {max} bytes"
        )));
    }
    let bytes = STANDARD
        .decode(raw)
        .map_err(|_| ApiError::bad_request(format!("{field} is not standard base64")))?;
    if bytes.is_empty() || bytes.len() > max {
        return Err(ApiError::bad_request(format!(
            "{field} must hold 1 to {max} bytes"
        )));
    }
    Ok(raw.to_owned())
}

fn users(field: &str, raw: &[String]) -> Result<Vec<UserId>, ApiError> {
    if raw.len() > WELCOME_DEVICES_MAX {
        return Err(ApiError::bad_request(format!(
            "{field} names at most {WELCOME_DEVICES_MAX} users"
        )));
    }
    let mut out: Vec<UserId> = Vec::with_capacity(raw.len());
    for user in raw {
        let user = fields::user_id(user)?;
        if out.contains(&user) {
            return Err(ApiError::bad_request(format!("{field} names {user} twice")));
        }
        out.push(user);
    }
    Ok(out)
}

/// A checked MLS write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostMls {
    pub conv_id: ConvId,
    pub client_msg_id: ClientMsgId,
    pub post: MlsPost,
    pub add_users: Vec<UserId>,
    pub remove_users: Vec<UserId>,
    pub welcome_devices: Vec<WelcomeDevice>,
}

impl PostMls {
    pub fn new(conv_id: ConvId, post: MlsPost) -> Result<Self, ApiError> {
        let client_msg_id = fields::client_msg_id(&post.client_msg_id)?;
        if post.epoch < 0 {
            return Err(ApiError::bad_request("epoch must not be negative"));
        }
        opaque("message", &post.message, MLS_MESSAGE_BYTES_MAX)?;
        let is_commit = post.kind == MlsKind::Commit;
        if !is_commit
            && (post.welcome.is_some()
                || !post.add_users.is_empty()
                || !post.remove_users.is_empty())
        {
            return Err(ApiError::bad_request(
                "only a commit carries a welcome, add_users or remove_users",
            ));
        }
        let add_users = users("add_users", &post.add_users)?;
        let remove_users = users("remove_users", &post.remove_users)?;
        if let Some(both) = add_users.iter().find(|u| remove_users.contains(u)) {
            return Err(ApiError::bad_request(format!(
                "{both} is both added and removed"
            )));
        }
        let mut welcome_devices = Vec::new();
        if let Some(welcome) = &post.welcome {
            opaque("welcome.message", &welcome.message, MLS_MESSAGE_BYTES_MAX)?;
            if welcome.devices.is_empty() || welcome.devices.len() > WELCOME_DEVICES_MAX {
                return Err(ApiError::bad_request(format!(
                    "a welcome names 1 to {WELCOME_DEVICES_MAX} devices"
                )));
            }
            for d in &welcome.devices {
                let device = WelcomeDevice {
                    user_id: fields::user_id(&d.user_id)?.into_string(),
                    device_id: fields::device_id(&d.device_id)?.as_str().to_owned(),
                };
                if welcome_devices.contains(&device) {
                    return Err(ApiError::bad_request("a welcome names a device twice"));
                }
                welcome_devices.push(device);
            }
        }
        Ok(Self {
            conv_id,
            client_msg_id,
            post,
            add_users,
            remove_users,
            welcome_devices,
        })
    }

    /// The fingerprint: every part of the request, so a retry with anything changed is a
    /// mismatch.
    fn request_hash(&self) -> RequestHash {
        let welcome = self
            .post
            .welcome
            .as_ref()
            .map(|w| w.message.as_str())
            .unwrap_or_default();
        let devices: Vec<String> = self
            .welcome_devices
            .iter()
            .map(|d| format!("{}/{}", d.user_id, d.device_id))
            .collect();
        let (added, removed, devices) = (
            self.post.add_users.join(","),
            self.post.remove_users.join(","),
            devices.join(","),
        );
        RequestHash::of_mls(
            self.post.kind.as_str(),
            self.post.epoch,
            &self.post.message,
            &[welcome, &devices, &added, &removed],
        )
    }

    /// Spends a token of the device's send budget, like a send, then writes.
    pub async fn run(self, state: &AppState, device: &DeviceIdentity) -> Result<MlsAck, ApiError> {
        state.rate_limiter().check_device(LimitKind::Send, device)?;
        let request_hash = self.request_hash();
        let kind = match self.post.kind {
            MlsKind::Application => EventKind::MlsApplication,
            MlsKind::Proposal => EventKind::MlsProposal,
            MlsKind::Commit => EventKind::MlsCommit,
        };
        let welcome = self.post.welcome.map(|w| (w.message, self.welcome_devices));
        let req = MlsRequest {
            conv_id: self.conv_id,
            sender_user: device.user_id.clone(),
            sender_device: device.device_id.clone(),
            client_msg_id: self.client_msg_id,
            kind,
            epoch: self.post.epoch,
            message: self.post.message,
            welcome,
            add_users: self.add_users,
            remove_users: self.remove_users,
            request_hash,
        };
        let outcome = state.store().post_mls(&req).await?;
        for event in outcome.events {
            crate::service::announce(state, event);
        }
        Ok(MlsAck {
            conv_id: outcome.conv_id.into_string(),
            seq: outcome.seq,
            message_id: outcome.message_id.to_string(),
            dup: outcome.dup,
            epoch: outcome.epoch,
            welcome_seq: outcome.welcome_seq,
        })
    }
}

/// A checked KeyPackage upload of the calling device.
pub fn key_package_batch(
    device: &DeviceIdentity,
    upload: KeyPackageUpload,
) -> Result<KeyPackageBatch, ApiError> {
    if upload.key_packages.is_empty() && upload.last_resort.is_none() {
        return Err(ApiError::bad_request(
            "key_packages or last_resort must be given",
        ));
    }
    if upload.key_packages.len() > KEY_PACKAGE_BATCH_LEN_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {KEY_PACKAGE_BATCH_LEN_MAX} key packages per request"
        )));
    }
    for package in &upload.key_packages {
        opaque("key_packages[]", package, KEY_PACKAGE_BYTES_MAX)?;
    }
    if let Some(package) = &upload.last_resort {
        opaque("last_resort", package, KEY_PACKAGE_BYTES_MAX)?;
    }
    Ok(KeyPackageBatch {
        user_id: device.user_id.clone(),
        device_id: device.device_id.clone(),
        key_packages: upload.key_packages,
        last_resort: upload.last_resort,
    })
}

pub fn count(stock: parley_store::KeyPackageStock) -> KeyPackageCount {
    KeyPackageCount {
        stored: stock.stored,
        available: stock.available,
        last_resort: stock.last_resort,
    }
}

pub fn claimed(user: &UserId, packages: Vec<parley_store::ClaimedPackage>) -> ClaimedKeyPackages {
    ClaimedKeyPackages {
        key_packages: packages
            .into_iter()
            .map(|p| ClaimedKeyPackage {
                user_id: user.as_str().to_owned(),
                device_id: p.device_id,
                key_package: p.key_package,
                last_resort: p.last_resort,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn post(value: serde_json::Value) -> Result<PostMls, ApiError> {
        let post: MlsPost = serde_json::from_value(value).expect("shape");
        PostMls::new(ConvId::parse("c1").expect("id"), post)
    }

    #[test]
    fn bad_mls_writes_are_refused_before_the_store() {
        let ok =
            json!({"client_msg_id": "m1", "kind": "application", "epoch": 0, "message": "AAEC"});
        assert!(post(ok).is_ok());
        let cases = [
            json!({"client_msg_id": "m1", "kind": "application", "epoch": 0, "message": "not base64!"}),
            json!({"client_msg_id": "m1", "kind": "application", "epoch": 0, "message": ""}),
            json!({"client_msg_id": "m1", "kind": "application", "epoch": -1, "message": "AA=="}),
            json!({"client_msg_id": "m1", "kind": "application", "epoch": 0, "message": "AA==",
                   "add_users": ["bo"]}),
            json!({"client_msg_id": "m1", "kind": "commit", "epoch": 0, "message": "AA==",
                   "add_users": ["bo"], "remove_users": ["bo"]}),
            json!({"client_msg_id": "m1", "kind": "commit", "epoch": 0, "message": "AA==",
                   "welcome": {"message": "AA==", "devices": []}}),
            json!({"client_msg_id": "m1", "kind": "commit", "epoch": 0, "message": "AA==",
                   "welcome": {"message": "AA==", "devices": [
                       {"user_id": "bo", "device_id": "d"}, {"user_id": "bo", "device_id": "d"}]}}),
        ];
        for case in cases {
            let err = post(case.clone()).err().map(|e| e.code());
            assert_eq!(err, Some("BAD_REQUEST"), "{case}");
        }
    }

    #[test]
    fn the_fingerprint_covers_every_part_of_the_request() {
        let base = json!({"client_msg_id": "m1", "kind": "commit", "epoch": 2, "message": "AAEC",
                          "add_users": ["bo"]});
        let hash = |v: serde_json::Value| post(v).expect("valid").request_hash();
        let first = hash(base.clone());
        assert_eq!(first, hash(base.clone()));
        let mut other_epoch = base.clone();
        other_epoch["epoch"] = json!(3);
        let mut other_users = base.clone();
        other_users["add_users"] = json!(["cy"]);
        let mut other_message = base;
        other_message["message"] = json!("AAED");
        for changed in [other_epoch, other_users, other_message] {
            assert_ne!(first, hash(changed));
        }
    }
}
