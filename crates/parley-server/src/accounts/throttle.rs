//! The throttle of failed password checks: per user id and per client address.
//!
//! Each key counts its failures in a fixed window that starts at its first failure. Once a key
//! has `failures_max` failures in its window, every password check for it is refused with
//! `RATE_LIMITED` and the time left in the window, before argon2 runs: a guesser learns nothing
//! more, not even from a correct guess, and costs the server no hashing. A successful login
//! clears the user's count (not the address's, which many users may share).
//!
//! Both maps hold at most `LOGIN_THROTTLE_KEYS_MAX` keys. When one is full, expired windows are
//! dropped first; if none has expired, the window that started longest ago goes, which gives
//! its key a fresh count rather than letting the map grow.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use parley_domain::UserId;
use prometheus_client::metrics::counter::Counter;

use crate::error::ApiError;

/// Default failures of one user id within a window before its checks are refused.
pub const LOGIN_FAILURES_PER_USER_MAX_DEFAULT: u32 = 5;
/// Default failures from one client address within a window before its checks are refused.
pub const LOGIN_FAILURES_PER_ADDRESS_MAX_DEFAULT: u32 = 20;
/// Default length of a failure window.
pub const LOGIN_FAILURE_WINDOW_MS_DEFAULT: u64 = 60_000;
/// Most keys each of the two maps keeps.
pub const LOGIN_THROTTLE_KEYS_MAX: usize = 100_000;

/// The throttle's settings (`ServerConfig::login`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginLimits {
    /// Failures of one user id per window; 0 turns the per-user throttle off.
    pub failures_per_user_max: u32,
    /// Failures from one client address per window; 0 turns the per-address throttle off.
    pub failures_per_address_max: u32,
    /// Length of a window, from a key's first failure.
    pub failure_window_ms: u64,
}

impl Default for LoginLimits {
    fn default() -> Self {
        Self {
            failures_per_user_max: LOGIN_FAILURES_PER_USER_MAX_DEFAULT,
            failures_per_address_max: LOGIN_FAILURES_PER_ADDRESS_MAX_DEFAULT,
            failure_window_ms: LOGIN_FAILURE_WINDOW_MS_DEFAULT,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

/// Failure windows of one kind of key, bounded in size.
#[derive(Debug)]
struct Windows<K> {
    max: u32,
    length: Duration,
    keys_max: usize,
    map: Mutex<HashMap<K, Window>>,
}

impl<K: Hash + Eq + Clone> Windows<K> {
    fn new(max: u32, length: Duration, keys_max: usize) -> Self {
        Self {
            max,
            length,
            keys_max: keys_max.max(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The wait left when `key` is over its failures, `None` when it may try.
    fn refused(&self, key: &K, now: Instant) -> Option<Duration> {
        if self.max == 0 {
            return None;
        }
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let window = map.get(key)?;
        let ends = window.started + self.length;
        (window.failures >= self.max && now < ends).then(|| ends - now)
    }

    fn fail(&self, key: &K, now: Instant) {
        if self.max == 0 {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if !map.contains_key(key) && map.len() >= self.keys_max {
            let length = self.length;
            map.retain(|_, w| now < w.started + length);
            if map.len() >= self.keys_max {
                let oldest = map
                    .iter()
                    .min_by_key(|(_, w)| w.started)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    map.remove(&oldest);
                }
            }
        }
        let window = map.entry(key.clone()).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now >= window.started + self.length {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
    }

    fn clear(&self, key: &K) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The failure counts of one server's password checks.
#[derive(Debug)]
pub struct LoginThrottle {
    users: Windows<UserId>,
    addresses: Windows<IpAddr>,
    refused: Counter,
}

impl LoginThrottle {
    /// A throttle of `limits`; `refused` counts the checks it refuses.
    pub fn new(limits: &LoginLimits, refused: Counter) -> Self {
        Self::with_keys_max(limits, refused, LOGIN_THROTTLE_KEYS_MAX)
    }

    fn with_keys_max(limits: &LoginLimits, refused: Counter, keys_max: usize) -> Self {
        let length = Duration::from_millis(limits.failure_window_ms.max(1));
        Self {
            users: Windows::new(limits.failures_per_user_max, length, keys_max),
            addresses: Windows::new(limits.failures_per_address_max, length, keys_max),
            refused,
        }
    }

    /// Refuses with `RATE_LIMITED` while the user or the address is over its failures; the
    /// wait is the longer of the two. `address` is `None` when the listener gave none.
    pub fn check(&self, user: &UserId, address: Option<IpAddr>) -> Result<(), ApiError> {
        let now = Instant::now();
        let by_user = self.users.refused(user, now);
        let by_address = address.and_then(|a| self.addresses.refused(&a, now));
        match by_user.max(by_address) {
            None => Ok(()),
            Some(wait) => {
                self.refused.inc();
                let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                Err(ApiError::RateLimited {
                    retry_after_ms: ms.max(1),
                })
            }
        }
    }

    /// Counts a failed password check of `user` from `address`.
    pub fn fail(&self, user: &UserId, address: Option<IpAddr>) {
        let now = Instant::now();
        self.users.fail(user, now);
        if let Some(address) = address {
            self.addresses.fail(&address, now);
        }
    }

    /// Forgets the user's failures after a correct password.
    pub fn succeed(&self, user: &UserId) {
        self.users.clear(user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(s: &str) -> UserId {
        UserId::parse(s).expect("valid")
    }

    fn limits(per_user: u32, per_address: u32, window_ms: u64) -> LoginLimits {
        LoginLimits {
            failures_per_user_max: per_user,
            failures_per_address_max: per_address,
            failure_window_ms: window_ms,
        }
    }

    const HOME: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[test]
    fn a_user_is_refused_after_its_failures_until_success() {
        let t = LoginThrottle::new(&limits(2, 100, 60_000), Counter::default());
        let ana = uid("ana");
        t.fail(&ana, HOME);
        assert!(t.check(&ana, HOME).is_ok());
        t.fail(&ana, HOME);
        let refused = t.check(&ana, HOME).expect_err("over");
        assert!(refused
            .retry_after_ms()
            .is_some_and(|ms| ms > 0 && ms <= 60_000));
        assert!(
            t.check(&uid("bo"), HOME).is_ok(),
            "another user is not refused"
        );
        t.succeed(&ana);
        assert!(t.check(&ana, HOME).is_ok());
    }

    #[test]
    fn an_address_is_refused_for_every_user() {
        let t = LoginThrottle::new(&limits(100, 2, 60_000), Counter::default());
        t.fail(&uid("a1"), HOME);
        t.fail(&uid("a2"), HOME);
        assert!(t.check(&uid("a3"), HOME).is_err());
        assert!(t.check(&uid("a3"), None).is_ok());
    }

    #[test]
    fn windows_expire() {
        let t = LoginThrottle::new(&limits(1, 1, 20), Counter::default());
        t.fail(&uid("ana"), HOME);
        assert!(t.check(&uid("ana"), HOME).is_err());
        std::thread::sleep(Duration::from_millis(30));
        assert!(t.check(&uid("ana"), HOME).is_ok());
    }

    #[test]
    fn maps_stay_bounded() {
        let t = LoginThrottle::with_keys_max(&limits(1, 0, 60_000), Counter::default(), 3);
        for i in 0..10 {
            t.fail(&uid(&format!("u{i}")), HOME);
        }
        assert_eq!(t.users.len(), 3);
        assert_eq!(t.addresses.len(), 0, "a throttle that is off keeps nothing");
        assert!(t.check(&uid("u9"), HOME).is_err(), "the newest key stays");
    }
}
