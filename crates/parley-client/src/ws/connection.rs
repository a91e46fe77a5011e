//! Opening the WebSocket and reading why it ended.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::{HeaderValue, AUTHORIZATION};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use url::Url;

use crate::client::Client;
use crate::error::ClientError;
use crate::http::error_from_answer;
use crate::ws::frames::{CLOSE_KICKED, CLOSE_REVOKED, CLOSE_TOO_SLOW};
use crate::ws::protocol::StopReason;

pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// `ws(s)://<base>/v1/ws` for the client's base URL: the same host, port and path prefix.
pub(crate) fn ws_url(client: &Client) -> Result<Url, ClientError> {
    let mut url = client.http().url(&["v1", "ws"])?;
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    url.set_scheme(scheme)
        .map_err(|()| ClientError::InvalidUrl {
            url: url.to_string(),
            reason: format!("cannot switch to {scheme}://"),
        })?;
    Ok(url)
}

/// Opens the device's WebSocket, authenticated by the `Authorization` header (the query
/// parameter is for browsers, which cannot set headers, and would put the token in URLs).
/// A refused upgrade answers like HTTP: 401 for a bad token.
pub(crate) async fn open(
    client: &Client,
    handshake_timeout_ms: u64,
) -> Result<Socket, ClientError> {
    let url = ws_url(client)?;
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| ClientError::InvalidUrl {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
    let mut bearer =
        HeaderValue::from_str(&format!("Bearer {}", client.token())).map_err(|_| {
            ClientError::Disconnected {
                reason: "the token is not a valid header value".into(),
            }
        })?;
    bearer.set_sensitive(true);
    request.headers_mut().insert(AUTHORIZATION, bearer);

    let handshake = tokio_tungstenite::connect_async_with_config(request, None, true);
    match tokio::time::timeout(Duration::from_millis(handshake_timeout_ms), handshake).await {
        Err(_) => Err(ClientError::Disconnected {
            reason: format!("no WebSocket upgrade within {handshake_timeout_ms} ms"),
        }),
        Ok(Ok((socket, _))) => Ok(socket),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            let status = response.status().as_u16();
            Err(error_from_answer(
                status,
                response.body().as_deref().unwrap_or_default(),
            ))
        }
        Ok(Err(e)) => Err(ClientError::Disconnected {
            reason: e.to_string(),
        }),
    }
}

/// Why a connection ended, and so whether to come back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Reconnect and resync, starting at the next gateway when there are several: a drop
    /// (1006), silence, 1001 (the gateway shuts down), anything else the server may close with.
    /// Each may mean the gateway is gone.
    Lost(String),
    /// Reconnect and resync on the same gateway, which is known to be alive: it closed with
    /// 4008 (this client read too slowly), or the app asked for a new connection.
    Renew(String),
    /// Stop for good: coming back would be refused (revoked) or would push out the newer
    /// connection that replaced this one (kicked), which would then do the same.
    Stop(StopReason),
}

/// What a close frame from the server means.
pub(crate) fn on_close(frame: Option<&CloseFrame>) -> Ended {
    let Some(frame) = frame else {
        return Ended::Lost("closed without a code".into());
    };
    match u16::from(frame.code) {
        CLOSE_KICKED => Ended::Stop(StopReason::Kicked),
        CLOSE_REVOKED => Ended::Stop(StopReason::Revoked),
        CLOSE_TOO_SLOW => Ended::Renew(format!("closed by the server with code {CLOSE_TOO_SLOW}")),
        code => Ended::Lost(format!("closed by the server with code {code}")),
    }
}

/// How long the server has been silent, not counting the time the session itself spent
/// elsewhere (filling a gap, waiting for the app to take deliveries): frames that arrived
/// meanwhile wait unread in the socket and prove nothing about the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Silence {
    since: Instant,
    busy: Duration,
}

impl Silence {
    pub(crate) fn new() -> Self {
        Self {
            since: Instant::now(),
            busy: Duration::ZERO,
        }
    }

    pub(crate) fn heard(&mut self) {
        *self = Self::new();
    }

    pub(crate) fn busy_for(&mut self, d: Duration) {
        self.busy += d;
    }

    pub(crate) fn exceeds(&self, max: Duration) -> bool {
        self.since.elapsed().saturating_sub(self.busy) > max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    fn close(code: u16) -> Ended {
        on_close(Some(&CloseFrame {
            code: CloseCode::from(code),
            reason: "".into(),
        }))
    }

    #[test]
    fn urls_follow_the_base_url() {
        let c = Client::new("http://127.0.0.1:8080", "t").unwrap();
        assert_eq!(ws_url(&c).unwrap().as_str(), "ws://127.0.0.1:8080/v1/ws");
        let c = Client::new("https://chat.example/api/", "t").unwrap();
        assert_eq!(ws_url(&c).unwrap().as_str(), "wss://chat.example/api/v1/ws");
    }

    #[test]
    fn only_kicked_and_revoked_stop_the_session_and_only_too_slow_stays() {
        assert_eq!(close(4001), Ended::Stop(StopReason::Kicked));
        assert_eq!(close(4003), Ended::Stop(StopReason::Revoked));
        assert!(matches!(close(4008), Ended::Renew(_)), "a live gateway");
        for code in [1001, 1000, 1011] {
            assert!(matches!(close(code), Ended::Lost(_)), "{code}");
        }
        assert!(matches!(on_close(None), Ended::Lost(_)));
    }

    #[test]
    fn time_spent_busy_is_not_silence() {
        let mut s = Silence::new();
        s.since -= Duration::from_secs(10);
        assert!(s.exceeds(Duration::from_secs(5)));
        s.busy_for(Duration::from_secs(8));
        assert!(!s.exceeds(Duration::from_secs(5)));
        s.heard();
        assert!(!s.exceeds(Duration::from_secs(1)));
    }
}
