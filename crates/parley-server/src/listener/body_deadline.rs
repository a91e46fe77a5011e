//! A request body that must arrive in full by a deadline set when its head arrived.
//!
//! The deadline bounds the whole body, not the gap between two pieces of it: a client that
//! trickles one byte at a time still has to finish in time. The timer is made only when a
//! read of the body has to wait, so a body that arrived with its head (most of them, being a
//! few hundred bytes) costs no timer at all. When the deadline passes the body ends in an
//! error; the handler answers it like any unreadable body, and the connection is closed
//! since the rest of the body will never be read.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

pub struct DeadlineBody<B> {
    inner: B,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> DeadlineBody<B> {
    pub fn new(inner: B, deadline: Instant) -> Self {
        Self {
            inner,
            deadline,
            timer: None,
        }
    }
}

/// The body did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub struct BodyTimedOut;

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use axum::body::Body as AxumBody;
    use futures::StreamExt;

    /// A body whose pieces arrive `gap` apart.
    fn trickle(pieces: usize, gap: Duration) -> AxumBody {
        let stream = futures::stream::iter(0..pieces).then(move |_| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"x"))
        });
        AxumBody::from_stream(stream)
    }

    async fn read_all(body: DeadlineBody<AxumBody>) -> Result<usize, String> {
        let mut stream = AxumBody::new(body).into_data_stream();
        let mut len = 0;
        while let Some(chunk) = stream.next().await {
            len += chunk.map_err(|e| e.to_string())?.len();
        }
        Ok(len)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_in_time_is_whole() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let body = DeadlineBody::new(trickle(5, Duration::from_secs(5)), deadline);
        assert_eq!(read_all(body).await, Ok(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_ends_at_the_deadline_however_often_it_sends() {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        let body = DeadlineBody::new(trickle(100, Duration::from_secs(1)), deadline);
        let err = read_all(body).await.expect_err("cut at the deadline");
        assert!(err.contains("did not arrive in time"), "{err}");
        assert_eq!(started.elapsed().as_secs(), 30);
    }
}
