//! The gateways a session may connect to: a ring of clients, one per base URL, that the
//! session walks when a connection fails or a gateway asks it to go elsewhere, and the pause
//! before each attempt.
//!
//! One URL (a single server or a load balancer) is a ring of one: every attempt goes to it and
//! the pauses are those of a session without a ring. With several, a session starts at a random
//! one, so devices spread over the gateways, and after a failure tries the next one at once
//! (after a short jittered pause), backing off further only when a whole round failed: a dead
//! gateway's devices move to the live ones within a pause, without waiting for it.

use rand::Rng;

use crate::client::Client;
use crate::error::ClientError;
use crate::retry::backoff_ms;

/// The gateways of a session, one client each, and the one in use.
#[derive(Debug, Clone)]
pub(crate) struct Gateways {
    clients: Vec<Client>,
    at: usize,
}

impl Gateways {
    /// A ring over `base_urls` for `client`'s device, in the order given, starting at `start`
    /// (wrapped into the ring). No URL: the client's own base URL alone.
    pub(crate) fn new(
        client: &Client,
        base_urls: &[String],
        start: usize,
    ) -> Result<Self, ClientError> {
        let clients = if base_urls.is_empty() {
            vec![client.clone()]
        } else {
            base_urls
                .iter()
                .map(|url| client.with_base_url(url))
                .collect::<Result<Vec<_>, _>>()?
        };
        let at = start % clients.len();
        Ok(Self { clients, at })
    }

    /// A ring over `base_urls` starting at a random gateway, so that devices spread evenly.
    pub(crate) fn starting_anywhere(
        client: &Client,
        base_urls: &[String],
    ) -> Result<Self, ClientError> {
        let start = rand::thread_rng().gen_range(0..base_urls.len().max(1));
        Self::new(client, base_urls, start)
    }

    pub(crate) fn len(&self) -> usize {
        self.clients.len()
    }

    /// The client of the gateway in use (or to be tried next).
    pub(crate) fn current(&self) -> &Client {
        &self.clients[self.at]
    }

    /// Moves on to the next gateway, wrapping after the last.
    pub(crate) fn advance(&mut self) {
        self.at = (self.at + 1) % self.clients.len();
    }

    /// The pause before connection attempt `attempt` (1 for the first) of a reconnect: jittered
    /// over the upper half of a ceiling that doubles with each whole round of the ring that
    /// failed, from `first_ms` up to `max_ms`. With one gateway every attempt is a round.
    pub(crate) fn pause_ms(&self, first_ms: u64, max_ms: u64, attempt: u32) -> u64 {
        backoff_ms(first_ms, max_ms, round_of(attempt, self.len()))
    }
}

/// The round (1 for the first) that connection attempt `attempt` (1 for the first) belongs to
/// on a ring of `len` gateways.
fn round_of(attempt: u32, len: usize) -> u32 {
    let len = u32::try_from(len.max(1)).unwrap_or(u32::MAX);
    attempt.max(1).saturating_sub(1) / len + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        Client::new("http://lb:80", "t").unwrap()
    }

    fn urls(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://g{i}:80")).collect()
    }

    fn host(g: &Gateways) -> String {
        g.current().base_url().host_str().unwrap().to_owned()
    }

    #[test]
    fn the_ring_walks_the_urls_in_order_and_wraps() {
        let mut g = Gateways::new(&client(), &urls(3), 1).unwrap();
        let mut seen = vec![host(&g)];
        for _ in 0..4 {
            g.advance();
            seen.push(host(&g));
        }
        assert_eq!(seen, ["g1", "g2", "g0", "g1", "g2"]);
        assert_eq!(host(&Gateways::new(&client(), &urls(3), 7).unwrap()), "g1");
        assert_eq!(
            g.current().token(),
            "t",
            "every gateway speaks as the device"
        );
    }

    #[test]
    fn no_url_is_the_clients_own_base_url_alone() {
        let mut g = Gateways::new(&client(), &[], 5).unwrap();
        assert_eq!((g.len(), host(&g)), (1, "lb".to_owned()));
        g.advance();
        assert_eq!(host(&g), "lb");
    }

    #[test]
    fn a_bad_url_is_refused() {
        let bad = vec!["http://g0:80".to_owned(), "not a url".to_owned()];
        assert!(matches!(
            Gateways::new(&client(), &bad, 0),
            Err(ClientError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn random_starts_cover_the_ring() {
        let mut hosts = std::collections::BTreeSet::new();
        for _ in 0..200 {
            hosts.insert(host(
                &Gateways::starting_anywhere(&client(), &urls(3)).unwrap(),
            ));
        }
        assert_eq!(hosts.len(), 3, "{hosts:?}");
    }

    #[test]
    fn attempts_are_grouped_in_rounds_of_the_ring() {
        assert_eq!(
            (1..=7).map(|a| round_of(a, 3)).collect::<Vec<_>>(),
            [1, 1, 1, 2, 2, 2, 3]
        );
        assert_eq!(
            (1..=4).map(|a| round_of(a, 1)).collect::<Vec<_>>(),
            [1, 2, 3, 4],
            "one gateway: every attempt is a round, as without a ring"
        );
        assert_eq!(round_of(0, 0), 1);
    }

    #[test]
    fn pauses_are_jittered_within_the_rounds_ceiling() {
        let g = Gateways::new(&client(), &urls(2), 0).unwrap();
        for _ in 0..200 {
            // Round 1 (attempts 1 and 2): ceiling 200 ms; round 2: 400 ms; far rounds: 5 s.
            for attempt in [1, 2] {
                assert!((100..=200).contains(&g.pause_ms(200, 5_000, attempt)));
            }
            for attempt in [3, 4] {
                assert!((200..=400).contains(&g.pause_ms(200, 5_000, attempt)));
            }
            assert!((2_500..=5_000).contains(&g.pause_ms(200, 5_000, 60)));
        }
        let spread: std::collections::BTreeSet<u64> =
            (0..200).map(|_| g.pause_ms(200, 5_000, 1)).collect();
        assert!(spread.len() > 10, "the pause is jittered: {spread:?}");
    }
}
