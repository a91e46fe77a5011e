//! The gateway's lease in the store and route convergence (chapter 10).
//!
//! A gateway holds a lease in `gateways`, renewed every third of its length, so one late or
//! failed renewal never lets it lapse. The gateway judges its own lease by its own clock: the
//! lease is held while the last renewal succeeded and less than one lease length passed since
//! that renewal was *sent*. The store computes the lease's end from its own clock when the
//! renewal arrives, so the gateway's view always ends first; a gateway that stopped holding
//! its lease claims no route, because any live gateway may reap its routes from then on.
//!
//! On each tick, a gateway that holds its lease also reaps: it deletes the routes of gateways
//! whose lease expired (or whose row is gone), in batches of `REAP_BATCH_LEN_MAX`, until a
//! batch comes back short or `REAP_BATCHES_PER_TICK_MAX` batches ran. A crashed gateway's
//! lease ends at most one lease length after its last renewal, and the next tick of any live
//! gateway comes at most a third of one later, so its routes are gone within two lease
//! lengths of the crash.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use parley_store::Store;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ephemeral::PresenceQueue;
use crate::metrics::Metrics;

/// Default lease length: a crashed gateway's routes converge within two of it.
pub const GATEWAY_LEASE_MS_DEFAULT: u64 = 10_000;
/// Shortest lease accepted: a renewal every 100 ms still leaves a round trip to the store
/// well inside one third. Tests use leases this short to see convergence quickly.
pub const GATEWAY_LEASE_MS_MIN: u64 = 300;
/// Renewals per lease length: two of them may fail before the lease lapses.
const RENEWALS_PER_LEASE: u64 = 3;
/// Routes deleted per store call of the reaper: the longest it holds row locks.
pub const REAP_BATCH_LEN_MAX: u32 = 500;
/// Batches per tick; what remains waits for the next tick (or another gateway's).
const REAP_BATCHES_PER_TICK_MAX: u32 = 20;

/// This gateway's lease as the gateway itself sees it.
pub struct Lease {
    lease: Duration,
    /// When the last successful renewal was sent; `None` before the first and after the
    /// release.
    renewed_at: Mutex<Option<Instant>>,
    /// Set once shutdown released the lease; a released lease is never renewed again.
    released: AtomicBool,
}

/// Whether the gateway holds its lease, as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    Ok,
    Expired,
}

impl LeaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Expired => "expired",
        }
    }
}

impl Lease {
    /// A lease of `lease_ms` (at least `GATEWAY_LEASE_MS_MIN`), not held until renewed.
    pub fn new(lease_ms: u64) -> Self {
        Self {
            lease: Duration::from_millis(lease_ms.max(GATEWAY_LEASE_MS_MIN)),
            renewed_at: Mutex::new(None),
            released: AtomicBool::new(false),
        }
    }

    /// The lease's length.
    pub fn length(&self) -> Duration {
        self.lease
    }

    /// Held while the last renewal succeeded and, by this gateway's clock, less than one
    /// lease length passed since it was sent.
    pub fn state(&self) -> LeaseState {
        let renewed_at = *self
            .renewed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match renewed_at {
            Some(at) if at.elapsed() < self.lease => LeaseState::Ok,
            _ => LeaseState::Expired,
        }
    }

    pub fn is_held(&self) -> bool {
        self.state() == LeaseState::Ok
    }

    /// Renews the lease in the store, waiting at most one renewal interval. True when it
    /// succeeded.
    pub async fn renew(&self, store: &dyn Store, gateway_id: &str) -> bool {
        if self.released.load(Ordering::Acquire) {
            return false;
        }
        let sent = Instant::now();
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        let renewed = tokio::time::timeout(
            self.renew_interval(),
            store.renew_gateway(gateway_id, lease_ms),
        )
        .await;
        let ok = match renewed {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "gateway lease renewal failed");
                false
            }
            Err(_) => {
                tracing::warn!("gateway lease renewal took longer than its interval");
                false
            }
        };
        let (was_held, held) = self.record_renewal(sent, ok);
        if was_held && !ok {
            tracing::warn!(
                "gateway lease renewal failed; the lease lapses one length after the last renewal unless the next succeeds"
            );
        } else if !was_held && held {
            tracing::info!("gateway lease held");
        }
        ok
    }

    /// Records a renewal sent at `sent`. A success starts the lease anew from `sent`; a
    /// failure keeps the start of the last success, because the store's lease runs from that
    /// renewal and has not lapsed before this gateway's view of it does: one failed renewal
    /// (a blip of the store) must not refuse connections. Answers whether the lease was held
    /// before and is held after.
    fn record_renewal(&self, sent: Instant, ok: bool) -> (bool, bool) {
        let mut renewed_at = self
            .renewed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let was_held = renewed_at.is_some_and(|at| at.elapsed() < self.lease);
        if ok {
            *renewed_at = Some(sent);
        }
        let held = renewed_at.is_some_and(|at| at.elapsed() < self.lease);
        (was_held, held)
    }

    /// Deletes the gateway's row and routes; the lease is never renewed again.
    pub async fn release(&self, store: &dyn Store, gateway_id: &str) {
        self.released.store(true, Ordering::Release);
        *self
            .renewed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        match store.release_gateway(gateway_id).await {
            Ok(routes) => tracing::info!(routes, "gateway lease released"),
            Err(e) => tracing::warn!(
                error = %e,
                "gateway lease release failed; its routes are reaped once the lease expires"
            ),
        }
    }

    fn renew_interval(&self) -> Duration {
        self.lease / RENEWALS_PER_LEASE as u32
    }

    /// Renews the lease and, while it is held, reaps expired routes, every third of the lease
    /// until `stop`. The first tick is immediate.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        gateway_id: String,
        metrics: Arc<Metrics>,
        presence: Arc<PresenceQueue>,
        stop: CancellationToken,
    ) {
        let mut every = tokio::time::interval(self.renew_interval());
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            let ticked = async {
                if self.renew(&*store, &gateway_id).await {
                    reap(&*store, &metrics, &presence).await;
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticked => {}
            }
        }
    }
}

/// One tick of route convergence: batches until one comes back short, at most
/// `REAP_BATCHES_PER_TICK_MAX`.
/// The users of reaped routes go to the presence queue: those left without a route are
/// announced offline, with `last_seen` the time of the reap (best effort: the queue may be
/// full, and the user's connection ended earlier, when the gateway died).
async fn reap(store: &dyn Store, metrics: &Metrics, presence: &PresenceQueue) {
    for _ in 0..REAP_BATCHES_PER_TICK_MAX {
        match store.reap_route_users(REAP_BATCH_LEN_MAX).await {
            Ok(mut users) => {
                let reaped = users.len() as u64;
                users.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
                users.dedup();
                users.iter().for_each(|u| presence.disconnected(u));
                metrics.routes_reaped.inc_by(reaped);
                if reaped > 0 {
                    tracing::info!(routes = reaped, "reaped routes of expired gateways");
                }
                if reaped < u64::from(REAP_BATCH_LEN_MAX) {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "route reaping failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_lease_lapses_by_its_own_clock() {
        let lease = Lease::new(1_000);
        assert_eq!(lease.state(), LeaseState::Expired, "held before renewed");
        *lease.renewed_at.lock().unwrap() = Some(Instant::now());
        assert_eq!(lease.state(), LeaseState::Ok);
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(lease.state(), LeaseState::Ok);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(lease.state(), LeaseState::Expired);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_keeps_the_lease_until_one_length_after_the_last_success() {
        let lease = Lease::new(900);
        assert_eq!(lease.record_renewal(Instant::now(), true), (false, true));
        tokio::time::advance(Duration::from_millis(300)).await;
        // One renewal fails: the lease the store granted 300 ms ago still holds.
        assert_eq!(lease.record_renewal(Instant::now(), false), (true, true));
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(lease.record_renewal(Instant::now(), false), (true, true));
        assert_eq!(lease.state(), LeaseState::Ok);
        // The third interval passes without a success: one length since the last one.
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(lease.state(), LeaseState::Expired);
        assert_eq!(lease.record_renewal(Instant::now(), false), (false, false));
        // A success holds it again, from when that renewal was sent.
        assert_eq!(lease.record_renewal(Instant::now(), true), (false, true));
        assert_eq!(lease.state(), LeaseState::Ok);
    }

    #[test]
    fn short_leases_are_raised_to_the_minimum_and_renewed_thrice() {
        let lease = Lease::new(10);
        assert_eq!(lease.length(), Duration::from_millis(GATEWAY_LEASE_MS_MIN));
        assert_eq!(lease.renew_interval(), Duration::from_millis(100));
        assert_eq!(
            Lease::new(GATEWAY_LEASE_MS_DEFAULT).renew_interval(),
            Duration::from_millis(GATEWAY_LEASE_MS_DEFAULT) / 3
        );
    }
}
