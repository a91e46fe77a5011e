//! Message search (docs/SEARCH.md): `GET /v1/search` or a `search` frame, parsed into one
//! request; the store finds the hits, and each is answered with a snippet of its current body
//! and the cursor that continues after it.

use parley_domain::search::{
    snippet, SEARCH_LIMIT_DEFAULT, SEARCH_LIMIT_MAX, SEARCH_RANK_OFFSET_MAX,
};
use parley_domain::{SearchCursor, SearchError, SearchOrder, SearchQuery};
use parley_store::{DeviceIdentity, SearchHit as StoredHit, SearchRequest};
use parley_wire::{Highlight, SearchHit, SearchResults};

use super::fields;
use crate::error::ApiError;
use crate::gateway::frames::rfc3339;
use crate::query::{check_names, find, QueryPairs};
use crate::rate_limit::LimitKind;
use crate::state::AppState;

/// The query parameters of `GET /v1/search`.
const SEARCH_PARAMS: [&str; 6] = ["q", "conv_id", "from", "limit", "cursor", "order"];

/// A search, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchMessages {
    pub query: SearchQuery,
    pub order: SearchOrder,
    pub cursor: Option<SearchCursor>,
    pub limit: u32,
}

/// The fields of a search as either transport carries them.
#[derive(Debug, Default, Clone, Copy)]
pub struct SearchFields<'a> {
    pub q: Option<&'a str>,
    pub conv_id: Option<&'a str>,
    pub from: Option<&'a str>,
    pub limit: Option<i64>,
    pub cursor: Option<&'a str>,
    pub order: Option<&'a str>,
}

fn bad(e: SearchError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

impl SearchMessages {
    /// `q` is required; `conv_id` and `from` narrow like `in:` and `from:` (the same filter
    /// twice with different values is refused); `limit` is clamped to 1..=100.
    pub fn parse(f: SearchFields<'_>) -> Result<Self, ApiError> {
        let q =
            f.q.ok_or_else(|| ApiError::bad_request("`q` is required"))?;
        let mut query = SearchQuery::parse(q).map_err(bad)?;
        if let Some(conv) = f.conv_id {
            let conv = fields::conv_id(conv)?;
            if query.in_conv.as_ref().is_some_and(|c| *c != conv) {
                return Err(bad(SearchError::Repeated));
            }
            query.in_conv = Some(conv);
        }
        if let Some(from) = f.from {
            let from = fields::user_id(from)?;
            if query.from.as_ref().is_some_and(|u| *u != from) {
                return Err(bad(SearchError::Repeated));
            }
            query.from = Some(from);
        }
        let order = f
            .order
            .map(SearchOrder::parse)
            .transpose()
            .map_err(bad)?
            .unwrap_or_default();
        let cursor = f
            .cursor
            .map(|c| SearchCursor::decode(c, order))
            .transpose()
            .map_err(bad)?;
        let limit = match f.limit {
            Some(n) if n < 1 => {
                return Err(ApiError::bad_request(
                    "`limit` must be a whole number of 1 or more",
                ))
            }
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX).min(SEARCH_LIMIT_MAX),
            None => SEARCH_LIMIT_DEFAULT,
        };
        Ok(Self {
            query,
            order,
            cursor,
            limit,
        })
    }

    /// From the query string of `GET /v1/search`: unknown and repeated parameters refused.
    pub fn from_http(query: QueryPairs) -> Result<Self, ApiError> {
        let pairs = query.into_inner()?;
        check_names(&pairs, &SEARCH_PARAMS)?;
        let get = |name: &str| find(&pairs, name);
        let limit = get("limit")
            .map(|raw| fields::whole_number("limit", raw))
            .transpose()?;
        Self::parse(SearchFields {
            q: get("q"),
            conv_id: get("conv_id"),
            from: get("from"),
            limit,
            cursor: get("cursor"),
            order: get("order"),
        })
    }

    /// Spends a token of the device's search rate (`--rate-limit-per-s`), waits for a turn
    /// among the node's searches, then asks the store for one hit more than the page, so the
    /// answer knows whether another page follows.
    pub async fn run(
        self,
        state: &AppState,
        device: &DeviceIdentity,
    ) -> Result<SearchResults, ApiError> {
        state
            .rate_limiter()
            .check_device(LimitKind::Search, device)?;
        let _turn = state.search_turn().await?;
        let started = std::time::Instant::now();
        let offset = match self.cursor {
            Some(SearchCursor::Offset(n)) => n,
            _ => 0,
        };
        let req = SearchRequest {
            user: device.user_id.clone(),
            query: self.query,
            order: self.order,
            cursor: self.cursor,
            limit: self.limit + 1,
        };
        let mut found = state.store().search(&req).await?;
        let more = found.len() > self.limit as usize;
        found.truncate(self.limit as usize);
        let hits: Vec<SearchHit> = found
            .iter()
            .enumerate()
            .map(|(i, hit)| {
                let after = match req.order {
                    SearchOrder::Newest => cursor_after(hit),
                    SearchOrder::Rank => SearchCursor::Offset(offset + i as u32 + 1),
                };
                wire_hit(hit, &req.query, &after)
            })
            .collect();
        let next_cursor = match found.last() {
            Some(last) if more => match req.order {
                SearchOrder::Newest => Some(cursor_after(last).encode()),
                SearchOrder::Rank => {
                    let next = offset + self.limit;
                    (next <= SEARCH_RANK_OFFSET_MAX).then(|| SearchCursor::Offset(next).encode())
                }
            },
            _ => None,
        };
        state
            .metrics()
            .search_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(SearchResults { hits, next_cursor })
    }
}

fn cursor_after(hit: &StoredHit) -> SearchCursor {
    SearchCursor::Before {
        at_us: hit.at_us,
        conv_id: hit.conv_id.clone(),
        seq: hit.seq,
    }
}

fn wire_hit(hit: &StoredHit, query: &SearchQuery, after: &SearchCursor) -> SearchHit {
    let cut = snippet(&hit.body, query, hit.language);
    // A snippet is at most a few hundred characters, so its positions fit a u32.
    let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    SearchHit {
        conv_id: hit.conv_id.as_str().to_owned(),
        seq: hit.seq,
        sender: hit.sender_user.as_str().to_owned(),
        sent_at: rfc3339(hit.created_at),
        snippet: cut.text,
        highlights: cut
            .highlights
            .into_iter()
            .map(|(start, end)| Highlight {
                start: at(start),
                end: at(end),
            })
            .collect(),
        cursor: after.encode(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(f: SearchFields<'_>) -> Result<SearchMessages, &'static str> {
        SearchMessages::parse(f).map_err(|e| e.code())
    }

    #[test]
    fn fields_become_one_query() {
        let s = parse(SearchFields {
            q: Some("link"),
            conv_id: Some("c-1"),
            from: Some("ana"),
            limit: Some(1_000),
            ..SearchFields::default()
        })
        .expect("parses");
        assert_eq!(s.query.in_conv.as_ref().map(|c| c.as_str()), Some("c-1"));
        assert_eq!(s.query.from.as_ref().map(|u| u.as_str()), Some("ana"));
        assert_eq!(s.limit, SEARCH_LIMIT_MAX);
        assert_eq!(s.order, SearchOrder::Newest);
        let same = parse(SearchFields {
            q: Some("in:c-1 link"),
            conv_id: Some("c-1"),
            ..SearchFields::default()
        });
        assert!(same.is_ok(), "the same filter twice agrees");
    }

    #[test]
    fn bad_fields_are_400() {
        let cases = [
            SearchFields::default(),
            SearchFields {
                q: Some(""),
                ..SearchFields::default()
            },
            SearchFields {
                q: Some("in:c-1 x"),
                conv_id: Some("c-2"),
                ..SearchFields::default()
            },
            SearchFields {
                q: Some("x"),
                order: Some("oldest"),
                ..SearchFields::default()
            },
            SearchFields {
                q: Some("x"),
                cursor: Some("r.5"),
                ..SearchFields::default()
            },
            SearchFields {
                q: Some("x"),
                limit: Some(0),
                ..SearchFields::default()
            },
            SearchFields {
                q: Some("x"),
                from: Some("a b"),
                ..SearchFields::default()
            },
        ];
        for f in cases {
            assert_eq!(parse(f).err(), Some("BAD_REQUEST"), "{f:?}");
        }
    }
}
