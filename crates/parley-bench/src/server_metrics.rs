//! What the server's own counters say about a phase of load: its `/metrics`, read with the
//! admin token at the start and at the end.

use anyhow::Result;
use parley_client::Client;

use crate::target::Target;

/// Counters of the servers of a target, summed over its gateways.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServerCounters {
    /// Events-after fetches the event window answered (`parley_window_fetches_total{outcome="hit"}`).
    pub window_hits: u64,
    /// Events-after fetches the store answered.
    pub window_misses: u64,
}

impl ServerCounters {
    /// Reads every gateway of `target`.
    pub async fn read(target: &Target) -> Result<Self> {
        let mut sum = Self::default();
        for url in &target.urls {
            let text = Client::new(url, &target.admin_token)?.metrics().await?;
            let one = parse(&text);
            sum.window_hits += one.window_hits;
            sum.window_misses += one.window_misses;
        }
        Ok(sum)
    }

    /// What was counted from `before` to `self`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            window_hits: self.window_hits.saturating_sub(before.window_hits),
            window_misses: self.window_misses.saturating_sub(before.window_misses),
        }
    }

    pub fn fetches(&self) -> u64 {
        self.window_hits + self.window_misses
    }
}

/// The counters of one exposition text; a missing line counts zero.
fn parse(text: &str) -> ServerCounters {
    let mut c = ServerCounters::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("parley_window_fetches_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if labels.contains("outcome=\"hit\"") {
            c.window_hits += value as u64;
        } else if labels.contains("outcome=\"miss\"") {
            c.window_misses += value as u64;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_fetches_are_read_by_outcome() {
        let text = "# TYPE parley_window_fetches counter\n\
                    parley_window_fetches_total{outcome=\"hit\"} 12\n\
                    parley_window_fetches_total{outcome=\"miss\"} 3\n\
                    parley_pushes_total 99\n";
        let c = parse(text);
        assert_eq!((c.window_hits, c.window_misses, c.fetches()), (12, 3, 15));
        let later = ServerCounters {
            window_hits: 20,
            window_misses: 4,
        };
        assert_eq!(later.since(&c).fetches(), 9);
        assert_eq!(parse("parley_pushes_total 1\n"), ServerCounters::default());
    }
}
