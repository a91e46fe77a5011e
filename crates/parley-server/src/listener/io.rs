//! The socket of one connection as hyper and, after an upgrade, the WebSocket see it.
//!
//! It does four small things on top of the TCP stream: it counts the bytes read (the head
//! timer's sign that a head has started), it holds the connection's admission ticket (so the
//! connection counts against the caps exactly as long as its socket is open, WebSocket life
//! included), it gives hyper's own answers to unparsable requests the JSON error body every
//! other answer has (see [`super::answers::rewrite_parse_error`]), and it ends a write that
//! makes no progress for the write-stall timeout: a client that stops reading would otherwise
//! hold its connection, its task and its buffers for as long as it likes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::activity::Activity;
use super::admission::Ticket;
use super::answers;

pub struct ConnIo {
    tcp: TcpStream,
    activity: Arc<Activity>,
    /// A replacement answer still to be written, and how much of it was.
    replacement: Option<(Vec<u8>, usize)>,
    /// How long a write may wait for the socket to take bytes.
    write_stall: Duration,
    /// Set while a write waits for the socket; cleared when one makes progress.
    stalled: Option<Pin<Box<Sleep>>>,
    _ticket: Ticket,
}

impl ConnIo {
    pub fn new(tcp: TcpStream, ticket: Ticket, write_stall: Duration) -> Self {
        Self {
            tcp,
            activity: ticket.activity().clone(),
            replacement: None,
            write_stall,
            stalled: None,
            _ticket: ticket,
        }
    }

    /// Passes a write's outcome on, timing how long the socket has taken no bytes: pending
    /// for longer than the write-stall timeout becomes a `TimedOut` error, which ends the
    /// connection.
    fn watch_stall<T>(
        &mut self,
        cx: &mut Context<'_>,
        write: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if write.is_ready() {
            self.stalled = None;
            return write;
        }
        let write_stall = self.write_stall;
        let stalled = self.stalled.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until(Instant::now() + write_stall))
        });
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.stalled = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client took no bytes within the write-stall timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
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
        let written = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.watch_stall(cx, written)
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
        let written = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.watch_stall(cx, written)
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
