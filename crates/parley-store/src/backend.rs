//! What a backend supplies to the store-neutral flows: transactions, and the few operations
//! that run outside one.

use crate::flow::create::CreateTx;
use crate::flow::membership::MembershipTx;
use crate::flow::send::SendTx;
use crate::flow::StoreFuture;

/// A database the store runs on. Its transaction type implements the primitives of every flow.
pub(crate) trait Backend: Send + Sync + 'static {
    type Tx: SendTx + CreateTx + MembershipTx + 'static;

    /// Starts a write transaction: its first lock statement serialises it with every other
    /// write of the conversation.
    fn begin_write(&self) -> impl StoreFuture<Self::Tx>;
}
