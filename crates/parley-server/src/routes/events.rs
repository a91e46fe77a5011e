//! Reading a conversation log: ascending after a cursor, or descending history pages.

use axum::extract::State;
use axum::Json;
use parley_domain::Event;
use parley_wire::EventsPage;

use crate::auth::Device;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::query::QueryPairs;
use crate::request::ReadEvents;
use crate::state::AppState;

/// `GET /v1/conversations/{conv_id}/events`: see `query::events_query` for the parameters.
pub async fn list(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    query: QueryPairs,
) -> Result<Json<EventsPage<Event>>, ApiError> {
    let req = ReadEvents::from_http(path, query)?;
    Ok(Json(req.run(&state, &identity).await?))
}
