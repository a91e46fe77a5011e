//! Rate limits (`RATE_LIMIT_PER_S`, SPEC §6): one token bucket per kind of request and key, the
//! key being a device for the requests a device makes. A bucket holds one second of the rate
//! (`RATE_LIMIT_BURST_S`): a client may make that many requests at once, then the rate.
//! A request over it is refused with `RATE_LIMITED` and the time until a token is back, before
//! it reaches the store, so it writes nothing.
//!
//! The buckets live in one map of at most `RATE_LIMIT_KEYS_MAX` entries. A full bucket holds
//! nothing a fresh one would not, so when the map is full the full buckets (idle for a second
//! or more) are dropped first; if every bucket is in use, the one used longest ago goes, which
//! gives its key a fresh burst rather than letting the map grow.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use parley_store::DeviceIdentity;
use prometheus_client::metrics::counter::Counter;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// Seconds of the rate a full bucket holds: the burst a client may make at once.
pub const RATE_LIMIT_BURST_S: u32 = 1;
/// Most buckets kept at once.
pub const RATE_LIMIT_KEYS_MAX: usize = 100_000;
/// The key of the admin endpoints' bucket: there is one admin token.
pub const ADMIN_KEY: &str = "admin";

/// What a bucket limits; each kind has its own buckets, so a device's sends do not spend the
/// budget of its other requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Message sends, over HTTP and WebSocket alike.
    Send,
    /// Calls of the admin endpoints.
    Admin,
    /// Message searches, over HTTP and WebSocket alike: each costs the store far more than a
    /// read of the log.
    Search,
}

impl LimitKind {
    /// The label of the kind in `parley_rate_limited_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Admin => "admin",
            Self::Search => "search",
        }
    }
}

/// Millionths of a token: a bucket counts in whole numbers, so a wait is exact.
const MICROS_PER_TOKEN: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// In millionths of a token.
    micros: u64,
    at: Instant,
}

/// The buckets of one server. With a rate of 0 every request passes and nothing is kept.
#[derive(Debug)]
pub struct RateLimiter {
    /// Tokens per second, which is millionths of a token per microsecond.
    per_s: u64,
    /// A full bucket, in millionths of a token.
    burst_micros: u64,
    keys_max: usize,
    buckets: Mutex<HashMap<(LimitKind, String), Bucket>>,
    /// Refusals of sends and of admin calls (`parley_rate_limited_total`).
    refused_sends: Counter,
    refused_admin: Counter,
    refused_searches: Counter,
}

impl RateLimiter {
    /// A limiter of `per_s` requests per second per key; 0 turns limiting off.
    pub fn new(per_s: u32) -> Self {
        Self::with_keys_max(per_s, RATE_LIMIT_KEYS_MAX)
    }

    fn with_keys_max(per_s: u32, keys_max: usize) -> Self {
        let burst = u64::from(per_s.saturating_mul(RATE_LIMIT_BURST_S).max(1));
        Self {
            per_s: u64::from(per_s),
            burst_micros: burst * MICROS_PER_TOKEN,
            keys_max: keys_max.max(1),
            buckets: Mutex::new(HashMap::new()),
            refused_sends: Counter::default(),
            refused_admin: Counter::default(),
            refused_searches: Counter::default(),
        }
    }

    /// Counts refusals into the server's metrics.
    pub fn counted(mut self, metrics: &Metrics) -> Self {
        self.refused_sends = metrics.rate_limited(LimitKind::Send.as_str());
        self.refused_admin = metrics.rate_limited(LimitKind::Admin.as_str());
        self.refused_searches = metrics.rate_limited(LimitKind::Search.as_str());
        self
    }

    pub fn is_on(&self) -> bool {
        self.per_s > 0
    }

    /// Takes a token of `device`'s `kind` bucket, or answers `RATE_LIMITED`.
    pub fn check_device(&self, kind: LimitKind, device: &DeviceIdentity) -> Result<(), ApiError> {
        if !self.is_on() {
            return Ok(());
        }
        // Neither id may contain `/`, so the key names one device.
        self.check(kind, &format!("{}/{}", device.user_id, device.device_id))
    }

    /// Takes a token of the bucket of `kind` and `key`, or answers `RATE_LIMITED` with the
    /// time until one is back.
    pub fn check(&self, kind: LimitKind, key: &str) -> Result<(), ApiError> {
        self.check_at(kind, key, Instant::now())
    }

    fn check_at(&self, kind: LimitKind, key: &str, now: Instant) -> Result<(), ApiError> {
        if !self.is_on() {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let id = (kind, key.to_owned());
        if !buckets.contains_key(&id) && buckets.len() >= self.keys_max {
            self.make_room(&mut buckets, now);
        }
        let bucket = buckets.entry(id).or_insert(Bucket {
            micros: self.burst_micros,
            at: now,
        });
        let micros = self.refilled(bucket, now);
        bucket.at = now;
        if micros >= MICROS_PER_TOKEN {
            bucket.micros = micros - MICROS_PER_TOKEN;
            return Ok(());
        }
        bucket.micros = micros;
        match kind {
            LimitKind::Send => self.refused_sends.inc(),
            LimitKind::Admin => self.refused_admin.inc(),
            LimitKind::Search => self.refused_searches.inc(),
        };
        let wait_us = (MICROS_PER_TOKEN - micros).div_ceil(self.per_s);
        Err(ApiError::RateLimited {
            retry_after_ms: wait_us.div_ceil(1_000).max(1),
        })
    }

    /// What the bucket holds at `now`, in millionths of a token.
    fn refilled(&self, bucket: &Bucket, now: Instant) -> u64 {
        let elapsed_us = now.saturating_duration_since(bucket.at).as_micros();
        let gained = u64::try_from(elapsed_us)
            .unwrap_or(u64::MAX)
            .saturating_mul(self.per_s);
        bucket.micros.saturating_add(gained).min(self.burst_micros)
    }

    /// Drops every full bucket; if none was, the one used longest ago.
    fn make_room(&self, buckets: &mut HashMap<(LimitKind, String), Bucket>, now: Instant) {
        buckets.retain(|_, b| self.refilled(b, now) < self.burst_micros);
        if buckets.len() < self.keys_max {
            return;
        }
        let oldest = buckets
            .iter()
            .min_by_key(|(_, b)| b.at)
            .map(|(id, _)| id.clone());
        if let Some(oldest) = oldest {
            buckets.remove(&oldest);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn retry_after(r: Result<(), ApiError>) -> Option<u64> {
        r.err().and_then(|e| e.retry_after_ms())
    }

    #[test]
    fn off_at_zero() {
        let limiter = RateLimiter::new(0);
        let now = Instant::now();
        for _ in 0..1_000 {
            assert!(limiter.check_at(LimitKind::Send, "a/d", now).is_ok());
        }
        assert_eq!(limiter.len(), 0);
    }

    #[test]
    fn a_burst_of_one_second_then_the_rate() {
        let limiter = RateLimiter::new(4);
        let start = Instant::now();
        for _ in 0..4 {
            assert!(limiter.check_at(LimitKind::Send, "a/d", start).is_ok());
        }
        assert_eq!(
            retry_after(limiter.check_at(LimitKind::Send, "a/d", start)),
            Some(250)
        );
        // A quarter second brings one token back, not two.
        let later = start + Duration::from_millis(250);
        assert!(limiter.check_at(LimitKind::Send, "a/d", later).is_ok());
        assert_eq!(
            retry_after(limiter.check_at(LimitKind::Send, "a/d", later)),
            Some(250)
        );
        // An idle bucket fills up to the burst and no further.
        let idle = later + Duration::from_secs(60);
        for _ in 0..4 {
            assert!(limiter.check_at(LimitKind::Send, "a/d", idle).is_ok());
        }
        assert!(limiter.check_at(LimitKind::Send, "a/d", idle).is_err());
    }

    #[test]
    fn refusals_spend_nothing() {
        let limiter = RateLimiter::new(1);
        let start = Instant::now();
        assert!(limiter.check_at(LimitKind::Send, "a/d", start).is_ok());
        for ms in [1, 100, 500, 999] {
            let at = start + Duration::from_millis(ms);
            assert_eq!(
                retry_after(limiter.check_at(LimitKind::Send, "a/d", at)),
                Some(1_000 - ms)
            );
        }
        assert!(limiter
            .check_at(LimitKind::Send, "a/d", start + Duration::from_secs(1))
            .is_ok());
    }

    #[test]
    fn kinds_and_keys_have_their_own_buckets() {
        let limiter = RateLimiter::new(1);
        let now = Instant::now();
        assert!(limiter.check_at(LimitKind::Send, "a/d1", now).is_ok());
        assert!(limiter.check_at(LimitKind::Send, "a/d1", now).is_err());
        assert!(limiter.check_at(LimitKind::Send, "a/d2", now).is_ok());
        assert!(limiter.check_at(LimitKind::Admin, "a/d1", now).is_ok());
    }

    #[test]
    fn the_map_stays_bounded() {
        let limiter = RateLimiter::with_keys_max(1, 3);
        let start = Instant::now();
        for (i, key) in ["k1", "k2", "k3"].iter().enumerate() {
            let at = start + Duration::from_millis(i as u64);
            assert!(limiter.check_at(LimitKind::Send, key, at).is_ok());
        }
        // Every bucket is in use: the one used longest ago makes room.
        let at = start + Duration::from_millis(10);
        assert!(limiter.check_at(LimitKind::Send, "k4", at).is_ok());
        assert_eq!(limiter.len(), 3);
        assert!(limiter.check_at(LimitKind::Send, "k2", at).is_err());
        assert!(limiter.check_at(LimitKind::Send, "k1", at).is_ok());
        // Once idle for a second, every full bucket goes at once.
        let idle = at + Duration::from_secs(2);
        assert!(limiter.check_at(LimitKind::Send, "k5", idle).is_ok());
        assert_eq!(limiter.len(), 1);
    }
}
