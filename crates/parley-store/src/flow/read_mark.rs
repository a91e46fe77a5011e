//! Moving a read position (P8): to `max(read_seq, min(seq, head))`, where `head` is what the
//! reader may see. A former member may still move theirs, up to the end of their last period;
//! it changes nothing others see.

use parley_domain::decide::view::clamp_read;
use parley_domain::{ConvId, UserId};

use super::{ReadTx, StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::read::{snapshot, LogReadTx};

pub(crate) trait ReadMarkTx: WriteTx + LogReadTx {
    /// Raises the read position of `reader`, a conversation and a user, to `seq` unless it is
    /// higher already (the maximum keeps it monotonic under concurrent marks); only a move
    /// counts as a change for the sync feed. Answers the resulting position.
    fn raise_read_mark(&mut self, reader: (&ConvId, &UserId), seq: i64) -> impl StoreFuture<i64>;
}

pub(crate) async fn mark_read<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    user: &UserId,
    seq: i64,
) -> Result<i64, StoreError> {
    let mut tx = backend.begin_write().await?;
    let snap = snapshot(&mut tx, conv_id, user).await?;
    let read_seq = tx
        .raise_read_mark((conv_id, user), clamp_read(seq, snap.head))
        .await?;
    // The position is a maximum: a retry after a failed commit moves it the same way.
    tx.finish().await?;
    Ok(read_seq)
}
