//! Reading a conversation log: ascending after a cursor, or descending history pages.

use axum::extract::State;
use axum::Json;
use parley_domain::EventsPage;

use crate::auth::Device;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::query::{self, QueryPairs};
use crate::state::AppState;

/// `GET /v1/conversations/{conv_id}/events`: see `query::events_query` for the parameters.
/// Visibility is checked by the store against the caller's periods at access time (P11).
pub async fn list(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    query: QueryPairs,
) -> Result<Json<EventsPage>, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    let (events_query, limit) = query::events_query(&query.into_inner()?)?;
    let page = state
        .store()
        .events(&conv_id, &identity.user_id, events_query, limit)
        .await?;
    Ok(Json(page))
}
