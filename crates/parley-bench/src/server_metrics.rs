//! What the server's own counters say about a phase of load: its `/metrics`, read with the
//! admin token at the start and at the end.

use std::collections::BTreeMap;

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

/// The offline-notification metrics of the servers of a target, summed over its gateways:
/// `parley_push_notifications{outcome}` and the `parley_push_commit_to_send_seconds`
/// histogram.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PushCounters {
    /// Notifications the push service accepted (`outcome="delivered"`).
    pub delivered: u64,
    /// Every outcome's count.
    pub by_outcome: BTreeMap<String, u64>,
    /// Observations of the commit-to-send histogram.
    pub commit_to_send_count: u64,
    /// Their sum, in seconds.
    pub commit_to_send_sum_s: f64,
    /// Its cumulative buckets: upper bound in seconds, count at or below it; ascending.
    pub commit_to_send_buckets: Vec<(f64, u64)>,
}

impl PushCounters {
    /// Reads every gateway of `target`.
    pub async fn read(target: &Target) -> Result<Self> {
        let mut sum = Self::default();
        for url in &target.urls {
            let text = Client::new(url, &target.admin_token)?.metrics().await?;
            sum.add(&parse_push(&text));
        }
        Ok(sum)
    }

    fn add(&mut self, other: &Self) {
        self.delivered += other.delivered;
        for (k, v) in &other.by_outcome {
            *self.by_outcome.entry(k.clone()).or_default() += v;
        }
        self.commit_to_send_count += other.commit_to_send_count;
        self.commit_to_send_sum_s += other.commit_to_send_sum_s;
        for (le, n) in &other.commit_to_send_buckets {
            match self
                .commit_to_send_buckets
                .iter_mut()
                .find(|(l, _)| l == le)
            {
                Some((_, m)) => *m += n,
                None => self.commit_to_send_buckets.push((*le, *n)),
            }
        }
        self.commit_to_send_buckets
            .sort_by(|a, b| a.0.total_cmp(&b.0));
    }

    /// What was counted from `before` to `self`.
    pub fn since(&self, before: &Self) -> Self {
        let earlier = |le: f64| {
            before
                .commit_to_send_buckets
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0, |(_, n)| *n)
        };
        Self {
            delivered: self.delivered.saturating_sub(before.delivered),
            by_outcome: self
                .by_outcome
                .iter()
                .map(|(k, v)| {
                    let was = before.by_outcome.get(k).copied().unwrap_or(0);
                    (k.clone(), v.saturating_sub(was))
                })
                .collect(),
            commit_to_send_count: self
                .commit_to_send_count
                .saturating_sub(before.commit_to_send_count),
            commit_to_send_sum_s: self.commit_to_send_sum_s - before.commit_to_send_sum_s,
            commit_to_send_buckets: self
                .commit_to_send_buckets
                .iter()
                .map(|(le, n)| (*le, n.saturating_sub(earlier(*le))))
                .collect(),
        }
    }

    /// The mean of the commit-to-send histogram, in ms; `None` without observations.
    pub fn mean_ms(&self) -> Option<f64> {
        (self.commit_to_send_count > 0)
            .then(|| self.commit_to_send_sum_s * 1000.0 / self.commit_to_send_count as f64)
    }

    /// The upper bound, in ms, of the first bucket holding the `q` quantile: the quantile is at
    /// most this (buckets double, so it is at least half of it unless it is the first bucket).
    /// `None` without observations, or when it lies past the last finite bucket.
    pub fn quantile_le_ms(&self, q: f64) -> Option<f64> {
        if self.commit_to_send_count == 0 {
            return None;
        }
        let want = (q * self.commit_to_send_count as f64).ceil() as u64;
        self.commit_to_send_buckets
            .iter()
            .find(|(le, n)| le.is_finite() && *n >= want.max(1))
            .map(|(le, _)| le * 1000.0)
    }
}

/// The push metrics of one exposition text; missing lines count zero.
fn parse_push(text: &str) -> PushCounters {
    const OUTCOMES: &str = "parley_push_notifications_total{";
    const HISTOGRAM: &str = "parley_push_commit_to_send_seconds";
    let mut c = PushCounters::default();
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if let Some(labels) = name.strip_prefix(OUTCOMES) {
            let Some(outcome) = labels
                .split(',')
                .find_map(|l| l.trim().strip_prefix("outcome=\""))
                .and_then(|l| l.split('"').next())
            else {
                continue;
            };
            *c.by_outcome.entry(outcome.to_owned()).or_default() += value as u64;
            if outcome == "delivered" {
                c.delivered += value as u64;
            }
        } else if let Some(rest) = name.strip_prefix(HISTOGRAM) {
            if rest == "_count" {
                c.commit_to_send_count += value as u64;
            } else if rest == "_sum" {
                c.commit_to_send_sum_s += value;
            } else if let Some(labels) = rest.strip_prefix("_bucket{") {
                let le = labels
                    .split(',')
                    .find_map(|l| l.trim().strip_prefix("le=\""))
                    .and_then(|l| l.split('"').next())
                    .and_then(|l| match l {
                        "+Inf" => Some(f64::INFINITY),
                        other => other.parse::<f64>().ok(),
                    });
                if let Some(le) = le {
                    c.commit_to_send_buckets.push((le, value as u64));
                }
            }
        }
    }
    c.commit_to_send_buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
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
    #[test]
    fn push_outcomes_and_the_commit_to_send_histogram_are_read() {
        let text = "# TYPE parley_push_notifications counter\n\
                    parley_push_notifications_total{outcome=\"delivered\"} 10\n\
                    parley_push_notifications_total{outcome=\"retry\"} 2\n\
                    parley_push_commit_to_send_seconds_sum 1.5\n\
                    parley_push_commit_to_send_seconds_count 10\n\
                    parley_push_commit_to_send_seconds_bucket{le=\"0.001\"} 0\n\
                    parley_push_commit_to_send_seconds_bucket{le=\"0.002\"} 5\n\
                    parley_push_commit_to_send_seconds_bucket{le=\"0.004\"} 9\n\
                    parley_push_commit_to_send_seconds_bucket{le=\"+Inf\"} 10\n";
        let c = parse_push(text);
        assert_eq!((c.delivered, c.by_outcome["retry"]), (10, 2));
        assert_eq!(c.commit_to_send_count, 10);
        assert_eq!(c.mean_ms(), Some(150.0));
        assert_eq!(c.quantile_le_ms(0.5), Some(2.0));
        assert_eq!(c.quantile_le_ms(0.9), Some(4.0));
        assert_eq!(c.quantile_le_ms(0.99), None, "past the last finite bucket");
        let d = c.since(&parse_push(
            "parley_push_notifications_total{outcome=\"delivered\"} 4\n\
             parley_push_commit_to_send_seconds_count 4\n\
             parley_push_commit_to_send_seconds_bucket{le=\"0.002\"} 4\n",
        ));
        assert_eq!((d.delivered, d.commit_to_send_count), (6, 6));
        assert_eq!(d.commit_to_send_buckets[1], (0.002, 1));
        assert_eq!(d.quantile_le_ms(0.5), Some(4.0));
        assert_eq!(
            parse_push("parley_pushes_total 1\n"),
            PushCounters::default()
        );
    }
}
