//! The route table of SPEC §6 and the JSON answers for requests that match no route.

mod accounts;
mod admin;
mod conversations;
mod events;
mod gateways;
mod health;
mod me;
mod media;
mod members;
mod messages;
mod metrics;
mod mls;
mod presence;
mod push;
mod read;
mod recall;
mod relations;
mod search;
mod server_info;
mod web;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::openapi::{self, ApiDoc};
use crate::state::AppState;

/// The one list of routes: each entry is a handler with its `#[utoipa::path]`, so the router and
/// the OpenAPI document (`openapi::document`) are built from the same entries.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(openapi::serve))
        .routes(routes!(admin::create_user))
        .routes(routes!(admin::issue_device))
        .routes(routes!(admin::revoke_device))
        .routes(routes!(admin::set_password))
        .routes(routes!(accounts::login))
        .routes(routes!(accounts::logout))
        .routes(routes!(accounts::register))
        .routes(routes!(accounts::change_password))
        .routes(routes!(gateways::list))
        .routes(routes!(server_info::describe))
        .routes(routes!(conversations::create, conversations::list))
        .routes(routes!(conversations::get_one))
        .routes(routes!(members::add))
        .routes(routes!(members::remove, members::set_role))
        .routes(routes!(messages::send))
        .routes(routes!(events::list))
        .routes(routes!(recall::recall))
        .routes(routes!(relations::edit))
        .routes(routes!(relations::react, relations::unreact))
        .routes(routes!(read::mark))
        .routes(routes!(media::upload))
        .routes(routes!(media::download))
        .routes(routes!(media::thumbnail))
        .routes(routes!(media::sign_url))
        .routes(routes!(crate::gateway::socket::upgrade))
        .routes(routes!(me::me))
        .routes(routes!(push::vapid))
        .routes(routes!(
            push::register,
            push::get_registration,
            push::unregister
        ))
        .routes(routes!(push::get_level, push::set_level))
        .routes(routes!(push::get_settings, push::set_settings))
        .routes(routes!(search::search))
        .routes(routes!(search::get_language, search::set_language))
        .routes(routes!(mls::post))
        .routes(routes!(mls::publish, mls::stock))
        .routes(routes!(mls::claim))
        .routes(routes!(presence::list))
        .routes(routes!(metrics::admin_only))
        .routes(routes!(web::page))
        .routes(routes!(web::asset))
}

/// Every HTTP route, with JSON errors for unknown paths and methods so no answer of the server
/// leaves the error envelope.
pub fn router() -> Router<AppState> {
    let (router, _document) = api().split_for_parts();
    router
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
}

/// The metrics listener's routes: the scrape, open to whoever reaches its address.
pub fn metrics_router() -> Router<AppState> {
    Router::new()
        .route("/metrics", axum::routing::get(metrics::open))
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
}

async fn no_such_route() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
