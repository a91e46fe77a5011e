//! What the scenarios that drive the server directly (push-latency, sync-feed, large-group)
//! share: a tag for the run's ids, users with a device, raw WebSocket connections and bounded
//! concurrency.

use std::future::Future;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use parley_client::AdminClient;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Device id of the devices these scenarios create.
pub const DEVICE_ID: &str = "d1";

/// A WebSocket connection of a device.
pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// `len` random hex digits, so the ids of one run never collide with another run's.
pub fn run_tag(len: usize) -> String {
    let mut tag = uuid::Uuid::new_v4().simple().to_string();
    tag.truncate(len);
    tag
}

/// Creates `user_id` and issues a token for its device [`DEVICE_ID`]; answers the token.
pub async fn user_with_device(admin: &AdminClient, user_id: &str) -> Result<String> {
    admin
        .create_user(user_id, None)
        .await
        .context("creating a benchmark user")?;
    Ok(admin.create_device(user_id, DEVICE_ID).await?)
}

/// The WebSocket endpoint of the server at `base_url`.
pub fn ws_url(base_url: &str) -> String {
    format!(
        "{}/v1/ws",
        base_url.trim_end_matches('/').replacen("http", "ws", 1)
    )
}

/// A WebSocket to the server at `base_url`, authenticated as the device of `token`.
pub async fn connect(base_url: &str, token: &str) -> Result<Socket> {
    let mut req = ws_url(base_url).into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let (ws, _) = tokio_tungstenite::connect_async(req).await?;
    Ok(ws)
}

/// Runs `f(i)` for `0..n`, at most `k` at once, and answers the results in the order of `i`.
pub async fn bounded<T, F, Fut>(n: usize, k: usize, f: F) -> Result<Vec<T>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    futures::stream::iter((0..n).map(f))
        .buffered(k.max(1))
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_urls_follow_the_base_url() {
        assert_eq!(
            ws_url("http://127.0.0.1:8080/"),
            "ws://127.0.0.1:8080/v1/ws"
        );
        assert_eq!(ws_url("https://chat.example"), "wss://chat.example/v1/ws");
    }

    #[test]
    fn run_tags_are_hex_of_the_length_asked_for_and_differ() {
        let (a, b) = (run_tag(8), run_tag(8));
        assert_eq!(a.len(), 8);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn bounded_answers_in_order_and_runs_at_most_k_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let out = bounded(20, 3, |i| {
            let (now, peak) = (&now, &peak);
            async move {
                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(running, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis((20 - i as u64) % 4)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(i * 2)
            }
        })
        .await
        .expect("no job fails");
        assert_eq!(out, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        assert!(peak.load(Ordering::SeqCst) <= 3, "peak {peak:?}");
    }
}
