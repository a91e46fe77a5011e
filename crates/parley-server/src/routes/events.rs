//! Reading a conversation log: ascending after a cursor, or descending history pages.

use axum::extract::State;
use axum::Json;
use parley_domain::Event;
use parley_wire::{ErrorBody, EventsPage};

use crate::auth::Device;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::query::QueryPairs;
use crate::request::ReadEvents;
use crate::state::AppState;

/// `GET /v1/conversations/{conv_id}/events`: see `query::events_query` for the parameters.
#[utoipa::path(
    get,
    path = "/v1/conversations/{conv_id}/events",
    tag = "conversations",
    security(("device_token" = [])),
    params(
        ("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation."),
        ("after" = Option<i64>, Query, minimum = 0,
            description = "Events after this seq, ascending; not with `before`."),
        ("before" = Option<i64>, Query, minimum = 0,
            description = "Events before this seq, descending; neither cursor: the newest page."),
        ("limit" = Option<i64>, Query, minimum = 1,
            description = "Page size; 50 when absent, at most 500 (larger sizes are clamped)."),
        ("epoch" = Option<i64>, Query, minimum = 0,
            description = "The epoch of an `after` cursor; another epoch is `EPOCH_CHANGED`."),
        ("thread" = Option<i64>, Query, minimum = 1,
            description = "Only the thread of this root message: the root and its replies, by \
            the same cursors (docs/RELATIONS.md)."),
    ),
    responses(
        (status = 200, description = "A page of the events the caller may see.",
            body = EventsPage<Event>),
        (status = 400, description = "`BAD_REQUEST`: an invalid id, an unknown, repeated or \
            malformed parameter, `after` with `before`, `epoch` without `after`.",
            body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: never a member, or no such conversation; \
            `NOT_FOUND`: `thread` names no visible message that roots a thread.",
            body = ErrorBody),
        (status = 409, description = "`EPOCH_CHANGED`: the cursor is of another epoch.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    query: QueryPairs,
) -> Result<Json<EventsPage<Event>>, ApiError> {
    let req = ReadEvents::from_http(path, query)?;
    Ok(Json(req.run(&state, &identity).await?))
}
