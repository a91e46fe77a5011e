//! The socket of one connection as hyper and, after an upgrade, the WebSocket see it.
//!
//! It does three small things on top of the TCP stream: it counts the bytes read (the head
//! timer's sign that a head has started), it holds the connection's admission ticket (so the
//! connection counts against the caps exactly as long as its socket is open, WebSocket life
//! included), and it gives hyper's own answers to unparsable requests the JSON error body
//! every other answer has (see [`super::answers::rewrite_parse_error`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::activity::Activity;
use super::admission::Ticket;
use super::answers;

pub struct ConnIo {
    tcp: TcpStream,
    activity: Arc<Activity>,
    /// A replacement answer still to be written, and how much of it was.
    replacement: Option<(Vec<u8>, usize)>,
    _ticket: Ticket,
}

impl ConnIo {
    pub fn new(tcp: TcpStream, ticket: Ticket) -> Self {
        Self {
            tcp,
            activity: ticket.activity().clone(),
            replacement: None,
            _ticket: ticket,
        }
    }

    /// Writes what is left of a replacement answer; ready once nothing is.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                self.replacement = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// hyper's own answer to a request it could not parse is written while it waits for a
    /// head, which no other answer is; it is swapped for one with an error body.
    fn replace(&mut self, buf: &[u8]) -> bool {
        if !self.activity.waiting_for_head() {
            return false;
        }
        match answers::rewrite_parse_error(buf) {
            Some(replacement) => {
                self.replacement = Some((replacement, 0));
                true
            }
            None => false,
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
        this.activity.count_read(buf.filled().len() - before);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        if this.replace(buf) {
            // The original is taken whole; the replacement goes out on this and later polls.
            let _ = this.poll_replacement(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        let first = bufs.iter().find(|b| !b.is_empty());
        if first.is_some_and(|b| this.replace(b)) {
            let _ = this.poll_replacement(cx)?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}
