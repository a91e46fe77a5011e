//! Raw TCP clients for the connection tests: exact bytes on the wire, from a chosen loopback
//! address, and the moment the server closes.

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// `127.0.0.1:<port>` of a test server's base URL.
pub fn server_addr(base_url: &str) -> Result<SocketAddr> {
    let host = base_url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not an http URL: {base_url}"))?;
    Ok(host.trim_end_matches('/').parse()?)
}

/// A connection from `127.0.0.<from>`; every 127.0.0.0/8 address reaches the loopback
/// interface on Linux, so tests can play several client hosts.
pub async fn connect_from(server: SocketAddr, from: u8) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::from([127, 0, 0, from]), 0))?;
    Ok(socket.connect(server).await?)
}

pub async fn connect(server: SocketAddr) -> Result<TcpStream> {
    connect_from(server, 1).await
}

/// What the server did with a connection by the time it closed it.
pub struct Closed {
    /// Everything it wrote before closing.
    pub received: Vec<u8>,
    /// When the close was seen.
    pub at: Instant,
}

/// Reads until the server closes (end of stream or reset), at most until `deadline`.
pub async fn until_closed(stream: &mut TcpStream, deadline: Instant) -> Result<Closed> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => bail!("still open at the deadline"),
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Ok(Closed {
                    received,
                    at: Instant::now(),
                })
            }
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Whether the connection is still open and silent after `wait`.
pub async fn open_after(stream: &mut TcpStream, wait: Duration) -> Result<bool> {
    let mut buf = [0u8; 1];
    match tokio::time::timeout(wait, stream.read(&mut buf)).await {
        Err(_) => Ok(true),
        Ok(Ok(0)) | Ok(Err(_)) => Ok(false),
        Ok(Ok(_)) => bail!("the server wrote to a connection it owed nothing"),
    }
}

/// Writes `bytes` one at a time, `gap` apart, while watching for the close. Answers when the
/// server closed, or `None` if every byte went out first.
pub async fn trickle(
    stream: &mut TcpStream,
    bytes: &[u8],
    gap: Duration,
) -> Result<Option<Instant>> {
    let mut buf = [0u8; 4096];
    for byte in bytes {
        if stream.write_all(&[*byte]).await.is_err() {
            return Ok(Some(Instant::now()));
        }
        match tokio::time::timeout(gap, stream.read(&mut buf)).await {
            Err(_) => {}
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(Some(Instant::now())),
            // An answer (an error for the cut request) comes before the close.
            Ok(Ok(_)) => {}
        }
    }
    Ok(None)
}

/// One parsed HTTP/1.1 answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> Result<Value> {
        serde_json::from_slice(&self.body)
            .with_context(|| format!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// Parses an answer out of `bytes`; the body is as long as `content-length` says.
pub fn parse_answer(bytes: &[u8]) -> Result<Answer> {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no complete head in {:?}", String::from_utf8_lossy(bytes)))?;
    let head = String::from_utf8(bytes[..end].to_vec())?;
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in {head:?}"))?;
    let mut answer = Answer {
        status,
        head,
        body: Vec::new(),
    };
    let len: usize = answer
        .header("content-length")
        .map(str::parse)
        .transpose()?
        .unwrap_or(0);
    let body = &bytes[end + 4..];
    if body.len() < len {
        bail!(
            "body shorter than its content-length: {} < {len}",
            body.len()
        );
    }
    answer.body = body[..len].to_vec();
    Ok(answer)
}

/// Sends `request` and reads one answer, within `wait`.
pub async fn exchange(stream: &mut TcpStream, request: &[u8], wait: Duration) -> Result<Answer> {
    stream.write_all(request).await?;
    read_answer(stream, wait).await
}

/// Reads one answer within `wait`.
pub async fn read_answer(stream: &mut TcpStream, wait: Duration) -> Result<Answer> {
    let deadline = Instant::now() + wait;
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Ok(answer) = parse_answer(&received) {
            return Ok(answer);
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => bail!("no answer within {wait:?}"),
            Ok(Ok(0)) => return parse_answer(&received).context("closed before a whole answer"),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return Err(e).context("reading the answer"),
        }
    }
}

/// A WebSocket upgrade request for `GET /v1/ws` with the device's token in the header.
pub fn upgrade_request(base_url: &str, token: &str) -> Result<UpgradeRequest> {
    let mut req = crate::ws_support::ws_url(base_url).into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    Ok(req)
}

pub type UpgradeRequest = tokio_tungstenite::tungstenite::handshake::client::Request;

pub const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: parley\r\n\r\n";
