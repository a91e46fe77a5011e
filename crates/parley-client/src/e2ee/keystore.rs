//! The local key store of a device: one directory per device, holding one file with the
//! device's openmls storage (its signature key, key packages and groups) and the SDK's own
//! state of each conversation. The file is replaced whole, by a temporary file renamed over it,
//! after every change, so a crash leaves either the old state or the new one, never a mix of
//! the two.
//!
//! The file holds private keys and the plaintexts of the device's own messages; on Unix it and
//! its directory are readable by their owner only.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use openmls_memory_storage::MemoryStorage;
use parley_wire::{DeviceRef, MlsPost};
use serde::{Deserialize, Serialize};

use super::error::E2eeError;
use super::Decrypted;

/// The name of the state file in the device's directory.
pub const STATE_FILE: &str = "e2ee-state.json";
/// The name the next state is written under before it replaces the current one.
const STATE_FILE_TMP: &str = "e2ee-state.json.tmp";
/// The layout of the state file; a file of another version is refused rather than misread.
const STATE_VERSION: u32 = 1;
/// Bytes of the length prefixes of the storage's encoding (big-endian u64).
const LEN_BYTES: usize = 8;

type Result<T> = std::result::Result<T, E2eeError>;

/// A write to the server whose outcome is not known yet: the exact request, resent as it is
/// (the server answers a repeat with the first answer), and for a Commit what it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWrite {
    pub post: MlsPost,
    #[serde(default)]
    pub added: Vec<DeviceRef>,
    #[serde(default)]
    pub removed: Vec<DeviceRef>,
}

/// The SDK's state of one encrypted conversation on this device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvState {
    /// The last seq applied: the next read starts after it.
    pub cursor: i64,
    /// Plaintexts of this device's own messages by `client_msg_id`, kept until the read of the
    /// log passes them: MLS cannot decrypt a message for its own sender.
    #[serde(default)]
    pub sent: BTreeMap<String, String>,
    /// The write in flight, at most one per conversation.
    #[serde(default)]
    pub pending: Option<PendingWrite>,
    /// Results already applied to the group but not yet handed to the caller, kept here so a
    /// crash between the two loses none.
    #[serde(default)]
    pub inbox: Vec<Decrypted>,
}

/// The SDK's state of the device beside the openmls storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub user_id: String,
    pub device_id: String,
    /// Base64 of the Ed25519 public key, which finds the key pair in the openmls storage.
    pub signature_public_key: String,
    /// The device published a last-resort key package.
    #[serde(default)]
    pub last_resort_published: bool,
    #[serde(default)]
    pub convs: BTreeMap<String, ConvState>,
}

impl Meta {
    pub fn new(me: &DeviceRef, signature_public_key: &[u8]) -> Self {
        Self {
            user_id: me.user_id.clone(),
            device_id: me.device_id.clone(),
            signature_public_key: BASE64.encode(signature_public_key),
            last_resort_published: false,
            convs: BTreeMap::new(),
        }
    }

    pub fn signature_public_key(&self) -> Result<Vec<u8>> {
        BASE64
            .decode(&self.signature_public_key)
            .map_err(|e| E2eeError::decode("the key store's signature key", e))
    }

    pub fn conv(&mut self, conv_id: &str) -> &mut ConvState {
        self.convs.entry(conv_id.to_owned()).or_default()
    }
}

/// The file's content: the metadata and the openmls storage's entries.
#[derive(Serialize, Deserialize)]
struct StateFile {
    version: u32,
    meta: Meta,
    /// Base64 of the storage's entries, each key and value after its length.
    mls_storage: String,
}

/// A device's directory.
#[derive(Debug, Clone)]
pub struct KeyStore {
    dir: PathBuf,
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> E2eeError {
    E2eeError::Store {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

impl KeyStore {
    /// The store in `dir`, which is created (owner-only) when missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        restrict(&dir, 0o700)?;
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The stored state, or `None` for a directory that holds none yet.
    pub fn load(&self) -> Result<Option<(Meta, MemoryStorage)>> {
        let path = self.path();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path, e)),
        };
        let file: StateFile = serde_json::from_slice(&bytes).map_err(|e| io_error(&path, e))?;
        if file.version != STATE_VERSION {
            return Err(io_error(
                &path,
                format!("layout version {} (expected {STATE_VERSION})", file.version),
            ));
        }
        let raw = BASE64
            .decode(&file.mls_storage)
            .map_err(|e| io_error(&path, e))?;
        let storage = decode_storage(&raw).map_err(|e| io_error(&path, e))?;
        Ok(Some((file.meta, storage)))
    }

    /// Replaces the stored state: writes a temporary file, flushes it to disk and renames it
    /// over the state file.
    pub fn save(&self, meta: &Meta, storage: &MemoryStorage) -> Result<()> {
        let path = self.path();
        let tmp = self.dir.join(STATE_FILE_TMP);
        let file = StateFile {
            version: STATE_VERSION,
            meta: meta.clone(),
            mls_storage: BASE64.encode(encode_storage(storage).map_err(|e| io_error(&path, e))?),
        };
        let bytes = serde_json::to_vec(&file).map_err(|e| io_error(&path, e))?;
        {
            let mut out = open_private(&tmp)?;
            out.write_all(&bytes).map_err(|e| io_error(&tmp, e))?;
            out.sync_all().map_err(|e| io_error(&tmp, e))?;
        }
        fs::rename(&tmp, &path).map_err(|e| io_error(&path, e))?;
        // The rename itself is durable once the directory is flushed.
        if let Ok(dir) = fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

#[cfg(unix)]
fn open_private(path: &Path) -> Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_error(path, e))
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> Result<fs::File> {
    fs::File::create(path).map_err(|e| io_error(path, e))
}

#[cfg(unix)]
fn restrict(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| io_error(path, e))
}

#[cfg(not(unix))]
fn restrict(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

/// The storage's entries, sorted by key so equal states encode alike: a count, then each key
/// and value after its length.
fn encode_storage(storage: &MemoryStorage) -> std::result::Result<Vec<u8>, String> {
    let values = storage
        .values
        .read()
        .map_err(|_| "the storage's lock is poisoned".to_owned())?;
    let mut entries: Vec<_> = values.iter().collect();
    entries.sort();
    let mut out = Vec::new();
    out.extend_from_slice(&(entries.len() as u64).to_be_bytes());
    for (k, v) in entries {
        out.extend_from_slice(&(k.len() as u64).to_be_bytes());
        out.extend_from_slice(&(v.len() as u64).to_be_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    Ok(out)
}

/// Reads [`encode_storage`]'s layout; a length beyond the end is an error, not an allocation.
fn decode_storage(mut raw: &[u8]) -> std::result::Result<MemoryStorage, String> {
    fn take<'a>(raw: &mut &'a [u8], n: u64) -> std::result::Result<&'a [u8], String> {
        let n = usize::try_from(n).map_err(|_| "a length out of range".to_owned())?;
        if raw.len() < n {
            return Err("the storage ends early".into());
        }
        let (head, tail) = raw.split_at(n);
        *raw = tail;
        Ok(head)
    }
    fn len(raw: &mut &[u8]) -> std::result::Result<u64, String> {
        let bytes = take(raw, LEN_BYTES as u64)?;
        let mut buf = [0u8; LEN_BYTES];
        buf.copy_from_slice(bytes);
        Ok(u64::from_be_bytes(buf))
    }
    let count = len(&mut raw)?;
    let mut values = HashMap::new();
    for _ in 0..count {
        let k_len = len(&mut raw)?;
        let v_len = len(&mut raw)?;
        let k = take(&mut raw, k_len)?.to_vec();
        let v = take(&mut raw, v_len)?.to_vec();
        values.insert(k, v);
    }
    if !raw.is_empty() {
        return Err("bytes after the storage's last entry".into());
    }
    Ok(MemoryStorage {
        values: RwLock::new(values),
    })
}

#[cfg(test)]
#[path = "keystore_tests.rs"]
mod tests;
