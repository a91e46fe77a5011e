//! What a backend supplies to the store-neutral flows: transactions, and the few operations
//! that run outside one.

use chrono::{DateTime, Utc};

use crate::flow::create::CreateTx;
use crate::flow::membership::MembershipTx;
use crate::flow::recall::RecallTx;
use crate::flow::retention::PurgeTx;
use crate::flow::send::SendTx;
use crate::flow::StoreFuture;

/// A database the store runs on. Its transaction type implements the primitives of every flow.
pub(crate) trait Backend: Send + Sync + 'static {
    type Tx: SendTx + CreateTx + MembershipTx + RecallTx + PurgeTx + 'static;

    /// Starts a write transaction: its first lock statement serialises it with every other
    /// write of the conversation.
    fn begin_write(&self) -> impl StoreFuture<Self::Tx>;

    /// Conversations with events past retention at `now`, by id, at most `limit`.
    fn due_for_purge(&self, now: DateTime<Utc>, limit: usize) -> impl StoreFuture<Vec<String>>;
    /// Deletes at most `len_max` tombstones purged before `older_than`; answers how many.
    fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> impl StoreFuture<u64>;
}
