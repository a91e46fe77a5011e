//! Marking a conversation read: `POST /v1/conversations/{conv_id}/read` with `{seq}`.

use axum::extract::State;
use axum::Json;
use parley_wire::ReadAck;

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::request::MarkRead;
use crate::state::AppState;

/// The answer is the resulting position: `max(read_seq, min(seq, head))` (P8).
pub async fn mark(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<ReadAck>, ApiError> {
    let req = MarkRead::from_http(path, &body)?;
    Ok(Json(req.run(&state, &identity).await?))
}
