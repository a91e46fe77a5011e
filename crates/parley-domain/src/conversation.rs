//! Conversations as a caller sees them (SPEC §6, conversation object).

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::ids::{ConvId, UserId};
use crate::membership::Role;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvKind {
    Direct,
    Group,
    /// A group whose events are MLS messages the server cannot read (docs/E2EE.md); its
    /// membership changes only by Commits.
    Encrypted,
}

impl ConvKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Group => "group",
            Self::Encrypted => "encrypted",
        }
    }

    /// The kind as a store's `kind` column keeps it: an encrypted conversation is a group
    /// with an MLS epoch.
    pub fn stored_as(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Group | Self::Encrypted => "group",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "direct" => Some(Self::Direct),
            "group" => Some(Self::Group),
            "encrypted" => Some(Self::Encrypted),
            _ => None,
        }
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    Push,
    Pull,
}

impl DeliveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Pull => "pull",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "push" => Some(Self::Push),
            "pull" => Some(Self::Pull),
            _ => None,
        }
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberView {
    pub user_id: UserId,
    pub role: Role,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationView {
    pub conv_id: ConvId,
    pub kind: ConvKind,
    pub title: Option<String>,
    pub delivery_mode: DeliveryMode,
    pub head: i64,
    pub min_seq: i64,
    pub epoch: i64,
    pub read_seq: i64,
    pub unread: i64,
    /// Unread messages that mention the viewer (docs/RELATIONS.md), for a badge.
    pub mentions: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<MemberView>>,
    pub recall_window_ms: i64,
    pub retention_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event: Option<Event>,
}
