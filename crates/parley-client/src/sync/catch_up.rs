//! [`Client::catch_up`]: one feed call, then events-after for every conversation that changed
//! (`fetch.rs`), a few at a time, applied to the [`SyncState`] as each one finishes.

use std::collections::{BTreeMap, BTreeSet};

use futures::stream::{self, StreamExt};

use crate::client::Client;
use crate::error::ClientError;
use crate::sync::conv::ConvSync;
use crate::sync::fetch::{fetch_conversation, ConvFetch, ConvJob, Op};
use crate::sync::state::SyncState;

/// The server's largest events-after page; larger limits are clamped to it.
pub const EVENTS_PAGE_LEN_MAX: u32 = 500;
/// Conversations fetched at the same time during a catch-up: enough to hide the round trips of
/// a device with many changed conversations, few enough not to crowd the server.
pub const CATCH_UP_CONCURRENCY_DEFAULT: usize = 4;

/// What one catch-up did. Lists of conversations are in `conv_id` order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatchUpReport {
    /// Entries of the feed answer. The feed may list a conversation where nothing visible to
    /// the user changed; [`CatchUpReport::changed`] leaves those out.
    pub listed: usize,
    /// Conversations whose state changed: new to the state, new events, read position, unread
    /// count, head, `min_seq` or epoch.
    pub changed: Vec<String>,
    /// Events handed to the app (after dropping any the state had).
    pub events: usize,
    /// Events-after answers received.
    pub pages: usize,
    /// Conversations whose log restarted because events below `min_seq` were purged.
    pub truncated: Vec<String>,
    /// Conversations restarted at a new epoch after `EPOCH_CHANGED`.
    pub epoch_resets: Vec<String>,
    /// Conversations left before their head because the page bound was reached; they stay
    /// stale and the next catch-up continues them.
    pub unfinished: Vec<String>,
    /// Conversations the server no longer lets the user read; they were forgotten.
    pub inaccessible: Vec<String>,
}

/// Bounds of a catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpOptions {
    /// Events per events-after call; clamped to 1..=[`EVENTS_PAGE_LEN_MAX`].
    pub page_len: u32,
    /// Conversations fetched at the same time (at least 1).
    pub concurrency: usize,
}

impl Default for CatchUpOptions {
    fn default() -> Self {
        Self {
            page_len: EVENTS_PAGE_LEN_MAX,
            concurrency: CATCH_UP_CONCURRENCY_DEFAULT,
        }
    }
}

impl Client {
    /// Brings `state` level with the server with the default [`CatchUpOptions`]: one feed
    /// call, then events-after for each changed conversation. See the
    /// [module documentation](crate::sync).
    pub async fn catch_up(&self, state: &mut SyncState) -> Result<CatchUpReport, ClientError> {
        self.catch_up_with(state, CatchUpOptions::default()).await
    }

    /// [`Client::catch_up`] with explicit bounds. On an error every conversation keeps the
    /// progress it made and the token stays, so calling again resumes.
    pub async fn catch_up_with(
        &self,
        state: &mut SyncState,
        options: CatchUpOptions,
    ) -> Result<CatchUpReport, ClientError> {
        let page_len = options.page_len.clamp(1, EVENTS_PAGE_LEN_MAX);
        let feed = self.list_conversations(state.token.as_deref()).await?;
        let mut report = CatchUpReport {
            listed: feed.conversations.len(),
            ..CatchUpReport::default()
        };

        let mut before: BTreeMap<String, Option<ConvSync>> = BTreeMap::new();
        let mut jobs = Vec::new();
        for entry in &feed.conversations {
            before.insert(
                entry.conv_id.clone(),
                state.convs.get(&entry.conv_id).cloned(),
            );
            state.apply_entry(entry);
            if let Some(conv) = state.convs.get(&entry.conv_id) {
                if conv.needs_fetch(entry) {
                    jobs.push(ConvJob {
                        conv_id: entry.conv_id.clone(),
                        start: conv.clone(),
                        feed_epoch: Some(entry.epoch),
                    });
                }
            }
        }
        for (conv_id, conv) in &state.convs {
            if conv.stale && !before.contains_key(conv_id) {
                before.insert(conv_id.clone(), Some(conv.clone()));
                jobs.push(ConvJob {
                    conv_id: conv_id.clone(),
                    start: conv.clone(),
                    feed_epoch: None,
                });
            }
        }

        let mut restarted = BTreeSet::new();
        let mut first_error = None;
        let mut fetches = stream::iter(jobs)
            .map(|job| fetch_conversation(self, job, page_len))
            .buffer_unordered(options.concurrency.max(1));
        while let Some(mut fetch) = fetches.next().await {
            if fetch.restarted() {
                restarted.insert(fetch.conv_id.clone());
            }
            state.apply_fetch(&mut fetch, &mut report);
            if let Some(e) = fetch.error.take() {
                first_error.get_or_insert(e);
            }
        }
        drop(fetches);

        for (conv_id, prior) in &before {
            let now = state.convs.get(conv_id);
            let changed = restarted.contains(conv_id)
                || match (prior, now) {
                    (Some(p), Some(n)) => p.observable() != n.observable(),
                    (None, None) => false,
                    _ => true,
                };
            if changed {
                report.changed.push(conv_id.clone());
            }
        }
        report.truncated.sort();
        report.epoch_resets.sort();
        report.unfinished.sort();
        report.inaccessible.sort();

        if let Some(e) = first_error {
            return Err(e);
        }
        state.token = Some(feed.sync_token);
        Ok(report)
    }
}

impl SyncState {
    /// Applies what fetching one conversation produced, in the order it happened.
    pub(super) fn apply_fetch(&mut self, fetch: &mut ConvFetch, report: &mut CatchUpReport) {
        let conv_id = fetch.conv_id.clone();
        if fetch.inaccessible {
            self.convs.remove(&conv_id);
        } else {
            self.convs.insert(conv_id.clone(), fetch.conv.clone());
        }
        for op in fetch.ops.drain(..) {
            match op {
                Op::Append(events) => self.store(&conv_id, events),
                Op::Restart(why) => self.events.restart(&conv_id, why),
            }
        }
        report.pages += fetch.pages;
        report.events += fetch.events;
        if fetch.truncated {
            report.truncated.push(conv_id.clone());
        }
        if fetch.epoch_resets > 0 {
            report.epoch_resets.push(conv_id.clone());
        }
        if fetch.unfinished {
            report.unfinished.push(conv_id.clone());
        }
        if fetch.inaccessible {
            report.inaccessible.push(conv_id);
        }
    }
}
