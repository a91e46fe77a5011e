//! Business rejections: requests that were understood and refused. Each maps to one stable code
//! of SPEC §6 at the edge.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Never a member, or no such conversation (P10): the two are indistinguishable on purpose.
    #[error("not a member of this conversation")]
    NotMember,
    #[error("{0}")]
    NotFound(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("already a member")]
    AlreadyMember,
    #[error("{0} already exists")]
    AlreadyExists(&'static str),
    #[error("this client_msg_id was used for a different request")]
    IdempotencyMismatch,
    #[error("the recall window has passed")]
    RecallWindowExpired,
    #[error("only the sender may recall or edit a message")]
    NotSender,
    #[error("the cursor belongs to another epoch of this conversation")]
    EpochChanged,
    #[error("{0}")]
    BadRequest(String),
    /// The message was recalled: it cannot be edited, reacted to, replied to or threaded.
    #[error("the message was recalled")]
    Recalled,
    /// A bound of the product was reached (distinct reaction keys on a message).
    #[error("{0}")]
    LimitReached(&'static str),
    /// The uploader's stored media would exceed their quota (docs/MEDIA.md).
    #[error("the media quota of this user is used up")]
    QuotaExceeded,
    /// An MLS message made in another epoch than the conversation's current one.
    #[error("the message was made in epoch {sent_in}; the conversation is at epoch {epoch}")]
    EpochConflict {
        sent_in: i64,
        epoch: i64,
        /// The Commit that ended `sent_in` (the last Commit when `sent_in` lies ahead).
        winning_seq: i64,
    },
    /// A plaintext write (or a member route) on an encrypted conversation.
    #[error("the conversation is end-to-end encrypted; post MLS messages instead")]
    EncryptedConversation,
    /// An MLS write on a conversation that is not encrypted.
    #[error("the conversation is not end-to-end encrypted")]
    NotEncrypted,
}
