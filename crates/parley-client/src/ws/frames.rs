//! The JSON frames of SPEC §7 and the close codes the server ends a connection with, as
//! declared once in `parley_wire` for the server and this SDK alike.
//!
//! Both directions decode and encode, so a test can play either side. Unknown fields of server
//! frames are ignored and an unknown server frame type decodes as [`ServerFrame::Unknown`],
//! because the contract lets the server add fields and frames without breaking existing
//! clients.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ClientError;

pub use parley_wire::close::{CLOSE_GOING_AWAY, CLOSE_KICKED, CLOSE_REVOKED, CLOSE_TOO_SLOW};
pub use parley_wire::{ClientFrame, Request, ServerFrame};

/// Decodes the fields of an `ack` as the answer type of the request it answers.
pub fn decode_ack<T: DeserializeOwned>(fields: Value) -> Result<T, ClientError> {
    serde_json::from_value(fields).map_err(|e| parley_wire::FrameError::new(&e).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SendAck;
    use serde_json::json;

    #[test]
    fn undecodable_acks_are_bad_frames_that_do_not_quote_them() {
        let ack: SendAck = decode_ack(json!({"conv_id": "c", "seq": 3, "message_id": "m",
                                             "dup": false}))
        .expect("a send ack");
        assert_eq!(ack.seq, 3);
        let secret = "very private words";
        let e = decode_ack::<SendAck>(json!({"conv_id": "c", "seq": secret})).expect_err("refused");
        assert!(matches!(e, ClientError::BadFrame { .. }), "{e}");
        assert!(!e.to_string().contains("private"), "{e}");
    }

    #[test]
    fn undecodable_frames_are_bad_frames() {
        let e: ClientError = ServerFrame::parse("not json").expect_err("refused").into();
        assert!(matches!(e, ClientError::BadFrame { .. }), "{e}");
    }
}
