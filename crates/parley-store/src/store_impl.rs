//! The [`Store`] contract for every backend, once: each call is a flow of `flow/`, a read of
//! `read.rs` or `views.rs`, or one of the backend's own operations.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parley_domain::{ConvId, ConversationView, DeviceId, Event, EventsPage, Role, UserId};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::{
    admin, create, join, leave, media, push, read_mark, recall, relate, retention, role, route,
};
use crate::mls_types::*;
use crate::presence::{self, Presence};
use crate::push_types::*;
use crate::store::Store;
use crate::types::*;
use crate::{read, views};

#[async_trait]
impl<B: Backend> Store for B {
    fn observe(&self, observer: std::sync::Arc<dyn crate::StoreObserver>) {
        Backend::observe(self, observer);
    }

    fn describe(&self) -> StoreDescription {
        Backend::describe(self)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_schema().await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.ping_database().await
    }

    async fn create_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
    ) -> Result<User, StoreError> {
        admin::create_user(self, user_id, display_name, None).await
    }

    async fn create_user_with_password(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
        password_hash: &str,
    ) -> Result<User, StoreError> {
        admin::create_user(self, user_id, display_name, Some(password_hash)).await
    }

    async fn set_password_hash(
        &self,
        user_id: &UserId,
        password_hash: &str,
    ) -> Result<(), StoreError> {
        admin::set_password_hash(self, user_id, password_hash).await
    }

    async fn password_hash(&self, user_id: &UserId) -> Result<Option<String>, StoreError> {
        self.password_hash_of(user_id).await
    }

    async fn issue_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        token_hash: &str,
    ) -> Result<(), StoreError> {
        admin::issue_device_token(self, user_id, device_id, token_hash).await
    }

    async fn revoke_device(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
    ) -> Result<(), StoreError> {
        admin::revoke_device(self, user_id, device_id).await
    }

    async fn authenticate(&self, token_hash: &str) -> Result<Option<DeviceIdentity>, StoreError> {
        self.device_of_token(token_hash).await
    }

    async fn create_conversation(
        &self,
        req: &NewConversation,
    ) -> Result<CreatedConversation, StoreError> {
        create::create_conversation(self, req).await
    }

    async fn get_conversation(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
    ) -> Result<ConversationView, StoreError> {
        views::get_conversation(self, conv_id, viewer).await
    }

    async fn list_conversations(
        &self,
        viewer: &UserId,
        since: Option<&str>,
    ) -> Result<ConversationFeed, StoreError> {
        views::list_conversations(self, viewer, since).await
    }

    async fn add_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        join::add_member(self, conv_id, actor, target).await
    }

    async fn remove_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        leave::remove_member(self, conv_id, actor, target).await
    }

    async fn set_role(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
        role: Role,
    ) -> Result<Role, StoreError> {
        role::set_role(self, conv_id, actor, target, role).await
    }

    async fn send(&self, req: &SendRequest) -> Result<SendOutcome, StoreError> {
        if req.relations.is_empty() {
            self.commit_send(req).await
        } else {
            relate::send_related(self, req).await
        }
    }

    async fn post_mls(&self, req: &MlsRequest) -> Result<MlsOutcome, StoreError> {
        crate::flow::mls::post_mls(self, req).await
    }

    async fn is_encrypted(&self, conv_id: &ConvId) -> Result<Option<bool>, StoreError> {
        crate::flow::mls::is_encrypted(self, conv_id).await
    }

    async fn publish_key_packages(
        &self,
        batch: &KeyPackageBatch,
    ) -> Result<KeyPackageStock, StoreError> {
        crate::flow::mls_keys::publish(self, batch).await
    }

    async fn key_package_stock(
        &self,
        user: &UserId,
        device: &DeviceId,
    ) -> Result<KeyPackageStock, StoreError> {
        crate::flow::mls_keys::stock(self, user, device).await
    }

    async fn claim_key_packages(&self, user: &UserId) -> Result<Vec<ClaimedPackage>, StoreError> {
        crate::flow::mls_keys::claim(self, user).await
    }

    async fn edit(&self, req: &EditRequest) -> Result<EditOutcome, StoreError> {
        relate::edit(self, req).await
    }

    async fn react(&self, req: &ReactRequest) -> Result<ReactOutcome, StoreError> {
        relate::react(self, req).await
    }

    async fn register_media(&self, new: &NewMedia) -> Result<MediaRecord, StoreError> {
        media::register(self, new).await
    }

    async fn readable_media(
        &self,
        media_id: &parley_domain::MediaId,
        viewer: &UserId,
    ) -> Result<Option<MediaRecord>, StoreError> {
        media::readable(self, media_id, viewer).await
    }

    async fn sweep_media(
        &self,
        uploaded_before_ms: i64,
        batch_len_max: u32,
        remover: &(dyn Fn(String) -> BlobRemover + Send + Sync),
    ) -> Result<MediaSweep, StoreError> {
        media::sweep(self, uploaded_before_ms, batch_len_max, remover).await
    }

    async fn shared_key(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        media::shared_key(self, name, candidate).await
    }

    async fn set_push_target(
        &self,
        device: (&UserId, &DeviceId),
        target: &PushTarget,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        push::set_target(self, device, target, now_ms).await
    }

    async fn push_target(
        &self,
        device: (&UserId, &DeviceId),
    ) -> Result<Option<PushTarget>, StoreError> {
        push::target(self, device).await
    }

    async fn delete_push_target(&self, device: (&UserId, &DeviceId)) -> Result<bool, StoreError> {
        push::delete_target(self, device).await
    }

    async fn set_notify_level(
        &self,
        conv_id: &ConvId,
        user: &UserId,
        level: NotifyLevel,
    ) -> Result<(), StoreError> {
        push::set_level(self, conv_id, user, level).await
    }

    async fn notify_level(
        &self,
        conv_id: &ConvId,
        user: &UserId,
    ) -> Result<NotifyLevel, StoreError> {
        push::level(self, conv_id, user).await
    }

    async fn set_push_privacy(&self, user: &UserId, privacy: bool) -> Result<(), StoreError> {
        push::set_privacy(self, user, privacy).await
    }

    async fn push_privacy(&self, user: &UserId) -> Result<bool, StoreError> {
        push::privacy(self, user).await
    }

    async fn expand_push_outbox(
        &self,
        now_ms: i64,
        coalesce_ms: i64,
        batch_len_max: u32,
    ) -> Result<u64, StoreError> {
        push::expand(self, now_ms, coalesce_ms, batch_len_max).await
    }

    async fn claim_push(
        &self,
        lease: &str,
        now_ms: i64,
        lease_ms: i64,
        batch_len_max: u32,
    ) -> Result<Vec<PushJob>, StoreError> {
        push::claim(self, lease, now_ms, lease_ms, batch_len_max).await
    }

    async fn report_push(
        &self,
        outcomes: &[PushOutcome],
        now_ms: i64,
        coalesce_ms: i64,
    ) -> Result<(), StoreError> {
        push::report(self, outcomes, now_ms, coalesce_ms).await
    }

    async fn push_backlog(&self) -> Result<PushBacklog, StoreError> {
        push::backlog(self).await
    }

    async fn search(&self, req: &SearchRequest) -> Result<Vec<SearchHit>, StoreError> {
        crate::flow::search::search(self, req).await
    }

    async fn search_language(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
    ) -> Result<parley_domain::SearchLanguage, StoreError> {
        crate::flow::search::language(self, conv_id, viewer).await
    }

    async fn set_search_language(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        language: parley_domain::SearchLanguage,
    ) -> Result<parley_domain::SearchLanguage, StoreError> {
        crate::flow::search::set_language(self, conv_id, actor, language).await
    }

    async fn search_status(&self) -> Result<SearchStatus, StoreError> {
        crate::flow::search::status(self).await
    }

    async fn thread(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        thread: ThreadQuery,
        limit: u32,
    ) -> Result<EventsPage, StoreError> {
        read::thread(self, conv_id, viewer, thread.root, thread.query, limit).await
    }

    async fn events(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        query: EventsQuery,
        limit: u32,
    ) -> Result<EventsPage, StoreError> {
        read::events(self, conv_id, viewer, query, limit).await
    }

    async fn recall(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target_seq: i64,
        now: DateTime<Utc>,
    ) -> Result<RecallOutcome, StoreError> {
        recall::recall(self, conv_id, actor, target_seq, now).await
    }

    async fn mark_read(
        &self,
        conv_id: &ConvId,
        user: &UserId,
        seq: i64,
    ) -> Result<i64, StoreError> {
        read_mark::mark_read(self, conv_id, user, seq).await
    }

    async fn purge_batch(
        &self,
        now: DateTime<Utc>,
        batch_events_max: u32,
    ) -> Result<PurgeReport, StoreError> {
        retention::purge_batch(self, now, batch_events_max).await
    }

    async fn expire_tombstones(&self, older_than: DateTime<Utc>) -> Result<u64, StoreError> {
        retention::expire_tombstones(self, older_than).await
    }

    async fn renew_gateway(&self, gateway_id: &str, lease_ms: i64) -> Result<(), StoreError> {
        self.renew_lease(gateway_id, lease_ms).await
    }

    async fn release_gateway(&self, gateway_id: &str) -> Result<u64, StoreError> {
        self.release_lease(gateway_id).await
    }

    async fn reap_routes(&self, batch_len_max: u32) -> Result<u64, StoreError> {
        Ok(self.reap_expired(batch_len_max).await?.len() as u64)
    }

    async fn reap_route_users(&self, batch_len_max: u32) -> Result<Vec<UserId>, StoreError> {
        self.reap_expired(batch_len_max).await
    }

    async fn gateway_leases(&self) -> Result<Vec<GatewayLease>, StoreError> {
        self.leases().await
    }

    async fn claim_route(&self, route: &Route) -> Result<Option<Route>, StoreError> {
        route::claim_route(self, route).await
    }

    async fn device_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
    ) -> Result<Option<Route>, StoreError> {
        route::device_route(self, (user_id, device_id)).await
    }

    async fn release_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        self.delete_route((user_id, device_id), conn_id).await
    }

    async fn current_members(&self, conv_id: &ConvId) -> Result<MemberSnapshot, StoreError> {
        read::current_members(self, conv_id).await
    }

    async fn log_range(
        &self,
        conv_id: &ConvId,
        after: i64,
        upto: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        read::log_range(self, conv_id, (after, upto), limit).await
    }

    async fn user_routes(&self, user_id: &UserId) -> Result<i64, StoreError> {
        presence::user_routes(self, user_id).await
    }

    async fn mark_seen(&self, user_id: &UserId) -> Result<Option<Seen>, StoreError> {
        Ok(Presence::mark_seen(self, user_id)
            .await?
            .map(|(routes_left, last_seen)| Seen {
                routes_left,
                last_seen,
            }))
    }

    async fn presence_peers(
        &self,
        user_id: &UserId,
        limit: u32,
    ) -> Result<Vec<UserId>, StoreError> {
        presence::presence_peers(self, user_id, limit).await
    }

    async fn typing_targets(
        &self,
        conv_id: &ConvId,
        user_id: &UserId,
        limit: u32,
    ) -> Result<Option<TypingTargets>, StoreError> {
        presence::typing_targets(self, conv_id, user_id, limit).await
    }

    async fn presence_of(
        &self,
        viewer: &UserId,
        users: &[UserId],
    ) -> Result<Vec<UserPresence>, StoreError> {
        presence::presence_of(self, viewer, users).await
    }
}
