//! Bounded retries with exponential backoff for requests whose outcome is unknown.
//!
//! Only requests that carry their own idempotency key are retried (sends, with the same
//! `client_msg_id`): the server then answers a repeat with the stored result (`dup: true`)
//! instead of writing twice.

use std::future::Future;
use std::time::Duration;

use rand::Rng;

use crate::error::ClientError;

/// Attempts of one send, the first included: enough to ride out a store failover of a few
/// seconds, few enough that a dead server is reported quickly.
pub const ATTEMPTS_MAX_DEFAULT: u32 = 5;
/// Pause after the first failure.
pub const BACKOFF_FIRST_MS_DEFAULT: u64 = 100;
/// Longest pause between two attempts.
pub const BACKOFF_MAX_MS_DEFAULT: u64 = 2_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included; 1 disables retries.
    pub attempts_max: u32,
    pub backoff_first_ms: u64,
    pub backoff_max_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts_max: ATTEMPTS_MAX_DEFAULT,
            backoff_first_ms: BACKOFF_FIRST_MS_DEFAULT,
            backoff_max_ms: BACKOFF_MAX_MS_DEFAULT,
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub fn none() -> Self {
        Self {
            attempts_max: 1,
            ..Self::default()
        }
    }

    /// The pause after `failures` failed attempts: doubling from `backoff_first_ms` up to
    /// `backoff_max_ms`, then drawn from its upper half so that clients cut off together do not
    /// come back together.
    pub fn backoff_ms(&self, failures: u32) -> u64 {
        backoff_ms(self.backoff_first_ms, self.backoff_max_ms, failures)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the attempts are used up; the last
    /// error is returned.
    pub async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let attempts_max = self.attempts_max.max(1);
        let mut failures = 0;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_retryable() && failures + 1 < attempts_max => {
                    failures += 1;
                    let pause_ms = self.backoff_ms(failures);
                    tracing::debug!(error = %e, failures, pause_ms, "retrying");
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The pause after `failures` failures: doubling from `first_ms` up to `max_ms`, then drawn from
/// the upper half of that ceiling so that clients cut off together do not come back together.
/// Shared by send retries and WebSocket reconnects.
pub(crate) fn backoff_ms(first_ms: u64, max_ms: u64, failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(u64::BITS - 1);
    let ceiling_ms = first_ms.saturating_mul(1u64 << doublings).min(max_ms);
    if ceiling_ms == 0 {
        return 0;
    }
    rand::thread_rng().gen_range(ceiling_ms.div_ceil(2)..=ceiling_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn unknown() -> ClientError {
        ClientError::Api {
            status: 503,
            code: crate::error::code::OUTCOME_UNKNOWN.into(),
            message: String::new(),
        }
    }

    fn fast(attempts_max: u32) -> RetryPolicy {
        RetryPolicy {
            attempts_max,
            backoff_first_ms: 1,
            backoff_max_ms: 2,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let p = RetryPolicy::default();
        for _ in 0..100 {
            assert!((50..=100).contains(&p.backoff_ms(1)));
            assert!((100..=200).contains(&p.backoff_ms(2)));
            assert!((1_000..=2_000).contains(&p.backoff_ms(60)));
        }
    }

    #[tokio::test]
    async fn retries_unknown_outcomes_until_attempts_run_out() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = fast(3)
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(unknown())
            })
            .await;
        assert_eq!(r.unwrap_err().code(), Some("OUTCOME_UNKNOWN"));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn stops_at_success_and_at_refusals() {
        let calls = AtomicU32::new(0);
        let r = fast(5)
            .run(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(unknown()),
                    n => Ok(n),
                }
            })
            .await;
        assert_eq!(r.unwrap(), 1);

        let calls = AtomicU32::new(0);
        let r: Result<(), _> = fast(5)
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ClientError::Api {
                    status: 409,
                    code: "IDEMPOTENCY_MISMATCH".into(),
                    message: String::new(),
                })
            })
            .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
