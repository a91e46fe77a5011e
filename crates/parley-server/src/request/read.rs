//! Marking a conversation read: `POST /v1/conversations/{conv_id}/read` with `{seq}`, or a
//! `read` frame.

use parley_domain::ConvId;
use parley_store::DeviceIdentity;
use parley_wire::ReadAck;
use serde::Deserialize;

use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::service;
use crate::state::AppState;

/// A read position to move to. A negative `seq` is refused by `service::mark_read`, which
/// both transports reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkRead {
    pub conv_id: ConvId,
    pub seq: i64,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadBody {
    /// The seq read up to; zero or more.
    #[schema(minimum = 0)]
    seq: i64,
}

impl MarkRead {
    pub fn from_http(path: DeferredPath<ConvPath>, body: &JsonBody) -> Result<Self, ApiError> {
        let conv_id = path.into_inner()?.conv_id()?;
        let req: ReadBody = body.parse()?;
        Ok(Self {
            conv_id,
            seq: req.seq,
        })
    }

    /// The answer is the resulting position: `max(read_seq, min(seq, head))` (P8).
    pub async fn run(self, state: &AppState, device: &DeviceIdentity) -> Result<ReadAck, ApiError> {
        let read_seq = service::mark_read(state, device, &self.conv_id, self.seq).await?;
        Ok(ReadAck { read_seq })
    }
}
