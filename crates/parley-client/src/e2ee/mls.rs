//! The MLS layer (RFC 9420) of end-to-end encryption, on openmls, with no IO: a device's
//! identity, its key packages and its groups. Every group lives in the device's openmls storage
//! and is loaded from it for each operation, so the storage alone is the whole state that the
//! key store ([`super::keystore`]) writes to disk.
//!
//! A device's credential is a basic credential whose identity is `user_id/device_id`: the ids
//! never contain `/`, so the pair reads back unambiguously. A group's id is its conversation's
//! id. Handshake and application messages travel as `PrivateMessage`s only, so the Delivery
//! Service sees opaque bytes, and a Welcome carries the ratchet tree, so a joiner needs nothing
//! else from the server.

use openmls::prelude::tls_codec::{Deserialize as _, Serialize as _};
use openmls::prelude::*;
use openmls_basic_credential::SignatureKeyPair;
use openmls_memory_storage::MemoryStorage;
use openmls_rust_crypto::RustCrypto;
use openmls_traits::OpenMlsProvider;
use parley_wire::DeviceRef;

use super::error::E2eeError;

/// X25519, AES-128-GCM, SHA-256 and Ed25519: the mandatory-to-implement suite of RFC 9420 §17.1,
/// which every MLS client supports.
pub const CIPHERSUITE: Ciphersuite = Ciphersuite::MLS_128_DHKEMX25519_AES128GCM_SHA256_Ed25519;

/// Plaintexts are padded to a multiple of this many bytes before encryption, so the server
/// learns a message's length only to within a block.
pub const PADDING_BYTES: usize = 32;

/// The separator of the user and the device in a credential's identity; ids never contain it.
const IDENTITY_SEPARATOR: char = '/';

type Result<T> = std::result::Result<T, E2eeError>;

/// openmls's crypto beside a storage the SDK owns (openmls's own provider keeps its storage
/// private, so it could be neither written to disk nor restored).
#[derive(Debug, Default)]
pub struct Provider {
    crypto: RustCrypto,
    storage: MemoryStorage,
}

impl OpenMlsProvider for Provider {
    type CryptoProvider = RustCrypto;
    type RandProvider = RustCrypto;
    type StorageProvider = MemoryStorage;

    fn storage(&self) -> &MemoryStorage {
        &self.storage
    }

    fn crypto(&self) -> &RustCrypto {
        &self.crypto
    }

    fn rand(&self) -> &RustCrypto {
        &self.crypto
    }
}

/// A Commit this device made: the message to post, the Welcome for the devices it adds, and
/// who it adds and removes. It stays pending in the group until merged or cleared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOut {
    /// The TLS encoding of the `MLSMessage` holding the Commit.
    pub commit: Vec<u8>,
    /// The TLS encoding of the `MLSMessage` holding the Welcome, when the Commit adds devices.
    pub welcome: Option<Vec<u8>>,
    pub added: Vec<DeviceRef>,
    pub removed: Vec<DeviceRef>,
}

/// What a merged Commit changed in the group's membership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<DeviceRef>,
    pub removed: Vec<DeviceRef>,
    /// The Commit removed this device: the group is inactive from now on.
    pub self_removed: bool,
}

/// An incoming message, processed: an application message decrypted, a Commit merged (the
/// group is in the next epoch), or a proposal stored for a later Commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Application {
        sender: DeviceRef,
        plaintext: Vec<u8>,
    },
    Commit {
        sender: DeviceRef,
        changes: Changes,
    },
    Proposal {
        sender: DeviceRef,
    },
    /// A message this device sent itself, which MLS cannot decrypt for its own author.
    Own,
}

/// The group a Welcome let this device join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub group_id: Vec<u8>,
    /// The member who sent the Welcome.
    pub sender: DeviceRef,
    pub epoch: u64,
    pub members: Vec<DeviceRef>,
}

/// A device: its credential, its signature key and the storage of its key packages and groups.
#[derive(Debug)]
pub struct Device {
    provider: Provider,
    signer: SignatureKeyPair,
    credential: CredentialWithKey,
    me: DeviceRef,
}

/// The credential's identity of a device: `user_id/device_id`.
pub fn identity_of(device: &DeviceRef) -> Vec<u8> {
    format!("{}{IDENTITY_SEPARATOR}{}", device.user_id, device.device_id).into_bytes()
}

/// The device a basic credential names.
pub fn device_of(credential: &Credential) -> Result<DeviceRef> {
    let basic = BasicCredential::try_from(credential.clone())
        .map_err(|e| E2eeError::decode("a credential", e))?;
    let identity = std::str::from_utf8(basic.identity())
        .map_err(|e| E2eeError::decode("a credential's identity", e))?;
    match identity.split_once(IDENTITY_SEPARATOR) {
        Some((user, device))
            if !user.is_empty() && !device.is_empty() && !device.contains(IDENTITY_SEPARATOR) =>
        {
            Ok(DeviceRef {
                user_id: user.to_owned(),
                device_id: device.to_owned(),
            })
        }
        _ => Err(E2eeError::decode(
            "a credential's identity",
            "expected user_id/device_id",
        )),
    }
}

/// The configuration every member uses for its own writes: ciphertext only, padded, and the
/// ratchet tree in every Welcome.
fn join_config() -> MlsGroupJoinConfig {
    MlsGroupJoinConfig::builder()
        .wire_format_policy(PURE_CIPHERTEXT_WIRE_FORMAT_POLICY)
        .padding_size(PADDING_BYTES)
        .use_ratchet_tree_extension(true)
        .build()
}

/// The leaf capabilities of every key package and of a group's creator: the defaults plus the
/// last-resort extension (RFC 9420 §17.3), which a key package may only carry when its leaf
/// lists it.
fn capabilities() -> Capabilities {
    Capabilities::new(
        None,
        Some(&[CIPHERSUITE]),
        Some(&[ExtensionType::LastResort]),
        None,
        Some(&[CredentialType::Basic]),
    )
}

fn group_id(id: &[u8]) -> GroupId {
    GroupId::from_slice(id)
}

fn to_bytes(message: &MlsMessageOut) -> Result<Vec<u8>> {
    message
        .tls_serialize_detached()
        .map_err(|e| E2eeError::mls("encode a message", e))
}

fn message_in(bytes: &[u8], what: &'static str) -> Result<MlsMessageIn> {
    MlsMessageIn::tls_deserialize_exact(bytes).map_err(|e| E2eeError::decode(what, e))
}

impl Device {
    /// A new device identity with a fresh Ed25519 key, in a fresh storage.
    pub fn generate(me: DeviceRef) -> Result<Self> {
        let provider = Provider::default();
        let signer = SignatureKeyPair::new(CIPHERSUITE.signature_algorithm())
            .map_err(|e| E2eeError::mls("generate a signature key", e))?;
        signer
            .store(provider.storage())
            .map_err(|e| E2eeError::mls("store the signature key", e))?;
        Ok(Self::assemble(provider, signer, me))
    }

    /// The device whose storage was written out earlier, found by its signature public key.
    pub fn restore(
        me: DeviceRef,
        storage: MemoryStorage,
        signature_public_key: &[u8],
    ) -> Result<Self> {
        let provider = Provider {
            crypto: RustCrypto::default(),
            storage,
        };
        let signer = SignatureKeyPair::read(
            provider.storage(),
            signature_public_key,
            CIPHERSUITE.signature_algorithm(),
        )
        .ok_or_else(|| E2eeError::Store {
            path: "openmls storage".into(),
            reason: "the device's signature key is missing".into(),
        })?;
        Ok(Self::assemble(provider, signer, me))
    }

    fn assemble(provider: Provider, signer: SignatureKeyPair, me: DeviceRef) -> Self {
        let credential = CredentialWithKey {
            credential: BasicCredential::new(identity_of(&me)).into(),
            signature_key: signer.to_public_vec().into(),
        };
        Self {
            provider,
            signer,
            credential,
            me,
        }
    }

    pub fn me(&self) -> &DeviceRef {
        &self.me
    }

    pub fn signature_public_key(&self) -> &[u8] {
        self.signer.public()
    }

    /// The storage holding the device's keys and groups, to be written out after a change.
    pub fn storage(&self) -> &MemoryStorage {
        self.provider.storage()
    }

    fn key_package(&self, last_resort: bool) -> Result<Vec<u8>> {
        let mut builder = KeyPackage::builder().leaf_node_capabilities(capabilities());
        if last_resort {
            builder = builder.mark_as_last_resort();
        }
        let bundle = builder
            .build(
                CIPHERSUITE,
                &self.provider,
                &self.signer,
                self.credential.clone(),
            )
            .map_err(|e| E2eeError::mls("build a key package", e))?;
        to_bytes(&MlsMessageOut::from(bundle.key_package().clone()))
    }

    /// `count` fresh key packages, each an `MLSMessage`; their private keys stay in the storage
    /// until a Welcome uses them.
    pub fn key_packages(&self, count: usize) -> Result<Vec<Vec<u8>>> {
        (0..count).map(|_| self.key_package(false)).collect()
    }

    /// A last-resort key package (RFC 9420 §16.8): it carries the last_resort extension, and a
    /// Welcome that uses it does not consume its private key, since the server may hand it out
    /// more than once.
    pub fn last_resort_key_package(&self) -> Result<Vec<u8>> {
        self.key_package(true)
    }

    /// A claimed key package, its signature checked, and the device it names.
    pub fn validate_key_package(&self, bytes: &[u8]) -> Result<(KeyPackage, DeviceRef)> {
        let key_package_in = match message_in(bytes, "a key package")?.extract() {
            MlsMessageBodyIn::KeyPackage(kp) => kp,
            _ => {
                return Err(E2eeError::decode(
                    "a key package",
                    "the message holds something else",
                ))
            }
        };
        let key_package = key_package_in
            .validate(self.provider.crypto(), ProtocolVersion::Mls10)
            .map_err(|e| E2eeError::decode("a key package", e))?;
        if key_package.ciphersuite() != CIPHERSUITE {
            return Err(E2eeError::decode(
                "a key package",
                "another ciphersuite than the group's",
            ));
        }
        let device = device_of(key_package.leaf_node().credential())?;
        Ok((key_package, device))
    }

    fn load(&self, id: &[u8]) -> Result<MlsGroup> {
        MlsGroup::load(self.provider.storage(), &group_id(id))
            .map_err(|e| E2eeError::mls("load the group", e))?
            .ok_or_else(|| E2eeError::NoGroup {
                conv_id: String::from_utf8_lossy(id).into_owned(),
            })
    }

    /// An active group that this device can write in.
    fn load_active(&self, id: &[u8]) -> Result<MlsGroup> {
        let group = self.load(id)?;
        if group.is_active() {
            Ok(group)
        } else {
            Err(E2eeError::Removed {
                conv_id: String::from_utf8_lossy(id).into_owned(),
            })
        }
    }

    /// Creates the group `id` at epoch 0 with this device as its only member.
    pub fn create_group(&self, id: &[u8]) -> Result<()> {
        let config = MlsGroupCreateConfig::builder()
            .ciphersuite(CIPHERSUITE)
            .wire_format_policy(PURE_CIPHERTEXT_WIRE_FORMAT_POLICY)
            .padding_size(PADDING_BYTES)
            .use_ratchet_tree_extension(true)
            .capabilities(capabilities())
            .build();
        MlsGroup::new_with_group_id(
            &self.provider,
            &self.signer,
            &config,
            group_id(id),
            self.credential.clone(),
        )
        .map_err(|e| E2eeError::mls("create the group", e))?;
        Ok(())
    }

    /// Whether this device holds the group, active or not.
    pub fn has_group(&self, id: &[u8]) -> Result<bool> {
        MlsGroup::load(self.provider.storage(), &group_id(id))
            .map(|g| g.is_some())
            .map_err(|e| E2eeError::mls("load the group", e))
    }

    /// Whether this device holds the group and was not removed from it.
    pub fn is_active(&self, id: &[u8]) -> Result<bool> {
        MlsGroup::load(self.provider.storage(), &group_id(id))
            .map(|g| g.is_some_and(|g| g.is_active()))
            .map_err(|e| E2eeError::mls("load the group", e))
    }

    pub fn epoch(&self, id: &[u8]) -> Result<u64> {
        Ok(self.load(id)?.epoch().as_u64())
    }

    /// The group's devices, in leaf order.
    pub fn members(&self, id: &[u8]) -> Result<Vec<DeviceRef>> {
        let group = self.load(id)?;
        group.members().map(|m| device_of(&m.credential)).collect()
    }

    /// Whether the group has a Commit of this device that is neither merged nor cleared.
    pub fn has_pending_commit(&self, id: &[u8]) -> Result<bool> {
        Ok(self.load(id)?.pending_commit().is_some())
    }

    /// A Commit adding the devices of `key_packages`, left pending.
    pub fn add(&self, id: &[u8], key_packages: &[KeyPackage]) -> Result<CommitOut> {
        let mut group = self.load_active(id)?;
        let added = key_packages
            .iter()
            .map(|kp| device_of(kp.leaf_node().credential()))
            .collect::<Result<Vec<_>>>()?;
        let (commit, welcome, _) = group
            .add_members(&self.provider, &self.signer, key_packages)
            .map_err(|e| E2eeError::mls("add members", e))?;
        Ok(CommitOut {
            commit: to_bytes(&commit)?,
            welcome: Some(to_bytes(&welcome)?),
            added,
            removed: Vec::new(),
        })
    }

    /// A Commit removing every leaf of `devices`, left pending.
    pub fn remove(&self, id: &[u8], devices: &[DeviceRef]) -> Result<CommitOut> {
        let mut group = self.load_active(id)?;
        if devices.contains(&self.me) {
            return Err(E2eeError::SelfRemoval);
        }
        let mut leaves = Vec::new();
        let mut removed = Vec::new();
        for member in group.members() {
            let device = device_of(&member.credential)?;
            if devices.contains(&device) {
                leaves.push(member.index);
                removed.push(device);
            }
        }
        if let Some(missing) = devices.iter().find(|d| !removed.contains(d)) {
            return Err(E2eeError::NotInGroup {
                who: format!("{}/{}", missing.user_id, missing.device_id),
            });
        }
        let (commit, _, _) = group
            .remove_members(&self.provider, &self.signer, &leaves)
            .map_err(|e| E2eeError::mls("remove members", e))?;
        Ok(CommitOut {
            commit: to_bytes(&commit)?,
            welcome: None,
            added: Vec::new(),
            removed,
        })
    }

    /// A Commit that only renews this device's leaf keys (and covers any stored proposals),
    /// left pending: it moves the group to a new epoch with fresh secrets.
    pub fn self_update(&self, id: &[u8]) -> Result<CommitOut> {
        let mut group = self.load_active(id)?;
        let bundle = group
            .self_update(&self.provider, &self.signer, LeafNodeParameters::default())
            .map_err(|e| E2eeError::mls("update", e))?;
        Ok(CommitOut {
            commit: to_bytes(bundle.commit())?,
            welcome: None,
            added: Vec::new(),
            removed: Vec::new(),
        })
    }

    /// Merges this device's pending Commit: the server accepted it.
    pub fn merge_pending(&self, id: &[u8]) -> Result<Changes> {
        let mut group = self.load_active(id)?;
        let changes = match group.pending_commit() {
            Some(staged) => changes_of(&group, staged)?,
            None => {
                return Err(E2eeError::Mls {
                    op: "merge the pending commit",
                    reason: "there is none".into(),
                })
            }
        };
        group
            .merge_pending_commit(&self.provider)
            .map_err(|e| E2eeError::mls("merge the pending commit", e))?;
        Ok(changes)
    }

    /// Drops this device's pending Commit: another one won its epoch.
    pub fn clear_pending(&self, id: &[u8]) -> Result<()> {
        let mut group = self.load(id)?;
        group
            .clear_pending_commit(self.provider.storage())
            .map_err(|e| E2eeError::mls("clear the pending commit", e))
    }

    /// An application message in the group's current epoch.
    pub fn encrypt(&self, id: &[u8], plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut group = self.load_active(id)?;
        let message = group
            .create_message(&self.provider, &self.signer, plaintext)
            .map_err(|e| E2eeError::mls("encrypt", e))?;
        to_bytes(&message)
    }

    /// Processes a message of another member: decrypts it, and merges a Commit or stores a
    /// proposal at once, since the server's order is the order every member applies.
    pub fn process(&self, id: &[u8], bytes: &[u8]) -> Result<Incoming> {
        let mut group = self.load_active(id)?;
        let protocol = message_in(bytes, "an MLS message")?
            .try_into_protocol_message()
            .map_err(|e| E2eeError::decode("an MLS message", e))?;
        if protocol.group_id().as_slice() != id {
            return Err(E2eeError::decode(
                "an MLS message",
                "it belongs to another group",
            ));
        }
        let processed = group
            .process_message(&self.provider, protocol)
            .map_err(|e| E2eeError::mls("process a message", e))?;
        let content = processed.content();
        if matches!(
            content,
            ProcessedMessageContent::OwnPrivateMessage | ProcessedMessageContent::OwnPendingCommit
        ) {
            return Ok(Incoming::Own);
        }
        let sender = device_of(processed.credential())?;
        match processed.into_content() {
            ProcessedMessageContent::OwnPrivateMessage
            | ProcessedMessageContent::OwnPendingCommit => Ok(Incoming::Own),
            ProcessedMessageContent::ApplicationMessage(app) => Ok(Incoming::Application {
                sender,
                plaintext: app.into_bytes(),
            }),
            ProcessedMessageContent::ProposalMessage(proposal) => {
                group
                    .store_pending_proposal(self.provider.storage(), *proposal)
                    .map_err(|e| E2eeError::mls("store a proposal", e))?;
                Ok(Incoming::Proposal { sender })
            }
            ProcessedMessageContent::ExternalJoinProposalMessage(_) => Err(E2eeError::decode(
                "an MLS message",
                "external proposals are not used",
            )),
            ProcessedMessageContent::StagedCommitMessage(staged) => {
                let changes = changes_of(&group, &staged)?;
                group
                    .merge_staged_commit(&self.provider, *staged)
                    .map_err(|e| E2eeError::mls("merge a commit", e))?;
                Ok(Incoming::Commit { sender, changes })
            }
        }
    }

    /// Joins the group of a Welcome for one of this device's key packages. A group of the same
    /// id that this device held before (it was removed, and is now added again) is replaced.
    pub fn join(&self, welcome: &[u8]) -> Result<Joined> {
        let welcome = match message_in(welcome, "a Welcome")?.extract() {
            MlsMessageBodyIn::Welcome(w) => w,
            _ => {
                return Err(E2eeError::decode(
                    "a Welcome",
                    "the message holds something else",
                ))
            }
        };
        let staged = StagedWelcome::build_from_welcome(&self.provider, &join_config(), welcome)
            .map_err(|e| E2eeError::mls("read a Welcome", e))?
            .replace_old_group()
            .build()
            .map_err(|e| E2eeError::mls("stage a Welcome", e))?;
        let sender = device_of(
            staged
                .welcome_sender()
                .map_err(|e| E2eeError::mls("read a Welcome", e))?
                .credential(),
        )?;
        let group = staged
            .into_group(&self.provider)
            .map_err(|e| E2eeError::mls("join from a Welcome", e))?;
        let members = group
            .members()
            .map(|m| device_of(&m.credential))
            .collect::<Result<Vec<_>>>()?;
        Ok(Joined {
            group_id: group.group_id().as_slice().to_vec(),
            sender,
            epoch: group.epoch().as_u64(),
            members,
        })
    }
}

/// Who a staged Commit adds and removes, read before it is merged (a removed leaf is gone
/// after).
fn changes_of(group: &MlsGroup, staged: &StagedCommit) -> Result<Changes> {
    let added = staged
        .add_proposals()
        .map(|p| device_of(p.add_proposal().key_package().leaf_node().credential()))
        .collect::<Result<Vec<_>>>()?;
    let removed = staged
        .remove_proposals()
        .filter_map(|p| group.member(p.remove_proposal().removed()).cloned())
        .map(|credential| device_of(&credential))
        .collect::<Result<Vec<_>>>()?;
    Ok(Changes {
        added,
        removed,
        self_removed: staged.self_removed(),
    })
}

#[cfg(test)]
#[path = "mls_tests.rs"]
mod tests;
