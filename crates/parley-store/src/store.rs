//! The storage-neutral contract.

use async_trait::async_trait;
use parley_domain::{ConvId, ConversationView, DeviceId, EventsPage, Role, UserId};

use crate::error::StoreError;
use crate::types::*;

/// Everything the server asks of the authoritative store. Implementations keep P1–P11; the
/// contract tests in `tests/` hold them to it.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies the embedded migrations.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// Succeeds when the store answers a trivial query.
    async fn ping(&self) -> Result<(), StoreError>;

    // Users and devices.
    async fn create_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
    ) -> Result<User, StoreError>;
    /// Stores the hash of a new token for the device, creating the device or replacing (and so
    /// revoking) its previous token. `NotFound` when the user does not exist.
    async fn issue_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        token_hash: &str,
    ) -> Result<(), StoreError>;
    /// Revokes the device's token. `NotFound` when there is no such device.
    async fn revoke_device(&self, user_id: &UserId, device_id: &DeviceId)
        -> Result<(), StoreError>;
    /// The live device a token hash belongs to; `None` for unknown or revoked tokens.
    async fn authenticate(&self, token_hash: &str) -> Result<Option<DeviceIdentity>, StoreError>;

    // Conversations and membership.
    async fn create_conversation(
        &self,
        req: &NewConversation,
    ) -> Result<CreatedConversation, StoreError>;
    /// The conversation as `viewer` sees it; `NotMember` unless the viewer ever had a period.
    async fn get_conversation(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
    ) -> Result<ConversationView, StoreError>;
    /// Every conversation in which `viewer` ever had a period.
    async fn list_conversations(
        &self,
        viewer: &UserId,
    ) -> Result<Vec<ConversationView>, StoreError>;
    async fn add_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError>;
    /// Leave (`actor == target`) or remove another member.
    async fn remove_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError>;
    async fn set_role(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
        role: Role,
    ) -> Result<Role, StoreError>;

    // The log.
    /// The send transaction of SPEC §4.
    async fn send(&self, req: &SendRequest) -> Result<SendOutcome, StoreError>;
    /// Events visible to `viewer`, ascending after a cursor or descending before one.
    async fn events(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        query: EventsQuery,
        limit: u32,
    ) -> Result<EventsPage, StoreError>;
}
