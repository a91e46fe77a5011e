//! Fetching one conversation of a catch-up from its cursor to its head, page by page, within
//! a bound on pages and epoch changes.

use crate::client::Client;
use crate::cursor::Progress;
use crate::error::{code, ClientError};
use crate::sync::conv::ConvSync;
use crate::sync::sink::Restart;
use crate::types::Event;

/// Pages allowed per conversation beyond those its head needs when the first page came, for
/// events committed while the conversation is being fetched.
pub const PAGES_SLACK: u64 = 3;
/// Epoch changes accepted per conversation in one catch-up; a log rebuilt more often than this
/// while it is being read is left for the next call.
pub const EPOCH_RESETS_MAX: u32 = 2;

/// Pages a conversation may take from `cursor` to `head`, with slack for events committed
/// meanwhile.
fn pages_budget(cursor: i64, head: i64, page_len: u32) -> u64 {
    let behind = u64::try_from(head.saturating_sub(cursor)).unwrap_or(0);
    behind.div_ceil(u64::from(page_len.max(1))) + PAGES_SLACK
}

/// What a fetch does to the app's copy of the conversation, replayed in order.
pub(super) enum Op {
    Append(Vec<Event>),
    Restart(Restart),
}

/// One conversation to fetch: a copy of its state and the epoch the feed gave it.
pub(super) struct ConvJob {
    pub(super) conv_id: String,
    pub(super) start: ConvSync,
    pub(super) feed_epoch: Option<i64>,
}

/// What fetching one conversation produced; applied to the state as a whole.
pub(super) struct ConvFetch {
    pub(super) conv_id: String,
    pub(super) conv: ConvSync,
    pub(super) ops: Vec<Op>,
    pub(super) pages: usize,
    pub(super) events: usize,
    pub(super) truncated: bool,
    pub(super) epoch_resets: u32,
    pub(super) unfinished: bool,
    pub(super) inaccessible: bool,
    pub(super) error: Option<ClientError>,
}

impl ConvFetch {
    pub(super) fn restarted(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Restart(_)))
    }
}

/// Fetches one conversation from its cursor to its head, page by page, within the page bound.
/// Never fails as a whole: an error ends the fetch and is returned with the progress made.
pub(super) async fn fetch_conversation(client: &Client, job: ConvJob, page_len: u32) -> ConvFetch {
    let mut out = ConvFetch {
        conv_id: job.conv_id,
        conv: job.start,
        ops: Vec::new(),
        pages: 0,
        events: 0,
        truncated: false,
        epoch_resets: 0,
        unfinished: false,
        inaccessible: false,
        error: None,
    };
    let conv_id = out.conv_id.clone();
    // Pages used and allowed since the fetch (re)started; the bound is set by the first answer.
    let mut used = 0u64;
    let mut budget: Option<u64> = None;
    loop {
        let from = out.conv.cursor;
        let answer = client
            .events_after(&conv_id, from, Some(page_len), Some(out.conv.epoch))
            .await;
        let page = match answer {
            Ok(page) => page,
            Err(e) if e.code() == Some(code::EPOCH_CHANGED) => {
                if out.epoch_resets >= EPOCH_RESETS_MAX {
                    out.unfinished = true;
                    out.conv.stale = true;
                    return out;
                }
                match new_epoch(client, &conv_id, out.conv.epoch, job.feed_epoch).await {
                    Ok(Some(epoch)) => {
                        out.conv.reset_epoch(epoch);
                        out.ops.push(Op::Restart(Restart::EpochChanged));
                        out.epoch_resets += 1;
                        used = 0;
                        budget = None;
                        continue;
                    }
                    // The feed and the conversation disagree with events-after: the server's
                    // answer is taken as it is, without looping on it.
                    Ok(None) => return failed(out, e),
                    Err(e) => return failed(out, e),
                }
            }
            Err(e) if e.code() == Some(code::NOT_MEMBER) => {
                out.inaccessible = true;
                out.ops.push(Op::Restart(Restart::Inaccessible));
                return out;
            }
            Err(e) => return failed(out, e),
        };
        out.pages += 1;
        used += 1;
        let allowed = *budget.get_or_insert_with(|| pages_budget(from, page.head, page_len));
        let step = out.conv.apply_page(page);
        if step.restart {
            out.truncated = true;
            out.ops.push(Op::Restart(Restart::Truncated));
        }
        if !step.events.is_empty() {
            out.events += step.events.len();
            out.ops.push(Op::Append(step.events));
        }
        match step.progress {
            Progress::Done => {
                out.conv.stale = false;
                return out;
            }
            Progress::More if used < allowed => {}
            Progress::More | Progress::Stuck => {
                out.unfinished = true;
                out.conv.stale = true;
                return out;
            }
        }
    }
}

fn failed(mut out: ConvFetch, e: ClientError) -> ConvFetch {
    out.conv.stale = true;
    out.error = Some(e);
    out
}

/// The epoch to restart at after `EPOCH_CHANGED`: the feed's when it differs from the
/// refused one, else the conversation's current one; `None` when that is the refused one too.
async fn new_epoch(
    client: &Client,
    conv_id: &str,
    refused: i64,
    feed_epoch: Option<i64>,
) -> Result<Option<i64>, ClientError> {
    if let Some(epoch) = feed_epoch.filter(|&e| e != refused) {
        return Ok(Some(epoch));
    }
    let conv = client.get_conversation(conv_id).await?;
    Ok((conv.epoch != refused).then_some(conv.epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_bound_follows_the_distance_to_the_head() {
        assert_eq!(pages_budget(0, 0, 500), PAGES_SLACK);
        assert_eq!(pages_budget(0, 500, 500), 1 + PAGES_SLACK);
        assert_eq!(pages_budget(0, 1201, 500), 3 + PAGES_SLACK);
        assert_eq!(pages_budget(90, 10, 500), PAGES_SLACK);
    }
}
