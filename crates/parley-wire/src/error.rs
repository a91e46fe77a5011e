//! The stable error codes of SPEC §6, their HTTP statuses, and the error body
//! `{"error": {"code", "message"}}`.

use serde::{Deserialize, Serialize};

/// Declares the table of codes once: the enum, its code strings, its statuses and the string
/// constants of [`code`] all come from the same rows.
macro_rules! error_codes {
    ($( $(#[doc = $doc:literal])* $variant:ident = $code:ident, $status:literal; )*) => {
        /// A stable error code of SPEC §6. A code never changes once published; clients branch
        /// on it, never on the message.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl ErrorCode {
            /// Every code, in the order of SPEC §6's table (415 beside 400).
            pub const ALL: &'static [ErrorCode] = &[ $( Self::$variant, )* ];

            /// The code as it appears in an error body or an `error` frame.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => stringify!($code), )*
                }
            }

            /// The HTTP status SPEC §6 gives the code; an `error` frame carries no status, so
            /// a client reads it from here.
            pub const fn http_status(self) -> u16 {
                match self {
                    $( Self::$variant => $status, )*
                }
            }
        }

        /// The codes as strings, for comparing with the code an answer carried.
        pub mod code {
            $( pub const $code: &str = stringify!($code); )*
        }
    };
}

error_codes! {
    /// Malformed JSON, an unknown or conflicting field, an invalid id or an empty body.
    BadRequest = BAD_REQUEST, 400;
    /// A request body that is not `application/json`. Beyond SPEC §6's table, at its 400 rank.
    UnsupportedMediaType = UNSUPPORTED_MEDIA_TYPE, 415;
    /// A message body over its limit.
    BodyTooLarge = BODY_TOO_LARGE, 413;
    /// A request body or frame over its limit.
    RequestTooLarge = REQUEST_TOO_LARGE, 413;
    /// A missing, unknown or revoked token.
    Unauthenticated = UNAUTHENTICATED, 401;
    /// Never a member, or no such conversation (P10); a write without an open period.
    NotMember = NOT_MEMBER, 404;
    /// No such visible message, user or device.
    NotFound = NOT_FOUND, 404;
    /// A member lacks the role for the action; a device token on an admin endpoint.
    Forbidden = FORBIDDEN, 403;
    /// A join of a current member.
    AlreadyMember = ALREADY_MEMBER, 409;
    /// A user or group `conv_id` that is taken.
    AlreadyExists = ALREADY_EXISTS, 409;
    /// The same request key with a different fingerprint.
    IdempotencyMismatch = IDEMPOTENCY_MISMATCH, 409;
    /// A recall after the conversation's recall window.
    RecallWindowExpired = RECALL_WINDOW_EXPIRED, 409;
    /// A recall of someone else's message.
    NotSender = NOT_SENDER, 403;
    /// A cursor from another epoch of the conversation.
    EpochChanged = EPOCH_CHANGED, 409;
    /// An edit, reaction, reply or thread reply naming a recalled message (docs/RELATIONS.md).
    /// Beyond SPEC §6's table, at its 409 rank.
    Recalled = RECALLED, 409;
    /// A bound of the product was reached, such as the distinct reaction keys of a message.
    /// Beyond SPEC §6's table, at its 409 rank.
    LimitReached = LIMIT_REACHED, 409;
    /// An MLS message made in an epoch that is not the conversation's current one
    /// (docs/E2EE.md); the error object carries `epoch` and `winning_seq`.
    EpochConflict = EPOCH_CONFLICT, 409;
    /// A plaintext write on an encrypted conversation (docs/E2EE.md).
    EncryptedConversation = ENCRYPTED_CONVERSATION, 409;
    /// An MLS write on a conversation that is not encrypted (docs/E2EE.md).
    NotEncrypted = NOT_ENCRYPTED, 409;
    /// An upload over the server's media size limit (docs/MEDIA.md).
    MediaTooLarge = MEDIA_TOO_LARGE, 413;
    /// An upload that would take the user's stored media past their quota.
    QuotaExceeded = QUOTA_EXCEEDED, 413;
    /// An upload declared an image whose bytes are not one the server reads.
    MediaTypeMismatch = MEDIA_TYPE_MISMATCH, 415;
    /// An image whose dimensions are over the server's bounds (a decompression bomb).
    ImageTooLarge = IMAGE_TOO_LARGE, 422;
    /// An upload's body ended early or failed; nothing was kept.
    UploadIncomplete = UPLOAD_INCOMPLETE, 400;
    /// An upload's body stalled or took longer than the server allows.
    RequestTimeout = REQUEST_TIMEOUT, 408;
    /// A download's `Range` lies outside the file.
    RangeNotSatisfiable = RANGE_NOT_SATISFIABLE, 416;
    /// Over a per-device limit.
    RateLimited = RATE_LIMITED, 429;
    /// The store did not confirm the commit; retry with the same `client_msg_id`.
    OutcomeUnknown = OUTCOME_UNKNOWN, 503;
    /// The store was unreachable before anything was written.
    Unavailable = UNAVAILABLE, 503;
    /// A WebSocket upgrade at a gateway that does not hold its lease (chapter 10): it claims
    /// no route until a renewal succeeds, so the client connects to another gateway. Beyond
    /// SPEC §6's table, at its 503 rank.
    LeaseExpired = LEASE_EXPIRED, 503;
}

impl ErrorCode {
    /// The code a string names; `None` for a code this version does not know.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == code)
    }
}

/// The document lists every code this version answers with, from the same table.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Self::ALL.iter().map(|c| c.as_str())))
            .description(Some(
                "A stable error code; each has one HTTP status (SPEC §6). Clients branch on it.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ErrorCode {}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every refusal over HTTP: `{"error": {"code", "message"}}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The code is kept as text so that a client reads codes added after it was built; the message
/// is for people and never carries message bodies, tokens or store internals.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[cfg_attr(feature = "openapi", schema(value_type = ErrorCode))]
    pub code: String,
    #[serde(default)]
    pub message: String,
    /// `EPOCH_CONFLICT` only (docs/E2EE.md): the conversation's current epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
    /// `EPOCH_CONFLICT` only: the Commit that ended the refused message's epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winning_seq: Option<i64>,
}

impl ErrorBody {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
                epoch: None,
                winning_seq: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC §6's table, written out by hand so that a changed row in the macro's table fails,
    /// with the codes added beside it (415, and the gateway's `LEASE_EXPIRED`).
    const SPEC_TABLE: [(&str, u16); 30] = [
        ("BAD_REQUEST", 400),
        ("UNSUPPORTED_MEDIA_TYPE", 415),
        ("BODY_TOO_LARGE", 413),
        ("REQUEST_TOO_LARGE", 413),
        ("UNAUTHENTICATED", 401),
        ("NOT_MEMBER", 404),
        ("NOT_FOUND", 404),
        ("FORBIDDEN", 403),
        ("ALREADY_MEMBER", 409),
        ("ALREADY_EXISTS", 409),
        ("IDEMPOTENCY_MISMATCH", 409),
        ("RECALL_WINDOW_EXPIRED", 409),
        ("NOT_SENDER", 403),
        ("EPOCH_CHANGED", 409),
        ("RECALLED", 409),
        ("LIMIT_REACHED", 409),
        ("EPOCH_CONFLICT", 409),
        ("ENCRYPTED_CONVERSATION", 409),
        ("NOT_ENCRYPTED", 409),
        ("MEDIA_TOO_LARGE", 413),
        ("QUOTA_EXCEEDED", 413),
        ("MEDIA_TYPE_MISMATCH", 415),
        ("IMAGE_TOO_LARGE", 422),
        ("UPLOAD_INCOMPLETE", 400),
        ("REQUEST_TIMEOUT", 408),
        ("RANGE_NOT_SATISFIABLE", 416),
        ("RATE_LIMITED", 429),
        ("OUTCOME_UNKNOWN", 503),
        ("UNAVAILABLE", 503),
        ("LEASE_EXPIRED", 503),
    ];

    #[test]
    fn every_code_has_its_string_and_status_both_ways() {
        assert_eq!(ErrorCode::ALL.len(), SPEC_TABLE.len());
        for (&code, (text, status)) in ErrorCode::ALL.iter().zip(SPEC_TABLE) {
            assert_eq!(code.as_str(), text);
            assert_eq!(code.http_status(), status, "{text}");
            assert_eq!(ErrorCode::parse(text), Some(code), "{text}");
            assert_eq!(code.to_string(), text);
        }
        assert_eq!(ErrorCode::parse("SOMETHING_NEW"), None);
        assert_eq!(ErrorCode::parse("bad_request"), None);
    }

    #[test]
    fn string_constants_name_the_same_codes() {
        let constants = [
            code::BAD_REQUEST,
            code::UNSUPPORTED_MEDIA_TYPE,
            code::BODY_TOO_LARGE,
            code::REQUEST_TOO_LARGE,
            code::UNAUTHENTICATED,
            code::NOT_MEMBER,
            code::NOT_FOUND,
            code::FORBIDDEN,
            code::ALREADY_MEMBER,
            code::ALREADY_EXISTS,
            code::IDEMPOTENCY_MISMATCH,
            code::RECALL_WINDOW_EXPIRED,
            code::NOT_SENDER,
            code::EPOCH_CHANGED,
            code::RECALLED,
            code::LIMIT_REACHED,
            code::EPOCH_CONFLICT,
            code::ENCRYPTED_CONVERSATION,
            code::NOT_ENCRYPTED,
            code::MEDIA_TOO_LARGE,
            code::QUOTA_EXCEEDED,
            code::MEDIA_TYPE_MISMATCH,
            code::IMAGE_TOO_LARGE,
            code::UPLOAD_INCOMPLETE,
            code::REQUEST_TIMEOUT,
            code::RANGE_NOT_SATISFIABLE,
            code::RATE_LIMITED,
            code::OUTCOME_UNKNOWN,
            code::UNAVAILABLE,
            code::LEASE_EXPIRED,
        ];
        let names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, constants);
    }

    #[test]
    fn error_bodies_round_trip_in_the_envelope() {
        let body = ErrorBody::new(ErrorCode::NotMember.as_str(), "not a member");
        let text = serde_json::to_string(&body).expect("encodes");
        assert_eq!(
            text,
            r#"{"error":{"code":"NOT_MEMBER","message":"not a member"}}"#
        );
        let back: ErrorBody = serde_json::from_str(&text).expect("decodes");
        assert_eq!(back, body);
        let bare: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"RATE_LIMITED"},"retry":1}"#)
                .expect("decodes");
        assert_eq!(bare, ErrorBody::new("RATE_LIMITED", ""));
        assert!(serde_json::from_str::<ErrorBody>(r#"{"code":"NOT_MEMBER"}"#).is_err());
    }
}
