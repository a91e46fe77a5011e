//! Router-level checks of the edge against an in-memory store: precedence of errors, the error
//! envelope, and that refused requests never reach the store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use parley_bus::{EventBus, LocalBus};
use parley_domain::{
    ConvId, ConversationView, DeviceId, Event, EventKind, EventsPage, Rejection, Role, UserId,
};
use parley_store::token::hash_token;
use parley_store::{
    ConversationFeed, CreatedConversation, DeviceIdentity, EditOutcome, EditRequest, EventsQuery,
    MemberSnapshot, MembershipChange, NewConversation, PurgeReport, ReactOutcome, ReactRequest,
    RecallOutcome, Route, Seen, SendOutcome, SendRequest, Store, StoreError, ThreadQuery,
    TypingTargets, User, UserPresence,
};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::{app, AppState, ServerConfig};

const DEVICE_TOKEN: &str = "pd_device";
const ADMIN_TOKEN: &str = "admin-secret";

/// Knows one device token; counts every call other than authentication, so a test can tell
/// whether a request reached the store.
#[derive(Default)]
struct FakeStore {
    writes: AtomicUsize,
    down: bool,
}

impl FakeStore {
    fn touched(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    fn touch(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }
}

fn msg_event(conv_id: ConvId, seq: i64) -> Event {
    Event {
        conv_id,
        seq,
        kind: EventKind::Msg,
        created_at: chrono::Utc::now(),
        message_id: Some(uuid::Uuid::nil()),
        sender_user: None,
        sender_device: None,
        client_msg_id: None,
        body: None,
        recalled: false,
        subject_user: None,
        target_seq: None,
        rel: None,
        mls: None,
    }
}

fn refused() -> StoreError {
    StoreError::Rejected(Rejection::NotMember)
}

#[async_trait]
impl Store for FakeStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn ping(&self) -> Result<(), StoreError> {
        if self.down {
            return Err(StoreError::Unavailable("connection refused".into()));
        }
        Ok(())
    }
    async fn create_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
    ) -> Result<User, StoreError> {
        self.touch();
        Ok(User {
            user_id: user_id.clone(),
            display_name: display_name.map(str::to_owned),
        })
    }
    async fn create_user_with_password(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
        _: &str,
    ) -> Result<User, StoreError> {
        self.create_user(user_id, display_name).await
    }
    async fn set_password_hash(&self, _: &UserId, _: &str) -> Result<(), StoreError> {
        self.touch();
        Ok(())
    }
    async fn password_hash(&self, _: &UserId) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
    async fn issue_device_token(
        &self,
        _: &UserId,
        _: &DeviceId,
        _: &str,
    ) -> Result<(), StoreError> {
        self.touch();
        Ok(())
    }
    async fn revoke_device(&self, _: &UserId, _: &DeviceId) -> Result<(), StoreError> {
        self.touch();
        Ok(())
    }
    async fn authenticate(&self, token_hash: &str) -> Result<Option<DeviceIdentity>, StoreError> {
        Ok(
            (token_hash == hash_token(DEVICE_TOKEN)).then(|| DeviceIdentity {
                user_id: UserId::from_trusted("ana".into()),
                device_id: DeviceId::from_trusted("phone".into()),
            }),
        )
    }
    async fn create_conversation(
        &self,
        _: &NewConversation,
    ) -> Result<CreatedConversation, StoreError> {
        self.touch();
        Err(refused())
    }
    async fn get_conversation(
        &self,
        _: &ConvId,
        _: &UserId,
    ) -> Result<ConversationView, StoreError> {
        self.touch();
        Err(refused())
    }
    async fn list_conversations(
        &self,
        _: &UserId,
        _: Option<&str>,
    ) -> Result<ConversationFeed, StoreError> {
        self.touch();
        Ok(ConversationFeed {
            conversations: Vec::new(),
            sync_token: "x1".into(),
        })
    }
    async fn add_member(
        &self,
        _: &ConvId,
        _: &UserId,
        _: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        self.touch();
        Err(refused())
    }
    async fn remove_member(
        &self,
        _: &ConvId,
        _: &UserId,
        _: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        self.touch();
        Err(refused())
    }
    async fn set_role(
        &self,
        _: &ConvId,
        _: &UserId,
        _: &UserId,
        _: Role,
    ) -> Result<Role, StoreError> {
        self.touch();
        Err(refused())
    }
    async fn send(&self, req: &SendRequest) -> Result<SendOutcome, StoreError> {
        self.touch();
        let dup = req.body.as_str() == "again";
        Ok(SendOutcome {
            conv_id: req.conv_id.clone(),
            seq: 3,
            message_id: uuid::Uuid::nil(),
            dup,
            purged: false,
            event: (!dup).then(|| msg_event(req.conv_id.clone(), 3)),
        })
    }
    async fn events(
        &self,
        _: &ConvId,
        _: &UserId,
        _: EventsQuery,
        _: u32,
    ) -> Result<EventsPage, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn mark_read(&self, _: &ConvId, _: &UserId, _: i64) -> Result<i64, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn recall(
        &self,
        _: &ConvId,
        _: &UserId,
        _: i64,
        _: chrono::DateTime<chrono::Utc>,
    ) -> Result<RecallOutcome, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn edit(&self, _: &EditRequest) -> Result<EditOutcome, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn react(&self, _: &ReactRequest) -> Result<ReactOutcome, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn thread(
        &self,
        _: &ConvId,
        _: &UserId,
        _: ThreadQuery,
        _: u32,
    ) -> Result<EventsPage, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn register_media(
        &self,
        _: &parley_store::NewMedia,
    ) -> Result<parley_store::MediaRecord, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn readable_media(
        &self,
        _: &parley_domain::MediaId,
        _: &UserId,
    ) -> Result<Option<parley_store::MediaRecord>, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn sweep_media(
        &self,
        _: i64,
        _: u32,
        _: &(dyn Fn(String) -> parley_store::BlobRemover + Send + Sync),
    ) -> Result<parley_store::MediaSweep, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn shared_key(&self, _: &str, _: &str) -> Result<String, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn set_push_target(
        &self,
        _: (&UserId, &DeviceId),
        _: &parley_store::PushTarget,
        _: i64,
    ) -> Result<(), StoreError> {
        self.touch();
        Err(refused())
    }

    async fn push_target(
        &self,
        _: (&UserId, &DeviceId),
    ) -> Result<Option<parley_store::PushTarget>, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn delete_push_target(&self, _: (&UserId, &DeviceId)) -> Result<bool, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn set_notify_level(
        &self,
        _: &ConvId,
        _: &UserId,
        _: parley_store::NotifyLevel,
    ) -> Result<(), StoreError> {
        self.touch();
        Err(refused())
    }

    async fn notify_level(
        &self,
        _: &ConvId,
        _: &UserId,
    ) -> Result<parley_store::NotifyLevel, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn set_push_privacy(&self, _: &UserId, _: bool) -> Result<(), StoreError> {
        self.touch();
        Err(refused())
    }

    async fn push_privacy(&self, _: &UserId) -> Result<bool, StoreError> {
        self.touch();
        Err(refused())
    }

    // The notification worker of a server under these tests finds no work.
    async fn expand_push_outbox(&self, _: i64, _: i64, _: u32) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn claim_push(
        &self,
        _: &str,
        _: i64,
        _: i64,
        _: u32,
    ) -> Result<Vec<parley_store::PushJob>, StoreError> {
        Ok(Vec::new())
    }

    async fn report_push(
        &self,
        _: &[parley_store::PushOutcome],
        _: i64,
        _: i64,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn search(
        &self,
        _: &parley_store::SearchRequest,
    ) -> Result<Vec<parley_store::SearchHit>, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn search_language(
        &self,
        _: &ConvId,
        _: &UserId,
    ) -> Result<parley_domain::SearchLanguage, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn set_search_language(
        &self,
        _: &ConvId,
        _: &UserId,
        _: parley_domain::SearchLanguage,
    ) -> Result<parley_domain::SearchLanguage, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn post_mls(
        &self,
        _: &parley_store::MlsRequest,
    ) -> Result<parley_store::MlsOutcome, StoreError> {
        self.touch();
        Err(refused())
    }

    /// Every conversation of the fake is a plain one.
    async fn is_encrypted(&self, _: &ConvId) -> Result<Option<bool>, StoreError> {
        self.touch();
        Ok(Some(false))
    }

    async fn publish_key_packages(
        &self,
        _: &parley_store::KeyPackageBatch,
    ) -> Result<parley_store::KeyPackageStock, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn key_package_stock(
        &self,
        _: &UserId,
        _: &DeviceId,
    ) -> Result<parley_store::KeyPackageStock, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn claim_key_packages(
        &self,
        _: &UserId,
    ) -> Result<Vec<parley_store::ClaimedPackage>, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn search_status(&self) -> Result<parley_store::SearchStatus, StoreError> {
        Ok(parley_store::SearchStatus {
            indexing: true,
            lag_events: 0,
        })
    }

    async fn push_backlog(&self) -> Result<parley_store::PushBacklog, StoreError> {
        Ok(parley_store::PushBacklog::default())
    }

    async fn purge_batch(
        &self,
        _: chrono::DateTime<chrono::Utc>,
        _: u32,
    ) -> Result<PurgeReport, StoreError> {
        Ok(PurgeReport::default())
    }

    async fn expire_tombstones(&self, _: chrono::DateTime<chrono::Utc>) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn renew_gateway(&self, _: &str, _: i64) -> Result<(), StoreError> {
        Ok(())
    }

    async fn release_gateway(&self, _: &str) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn reap_routes(&self, _: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn reap_route_users(&self, _: u32) -> Result<Vec<UserId>, StoreError> {
        Ok(Vec::new())
    }

    async fn gateway_leases(&self) -> Result<Vec<parley_store::GatewayLease>, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn claim_route(&self, _: &Route) -> Result<Option<Route>, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn device_route(&self, _: &UserId, _: &DeviceId) -> Result<Option<Route>, StoreError> {
        // A read: no route is known, so the sweep after lost notices kicks nothing.
        Ok(None)
    }

    async fn release_route(&self, _: &UserId, _: &DeviceId, _: &str) -> Result<bool, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn current_members(&self, _: &ConvId) -> Result<MemberSnapshot, StoreError> {
        self.touch();
        Err(refused())
    }

    async fn log_range(
        &self,
        _: &ConvId,
        _: i64,
        _: i64,
        _: u32,
    ) -> Result<Vec<Event>, StoreError> {
        self.touch();
        Err(refused())
    }
    async fn user_routes(&self, _: &UserId) -> Result<i64, StoreError> {
        self.touch();
        Ok(0)
    }
    async fn mark_seen(&self, _: &UserId) -> Result<Option<Seen>, StoreError> {
        self.touch();
        Ok(None)
    }
    async fn presence_peers(&self, _: &UserId, _: u32) -> Result<Vec<UserId>, StoreError> {
        self.touch();
        Ok(Vec::new())
    }
    async fn typing_targets(
        &self,
        _: &ConvId,
        _: &UserId,
        _: u32,
    ) -> Result<Option<TypingTargets>, StoreError> {
        self.touch();
        Ok(None)
    }
    async fn presence_of(&self, _: &UserId, _: &[UserId]) -> Result<Vec<UserPresence>, StoreError> {
        self.touch();
        Ok(Vec::new())
    }
}

struct Harness {
    store: Arc<FakeStore>,
    bus: Arc<LocalBus>,
    state: AppState,
}

fn harness_with(store: FakeStore, body_bytes_max: usize, request_bytes_max: usize) -> Harness {
    let store = Arc::new(store);
    let bus = Arc::new(LocalBus::new());
    let mut config = ServerConfig {
        admin_token: ADMIN_TOKEN.into(),
        ..ServerConfig::default()
    };
    config.limits.body_bytes_max = body_bytes_max;
    config.limits.request_bytes_max = request_bytes_max;
    let state = AppState::new(store.clone(), bus.clone(), config);
    Harness { store, bus, state }
}

/// The second seed's teaching limits: 6-byte bodies, 4096-byte requests.
fn harness() -> Harness {
    harness_with(FakeStore::default(), 6, 4096)
}

async fn call(
    h: &Harness,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<String>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if let Some(b) = &body {
        req = req
            .header(header::CONTENT_LENGTH, b.len())
            .header(header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .expect("a valid request");
    let resp = app(h.state.clone())
        .oneshot(req)
        .await
        .expect("the router is infallible");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a readable body");
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON answer")
    };
    (status, json)
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

const SEND_URI: &str = "/v1/conversations/c-1/messages";

#[tokio::test]
async fn authentication_comes_before_everything() {
    let h = harness();
    let huge = "x".repeat(10_000);
    let (status, v) = call(&h, Method::POST, SEND_URI, None, Some(huge)).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED")
    );
    let (status, v) = call(
        &h,
        Method::POST,
        SEND_URI,
        Some("pd_wrong"),
        Some("{".into()),
    )
    .await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED")
    );
    assert_eq!(h.store.touched(), 0);
}

#[tokio::test]
async fn request_limit_comes_before_parsing() {
    let h = harness();
    let huge = format!("{{\"oops\": \"{}\"", "x".repeat(5000));
    let (status, v) = call(&h, Method::POST, SEND_URI, Some(DEVICE_TOKEN), Some(huge)).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "REQUEST_TOO_LARGE")
    );
    assert_eq!(h.store.touched(), 0);
}

#[tokio::test]
async fn body_limit_outranks_unknown_fields_and_bad_paths() {
    let h = harness();
    let req = json!({"client_msg_id": "m1", "body": "你好呀", "sender": "ben"}).to_string();
    let uri = "/v1/conversations/bad%20id/messages";
    let (status, v) = call(&h, Method::POST, uri, Some(DEVICE_TOKEN), Some(req)).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_LARGE")
    );
    assert_eq!(h.store.touched(), 0);
}

#[tokio::test]
async fn malformed_and_unknown_fields_are_bad_requests_that_write_nothing() {
    let h = harness();
    for req in [
        "{".to_owned(),
        String::new(),
        json!({"client_msg_id": "m1", "body": "hi", "sender_user": "ben"}).to_string(),
        json!({"client_msg_id": "m1", "body": ""}).to_string(),
        json!({"client_msg_id": "", "body": "hi"}).to_string(),
        json!({"body": "hi"}).to_string(),
    ] {
        let (status, v) = call(
            &h,
            Method::POST,
            SEND_URI,
            Some(DEVICE_TOKEN),
            Some(req.clone()),
        )
        .await;
        assert_eq!(
            (status, code(&v)),
            (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            "{req}"
        );
    }
    let good = json!({"client_msg_id": "m1", "body": "hi"}).to_string();
    let uri = "/v1/conversations/bad%20id/messages";
    let (status, v) = call(&h, Method::POST, uri, Some(DEVICE_TOKEN), Some(good)).await;
    assert_eq!((status, code(&v)), (StatusCode::BAD_REQUEST, "BAD_REQUEST"));
    assert_eq!(h.store.touched(), 0);
}

#[tokio::test]
async fn a_committed_send_is_acked_and_announced_a_replay_only_acked() {
    let h = harness();
    let mut sub = h.bus.subscribe();
    let req = json!({"client_msg_id": "m1", "body": "hi"}).to_string();
    let (status, v) = call(&h, Method::POST, SEND_URI, Some(DEVICE_TOKEN), Some(req)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["conv_id"], "c-1");
    assert_eq!(v["seq"], 3);
    assert_eq!(v["dup"], false);
    assert!(v.get("purged").is_none());
    assert_eq!(
        sub.try_recv()
            .ok()
            .and_then(|a| a.committed().map(|c| c.head)),
        Some(3)
    );

    let req = json!({"client_msg_id": "m1", "body": "again"}).to_string();
    let (status, v) = call(&h, Method::POST, SEND_URI, Some(DEVICE_TOKEN), Some(req)).await;
    assert_eq!((status, v["dup"].as_bool()), (StatusCode::OK, Some(true)));
    assert!(sub.try_recv().is_err());
}

#[tokio::test]
async fn admin_endpoints_tell_device_tokens_from_unknown_ones() {
    let h = harness();
    let req = || Some(json!({"user_id": "ben"}).to_string());
    let uri = "/v1/admin/users";
    let (status, v) = call(&h, Method::POST, uri, Some(DEVICE_TOKEN), req()).await;
    assert_eq!((status, code(&v)), (StatusCode::FORBIDDEN, "FORBIDDEN"));
    let (status, v) = call(&h, Method::POST, uri, Some("nope"), req()).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED")
    );
    assert_eq!(h.store.touched(), 0);
    let (status, v) = call(&h, Method::POST, uri, Some(ADMIN_TOKEN), req()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(v, json!({"user_id": "ben", "display_name": null}));
}

#[tokio::test]
async fn issued_tokens_are_returned_once_and_revocation_answers_204() {
    let h = harness();
    let uri = "/v1/admin/users/ben/devices";
    let req = Some(json!({"device_id": "laptop"}).to_string());
    let (status, v) = call(&h, Method::POST, uri, Some(ADMIN_TOKEN), req).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(v["token"].as_str().is_some_and(|t| t.starts_with("pd_")));
    let uri = "/v1/admin/users/ben/devices/laptop";
    let (status, _) = call(&h, Method::DELETE, uri, Some(ADMIN_TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn an_empty_admin_token_opens_nothing() {
    let store = Arc::new(FakeStore::default());
    let h = Harness {
        state: AppState::new(
            store.clone(),
            Arc::new(LocalBus::new()),
            ServerConfig::default(),
        ),
        store,
        bus: Arc::new(LocalBus::new()),
    };
    let req = Some(json!({"user_id": "ben"}).to_string());
    let (status, _) = call(&h, Method::POST, "/v1/admin/users", Some(""), req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_envelope() {
    let h = harness();
    let (status, v) = call(&h, Method::GET, "/v1/nothing", Some(DEVICE_TOKEN), None).await;
    assert_eq!((status, code(&v)), (StatusCode::NOT_FOUND, "NOT_FOUND"));
    let (status, v) = call(&h, Method::PATCH, SEND_URI, Some(DEVICE_TOKEN), None).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED")
    );
}

#[tokio::test]
async fn conflicting_cursors_are_refused_before_the_store() {
    let h = harness();
    let uri = "/v1/conversations/c-1/events?after=1&before=5";
    let (status, v) = call(&h, Method::GET, uri, Some(DEVICE_TOKEN), None).await;
    assert_eq!((status, code(&v)), (StatusCode::BAD_REQUEST, "BAD_REQUEST"));
    let uri = "/v1/conversations/c-1/events?limit=0";
    let (status, _) = call(&h, Method::GET, uri, Some(DEVICE_TOKEN), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(h.store.touched(), 0);
    let uri = "/v1/conversations/c-1/events?after=1";
    let (status, v) = call(&h, Method::GET, uri, Some(DEVICE_TOKEN), None).await;
    assert_eq!((status, code(&v)), (StatusCode::NOT_FOUND, "NOT_MEMBER"));
}

#[tokio::test]
async fn readiness_follows_the_store() {
    let h = harness();
    // Before the first renewal the gateway holds no lease, so it is not ready.
    let (status, v) = call(&h, Method::GET, "/readyz", None, None).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "LEASE_EXPIRED")
    );
    let gateway = h.state.gateway();
    assert!(gateway.lease().renew(&*h.store, gateway.id()).await);
    let (status, v) = call(&h, Method::GET, "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((&v["status"], &v["lease"]), (&json!("ready"), &json!("ok")));
    let h = harness_with(
        FakeStore {
            down: true,
            ..FakeStore::default()
        },
        6,
        4096,
    );
    let (status, v) = call(&h, Method::GET, "/readyz", None, None).await;
    assert_eq!(
        (status, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
    );
    assert!(!v.to_string().contains("connection refused"));
    let (status, _) = call(&h, Method::GET, "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn list_answers_a_sync_token() {
    let h = harness();
    let uri = "/v1/conversations?since=full";
    let (status, v) = call(&h, Method::GET, uri, Some(DEVICE_TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["conversations"], json!([]));
    assert!(v["sync_token"].is_string());
}

#[tokio::test]
async fn a_sweep_after_lost_notices_closes_only_connections_of_tokens_that_no_longer_work() {
    use crate::gateway::hub::{CloseReason, ConnHandle, Hub};
    use crate::gateway::notices::recheck_all;
    use crate::gateway::out_queue;
    use tokio::sync::watch;

    let hub = Hub::default();
    let store = FakeStore::default();
    let mut closed = Vec::new();
    for (user, device, token) in [
        ("ana", "phone", DEVICE_TOKEN),
        ("ana", "laptop", "a token revoked meanwhile"),
        ("ben", "phone", DEVICE_TOKEN),
    ] {
        let (tx, _rx) = out_queue::channel(1);
        let (close, watch_close) = watch::channel(None);
        let handle = ConnHandle::new(
            format!("{user}/{device}"),
            DeviceId::from_trusted(device.into()),
            hash_token(token),
            tx,
            close,
        );
        hub.register(&UserId::from_trusted(user.into()), Arc::new(handle));
        closed.push(watch_close);
    }
    recheck_all(&hub, &store, "gw-test").await;
    let codes: Vec<Option<u16>> = closed
        .iter()
        .map(|c| c.borrow().map(CloseReason::code))
        .collect();
    // ana's phone holds the store's token; ana's laptop a token it no longer knows; ben's
    // phone the token of another user's device.
    assert_eq!(codes, [None, Some(4003), Some(4003)]);
    assert_eq!(store.touched(), 0, "checking tokens writes nothing");
}

/// Every operation the server serves, as (method, path template): SPEC §6's endpoints, the
/// probes, `/v1/me`, `/v1/presence`, the account endpoints, edits and reactions, the WebSocket upgrade, the web client and the document itself. A route added to the router
/// belongs here too; one missing from the document fails the test below.
const SERVED_OPERATIONS: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/openapi.json"),
    ("post", "/v1/admin/users"),
    ("post", "/v1/admin/users/{user_id}/devices"),
    ("delete", "/v1/admin/users/{user_id}/devices/{device_id}"),
    ("put", "/v1/admin/users/{user_id}/password"),
    ("post", "/v1/auth/login"),
    ("post", "/v1/auth/logout"),
    ("post", "/v1/auth/register"),
    ("put", "/v1/auth/password"),
    ("get", "/v1/admin/gateways"),
    ("get", "/v1/admin/server"),
    ("post", "/v1/conversations"),
    ("get", "/v1/conversations"),
    ("get", "/v1/conversations/{conv_id}"),
    ("post", "/v1/conversations/{conv_id}/members"),
    ("delete", "/v1/conversations/{conv_id}/members/{user_id}"),
    ("put", "/v1/conversations/{conv_id}/members/{user_id}"),
    ("post", "/v1/conversations/{conv_id}/messages"),
    ("get", "/v1/conversations/{conv_id}/events"),
    ("post", "/v1/conversations/{conv_id}/events/{seq}/recall"),
    ("post", "/v1/conversations/{conv_id}/events/{seq}/edit"),
    (
        "put",
        "/v1/conversations/{conv_id}/events/{seq}/reactions/{key}",
    ),
    (
        "delete",
        "/v1/conversations/{conv_id}/events/{seq}/reactions/{key}",
    ),
    ("post", "/v1/conversations/{conv_id}/read"),
    ("post", "/v1/media"),
    ("get", "/v1/media/{media_id}"),
    ("get", "/v1/media/{media_id}/thumbnail"),
    ("post", "/v1/media/{media_id}/url"),
    ("get", "/v1/ws"),
    ("get", "/v1/me"),
    ("get", "/v1/presence"),
    ("get", "/v1/push/vapid"),
    ("put", "/v1/devices/me/push"),
    ("get", "/v1/devices/me/push"),
    ("delete", "/v1/devices/me/push"),
    ("get", "/v1/conversations/{conv_id}/notifications"),
    ("put", "/v1/conversations/{conv_id}/notifications"),
    ("get", "/v1/me/notifications"),
    ("put", "/v1/me/notifications"),
    ("get", "/v1/search"),
    ("get", "/v1/conversations/{conv_id}/search"),
    ("put", "/v1/conversations/{conv_id}/search"),
    ("post", "/v1/conversations/{conv_id}/mls"),
    ("post", "/v1/devices/me/key-packages"),
    ("get", "/v1/devices/me/key-packages"),
    ("post", "/v1/users/{user_id}/key-packages/claim"),
    ("get", "/metrics"),
    ("get", "/"),
    ("get", "/web/{name}"),
];

/// The (method, path) pairs of the OpenAPI document, sorted.
fn documented_operations() -> Vec<(String, String)> {
    let doc = serde_json::to_value(crate::openapi::document()).expect("the document serialises");
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in ["get", "put", "post", "delete", "patch", "head", "options"] {
            if item.get(method).is_some() {
                ops.push((method.to_owned(), path.clone()));
            }
        }
    }
    ops.sort();
    ops
}

#[test]
fn the_document_describes_every_served_operation_and_no_other() {
    let mut served: Vec<(String, String)> = SERVED_OPERATIONS
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    served.sort();
    assert_eq!(documented_operations(), served);
}

#[test]
fn every_refusal_in_the_document_is_the_error_body() {
    let doc = serde_json::to_value(crate::openapi::document()).expect("the document serialises");
    let error_ref = json!({"$ref": "#/components/schemas/ErrorBody"});
    let mut refusals = 0;
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            let Some(responses) = op["responses"].as_object() else {
                continue;
            };
            for (status, response) in responses {
                if status.starts_with('4') || status.starts_with('5') {
                    refusals += 1;
                    let schema = &response["content"]["application/json"]["schema"];
                    assert_eq!(schema, &error_ref, "{method} {path} {status}");
                }
            }
            let secured = op.get("security").is_some();
            if secured && path != "/v1/ws" {
                assert!(responses.contains_key("401"), "{method} {path} lacks 401");
            }
        }
    }
    assert!(
        refusals > SERVED_OPERATIONS.len(),
        "{refusals} refusals documented"
    );
    let codes = &doc["components"]["schemas"]["ErrorCode"]["enum"];
    assert_eq!(
        codes.as_array().map(Vec::len),
        Some(parley_wire::ErrorCode::ALL.len())
    );
}

/// Each documented operation reaches a handler of the router: the answer is never the
/// fallback's `no such route` nor 405.
#[tokio::test]
async fn every_documented_operation_is_routed() {
    let h = harness();
    for (method, path) in documented_operations() {
        let uri = path
            .replace("{conv_id}", "c-1")
            .replace("{user_id}", "ana")
            .replace("{device_id}", "d-1")
            .replace("{seq}", "1")
            .replace("{name}", "app.js");
        if path == "/" || path.starts_with("/web/") {
            // The web client answers HTML, scripts and styles, not JSON.
            let req = Request::builder()
                .uri(&uri)
                .body(Body::empty())
                .expect("a valid request");
            let resp = app(h.state.clone())
                .oneshot(req)
                .await
                .expect("the router is infallible");
            assert_eq!(resp.status(), StatusCode::OK, "GET {uri}");
            continue;
        }
        let token = if path.starts_with("/v1/admin") {
            ADMIN_TOKEN
        } else {
            DEVICE_TOKEN
        };
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
        let body = [Method::POST, Method::PUT]
            .contains(&method)
            .then(|| "{}".to_owned());
        let (status, v) = call(&h, method.clone(), &uri, Some(token), body).await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert_ne!(
            v["error"]["message"].as_str(),
            Some("no such route"),
            "{method} {uri}"
        );
    }
}

#[tokio::test]
async fn the_document_is_served_as_json() {
    let h = harness();
    let (status, v) = call(&h, Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(v["openapi"].as_str().is_some_and(|s| s.starts_with("3.")));
    assert!(v["components"]["securitySchemes"]["device_token"].is_object());
    assert!(v["components"]["securitySchemes"]["admin_token"].is_object());
}
