//! Recalling a message: `POST /v1/conversations/{conv_id}/events/{seq}/recall` (SPEC §4).

use axum::extract::State;
use axum::Json;
use parley_wire::RecallAck;

use crate::auth::Device;
use crate::error::ApiError;
use crate::path::{ConvSeqPath, DeferredPath};
use crate::request::Recall;
use crate::state::AppState;

/// Answers `{seq, target_seq}`; see `request::Recall`.
pub async fn recall(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvSeqPath>,
) -> Result<Json<RecallAck>, ApiError> {
    let req = Recall::from_http(path)?;
    Ok(Json(req.run(&state, &identity).await?))
}
