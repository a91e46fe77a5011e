//! Recalling a message: `POST /v1/conversations/{conv_id}/events/{seq}/recall` (SPEC §4).

use axum::extract::State;
use axum::Json;

use crate::auth::Device;
use crate::error::ApiError;
use crate::path::{ConvSeqPath, DeferredPath};
use crate::service::{self, RecallAck};
use crate::state::AppState;

/// Answers `{seq, target_seq}`; recalling again answers the same recall. The store checks the
/// caller's open period first, so a non-member and an unknown conversation answer alike (P10).
pub async fn recall(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvSeqPath>,
) -> Result<Json<RecallAck>, ApiError> {
    let (conv_id, seq) = path.into_inner()?.ids()?;
    let ack = service::recall(&state, &identity, &conv_id, seq).await?;
    Ok(Json(ack))
}
