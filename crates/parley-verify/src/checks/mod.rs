//! The checks, by chapter. Each is `async fn(&Ctx) -> Result<String, CheckError>`: the observed
//! value on success, the failure otherwise.

pub mod access;
pub mod concurrency;
pub mod database;
pub mod gateways;
pub mod media;
pub mod mls;
pub mod more;
pub mod push;
pub mod realtime;
pub mod recall;
pub mod relations;
pub mod retention;
pub mod search;
pub mod seed;
pub mod sync_read;

use parley_client::{Client, ClientError, Event, EventKind};

use crate::error::{ensure, CheckError};

/// What a check observed when it passed.
pub type Observed = Result<String, CheckError>;

/// Every event the reader sees, by pages of `events?after=` following `through_seq`.
pub async fn read_whole_log(client: &Client, conv: &str) -> Result<Vec<Event>, CheckError> {
    let mut after = 0;
    let mut events = Vec::new();
    loop {
        let page = client.events_after(conv, after, Some(500), None).await?;
        events.extend(page.events);
        ensure!(
            page.through_seq >= after,
            "cursor moved back: {after} → {}",
            page.through_seq
        );
        if page.through_seq >= page.head {
            return Ok(events);
        }
        after = page.through_seq;
    }
}

/// `(seq, kind)` of each event.
pub fn seq_kinds(events: &[Event]) -> Vec<(i64, EventKind)> {
    events.iter().map(|e| (e.seq, e.kind)).collect()
}

/// The error code of a refused request, or what happened instead.
pub fn refusal<T: std::fmt::Debug>(r: &Result<T, ClientError>) -> String {
    match r {
        Ok(v) => format!("accepted: {v:?}"),
        Err(e) => match (e.status(), e.code()) {
            (Some(s), Some(c)) => format!("{s} {c}"),
            _ => e.to_string(),
        },
    }
}
