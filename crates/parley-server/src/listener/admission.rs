//! Which connections may stay open: a cap on all of them and a cap per client address.
//!
//! An address over its cap is refused. When the process is at its cap, a new connection
//! takes the place of one that is doing nothing (waiting for a request head: a silent or
//! trickling socket, or an idle keep-alive), preferring one that never sent a request, then
//! the one idle the longest; only when no connection is idle is the new one refused. So a
//! flood of silent sockets cannot lock everyone else out: a health probe or a client that
//! sends its request at once displaces the oldest of them, and connections with a request in
//! progress and WebSockets are never displaced.
//!
//! A burst of accepts can find the process full while the connections it displaced have not
//! closed yet (or while the newest ones have not begun to wait for their head, so none looks
//! idle). Such a connection waits a short while for room (`admit_within`) instead of being
//! refused at once: a health probe that arrives right behind a flood is served.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use prometheus_client::metrics::gauge::Gauge;

use super::activity::Activity;
use super::answers::Refusal;

/// Connections looked at to find an idle one to displace: a bound on the work done under the
/// lock per accept, however many connections are open. The scan resumes where the last one
/// stopped, so successive displacements look at different connections.
const EVICTION_SCAN_MAX: usize = 64;
/// Displacements asked for and not yet done. Each displaced connection closes within one
/// poll of its task; the bound keeps a burst of accepts from overshooting the cap by more.
const EVICTIONS_PENDING_MAX: usize = 64;

pub struct Admission {
    registry: Mutex<Registry>,
    /// Woken whenever a connection leaves, for those waiting for room.
    room: Notify,
    connections_max: usize,
    per_address_max: usize,
    /// Connections open now, as the `http` kind of `parley_open_connections`.
    open_gauge: Gauge,
}

#[derive(Default)]
struct Registry {
    by_address: HashMap<IpAddr, usize>,
    /// Every open connection, in no particular order; each knows its own index.
    open: Vec<Arc<Activity>>,
    cursor: usize,
    evictions_pending: usize,
}

/// A connection's place under the caps, given back when it is dropped.
pub struct Ticket {
    admission: Arc<Admission>,
    address: IpAddr,
    activity: Arc<Activity>,
}

impl Ticket {
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// The client address the connection was admitted for.
    pub fn address(&self) -> IpAddr {
        self.address
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.release(self.address, &self.activity);
    }
}

impl Admission {
    /// Caps of the process and of one address; `open_gauge` follows the connections open.
    pub fn new(connections_max: usize, per_address_max: usize, open_gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            registry: Mutex::new(Registry::default()),
            room: Notify::new(),
            connections_max: connections_max.max(1),
            per_address_max: per_address_max.max(1),
            open_gauge,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Admits a connection from `address`, displacing an idle one if the process is full.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Ticket, Refusal> {
        let address = address.to_canonical();
        let mut registry = self.lock();
        let from_address = registry.by_address.get(&address).copied().unwrap_or(0);
        if from_address >= self.per_address_max {
            return Err(Refusal::PerAddress);
        }
        if registry.open.len() >= self.connections_max {
            if registry.evictions_pending >= EVICTIONS_PENDING_MAX {
                return Err(Refusal::Full);
            }
            let victim = registry.idle_victim().ok_or(Refusal::Full)?;
            if victim.ask_to_leave() {
                registry.evictions_pending += 1;
            }
        }
        *registry.by_address.entry(address).or_insert(0) += 1;
        let activity = Arc::new(Activity::new());
        activity
            .slot
            .store(registry.open.len(), std::sync::atomic::Ordering::Relaxed);
        registry.open.push(activity.clone());
        self.open_gauge.set(registry.open.len() as i64);
        Ok(Ticket {
            admission: self.clone(),
            address,
            activity,
        })
    }

    /// Admits a connection from `address`, waiting at most `wait` for room when the process
    /// is full. An address over its own cap is refused at once: waiting frees nothing there.
    pub async fn admit_within(
        self: &Arc<Self>,
        address: IpAddr,
        wait: Duration,
    ) -> Result<Ticket, Refusal> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the attempt, so a connection that leaves between the attempt
            // and the wait still wakes this one.
            let freed = self.room.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.admit(address) {
                Err(Refusal::Full) => {}
                decided => return decided,
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(Refusal::Full);
            }
        }
    }

    fn release(&self, address: IpAddr, activity: &Arc<Activity>) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut registry = self.lock();
        if let Some(count) = registry.by_address.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                registry.by_address.remove(&address);
            }
        }
        let slot = activity.slot.load(Relaxed);
        if registry
            .open
            .get(slot)
            .is_some_and(|a| Arc::ptr_eq(a, activity))
        {
            registry.open.swap_remove(slot);
            if let Some(moved) = registry.open.get(slot) {
                moved.slot.store(slot, Relaxed);
            }
        }
        self.open_gauge.set(registry.open.len() as i64);
        if activity.is_evicting() {
            registry.evictions_pending = registry.evictions_pending.saturating_sub(1);
        }
        drop(registry);
        self.room.notify_waiters();
    }

    /// The lock guards counts only; a panic while it was held cannot leave them half-updated
    /// in a way that matters more than refusing to serve, so a poisoned lock is used as is.
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Registry {
    /// An idle connection to displace among the next few: one that never sent a request
    /// first, then the one idle the longest.
    fn idle_victim(&mut self) -> Option<Arc<Activity>> {
        let len = self.open.len();
        if len == 0 {
            return None;
        }
        let mut best: Option<&Arc<Activity>> = None;
        for step in 0..EVICTION_SCAN_MAX.min(len) {
            let candidate = &self.open[(self.cursor + step) % len];
            if !candidate.waiting_for_head() || candidate.is_evicting() {
                continue;
            }
            let better = best.is_none_or(|b| {
                (candidate.served(), candidate.waiting_since()) < (b.served(), b.waiting_since())
            });
            if better {
                best = Some(candidate);
            }
        }
        let best = best.cloned();
        self.cursor = (self.cursor + EVICTION_SCAN_MAX) % len;
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn one_address_cannot_take_more_than_its_share() {
        let admission = Admission::new(10, 2, Gauge::default());
        let a = admission.admit(addr(1)).expect("first");
        let _b = admission.admit(addr(1)).expect("second");
        assert_eq!(admission.admit(addr(1)).err(), Some(Refusal::PerAddress));
        let _c = admission.admit(addr(2)).expect("another address");
        drop(a);
        assert!(admission.admit(addr(1)).is_ok());
    }

    #[test]
    fn at_the_cap_an_idle_connection_makes_room_and_a_busy_one_does_not() {
        let admission = Admission::new(2, 10, Gauge::default());
        let busy = admission.admit(addr(1)).expect("busy");
        let idle = admission.admit(addr(1)).expect("idle");
        // Nobody waits for a head: the process is full of work.
        assert_eq!(admission.admit(addr(2)).err(), Some(Refusal::Full));
        idle.activity().head_wait_began();
        let newer = admission.admit(addr(2)).expect("displaces the idle one");
        assert!(idle.activity().is_evicting());
        assert!(!busy.activity().is_evicting());
        // The displaced connection is not asked twice while it closes.
        assert_eq!(admission.admit(addr(3)).err(), Some(Refusal::Full));
        drop(idle);
        assert_eq!(admission.open(), 2);
        drop((busy, newer));
        assert_eq!(admission.open(), 0);
    }

    #[tokio::test]
    async fn a_full_process_admits_a_waiting_connection_when_one_leaves() {
        let admission = Admission::new(1, 10, Gauge::default());
        let busy = admission.admit(addr(1)).expect("busy");
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move {
                admission
                    .admit_within(addr(2), Duration::from_secs(10))
                    .await
            })
        };
        tokio::task::yield_now().await;
        drop(busy);
        let admitted = waiting.await.expect("the waiting task");
        assert!(admitted.is_ok(), "admitted once room was made");
        // Nobody leaves: the wait ends in a refusal.
        let refused = admission
            .admit_within(addr(3), Duration::from_millis(20))
            .await;
        assert_eq!(refused.err(), Some(Refusal::Full));
        // An address over its cap is refused without waiting.
        let own = Admission::new(10, 1, Gauge::default());
        let _first = own.admit(addr(4)).expect("first");
        let started = std::time::Instant::now();
        let refused = own.admit_within(addr(4), Duration::from_secs(10)).await;
        assert_eq!(refused.err(), Some(Refusal::PerAddress));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_connection_that_never_sent_a_request_goes_first() {
        let admission = Admission::new(2, 10, Gauge::default());
        let keep_alive = admission.admit(addr(1)).expect("keep-alive");
        let silent = admission.admit(addr(1)).expect("silent");
        keep_alive.activity().head_wait_began();
        keep_alive.activity().head_wait_ended();
        keep_alive.activity().head_wait_began();
        silent.activity().head_wait_began();
        let _newer = admission.admit(addr(2)).expect("room made");
        assert!(silent.activity().is_evicting());
        assert!(!keep_alive.activity().is_evicting());
    }
}
