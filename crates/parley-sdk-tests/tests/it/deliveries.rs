//! Reading a realtime session's deliveries in tests: each wait is bounded, and a session that
//! ends is an error rather than a hang.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use parley_client::{Delivery, Realtime};

/// Longest wait for one delivery; generous for a loaded 2-core machine.
pub const DELIVERY_WAIT_MS: u64 = 10_000;

/// The next delivery.
pub async fn next_delivery(rt: &mut Realtime) -> Result<Delivery> {
    tokio::time::timeout(Duration::from_millis(DELIVERY_WAIT_MS), rt.next())
        .await
        .context("waiting for a delivery")?
        .context("the session ended")
}

/// Reads deliveries until one matches, returning it.
pub async fn wait_for(rt: &mut Realtime, wanted: impl Fn(&Delivery) -> bool) -> Result<Delivery> {
    loop {
        let d = next_delivery(rt).await?;
        if wanted(&d) {
            return Ok(d);
        }
    }
}

/// Nothing but ephemeral deliveries (typing, presence: other users coming and going) arrives
/// for `ms`.
pub async fn quiet(rt: &mut Realtime, ms: u64) -> Result<()> {
    let until = tokio::time::Instant::now() + Duration::from_millis(ms);
    while let Ok(d) = tokio::time::timeout_at(until, rt.next()).await {
        if !matches!(d, Some(Delivery::Typing { .. } | Delivery::Presence { .. })) {
            bail!("unexpected delivery {d:?}");
        }
    }
    Ok(())
}
