//! Runs argon2 off the async workers, a bounded number at a time.
//!
//! Each hash or verification takes tens of milliseconds of one core and 19 MiB of memory, so it
//! runs on tokio's blocking pool, and at most `PASSWORD_HASHES_IN_FLIGHT_MAX` run at once: a
//! flood of logins queues here instead of taking every core from the requests already
//! admitted. A request that cannot start within `PASSWORD_QUEUE_WAIT_MS` is answered 503
//! `UNAVAILABLE` (the server is busy, not the client over a limit of its own), having run
//! nothing.
//!
//! A login for an unknown user, or a user without a password, verifies against a dummy hash of
//! the same parameters, so every failed login costs the same time and the answer's timing does
//! not tell which users exist.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::Semaphore;

use super::password::{hash_blocking, verify_blocking, Password};
use crate::error::ApiError;

/// Argon2 runs at once: one per core of our 2-core machine, so logins can use the machine
/// but never starve the rest of the server of every worker.
pub const PASSWORD_HASHES_IN_FLIGHT_MAX: usize = 2;
/// Longest a request waits for its turn to hash before it is answered 503.
pub const PASSWORD_QUEUE_WAIT_MS: u64 = 2_000;

/// The shared pool of argon2 runs of one server.
#[derive(Debug)]
pub struct Hasher {
    permits: Arc<Semaphore>,
    queue_wait: Duration,
    verifications: Counter,
    /// A hash of a random password, made on first use, for logins that have no stored hash.
    dummy: Arc<OnceLock<Option<String>>>,
}

impl Hasher {
    /// A pool of `in_flight_max` runs; `verifications` counts every verification run.
    pub fn new(in_flight_max: usize, verifications: Counter) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(in_flight_max.max(1))),
            queue_wait: Duration::from_millis(PASSWORD_QUEUE_WAIT_MS),
            verifications,
            dummy: Arc::new(OnceLock::new()),
        }
    }

    /// Runs `work` on the blocking pool once a permit is free.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = tokio::time::timeout(self.queue_wait, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| ApiError::Unavailable {
                detail: "password hashing queue full".into(),
            })?
            .map_err(|_| ApiError::Unavailable {
                detail: "password hashing pool closed".into(),
            })?;
        tokio::task::spawn_blocking(move || {
            let out = work();
            drop(permit);
            out
        })
        .await
        .map_err(|e| ApiError::Unavailable {
            detail: format!("password hashing task failed: {e}"),
        })
    }

    /// The argon2id PHC string of `password`.
    pub async fn hash(&self, password: &Password) -> Result<String, ApiError> {
        let password = password.clone();
        self.run(move || hash_blocking(password.as_bytes()))
            .await?
            .map_err(|e| ApiError::Unavailable {
                detail: e.to_string(),
            })
    }

    /// Whether `password` matches `stored`. Without a stored hash (an unknown user, or a user
    /// without a password) it verifies against the dummy hash and answers false, in the same
    /// time as a wrong password.
    pub async fn verify(
        &self,
        password: &Password,
        stored: Option<String>,
    ) -> Result<bool, ApiError> {
        let password = password.clone();
        let dummy = self.dummy.clone();
        let verifications = self.verifications.clone();
        self.run(move || {
            verifications.inc();
            // Made on the first verification whatever its kind, so the one-time cost of making
            // it does not mark the first unknown user either.
            let dummy = dummy.get_or_init(|| {
                let random = uuid::Uuid::new_v4();
                hash_blocking(random.as_bytes()).ok()
            });
            match (stored, dummy) {
                (Some(phc), _) => verify_blocking(password.as_bytes(), &phc),
                (None, Some(dummy)) => {
                    // The result is thrown away: the run is only there to take the time.
                    let _ = verify_blocking(password.as_bytes(), dummy);
                    false
                }
                (None, None) => false,
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn password(text: &str) -> Password {
        Password::parse("password", text.into()).expect("valid")
    }

    #[tokio::test]
    async fn unknown_users_run_a_verification_too() {
        let counter = Counter::default();
        let hasher = Hasher::new(1, counter.clone());
        let phc = hasher.hash(&password("right-one")).await.expect("hashes");
        assert!(hasher
            .verify(&password("right-one"), Some(phc.clone()))
            .await
            .expect("runs"));
        assert!(!hasher
            .verify(&password("wrong-one"), Some(phc))
            .await
            .expect("runs"));
        assert!(!hasher
            .verify(&password("right-one"), None)
            .await
            .expect("runs"));
        assert_eq!(counter.get(), 3);
    }
}
