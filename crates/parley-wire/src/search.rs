//! Message search (docs/SEARCH.md): `GET /v1/search`, the `search` frame's answer, and a
//! conversation's search language.

use serde::{Deserialize, Serialize};

/// A hit's marked word: `[start, end)` in characters (Unicode scalar values) of the snippet.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Highlight {
    pub start: u32,
    pub end: u32,
}

/// One message a search found.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchHit {
    pub conv_id: String,
    pub seq: i64,
    /// The user who sent the message.
    pub sender: String,
    /// When the message was sent (RFC 3339).
    pub sent_at: String,
    /// Plain text around the first match, never markup, at most 160 characters with `…` where
    /// the message was cut: the message's current body (after its edits).
    pub snippet: String,
    /// The words of `snippet` that matched.
    #[serde(default)]
    pub highlights: Vec<Highlight>,
    /// Continues the search after this hit (the same as `next_cursor` for the last hit).
    pub cursor: String,
}

/// `GET /v1/search`: a page of hits, newest first or best first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResults {
    pub hits: Vec<SearchHit>,
    /// The next page's cursor; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A conversation's search language: `simple` (the default: words lower-cased, no stemming)
/// or `english` (stemmed, English stop words dropped on PostgreSQL).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchLanguageSetting {
    pub language: String,
}
