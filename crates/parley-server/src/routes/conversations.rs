//! Creating, listing and reading conversations.

use std::collections::HashSet;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use parley_domain::limits::CREATE_MEMBERS_MAX;
use parley_domain::{ConvKind, ConversationView, DeliveryMode, UserId};
use parley_store::NewConversation;
use parley_wire::ErrorBody;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Device;
use crate::body::JsonBody;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::path::{self, ConvPath, DeferredPath};
use crate::query::{self, QueryPairs};
use crate::request::fields;
use crate::service;
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateConversationRequest {
    kind: ConvKind,
    /// The other members' user ids (a direct chat: exactly one); the caller is added as owner.
    #[serde(default)]
    members: Vec<String>,
    /// A group's id of choice; a direct chat's id is derived from its members.
    #[schema(pattern = "^[A-Za-z0-9._@:-]{1,140}$")]
    conv_id: Option<String>,
    title: Option<String>,
    delivery_mode: Option<DeliveryMode>,
    /// Zero or more; the server's default when absent.
    #[schema(minimum = 0)]
    recall_window_ms: Option<i64>,
    /// More than zero; the server's default (keep forever) when absent.
    #[schema(minimum = 1)]
    retention_ms: Option<i64>,
}

/// Turns a create request into the store's request. The caller is the creator and first
/// member; the listed members lose duplicates and the caller but keep their order, and the
/// settings the request leaves out come from the server's configuration.
pub fn new_conversation(
    creator: &UserId,
    req: CreateConversationRequest,
    config: &ServerConfig,
) -> Result<NewConversation, ApiError> {
    if req.members.len() > CREATE_MEMBERS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {CREATE_MEMBERS_MAX} members may be named at creation"
        )));
    }
    let mut seen = HashSet::new();
    let mut members = Vec::with_capacity(req.members.len());
    for raw in &req.members {
        let user = path::user_id(raw)?;
        if user != *creator && seen.insert(user.clone()) {
            members.push(user);
        }
    }
    let conv_id =
        match (req.kind, req.conv_id) {
            (ConvKind::Direct, Some(_)) => {
                return Err(ApiError::bad_request(
                    "a direct conversation's id is derived from its members; omit conv_id",
                ))
            }
            (ConvKind::Direct, None) => {
                if members.len() != 1 {
                    return Err(ApiError::bad_request(
                        "a direct conversation has exactly one other member",
                    ));
                }
                None
            }
            (ConvKind::Encrypted, _) if !members.is_empty() => return Err(ApiError::bad_request(
                "an encrypted conversation starts with its creator alone; members join by Commit",
            )),
            (ConvKind::Group | ConvKind::Encrypted, Some(raw)) => Some(path::group_conv_id(&raw)?),
            (ConvKind::Group | ConvKind::Encrypted, None) => None,
        };
    if let Some(title) = &req.title {
        fields::text("title", title)?;
    }
    if req.recall_window_ms.is_some_and(|ms| ms < 0) {
        return Err(ApiError::bad_request(
            "recall_window_ms must not be negative",
        ));
    }
    if req.retention_ms.is_some_and(|ms| ms <= 0) {
        return Err(ApiError::bad_request("retention_ms must be positive"));
    }
    Ok(NewConversation {
        creator: creator.clone(),
        kind: req.kind,
        conv_id,
        members,
        title: req.title,
        delivery_mode: req.delivery_mode,
        pull_threshold: config.pull_threshold,
        recall_window_ms: req.recall_window_ms.unwrap_or(config.recall_window_ms),
        retention_ms: req.retention_ms.or(config.retention_ms),
    })
}

/// `POST /v1/conversations`: 201 with the new conversation, or 200 with the existing direct
/// chat of the pair.
#[utoipa::path(
    post,
    path = "/v1/conversations",
    tag = "conversations",
    security(("device_token" = [])),
    request_body = CreateConversationRequest,
    responses(
        (status = 201, description = "The new conversation.", body = ConversationView),
        (status = 200, description = "The pair's existing direct chat.", body = ConversationView),
        (status = 400, description = "`BAD_REQUEST`: malformed JSON, an unknown or missing \
            field, an invalid id, text or setting.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: a named member is no user.", body = ErrorBody),
        (status = 409, description = "`ALREADY_EXISTS`: the group id is taken.", body = ErrorBody),
        (status = 413, description = "`REQUEST_TOO_LARGE`: the body is over the request limit.",
            body = ErrorBody),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: the body is not \
            `application/json`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE` or `OUTCOME_UNKNOWN`: the store did not \
            answer or confirm.", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Device(identity): Device,
    body: JsonBody,
) -> Result<(StatusCode, Json<ConversationView>), ApiError> {
    let req: CreateConversationRequest = body.parse()?;
    let new = new_conversation(&identity.user_id, req, state.config())?;
    let created = service::create_conversation(&state, &new).await?;
    let status = if created.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(created.conversation)))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationList {
    conversations: Vec<ConversationView>,
    sync_token: String,
}

/// `GET /v1/conversations[?since=<token>]`: the caller's conversations that changed since the
/// token (all of them without one), and the token for the next call (SPEC §5, sync feed).
#[utoipa::path(
    get,
    path = "/v1/conversations",
    tag = "conversations",
    security(("device_token" = [])),
    params(("since" = Option<String>, Query,
        description = "The `sync_token` of an earlier answer: only what changed since.")),
    responses(
        (status = 200, description = "The changed conversations and the next token.",
            body = ConversationList),
        (status = 400, description = "`BAD_REQUEST`: an unknown or repeated parameter, a token \
            of another store or from the future.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Device(identity): Device,
    query: QueryPairs,
) -> Result<Json<ConversationList>, ApiError> {
    let since = query::list_since(&query.into_inner()?)?;
    let feed = state
        .store()
        .list_conversations(&identity.user_id, since.as_deref())
        .await?;
    let conversations = feed
        .conversations
        .into_iter()
        .map(|v| for_device(v, &identity))
        .collect();
    Ok(Json(ConversationList {
        conversations,
        sync_token: feed.sync_token,
    }))
}

/// `GET /v1/conversations/{conv_id}`: `NOT_MEMBER` both for a conversation the caller never
/// joined and for one that does not exist (P10).
#[utoipa::path(
    get,
    path = "/v1/conversations/{conv_id}",
    tag = "conversations",
    security(("device_token" = [])),
    params(("conv_id" = String, Path, pattern = "^[A-Za-z0-9._@:-]{1,140}$", description = "The conversation.")),
    responses(
        (status = 200, description = "The conversation as the caller sees it.",
            body = ConversationView),
        (status = 400, description = "`BAD_REQUEST`: an invalid id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: a missing, unknown or revoked token.",
            body = ErrorBody),
        (status = 404, description = "`NOT_MEMBER`: never a member, or no such conversation.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store did not answer.", body = ErrorBody),
    )
)]
pub async fn get_one(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<ConvPath>,
) -> Result<Json<ConversationView>, ApiError> {
    let conv_id = path.into_inner()?.conv_id()?;
    let view = state
        .store()
        .get_conversation(&conv_id, &identity.user_id)
        .await?;
    Ok(Json(for_device(view, &identity)))
}

/// The view as the calling device may see it: a last event that is a Welcome shows its message
/// only to the devices it names (docs/E2EE.md).
fn for_device(
    mut view: ConversationView,
    device: &parley_store::DeviceIdentity,
) -> ConversationView {
    if let Some(redacted) = view
        .last_event
        .as_ref()
        .and_then(|e| e.redacted_for(device.user_id.as_str(), device.device_id.as_str()))
    {
        view.last_event = Some(redacted);
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> CreateConversationRequest {
        serde_json::from_str(json).expect("a valid test request")
    }

    fn ana() -> UserId {
        UserId::parse("ana").expect("a valid id")
    }

    #[test]
    fn members_drop_the_caller_and_duplicates_in_order() {
        let req = request(r#"{"kind":"group","members":["cy","ana","ben","cy"]}"#);
        let new = new_conversation(&ana(), req, &ServerConfig::default());
        let names: Option<Vec<String>> = new
            .ok()
            .map(|n| n.members.iter().map(|u| u.to_string()).collect());
        assert_eq!(names, Some(vec!["cy".to_owned(), "ben".to_owned()]));
    }

    #[test]
    fn direct_needs_exactly_one_other_member() {
        let config = ServerConfig::default();
        let ok = new_conversation(
            &ana(),
            request(r#"{"kind":"direct","members":["ben","ana","ben"]}"#),
            &config,
        );
        assert!(ok.is_ok());
        for bad in [
            r#"{"kind":"direct","members":["ana"]}"#,
            r#"{"kind":"direct","members":["ben","cy"]}"#,
            r#"{"kind":"direct","members":["ben"],"conv_id":"x"}"#,
        ] {
            assert!(
                new_conversation(&ana(), request(bad), &config).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn group_ids_may_not_take_the_direct_prefix() {
        let req = request(r#"{"kind":"group","members":[],"conv_id":"dm:ana:ben"}"#);
        let err = new_conversation(&ana(), req, &ServerConfig::default()).err();
        assert_eq!(err.map(|e| e.code()), Some("BAD_REQUEST"));
    }

    #[test]
    fn absent_settings_come_from_the_configuration() {
        let config = ServerConfig {
            recall_window_ms: 5_000,
            pull_threshold: 7,
            retention_ms: Some(60_000),
            ..ServerConfig::default()
        };
        let new = new_conversation(
            &ana(),
            request(r#"{"kind":"group","members":["ben"]}"#),
            &config,
        )
        .expect("a valid request");
        assert_eq!(new.recall_window_ms, 5_000);
        assert_eq!(new.pull_threshold, 7);
        assert_eq!(new.retention_ms, Some(60_000));
        assert!(new.conv_id.is_none());
        let new = new_conversation(
            &ana(),
            request(r#"{"kind":"group","members":[],"recall_window_ms":1,"retention_ms":2}"#),
            &config,
        )
        .expect("a valid request");
        assert_eq!((new.recall_window_ms, new.retention_ms), (1, Some(2)));
    }

    #[test]
    fn titles_hold_no_zero_character() {
        let req = request(r#"{"kind":"group","members":[],"title":"a\u0000b"}"#);
        let err = new_conversation(&ana(), req, &ServerConfig::default()).err();
        assert_eq!(err.map(|e| e.code()), Some("BAD_REQUEST"));
        let req = request(r#"{"kind":"group","members":[],"title":"a b"}"#);
        assert!(new_conversation(&ana(), req, &ServerConfig::default()).is_ok());
    }

    #[test]
    fn unknown_fields_are_refused() {
        let parsed: Result<CreateConversationRequest, _> =
            serde_json::from_str(r#"{"kind":"group","members":[],"creator":"ben"}"#);
        assert!(parsed.is_err());
    }
}
