//! The request-head and keep-alive deadlines of one connection, run by hyper's own head timer.
//!
//! hyper's HTTP/1 server asks its timer for one thing only: a deadline each time it starts
//! waiting for a request head, dropped as soon as the head has arrived. Its own timer counts
//! that deadline from the moment the wait begins, so the keep-alive idle time and the time a
//! head may take to arrive would be one setting. This timer tells them apart, as Go's and
//! Envoy's servers do:
//!
//! - a connection's first head must arrive within the head timeout of the accept, so a silent
//!   or trickling connection is closed after it, whatever it sends;
//! - between requests, a connection may sit idle for the keep-alive time; once the first byte
//!   of the next head arrives, the rest must follow within the head timeout.
//!
//! The timer knows whether a byte arrived from the socket wrapper's read count; nothing runs
//! between two polls of the connection, and a connection that is not waiting for a head (a
//! request in progress, or a WebSocket) holds no timer at all.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Sleep, Timer};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::activity::Activity;

#[derive(Clone)]
pub struct HeadTimer {
    activity: Arc<Activity>,
    header_timeout: Duration,
    keepalive_idle: Duration,
}

impl HeadTimer {
    pub fn new(
        activity: Arc<Activity>,
        header_timeout: Duration,
        keepalive_idle: Duration,
    ) -> Self {
        Self {
            activity,
            header_timeout,
            keepalive_idle,
        }
    }
}

impl Timer for HeadTimer {
    /// A plain sleep: hyper's HTTP/1 server does not ask for one, and any other use keeps its
    /// own meaning.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(PlainSleep {
            sleep: tokio::time::sleep(duration),
        })
    }

    /// The wait for a request head: hyper's deadline is replaced by the connection's own.
    fn sleep_until(&self, _deadline: std::time::Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeadWait::new(
            self.activity.clone(),
            self.header_timeout,
            self.keepalive_idle,
        ))
    }
}

pin_project! {
    /// One wait for a request head.
    pub struct HeadWait {
        activity: Arc<Activity>,
        header_timeout: Duration,
        // The read count when the wait began; `None` once the head has started.
        idle_reads: Option<u64>,
        #[pin]
        sleep: tokio::time::Sleep,
    }

    impl PinnedDrop for HeadWait {
        fn drop(this: Pin<&mut Self>) {
            this.activity.head_wait_ended();
        }
    }
}

impl HeadWait {
    fn new(activity: Arc<Activity>, header_timeout: Duration, keepalive_idle: Duration) -> Self {
        let first = !activity.served();
        let (deadline, idle_reads) = if first {
            (activity.accepted() + header_timeout, None)
        } else {
            (Instant::now() + keepalive_idle, Some(activity.reads()))
        };
        activity.head_wait_began();
        Self {
            activity,
            header_timeout,
            idle_reads,
            sleep: tokio::time::sleep_until(deadline),
        }
    }
}

impl Future for HeadWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        // hyper polls the timer right after each read that did not complete the head, so the
        // first byte of a head is seen here as soon as it arrives.
        if let Some(reads) = *this.idle_reads {
            if this.activity.reads() != reads {
                *this.idle_reads = None;
                let deadline = Instant::now() + *this.header_timeout;
                this.sleep.as_mut().reset(deadline);
            }
        }
        this.sleep.poll(cx)
    }
}

impl Sleep for HeadWait {}

pin_project! {
    struct PlainSleep {
        #[pin]
        sleep: tokio::time::Sleep,
    }
}

impl Future for PlainSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.project().sleep.poll(cx)
    }
}

impl Sleep for PlainSleep {}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(activity: &Arc<Activity>) -> HeadTimer {
        HeadTimer::new(
            activity.clone(),
            Duration::from_secs(10),
            Duration::from_secs(60),
        )
    }

    async fn fires_within(wait: &mut Pin<Box<dyn Sleep>>, limit: Duration) -> bool {
        tokio::time::timeout(limit, wait.as_mut()).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_head_counts_from_the_accept() {
        let activity = Arc::new(Activity::new());
        tokio::time::advance(Duration::from_secs(4)).await;
        let mut wait = timer(&activity).sleep_until(std::time::Instant::now());
        assert!(activity.waiting_for_head());
        // Bytes that keep arriving do not move the deadline of a first head.
        activity.count_read(1);
        assert!(!fires_within(&mut wait, Duration::from_millis(5_900)).await);
        activity.count_read(1);
        assert!(fires_within(&mut wait, Duration::from_millis(200)).await);
        drop(wait);
        assert!(!activity.waiting_for_head());
        assert!(activity.served());
    }

    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_wait_is_idle_until_the_first_byte_then_a_head_wait() {
        let activity = Arc::new(Activity::new());
        drop(timer(&activity).sleep_until(std::time::Instant::now()));
        let mut idle = timer(&activity).sleep_until(std::time::Instant::now());
        assert!(!fires_within(&mut idle, Duration::from_secs(59)).await);
        assert!(fires_within(&mut idle, Duration::from_secs(2)).await);

        let mut started = timer(&activity).sleep_until(std::time::Instant::now());
        assert!(!fires_within(&mut started, Duration::from_secs(30)).await);
        activity.count_read(3);
        assert!(!fires_within(&mut started, Duration::from_millis(9_900)).await);
        assert!(fires_within(&mut started, Duration::from_millis(200)).await);
    }
}
