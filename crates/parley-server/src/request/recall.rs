//! Recalling a message: `POST /v1/conversations/{conv_id}/events/{seq}/recall` (SPEC §4).

use parley_domain::ConvId;
use parley_store::DeviceIdentity;
use parley_wire::RecallAck;

use crate::error::ApiError;
use crate::path::{ConvSeqPath, DeferredPath};
use crate::service;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    pub conv_id: ConvId,
    pub target_seq: i64,
}

impl Recall {
    pub fn from_http(path: DeferredPath<ConvSeqPath>) -> Result<Self, ApiError> {
        let (conv_id, target_seq) = path.into_inner()?.ids()?;
        Ok(Self {
            conv_id,
            target_seq,
        })
    }

    /// Answers `{seq, target_seq}`; recalling again answers the same recall. The store checks
    /// the caller's open period first, so a non-member and an unknown conversation answer
    /// alike (P10).
    pub async fn run(
        self,
        state: &AppState,
        device: &DeviceIdentity,
    ) -> Result<RecallAck, ApiError> {
        service::recall(state, device, &self.conv_id, self.target_seq).await
    }
}
