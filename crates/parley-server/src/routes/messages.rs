//! Sending messages over HTTP; the request is `request::SendMessage`, shared with WebSocket.

use axum::extract::State;
use axum::Json;
use parley_wire::SendAck;

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::metrics::SendOutcome;
use crate::path::{ConvPath, DeferredPath};
use crate::request::SendMessage;
use crate::state::AppState;

/// `POST /v1/conversations/{conv_id}/messages`: the sender is the token's device, never a
/// field of the request.
pub async fn send(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<SendAck>, ApiError> {
    let req = SendMessage::from_http(path, &body, state.config().limits.body_bytes_max)
        .inspect_err(|_| state.metrics().send(SendOutcome::Invalid))?;
    Ok(Json(req.run(&state, &identity).await?))
}
