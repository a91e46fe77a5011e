//! The OpenAPI document of the HTTP API, served at `GET /openapi.json`.
//!
//! The operations come from the handlers' own `#[utoipa::path]` annotations and their request
//! and answer types, gathered by the same list of routes that builds the router
//! (`routes::api`), so a route cannot be served without being described. This file adds what
//! belongs to no single route: the title, the security schemes and the tags.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The security scheme of device endpoints: a device token issued by the admin API.
pub const DEVICE_TOKEN_SCHEME: &str = "device_token";
/// The security scheme of `/v1/admin` endpoints: the server's admin token.
pub const ADMIN_TOKEN_SCHEME: &str = "admin_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Parley",
        description = "Parley's HTTP API (SPEC §6). Every refusal is the error body \
            `{\"error\": {\"code\", \"message\"}}` with the status of its code. The WebSocket \
            protocol of `/v1/ws` (SPEC §7) is not described here."
    ),
    modifiers(&SecuritySchemes),
    tags(
        (name = "probes", description = "Liveness and readiness, without a token."),
        (name = "admin", description = "Users and device tokens, with the admin token."),
        (name = "accounts", description = "Login with a password, logout, registration and \
            password changes."),
        (name = "conversations", description = "Conversations, members, messages and reads, \
            with a device token."),
        (name = "realtime", description = "The WebSocket gateway."),
        (name = "media", description = "Attachments: uploads, downloads, thumbnails and \
            signed URLs (docs/MEDIA.md)."),
        (name = "notifications", description = "Offline notifications: push registrations \
            (Web Push, push gateways), levels and settings (docs/PUSH.md)."),
        (name = "search", description = "Message search over what the caller may read, and \
            a conversation's search language (docs/SEARCH.md)."),
        (name = "e2ee", description = "End-to-end encrypted conversations: the MLS Delivery \
            Service and the KeyPackage directory (docs/E2EE.md)."),
        (name = "meta", description = "This document."),
        (name = "web", description = "The browser client (docs/WEB.md)."),
    )
)]
pub struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            DEVICE_TOKEN_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <token>` with a device token from \
                         `POST /v1/admin/users/{user_id}/devices`.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            ADMIN_TOKEN_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <token>` with the admin token of \
                         `--admin-token` (or `<data-dir>/admin_token`).",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document, built from the route list once per process.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOCUMENT: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| crate::routes::api().split_for_parts().1)
}

/// The document as JSON, serialised once.
fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        // The document is built from types only; serialising it cannot meet a map with
        // non-string keys or a failing serializer, so an error here is a bug of this crate.
        document()
            .to_json()
            .expect("the OpenAPI document serialises")
    })
}

/// The OpenAPI 3.1 document of every HTTP endpoint of this server.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI document.", content_type = "application/json",
            body = Object),
    )
)]
pub async fn serve() -> Response {
    ([(CONTENT_TYPE, "application/json")], document_json()).into_response()
}
