//! End-to-end encrypted conversations (docs/E2EE.md): each is an MLS group (RFC 9420) of the
//! members' devices, and the server only orders and delivers its opaque messages.
//!
//! [`E2ee`] is one device: it keeps the device's MLS identity and groups in a local key store
//! ([`keystore`]), publishes key packages, creates encrypted conversations, adds and removes
//! users and devices by Commits, encrypts messages, and reads the conversation's log strictly
//! in order ([`E2ee::sync`]), which is how every member applies the same Commits.
//!
//! ```no_run
//! # async fn demo(ana: parley_client::Client, ben: parley_client::Client)
//! # -> Result<(), parley_client::e2ee::E2eeError> {
//! use parley_client::e2ee::{Content, E2ee};
//!
//! let ana = E2ee::open(ana, "/var/lib/app/ana-phone").await?;
//! let ben = E2ee::open(ben, "/var/lib/app/ben-laptop").await?;
//! ben.publish_key_packages(10).await?;
//!
//! let conv = ana.create_conversation().await?;
//! ana.add_users(&conv.conv_id, &["ben"]).await?;
//! ana.send(&conv.conv_id, "hello, only ben can read this").await?;
//!
//! for item in ben.sync(&conv.conv_id).await? {
//!     if let Content::Text(text) = item.content {
//!         println!("{}: {text}", item.sender_user);
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every write is made in the group's current epoch. When another member's Commit got there
//! first, the server refuses it with `EPOCH_CONFLICT`; the device then drops its own Commit,
//! reads the log (which applies the winner's) and makes the write again, at most
//! [`WRITE_ATTEMPTS_MAX`] times.

mod api;
mod apply;
pub mod error;
pub mod keystore;
pub mod mls;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use parley_wire::KeyPackageUpload;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::client::Client;
use crate::request::NewConversation;
use crate::types::{ConvKind, Conversation};

pub use error::E2eeError;
use keystore::{KeyStore, Meta};
use mls::Device;
pub use parley_wire::{DeviceRef, KeyPackageCount, MlsAck};

/// Attempts of one write that each meet `EPOCH_CONFLICT` before the write gives up: enough to
/// ride out several members committing at once, bounded so a write cannot spin forever.
pub const WRITE_ATTEMPTS_MAX: u32 = 8;
/// Key packages per upload: the server's batch limit.
pub const KEY_PACKAGES_PER_UPLOAD_MAX: usize = 100;

type Result<T> = std::result::Result<T, E2eeError>;

/// One result of reading an encrypted conversation, in the log's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decrypted {
    /// The seq of the event it comes from.
    pub seq: i64,
    pub sender_user: String,
    pub sender_device: String,
    pub content: Content,
}

/// What an event of an encrypted conversation meant to this device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// A message, this device's own included.
    Text(String),
    /// A Commit added or removed devices.
    MembersChanged {
        added: Vec<DeviceRef>,
        removed: Vec<DeviceRef>,
    },
    /// This device joined the group by the Welcome at this seq.
    Joined,
    /// A message this device cannot read: sent after it was removed, or not decryptable.
    Undecryptable { reason: String },
}

/// The device's state behind the lock: the key store, the MLS device and the SDK's metadata.
struct Inner {
    store: KeyStore,
    device: Device,
    meta: Meta,
    /// This device's own messages seen in the log in this session, by conversation and
    /// `client_msg_id`: how a write whose answer was lost learns where it landed.
    landed: HashMap<(String, String), MlsAck>,
}

impl Inner {
    fn save(&self) -> Result<()> {
        self.store.save(&self.meta, self.device.storage())
    }
}

/// A device's end-to-end encryption: its MLS identity and groups, kept in a directory, and the
/// encrypted conversations it reads and writes through a [`Client`]. Calls on one `E2ee` run one
/// at a time; share it behind an `Arc` across tasks. Only one `E2ee` may use a directory.
pub struct E2ee {
    client: Client,
    me: DeviceRef,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for E2ee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2ee")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl E2ee {
    /// The device of `client` with the key store in `dir`: loaded when the directory holds
    /// one, otherwise a new identity (a fresh signature key) written there.
    pub async fn open(client: Client, dir: impl Into<PathBuf>) -> Result<Self> {
        let identity = client.whoami().await?;
        let me = DeviceRef {
            user_id: identity.user_id,
            device_id: identity.device_id,
        };
        let store = KeyStore::open(dir)?;
        let (device, meta) = match store.load()? {
            Some((meta, storage)) => {
                if (meta.user_id.as_str(), meta.device_id.as_str())
                    != (me.user_id.as_str(), me.device_id.as_str())
                {
                    return Err(E2eeError::WrongDevice {
                        expected: format!("{}/{}", me.user_id, me.device_id),
                        found: format!("{}/{}", meta.user_id, meta.device_id),
                    });
                }
                let public = meta.signature_public_key()?;
                (Device::restore(me.clone(), storage, &public)?, meta)
            }
            None => {
                let device = Device::generate(me.clone())?;
                let meta = Meta::new(&me, device.signature_public_key());
                store.save(&meta, device.storage())?;
                (device, meta)
            }
        };
        Ok(Self {
            client,
            me,
            inner: Mutex::new(Inner {
                store,
                device,
                meta,
                landed: HashMap::new(),
            }),
        })
    }

    /// The user and device this is.
    pub fn me(&self) -> &DeviceRef {
        &self.me
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Publishes `count` (1 to [`KEY_PACKAGES_PER_UPLOAD_MAX`]) fresh key packages, and a
    /// last-resort one the first time. Their private keys are in the key store before the
    /// server sees them, so a Welcome for any of them can be read after a crash.
    pub async fn publish_key_packages(&self, count: usize) -> Result<KeyPackageCount> {
        if !(1..=KEY_PACKAGES_PER_UPLOAD_MAX).contains(&count) {
            return Err(E2eeError::Invalid(format!(
                "publish 1 to {KEY_PACKAGES_PER_UPLOAD_MAX} key packages, not {count}"
            )));
        }
        let mut inner = self.inner.lock().await;
        let key_packages = inner.device.key_packages(count)?;
        let last_resort = if inner.meta.last_resort_published {
            None
        } else {
            Some(inner.device.last_resort_key_package()?)
        };
        inner.save()?;
        let upload = KeyPackageUpload {
            key_packages: key_packages.iter().map(|kp| BASE64.encode(kp)).collect(),
            last_resort: last_resort.as_ref().map(|kp| BASE64.encode(kp)),
        };
        let answer = self.client.upload_key_packages(&upload).await?;
        if last_resort.is_some() {
            inner.meta.last_resort_published = true;
            inner.save()?;
        }
        Ok(answer)
    }

    /// How many of this device's key packages the server still holds.
    pub async fn key_package_count(&self) -> Result<KeyPackageCount> {
        Ok(self.client.key_package_count().await?)
    }

    /// Creates an encrypted conversation with this user as its only member, and its MLS group
    /// at epoch 0 with this device as its only member.
    pub async fn create_conversation(&self) -> Result<Conversation> {
        let mut inner = self.inner.lock().await;
        let conv = self
            .client
            .create_conversation(&NewConversation::encrypted())
            .await?;
        inner.device.create_group(conv.conv_id.as_bytes())?;
        inner.meta.conv(&conv.conv_id);
        inner.save()?;
        Ok(conv)
    }

    /// The group's epoch on this device.
    pub async fn epoch(&self, conv_id: &str) -> Result<u64> {
        self.inner.lock().await.device.epoch(conv_id.as_bytes())
    }

    /// The group's devices as this device sees them, in leaf order.
    pub async fn members(&self, conv_id: &str) -> Result<Vec<DeviceRef>> {
        self.inner.lock().await.device.members(conv_id.as_bytes())
    }

    /// Whether this device is in the conversation's group (it has joined and was not removed).
    pub async fn is_member(&self, conv_id: &str) -> Result<bool> {
        self.inner.lock().await.device.is_active(conv_id.as_bytes())
    }

    /// Reads the conversation's new events and applies them in order: joins the group from a
    /// Welcome for this device, applies Commits, decrypts messages. Answers what they meant,
    /// in seq order, each once.
    pub async fn sync(&self, conv_id: &str) -> Result<Vec<Decrypted>> {
        let mut inner = self.inner.lock().await;
        self.apply_new(&mut inner, conv_id).await?;
        let state = inner.meta.conv(conv_id);
        let mut out = std::mem::take(&mut state.inbox);
        out.sort_by_key(|d| d.seq);
        if !out.is_empty() {
            inner.save()?;
        }
        Ok(out)
    }

    /// [`E2ee::sync`] over every encrypted conversation of the user, the ones this device was
    /// added to since it last looked included; keyed by conversation.
    pub async fn sync_all(&self) -> Result<BTreeMap<String, Vec<Decrypted>>> {
        let list = self.client.list_conversations(None).await?;
        let mut out = BTreeMap::new();
        for conv in list.conversations {
            if conv.kind == ConvKind::Encrypted {
                let items = self.sync(&conv.conv_id).await?;
                out.insert(conv.conv_id, items);
            }
        }
        Ok(out)
    }
}
