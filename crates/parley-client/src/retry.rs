//! Retries within a time budget, with jittered exponential backoff, for requests whose outcome
//! is unknown.
//!
//! Only requests that carry their own idempotency key are retried (sends, with the same
//! `client_msg_id`; read positions, which only move forward): the server then answers a repeat
//! with the stored result (`dup: true`) instead of writing twice. The same [`RetryPolicy`]
//! governs HTTP sends ([`crate::Client::send_with_retry`]) and realtime sends
//! ([`crate::RealtimeHandle::send`]).
//!
//! With the defaults a send keeps trying for 20 s ([`RETRY_BUDGET_MS_DEFAULT`]): the first
//! attempt runs to its own timeout, later ones start only within the budget and are cut at its
//! end, so the call returns within 20 s of its start (10 s, the answer timeout, when the first
//! attempt alone takes that long and no retry fits). A server that restarts within 10 s is
//! ridden out with room to spare: attempts against a stopped server fail at once, pauses
//! between them double from 100 ms up to 2 s, each drawn from the upper half of its ceiling,
//! so the first attempt after the server is back comes at most 2 s after its return.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use rand::Rng;

use crate::error::ClientError;

/// Time from the start of a send after which no new attempt starts: a server restart of 10 s,
/// plus the longest pause before the next attempt (2 s over HTTP; 5 s before a realtime session
/// reconnects), plus the catch-up and the answer, fits with room to spare.
pub const RETRY_BUDGET_MS_DEFAULT: u64 = 20_000;
/// No cap on the number of attempts: the time budget decides.
pub const ATTEMPTS_MAX_DEFAULT: u32 = u32::MAX;
/// Pause after the first failure.
pub const BACKOFF_FIRST_MS_DEFAULT: u64 = 100;
/// Longest pause between two attempts.
pub const BACKOFF_MAX_MS_DEFAULT: u64 = 2_000;

/// How long and how often a request with an unknown outcome is resent. See the
/// [module documentation](self) for the totals of the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included; 1 disables retries. The default sets no cap.
    pub attempts_max: u32,
    pub backoff_first_ms: u64,
    pub backoff_max_ms: u64,
    /// Time from the first attempt after which no attempt starts, and at which a retry still
    /// waiting is cut short; the first attempt always runs to its own timeout.
    pub budget_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts_max: ATTEMPTS_MAX_DEFAULT,
            backoff_first_ms: BACKOFF_FIRST_MS_DEFAULT,
            backoff_max_ms: BACKOFF_MAX_MS_DEFAULT,
            budget_ms: RETRY_BUDGET_MS_DEFAULT,
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

    /// The default pauses within another time budget.
    pub fn within_ms(budget_ms: u64) -> Self {
        Self {
            budget_ms,
            ..Self::default()
        }
    }

    /// The pause after `failures` failed attempts: doubling from `backoff_first_ms` up to
    /// `backoff_max_ms`, then drawn from its upper half so that clients cut off together do not
    /// come back together.
    pub fn backoff_ms(&self, failures: u32) -> u64 {
        backoff_ms(self.backoff_first_ms, self.backoff_max_ms, failures)
    }

    /// Runs `attempt` until it succeeds, fails for good, the attempts are used up or the budget
    /// is spent. The error is the last attempt's, or [`ClientError::RetryBudgetSpent`] when the
    /// budget ran out while a retry waited for its answer.
    pub async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let started = Instant::now();
        let budget = Duration::from_millis(self.budget_ms);
        let attempts_max = self.attempts_max.max(1);
        let mut attempts: u32 = 0;
        loop {
            attempts += 1;
            let outcome = if attempts == 1 {
                attempt().await
            } else {
                let left = budget.saturating_sub(started.elapsed());
                tokio::time::timeout(left, attempt())
                    .await
                    .unwrap_or_else(|_| {
                        Err(ClientError::RetryBudgetSpent {
                            waited_ms: millis(started.elapsed()),
                            attempts,
                        })
                    })
            };
            let e = match outcome {
                Ok(v) => return Ok(v),
                Err(e) if e.is_retryable() && attempts < attempts_max => e,
                Err(e) => return Err(e),
            };
            let pause_ms = self.backoff_ms(attempts);
            let pause = Duration::from_millis(pause_ms);
            if started.elapsed() + pause >= budget {
                return Err(e);
            }
            tracing::debug!(error = %e.redacted(), attempts, pause_ms, "retrying");
            tokio::time::sleep(pause).await;
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
            ..RetryPolicy::default()
        }
    }

    fn lost() -> ClientError {
        ClientError::Disconnected {
            reason: "connection refused".into(),
        }
    }

    /// With the default policy, attempts against a server that is down for `outage` (failing at
    /// once, as a closed port does) succeed once it is back; answers when, in virtual time.
    async fn outage_ridden_out_after(outage: Duration) -> Result<Duration, ClientError> {
        let started = Instant::now();
        RetryPolicy::default()
            .run(|| async {
                if started.elapsed() < outage {
                    Err(lost())
                } else {
                    Ok(started.elapsed())
                }
            })
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_budget_rides_out_a_ten_second_restart() {
        for _ in 0..20 {
            let took = outage_ridden_out_after(Duration::from_secs(10))
                .await
                .expect("the send succeeds once the server is back");
            let late = took - Duration::from_secs(10);
            assert!(
                late <= Duration::from_millis(BACKOFF_MAX_MS_DEFAULT),
                "{took:?}"
            );
        }
        let e = outage_ridden_out_after(Duration::from_secs(25))
            .await
            .expect_err("a longer outage exceeds the budget");
        assert!(e.is_retryable(), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_starts_after_the_budget() {
        let started = Instant::now();
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = RetryPolicy::default()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                assert!(started.elapsed() < Duration::from_millis(RETRY_BUDGET_MS_DEFAULT));
                Err(lost())
            })
            .await;
        assert!(matches!(r, Err(ClientError::Disconnected { .. })), "{r:?}");
        let spent = started.elapsed();
        assert!(
            spent < Duration::from_millis(RETRY_BUDGET_MS_DEFAULT),
            "{spent:?}"
        );
        // Pauses of at most 2 s: the last attempt came within 2 s of the budget's end.
        assert!(
            spent + Duration::from_millis(BACKOFF_MAX_MS_DEFAULT)
                >= Duration::from_millis(RETRY_BUDGET_MS_DEFAULT),
            "{spent:?}"
        );
        assert!(calls.load(Ordering::SeqCst) > 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_still_waiting_is_cut_at_the_end_of_the_budget() {
        let started = Instant::now();
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = RetryPolicy::within_ms(5_000)
            .run(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(lost());
                }
                std::future::pending().await
            })
            .await;
        match r {
            Err(ClientError::RetryBudgetSpent {
                waited_ms,
                attempts,
            }) => {
                assert_eq!((waited_ms, attempts), (5_000, 2));
            }
            other => panic!("expected the budget to be spent: {other:?}"),
        }
        assert_eq!(started.elapsed(), Duration::from_millis(5_000));
        assert!(ClientError::RetryBudgetSpent {
            waited_ms: 1,
            attempts: 2
        }
        .is_retryable());
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
