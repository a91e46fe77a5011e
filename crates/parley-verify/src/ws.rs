//! A raw WebSocket client for the checks: exact frames and close codes, no SDK logic.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::error::CheckError;

/// How long a check waits for a frame it expects.
pub const FRAME_WAIT: Duration = Duration::from_secs(5);

/// What [`Ws::next_or_end`] read.
#[derive(Debug)]
pub enum Next {
    Frame(Value),
    /// The server closed with this code; 1006 when the connection ended without a close frame.
    Ended(u16),
    /// Nothing within the wait.
    Quiet,
}

pub struct Ws {
    inner: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

fn ws_err(e: impl std::fmt::Display) -> CheckError {
    CheckError::WebSocket(e.to_string())
}

impl Ws {
    /// Opens `/v1/ws` with the device's token and waits for the answer to a ping, so that
    /// the connection is registered before the check goes on.
    pub async fn connect(base_url: &str, token: &str) -> Result<Ws, CheckError> {
        let url = format!(
            "{}/v1/ws",
            base_url.trim_end_matches('/').replacen("http", "ws", 1)
        );
        let mut req = url.into_client_request().map_err(ws_err)?;
        let bearer = format!("Bearer {token}").parse().map_err(ws_err)?;
        req.headers_mut().insert("authorization", bearer);
        let (inner, _) = tokio_tungstenite::connect_async(req)
            .await
            .map_err(ws_err)?;
        let mut ws = Ws { inner };
        ws.send(serde_json::json!({"type": "ping", "req_id": "ready"}))
            .await?;
        ws.next_of("pong", FRAME_WAIT).await?;
        Ok(ws)
    }

    pub async fn send(&mut self, frame: Value) -> Result<(), CheckError> {
        self.inner
            .send(Message::Text(frame.to_string().into()))
            .await
            .map_err(ws_err)
    }

    /// The next JSON frame within `wait`; `None` when nothing came. A close is an error.
    pub async fn next_json(&mut self, wait: Duration) -> Result<Option<Value>, CheckError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inner.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => return Err(ws_err("connection ended")),
                Ok(Some(m)) => m.map_err(ws_err)?,
            };
            match msg {
                Message::Text(t) => {
                    return serde_json::from_str(t.as_str()).map(Some).map_err(ws_err)
                }
                Message::Close(c) => return Err(ws_err(format!("closed: {c:?}"))),
                _ => continue,
            }
        }
    }

    /// The next JSON frame within `wait`, or how the connection ended.
    pub async fn next_or_end(&mut self, wait: Duration) -> Result<Next, CheckError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inner.next()).await {
                Err(_) => return Ok(Next::Quiet),
                Ok(None) | Ok(Some(Err(_))) => return Ok(Next::Ended(1006)),
                Ok(Some(Ok(m))) => m,
            };
            match msg {
                Message::Text(t) => {
                    return serde_json::from_str(t.as_str())
                        .map(Next::Frame)
                        .map_err(ws_err)
                }
                Message::Close(Some(frame)) => return Ok(Next::Ended(u16::from(frame.code))),
                Message::Close(None) => return Ok(Next::Ended(u16::from(CloseCode::Status))),
                _ => continue,
            }
        }
    }

    /// The next frame of type `kind` within `wait`, skipping others.
    pub async fn next_of(&mut self, kind: &str, wait: Duration) -> Result<Value, CheckError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(v) = self.next_json(left).await? else {
                return Err(CheckError::Failed(format!(
                    "no {kind} frame within {wait:?}"
                )));
            };
            if v["type"] == kind {
                return Ok(v);
            }
        }
    }

    /// Reads until the server closes: the close code and the frames seen before it.
    pub async fn until_close(&mut self, wait: Duration) -> Result<(u16, Vec<Value>), CheckError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut seen = Vec::new();
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inner.next()).await {
                Err(_) => return Err(CheckError::Failed(format!("no close within {wait:?}"))),
                Ok(None) => return Err(ws_err("ended without a close frame")),
                Ok(Some(m)) => m.map_err(ws_err)?,
            };
            match msg {
                Message::Close(Some(frame)) => return Ok((u16::from(frame.code), seen)),
                Message::Close(None) => return Ok((u16::from(CloseCode::Status), seen)),
                Message::Text(t) => seen.push(serde_json::from_str(t.as_str()).map_err(ws_err)?),
                _ => {}
            }
        }
    }
}
