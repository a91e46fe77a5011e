//! The records of a history: one JSON object per line, tagged by `type`.
//!
//! A send is recorded Jepsen style: an `invoke` when the client starts it, then one completion
//! for the same `process`, `conv` and `client_msg_id`: `ok` (acked: committed), `fail` (a
//! definite failure: not committed) or `info` (unknown outcome: maybe committed). What devices
//! see is recorded as `delivery` (one event handed to the app), `read` (one sync or read
//! answer), `read_position` (a read position observed) and `reconnect`. What the checker expects
//! and the authority it checks against are recorded as `member` (which seqs a device must
//! receive), `final` (one event of a conversation's log, read at the end) and `final_head`
//! (the log's bounds at the end).
//!
//! Unknown fields are ignored, so a newer recorder may add fields without breaking an older
//! checker.

use serde::{Deserialize, Serialize};

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// A device is expected to receive every event of the final log in a seq range.
    Member(Member),
    /// A send was started.
    Invoke(Invoke),
    /// A send was acked: committed at `seq`.
    Ok(SendOk),
    /// A send failed definitely: the server says it was not committed.
    Fail(SendFail),
    /// A send's outcome is unknown: it may or may not have been committed.
    Info(SendInfo),
    /// One event handed to the app by a device, as new.
    Delivery(Delivery),
    /// The answer of one read or sync of a conversation by a device.
    Read(Read),
    /// A user's read position in a conversation, as one device observed it.
    ReadPosition(ReadPosition),
    /// A device's realtime session reconnected.
    Reconnect(Reconnect),
    /// One event of a conversation's log, read at the end of the run: the authority.
    Final(FinalEvent),
    /// The bounds of a conversation's log at the end of the run.
    FinalHead(FinalHead),
}

impl Record {
    /// Whether the record is something a client did or saw (an operation), rather than an
    /// expectation or the final state.
    pub fn is_operation(&self) -> bool {
        !matches!(
            self,
            Record::Member(_) | Record::Final(_) | Record::FinalHead(_)
        )
    }
}

/// `{"type":"member","conv":"c1","user":"u2","device":"u2-d1","from_seq":3,"to_seq":null}`:
/// device `device` of `user` must receive every event of the final log of `conv` with a seq in
/// `from_seq..=to_seq` (`to_seq` absent: up to the end). Several records add up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub conv: String,
    pub user: String,
    pub device: String,
    pub from_seq: i64,
    #[serde(default)]
    pub to_seq: Option<i64>,
}

/// `{"type":"invoke","time_ms":5,"process":"u1-d1","conv":"c1","client_msg_id":"m1"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invoke {
    /// Milliseconds since the start of the run; the line order is the order of events.
    #[serde(default)]
    pub time_ms: u64,
    /// The client that sends (a device): completions pair with invokes of the same process.
    pub process: String,
    pub conv: String,
    /// The send's request key within the conversation; unique per send in one history.
    pub client_msg_id: String,
}

/// `{"type":"ok","time_ms":9,"process":"u1-d1","conv":"c1","client_msg_id":"m1","seq":3,
/// "message_id":"7f0c…","dup":false}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendOk {
    #[serde(default)]
    pub time_ms: u64,
    pub process: String,
    pub conv: String,
    pub client_msg_id: String,
    pub seq: i64,
    #[serde(default)]
    pub message_id: Option<String>,
    /// The ack said the send was a replay of an earlier commit.
    #[serde(default)]
    pub dup: bool,
}

/// `{"type":"fail","time_ms":9,"process":"u1-d1","conv":"c1","client_msg_id":"m1",
/// "code":"NOT_MEMBER"}`: only a definite failure (an error code that means nothing was
/// written); a timeout or a dropped connection is an `info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendFail {
    #[serde(default)]
    pub time_ms: u64,
    pub process: String,
    pub conv: String,
    pub client_msg_id: String,
    /// The stable error code (SPEC §6).
    pub code: String,
}

/// `{"type":"info","time_ms":9,"process":"u1-d1","conv":"c1","client_msg_id":"m1",
/// "reason":"connection closed"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendInfo {
    #[serde(default)]
    pub time_ms: u64,
    pub process: String,
    pub conv: String,
    pub client_msg_id: String,
    /// Why the outcome is unknown, for people; the checker does not read it.
    #[serde(default)]
    pub reason: String,
}

/// How a delivered event reached the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// Pushed on the realtime session.
    Push,
    /// Fetched by a sync or read.
    Sync,
}

/// `{"type":"delivery","time_ms":12,"device":"u2-d1","conv":"c1","seq":3,
/// "client_msg_id":"m1","message_id":"7f0c…","via":"push"}`: the device handed the event to
/// the app as new (not as a repeat it recognised).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    #[serde(default)]
    pub time_ms: u64,
    pub device: String,
    pub conv: String,
    pub seq: i64,
    /// Known for messages; absent for other events.
    #[serde(default)]
    pub client_msg_id: Option<String>,
    #[serde(default)]
    pub message_id: Option<String>,
    pub via: Via,
}

/// `{"type":"read","time_ms":20,"device":"u2-d1","conv":"c1","after":0,"seqs":[1,2,3],
/// "through_seq":3,"head":3}`: one events-after or sync answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    #[serde(default)]
    pub time_ms: u64,
    pub device: String,
    pub conv: String,
    /// The cursor the read asked from.
    #[serde(default)]
    pub after: i64,
    /// The seqs of the events returned.
    #[serde(default)]
    pub seqs: Vec<i64>,
    pub through_seq: i64,
    pub head: i64,
}

/// `{"type":"read_position","time_ms":25,"user":"u2","device":"u2-d1","conv":"c1",
/// "read_seq":3}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadPosition {
    #[serde(default)]
    pub time_ms: u64,
    pub user: String,
    pub device: String,
    pub conv: String,
    pub read_seq: i64,
}

/// `{"type":"reconnect","time_ms":30,"device":"u2-d1"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconnect {
    #[serde(default)]
    pub time_ms: u64,
    pub device: String,
}

/// `{"type":"final","conv":"c1","seq":3,"client_msg_id":"m1","sender":"u1",
/// "message_id":"7f0c…"}`: one event of the log at the end; `client_msg_id` and `sender` are
/// absent for events that are not messages (a join).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalEvent {
    pub conv: String,
    pub seq: i64,
    #[serde(default)]
    pub client_msg_id: Option<String>,
    #[serde(default)]
    pub sender: Option<String>,
    #[serde(default)]
    pub message_id: Option<String>,
}

/// `{"type":"final_head","conv":"c1","min_seq":1,"head":3}`: the final log should hold every
/// seq of `min_seq..=head`. Every conversation of the history should have one; without it the
/// log's own first and last seqs bound it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalHead {
    pub conv: String,
    pub min_seq: i64,
    pub head: i64,
}
