//! Waits between reconnect attempts: exponential with jitter, so gateways that lost their
//! transport together do not all reconnect in the same instant.

use std::time::Duration;

use rand::Rng;

/// The wait before each attempt: it starts at `min_ms`, doubles after every failure up to
/// `max_ms`, and returns to `min_ms` after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    min_ms: u64,
    max_ms: u64,
    next_ms: u64,
}

impl Backoff {
    pub fn new(min_ms: u64, max_ms: u64) -> Self {
        assert!(
            0 < min_ms && min_ms <= max_ms,
            "backoff bounds {min_ms}..{max_ms} ms"
        );
        Self {
            min_ms,
            max_ms,
            next_ms: min_ms,
        }
    }

    /// After a success: the next failure waits the shortest time again.
    pub fn reset(&mut self) {
        self.next_ms = self.min_ms;
    }

    /// The next wait: between half and all of the current step, which then doubles.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_with(&mut rand::thread_rng())
    }

    /// [`Backoff::next_delay`] with the jitter drawn from `rng`.
    pub fn next_delay_with(&mut self, rng: &mut impl Rng) -> Duration {
        let step = self.next_ms;
        self.next_ms = step.saturating_mul(2).min(self.max_ms);
        Duration::from_millis(rng.gen_range(step / 2..=step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn backoff_doubles_up_to_its_maximum_and_resets() {
        let mut b = Backoff::new(100, 400);
        let steps: Vec<u64> = (0..4).map(|_| b.next_delay().as_millis() as u64).collect();
        assert!((50..=100).contains(&steps[0]));
        assert!((100..=200).contains(&steps[1]));
        assert!((200..=400).contains(&steps[2]));
        assert!((200..=400).contains(&steps[3]));
        b.reset();
        assert!(b.next_delay().as_millis() <= 100);
    }

    #[test]
    fn the_jitter_spreads_the_waits_of_gateways_that_failed_together() {
        // Twenty gateways on their first attempt: not all the same wait.
        let waits: std::collections::HashSet<Duration> = (0..20)
            .map(|seed| Backoff::new(100, 5_000).next_delay_with(&mut StdRng::seed_from_u64(seed)))
            .collect();
        assert!(waits.len() > 1, "every gateway waits {waits:?}");
        assert!(waits.iter().all(|w| (50..=100).contains(&w.as_millis())));
    }

    #[test]
    fn a_long_outage_never_waits_past_the_maximum() {
        let mut b = Backoff::new(100, 5_000);
        let mut rng = StdRng::seed_from_u64(7);
        let longest = (0..1_000).map(|_| b.next_delay_with(&mut rng)).max();
        assert_eq!(longest.map(|d| d.as_millis() <= 5_000), Some(true));
    }
}
