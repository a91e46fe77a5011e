//! Message search (docs/SEARCH.md): `GET /v1/search` and a conversation's search language.

use parley_wire::{SearchLanguageSetting, SearchResults};
use reqwest::Method;

use crate::error::ClientError;
use crate::Client;

/// A search: `q` holds words, `"phrases"`, `from:USER` and `in:CONVERSATION`; the fields
/// narrow or page it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchOptions {
    pub q: String,
    /// Only this conversation (as `in:`).
    pub conv_id: Option<String>,
    /// Only this sender (as `from:`).
    pub from: Option<String>,
    /// Hits per page: the server's default (20) when `None`, at most 100.
    pub limit: Option<u32>,
    /// A `next_cursor` (or a hit's `cursor`) of the same search.
    pub cursor: Option<String>,
    /// Best match first instead of newest first.
    pub by_rank: bool,
}

impl SearchOptions {
    /// A newest-first search for `q`.
    pub fn new(q: impl Into<String>) -> Self {
        Self {
            q: q.into(),
            ..Self::default()
        }
    }

    /// The same search from `cursor` on.
    pub fn after(&self, cursor: impl Into<String>) -> Self {
        Self {
            cursor: Some(cursor.into()),
            ..self.clone()
        }
    }

    pub(crate) fn order(&self) -> Option<&'static str> {
        self.by_rank.then_some("rank")
    }
}

impl Client {
    /// One page of the messages the caller may read that match `search`.
    pub async fn search(&self, search: &SearchOptions) -> Result<SearchResults, ClientError> {
        let mut url = self.http().url(&["v1", "search"])?;
        {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("q", &search.q);
            if let Some(conv) = &search.conv_id {
                pairs.append_pair("conv_id", conv);
            }
            if let Some(from) = &search.from {
                pairs.append_pair("from", from);
            }
            if let Some(limit) = search.limit {
                pairs.append_pair("limit", &limit.to_string());
            }
            if let Some(cursor) = &search.cursor {
                pairs.append_pair("cursor", cursor);
            }
            if let Some(order) = search.order() {
                pairs.append_pair("order", order);
            }
        }
        self.http()
            .json(self.http().authorised(Method::GET, url))
            .await
    }

    /// The conversation's search language: `simple` or `english`.
    pub async fn search_language(&self, conv_id: &str) -> Result<String, ClientError> {
        let url = self
            .http()
            .url(&["v1", "conversations", conv_id, "search"])?;
        let answer: SearchLanguageSetting = self
            .http()
            .json(self.http().authorised(Method::GET, url))
            .await?;
        Ok(answer.language)
    }

    /// Sets the conversation's search language (an owner or admin).
    pub async fn set_search_language(
        &self,
        conv_id: &str,
        language: &str,
    ) -> Result<String, ClientError> {
        let url = self
            .http()
            .url(&["v1", "conversations", conv_id, "search"])?;
        let body = SearchLanguageSetting {
            language: language.to_owned(),
        };
        let request = self.http().authorised(Method::PUT, url).json(&body);
        let answer: SearchLanguageSetting = self.http().json(request).await?;
        Ok(answer.language)
    }
}
