//! Message search (docs/SEARCH.md): `GET /v1/search` and a conversation's search language.

use axum::extract::State;
use axum::Json;
use parley_domain::SearchLanguage;
use parley_wire::{ErrorBody, SearchLanguageSetting, SearchResults};

use crate::auth::Device;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::query::QueryPairs;
use crate::request::SearchMessages;
use crate::state::AppState;

/// Hits are messages the caller may read: of conversations they are or were a member of, inside
/// their membership periods, neither recalled nor purged, matched by their current body.
#[utoipa::path(
    get,
    path = "/v1/search",
    tag = "search",
    security(("device_token" = [])),
    params(
        ("q" = String, Query, description = "Words (all required), `\"quoted phrases\"`, \
            `from:USER`, `in:CONVERSATION`; the last word also matches as a prefix. At most 256 \
            characters and 16 words and phrases."),
        ("conv_id" = Option<String>, Query, pattern = "^[A-Za-z0-9._@:-]{1,140}$",
            description = "Only this conversation, as `in:`."),
        ("from" = Option<String>, Query, description = "Only this sender, as `from:`."),
        ("limit" = Option<i64>, Query, minimum = 1,
            description = "Page size; 20 when absent, at most 100 (larger sizes are clamped)."),
        ("cursor" = Option<String>, Query,
            description = "A `next_cursor` or a hit's `cursor` of the same search and order."),
        ("order" = Option<String>, Query,
            description = "`newest` (the default) or `rank` (best match first; pages end after \
            1,000 hits)."),
    ),
    responses(
        (status = 200, description = "A page of hits.", body = SearchResults),
        (status = 400, description = "`BAD_REQUEST`: no `q`, a query without words or filters, \
            too long, an invalid id, a filter given twice with different values, an unknown \
            order, a cursor of another order or not one the server gave, an unknown or repeated \
            parameter.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn search(
    State(state): State<AppState>,
    Device(identity): Device,
    query: QueryPairs,
) -> Result<Json<SearchResults>, ApiError> {
    let search = SearchMessages::from_http(query)?;
    Ok(Json(search.run(&state, &identity).await?))
}

#[utoipa::path(
    get,
    path = "/v1/conversations/{conv_id}/search",
    tag = "search",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    responses(
        (status = 200, description = "The conversation's search language.",
            body = SearchLanguageSetting),
        (status = 400, description = "`BAD_REQUEST`: an invalid id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: never a member, or no such conversation.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn get_language(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
) -> Result<Json<SearchLanguageSetting>, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    let language = state
        .store()
        .search_language(&conv_id, &identity.user_id)
        .await?;
    Ok(Json(SearchLanguageSetting {
        language: language.as_str().to_owned(),
    }))
}

/// The conversation's messages are split again in the same transaction, so a search never sees
/// the conversation half in one language: the cost grows with the conversation.
#[utoipa::path(
    put,
    path = "/v1/conversations/{conv_id}/search",
    tag = "search",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    request_body = SearchLanguageSetting,
    responses(
        (status = 200, description = "The conversation's search language now.",
            body = SearchLanguageSetting),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown field, an \
            invalid id, a language other than simple and english.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: the caller is no owner or admin.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: not a member now, or no such conversation.",
            body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn set_language(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
    body: JsonBody,
) -> Result<Json<SearchLanguageSetting>, ApiError> {
    let req: SearchLanguageSetting = body.parse()?;
    let conv_id = path.into_inner()?.conv_id()?;
    let language =
        SearchLanguage::parse(&req.language).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let language = state
        .store()
        .set_search_language(&conv_id, &identity.user_id, language)
        .await?;
    Ok(Json(SearchLanguageSetting {
        language: language.as_str().to_owned(),
    }))
}
