//! Events as they are stored and as they appear on the wire (SPEC §6, event object).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use crate::ids::{ConvId, UserId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Msg,
    Recall,
    Join,
    Leave,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Msg => "msg",
            Self::Recall => "recall",
            Self::Join => "join",
            Self::Leave => "leave",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "msg" => Self::Msg,
            "recall" => Self::Recall,
            "join" => Self::Join,
            "leave" => Self::Leave,
            _ => return None,
        })
    }
}

fn rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Micros, true))
}

/// One committed event of a conversation log. Fields that do not belong to the kind are `None`
/// and are left out of the JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub conv_id: ConvId,
    pub seq: i64,
    pub kind: EventKind,
    #[serde(serialize_with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<uuid::Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_user: Option<UserId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_msg_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recalled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_user: Option<UserId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_seq: Option<i64>,
}

/// An answer of events-after or of a history page (SPEC §5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventsPage {
    pub events: Vec<Event>,
    pub head: i64,
    pub min_seq: i64,
    pub epoch: i64,
    /// The last seq the server examined (ascending reads): the client's next cursor.
    pub through_seq: i64,
    pub truncated: bool,
    /// The exclusive cursor of the next older page (descending reads); null once nothing older
    /// is visible.
    pub next_before: Option<i64>,
}
