//! One notification to one push service, and what its answer means for the job.

use std::time::Duration;

use parley_push::{Outcome, PreparedPush, Urgency, VapidKey};
use parley_store::{NotifyReason, PushJob, PushMessage, PushResult, PushTarget};

use super::payload::{self, Counts};
use super::PushConfig;

/// A push service must answer within this time; a timeout is retried like a 5xx.
pub const PUSH_TIMEOUT_MS: u64 = 10_000;
/// A push service must accept the connection within this time.
pub const PUSH_CONNECT_TIMEOUT_MS: u64 = 3_000;
/// How long a push service keeps a notification for a device that is away: a day, after which
/// the conversation's unread count says more than the notification would.
pub const PUSH_TTL_S: u32 = 86_400;
/// Attempts after which a notification is given up.
pub const PUSH_ATTEMPTS_MAX: i64 = 10;
/// The first retry waits this long; each next one twice as long as the last.
pub const PUSH_RETRY_BASE_MS: i64 = 1_000;
/// No retry waits longer than this.
pub const PUSH_RETRY_MAX_MS: i64 = 300_000;

/// What became of one attempt, before it is a store outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Delivered,
    Gone,
    Refused,
    Retry { after_ms: Option<u64> },
}

impl Attempt {
    pub fn label(self) -> &'static str {
        match self {
            Attempt::Delivered => "delivered",
            Attempt::Gone => "gone",
            Attempt::Refused => "refused",
            Attempt::Retry { .. } => "retry",
        }
    }

    /// The store outcome at `now_ms` for a job that failed `attempts` times before.
    pub fn result(self, attempts: i64, now_ms: i64) -> PushResult {
        match self {
            Attempt::Delivered => PushResult::Sent { at_ms: now_ms },
            Attempt::Gone => PushResult::Gone,
            Attempt::Refused => PushResult::Dropped,
            Attempt::Retry { .. } if attempts + 1 >= PUSH_ATTEMPTS_MAX => PushResult::Dropped,
            Attempt::Retry { after_ms } => {
                let backoff = retry_delay_ms(attempts);
                let asked = after_ms
                    .map(|ms| i64::try_from(ms).unwrap_or(PUSH_RETRY_MAX_MS))
                    .unwrap_or(0)
                    .min(PUSH_RETRY_MAX_MS);
                PushResult::Retry {
                    due_ms: now_ms.saturating_add(backoff.max(asked)),
                }
            }
        }
    }
}

/// The wait before the retry that follows `attempts` failures: doubling, capped.
pub fn retry_delay_ms(attempts: i64) -> i64 {
    let doublings = u32::try_from(attempts.clamp(0, 20)).unwrap_or(20);
    PUSH_RETRY_BASE_MS
        .saturating_mul(1_i64 << doublings)
        .min(PUSH_RETRY_MAX_MS)
}

/// The request for `job`: encrypted for a Web Push subscription, JSON for a push gateway.
pub fn prepare(
    job: &PushJob,
    message: &PushMessage,
    counts: Counts,
    vapid: &VapidKey,
    config: &PushConfig,
    now_unix_s: u64,
) -> Result<PreparedPush, parley_push::PushError> {
    let urgent = message.reason != NotifyReason::Message;
    match &job.target {
        PushTarget::WebPush {
            endpoint,
            p256dh,
            auth,
        } => {
            let body = payload::web_push(job, message, counts);
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            let subscription = parley_push::WebPushSubscription {
                endpoint: endpoint.clone(),
                p256dh: p256dh.clone(),
                auth: auth.clone(),
            };
            // One topic per conversation: a push service holding an undelivered notification
            // of the conversation replaces it with the newer one instead of queueing both.
            let topic = parley_push::topic_for(job.conv_id.as_str());
            parley_push::web_push(
                &subscription,
                vapid,
                &config.subject,
                &bytes,
                PUSH_TTL_S,
                if urgent {
                    Urgency::High
                } else {
                    Urgency::Normal
                },
                Some(&topic),
                now_unix_s,
            )
        }
        PushTarget::Gateway {
            url,
            pushkey,
            app_id,
        } => {
            let target = parley_push::GatewayTarget {
                url: url.clone(),
                pushkey: pushkey.clone(),
                app_id: app_id.clone(),
            };
            parley_push::gateway(&target, &payload::gateway(job, message, counts))
        }
    }
}

/// Posts `prepared` and reads the answer.
pub async fn post(
    client: &reqwest::Client,
    prepared: PreparedPush,
    gateway_pushkey: Option<&str>,
) -> Attempt {
    let mut request = client.post(&prepared.url);
    for (name, value) in &prepared.headers {
        request = request.header(*name, value);
    }
    let response = match request.body(prepared.body).send().await {
        Ok(response) => response,
        // Timeouts and connection failures: the service may be down for a while.
        Err(_) => return Attempt::Retry { after_ms: None },
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let attempt = match parley_push::classify(status, retry_after.as_deref()) {
        Outcome::Delivered => Attempt::Delivered,
        Outcome::Gone => Attempt::Gone,
        Outcome::Refused => Attempt::Refused,
        Outcome::Retry { after_ms } => Attempt::Retry { after_ms },
    };
    // A push gateway answers 200 and lists the keys it no longer knows.
    if let (Attempt::Delivered, Some(pushkey)) = (attempt, gateway_pushkey) {
        let body =
            tokio::time::timeout(Duration::from_millis(PUSH_TIMEOUT_MS), response.bytes()).await;
        if let Ok(Ok(body)) = body {
            if parley_push::gateway_rejected(&body, pushkey) {
                return Attempt::Gone;
            }
        }
    }
    attempt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_doubling_up_to_the_cap() {
        assert_eq!(retry_delay_ms(0), 1_000);
        assert_eq!(retry_delay_ms(1), 2_000);
        assert_eq!(retry_delay_ms(30), PUSH_RETRY_MAX_MS);
        let retry = Attempt::Retry {
            after_ms: Some(60_000),
        };
        assert_eq!(retry.result(0, 10), PushResult::Retry { due_ms: 60_010 });
        assert_eq!(retry.result(PUSH_ATTEMPTS_MAX - 1, 10), PushResult::Dropped);
    }
}
