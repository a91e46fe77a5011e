//! The route table of SPEC §6 and the JSON answers for requests that match no route.

mod admin;
mod conversations;
mod events;
mod health;
mod me;
mod members;
mod messages;
mod metrics;
mod read;
mod recall;

use axum::routing::{delete, get, post};
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;

/// Every HTTP route, with JSON errors for unknown paths and methods so no answer of the server
/// leaves the error envelope.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/admin/users", post(admin::create_user))
        .route(
            "/v1/admin/users/{user_id}/devices",
            post(admin::issue_device),
        )
        .route(
            "/v1/admin/users/{user_id}/devices/{device_id}",
            delete(admin::revoke_device),
        )
        .route(
            "/v1/conversations",
            post(conversations::create).get(conversations::list),
        )
        .route("/v1/conversations/{conv_id}", get(conversations::get_one))
        .route("/v1/conversations/{conv_id}/members", post(members::add))
        .route(
            "/v1/conversations/{conv_id}/members/{user_id}",
            delete(members::remove).put(members::set_role),
        )
        .route("/v1/conversations/{conv_id}/messages", post(messages::send))
        .route("/v1/conversations/{conv_id}/events", get(events::list))
        .route(
            "/v1/conversations/{conv_id}/events/{seq}/recall",
            post(recall::recall),
        )
        .route("/v1/conversations/{conv_id}/read", post(read::mark))
        .route("/v1/ws", get(crate::gateway::socket::upgrade))
        .route("/v1/me", get(me::me))
        .route("/metrics", get(metrics::admin_only))
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
}

/// The metrics listener's routes: the scrape, open to whoever reaches its address.
pub fn metrics_router() -> Router<AppState> {
    Router::new()
        .route("/metrics", get(metrics::open))
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
}

async fn no_such_route() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
