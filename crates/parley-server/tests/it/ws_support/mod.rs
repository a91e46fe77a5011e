//! A raw WebSocket client for the gateway tests: exact frames and close codes, no SDK logic.

#![allow(dead_code)]

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// What [`Ws::next_or_close`] read.
#[derive(Debug)]
pub enum Next {
    Frame(Value),
    /// The server closed with this code; 1006 when the connection ended without a close frame.
    Closed(u16),
    /// Nothing within the wait.
    Quiet,
}

/// Presence frames (SPEC §7) come whenever a co-member's first device connects or last one
/// disconnects, which most tests do not watch for: they are skipped unless asked for
/// ([`Ws::with_presence`]).
pub struct Ws {
    inner: WebSocketStream<MaybeTlsStream<TcpStream>>,
    presence: bool,
}

fn skipped(presence: bool, t: &str) -> bool {
    !presence && t.starts_with(r#"{"type":"presence""#)
}

pub fn ws_url(base_url: &str) -> String {
    format!(
        "{}/v1/ws",
        base_url.trim_end_matches('/').replacen("http", "ws", 1)
    )
}

impl Ws {
    pub async fn connect(base_url: &str, token: &str) -> Result<Ws> {
        let mut req = ws_url(base_url).into_client_request()?;
        req.headers_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
        let (inner, _) = tokio_tungstenite::connect_async(req).await?;
        Ok(Ws {
            inner,
            presence: false,
        })
    }

    /// This connection's reads return presence frames too.
    pub fn with_presence(mut self) -> Self {
        self.presence = true;
        self
    }

    pub async fn send(&mut self, frame: Value) -> Result<()> {
        self.inner
            .send(Message::Text(frame.to_string().into()))
            .await?;
        Ok(())
    }

    pub async fn send_raw(&mut self, msg: Message) -> Result<()> {
        self.inner.send(msg).await?;
        Ok(())
    }

    /// The next JSON frame within `wait`; `None` on timeout. A close is an error.
    pub async fn next_json(&mut self, wait: Duration) -> Result<Option<Value>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inner.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => bail!("connection ended"),
                Ok(Some(m)) => m?,
            };
            match msg {
                Message::Text(t) if skipped(self.presence, t.as_str()) => continue,
                Message::Text(t) => return Ok(Some(serde_json::from_str(t.as_str())?)),
                Message::Close(c) => bail!("closed: {c:?}"),
                _ => continue,
            }
        }
    }

    /// The next JSON frame within `wait`, or how the connection ended: for a client that
    /// moves on to another gateway when its connection ends, whatever the reason.
    pub async fn next_or_close(&mut self, wait: Duration) -> Result<Next> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inner.next()).await {
                Err(_) => return Ok(Next::Quiet),
                Ok(None) | Ok(Some(Err(_))) => return Ok(Next::Closed(1006)),
                Ok(Some(Ok(m))) => m,
            };
            match msg {
                Message::Text(t) if skipped(self.presence, t.as_str()) => continue,
                Message::Text(t) => return Ok(Next::Frame(serde_json::from_str(t.as_str())?)),
                Message::Close(Some(frame)) => return Ok(Next::Closed(u16::from(frame.code))),
                Message::Close(None) => return Ok(Next::Closed(u16::from(CloseCode::Status))),
                _ => continue,
            }
        }
    }

    /// The next frame of `kind` within `wait`, skipping others.
    pub async fn next_of(&mut self, kind: &str, wait: Duration) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(v) = self.next_json(left).await? else {
                bail!("no {kind} frame within {wait:?}")
            };
            if v["type"] == kind {
                return Ok(v);
            }
        }
    }

    /// Reads until the server closes; answers the close code and the JSON frames seen before.
    pub async fn until_close(&mut self, wait: Duration) -> Result<(u16, Vec<Value>)> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut seen = Vec::new();
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inner.next()).await {
                Err(_) => bail!("no close within {wait:?}"),
                Ok(None) => return Err(anyhow!("ended without a close frame")),
                Ok(Some(Err(e))) => return Err(anyhow!("error before close: {e}")),
                Ok(Some(Ok(m))) => m,
            };
            match msg {
                Message::Close(Some(frame)) => return Ok((u16::from(frame.code), seen)),
                Message::Close(None) => return Ok((u16::from(CloseCode::Status), seen)),
                Message::Text(t) if skipped(self.presence, t.as_str()) => {}
                Message::Text(t) => seen.push(serde_json::from_str(t.as_str())?),
                _ => {}
            }
        }
    }
}
