//! The errors of end-to-end encryption: the server's, the key store's and the MLS layer's, kept
//! apart so a caller can tell a refusal from a broken local state.

use crate::error::ClientError;

/// Everything an [`crate::e2ee::E2ee`] call can fail with. New kinds may be added, so a `match`
/// on it ends with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum E2eeError {
    /// A call to the server failed; [`ClientError`] tells whether the outcome is unknown.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// openmls refused an operation or a message. The reason is openmls's error, which never
    /// quotes a plaintext.
    #[error("MLS {op}: {reason}")]
    Mls { op: &'static str, reason: String },
    /// A message, a key package or a Welcome from the server that does not decode.
    #[error("cannot decode {what}: {reason}")]
    Decode { what: &'static str, reason: String },
    /// The local key store could not be read or written.
    #[error("key store {path}: {reason}")]
    Store { path: String, reason: String },
    /// The key store in this directory belongs to another device.
    #[error("the key store belongs to {found}, not to {expected}")]
    WrongDevice { expected: String, found: String },
    /// This device has no MLS group for the conversation (not created here, or no Welcome for
    /// this device was read yet: call [`crate::e2ee::E2ee::sync`]).
    #[error("this device is not in the MLS group of {conv_id}")]
    NoGroup { conv_id: String },
    /// A Commit removed this device from the group; it can neither read nor write any more.
    #[error("this device was removed from the MLS group of {conv_id}")]
    Removed { conv_id: String },
    /// None of the user's devices has a key package to claim, so none can be added now.
    #[error("no device of {user_id} has a key package")]
    NoKeyPackages { user_id: String },
    /// A claimed key package names another device than the one the server handed it for.
    #[error("the key package claimed for {claimed} is for {found}")]
    ForeignKeyPackage { claimed: String, found: String },
    /// MLS has no way for a member to remove itself by its own Commit.
    #[error("a device cannot remove itself from a group")]
    SelfRemoval,
    /// A user or device to remove is not in the group.
    #[error("{who} is not in the MLS group")]
    NotInGroup { who: String },
    /// Every attempt met an `EPOCH_CONFLICT`: other members kept committing first.
    #[error("the epoch kept moving: gave up after {attempts} attempts")]
    Contended { attempts: u32 },
    /// A number out of its documented range (a key package count, a message size).
    #[error("{0}")]
    Invalid(String),
}

impl E2eeError {
    pub(crate) fn mls(op: &'static str, e: impl std::fmt::Debug) -> Self {
        Self::Mls {
            op,
            reason: format!("{e:?}"),
        }
    }

    pub(crate) fn decode(what: &'static str, e: impl std::fmt::Display) -> Self {
        Self::Decode {
            what,
            reason: e.to_string(),
        }
    }

    /// The stable error code of the server's refusal, when that is what it was.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Client(e) => e.code(),
            _ => None,
        }
    }
}
