//! PostgreSQL implementation of the store (placeholder until the real one lands).

use async_trait::async_trait;
use parley_domain::{ConvId, ConversationView, DeviceId, EventsPage, Role, UserId};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::{error::StoreError, store::Store, types::*};

#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
}

fn todo_err() -> StoreError {
    StoreError::Unavailable("not implemented yet".into())
}

impl PgStore {
    /// Connects a pool of at most `pool_size` connections.
    pub async fn connect(url: &str, pool_size: u32) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        Err(todo_err())
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Err(todo_err())
    }
    async fn create_user(&self, _: &UserId, _: Option<&str>) -> Result<User, StoreError> {
        Err(todo_err())
    }
    async fn issue_device_token(
        &self,
        _: &UserId,
        _: &DeviceId,
        _: &str,
    ) -> Result<(), StoreError> {
        Err(todo_err())
    }
    async fn revoke_device(&self, _: &UserId, _: &DeviceId) -> Result<(), StoreError> {
        Err(todo_err())
    }
    async fn authenticate(&self, _: &str) -> Result<Option<DeviceIdentity>, StoreError> {
        Err(todo_err())
    }
    async fn create_conversation(
        &self,
        _: &NewConversation,
    ) -> Result<CreatedConversation, StoreError> {
        Err(todo_err())
    }
    async fn get_conversation(
        &self,
        _: &ConvId,
        _: &UserId,
    ) -> Result<ConversationView, StoreError> {
        Err(todo_err())
    }
    async fn list_conversations(&self, _: &UserId) -> Result<Vec<ConversationView>, StoreError> {
        Err(todo_err())
    }
    async fn add_member(
        &self,
        _: &ConvId,
        _: &UserId,
        _: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        Err(todo_err())
    }
    async fn remove_member(
        &self,
        _: &ConvId,
        _: &UserId,
        _: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        Err(todo_err())
    }
    async fn set_role(
        &self,
        _: &ConvId,
        _: &UserId,
        _: &UserId,
        _: Role,
    ) -> Result<Role, StoreError> {
        Err(todo_err())
    }
    async fn send(&self, _: &SendRequest) -> Result<SendOutcome, StoreError> {
        Err(todo_err())
    }
    async fn events(
        &self,
        _: &ConvId,
        _: &UserId,
        _: EventsQuery,
        _: u32,
    ) -> Result<EventsPage, StoreError> {
        Err(todo_err())
    }
}
