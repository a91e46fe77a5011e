//! Marking a conversation read: `POST /v1/conversations/{conv_id}/read` with `{seq}`.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::service;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkReadRequest {
    seq: i64,
}

#[derive(Debug, Serialize)]
pub struct ReadAck {
    read_seq: i64,
}

/// The answer is the resulting position: `max(read_seq, min(seq, head))` (P8).
pub async fn mark(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<ReadAck>, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    let req: MarkReadRequest = body.parse()?;
    let read_seq = service::mark_read(&state, &identity, &conv_id, req.seq).await?;
    Ok(Json(ReadAck { read_seq }))
}
