//! Query strings, parsed by hand so every mistake is a JSON 400 at the right precedence.
//!
//! Like path parameters, the raw pairs are captured without failing and checked in the handler
//! after authentication. Unknown, repeated and conflicting parameters are refused (SPEC §6).

use std::collections::HashSet;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use parley_domain::limits::page_limit;
use parley_store::EventsQuery;

use crate::error::ApiError;
use crate::request::fields;

/// The decoded `key=value` pairs of a query string, in order, or the 400 to answer.
pub struct QueryPairs(Result<Vec<(String, String)>, ApiError>);

impl QueryPairs {
    pub fn into_inner(self) -> Result<Vec<(String, String)>, ApiError> {
        self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let parsed = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map(|Query(pairs)| pairs)
            .map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())));
        Ok(Self(parsed))
    }
}

/// Refuses parameters outside `allowed` and parameters given twice.
pub(crate) fn check_names(pairs: &[(String, String)], allowed: &[&str]) -> Result<(), ApiError> {
    let mut seen = HashSet::new();
    for (name, _) in pairs {
        if !allowed.contains(&name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter `{name}`"
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "query parameter `{name}` is given more than once"
            )));
        }
    }
    Ok(())
}

pub(crate) fn find<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A cursor or epoch, when given (`fields::cursor`).
fn non_negative(pairs: &[(String, String)], name: &str) -> Result<Option<i64>, ApiError> {
    find(pairs, name)
        .map(|raw| fields::cursor(name, raw))
        .transpose()
}

/// A page size (`fields::limit`), or the default.
fn limit(pairs: &[(String, String)]) -> Result<u32, ApiError> {
    find(pairs, "limit").map_or(Ok(page_limit(None)), fields::limit)
}

/// `?after=N[&epoch=E]` reads ascending, `?before=N` descending, neither the newest page.
pub fn events_query(pairs: &[(String, String)]) -> Result<(EventsQuery, u32), ApiError> {
    check_names(pairs, &["after", "before", "limit", "epoch", "thread"])?;
    let after = non_negative(pairs, "after")?;
    let before = non_negative(pairs, "before")?;
    let epoch = non_negative(pairs, "epoch")?;
    let limit = limit(pairs)?;
    let query = match (after, before) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "`after` and `before` cannot be combined",
            ))
        }
        (Some(after), None) => EventsQuery::After { after, epoch },
        (None, before) => {
            if epoch.is_some() {
                return Err(ApiError::bad_request(
                    "`epoch` belongs to an `after` cursor",
                ));
            }
            EventsQuery::Before { before }
        }
    };
    Ok((query, limit))
}

/// `?thread=ROOT`: the page is of that thread only (docs/RELATIONS.md); the root is a seq of
/// 1 or more.
pub fn events_thread(pairs: &[(String, String)]) -> Result<Option<i64>, ApiError> {
    match non_negative(pairs, "thread")? {
        Some(0) => Err(ApiError::bad_request(
            "`thread` must be the seq of a thread's root, 1 or more",
        )),
        other => Ok(other),
    }
}

/// The optional sync token of a conversation list request.
pub fn list_since(pairs: &[(String, String)]) -> Result<Option<String>, ApiError> {
    check_names(pairs, &["since"])?;
    Ok(find(pairs, "since").map(str::to_owned))
}

/// Most users one `GET /v1/presence` may ask about.
pub const PRESENCE_USERS_LEN_MAX: usize = 100;

/// The users of `GET /v1/presence?users=a,b`: comma-separated ids, 1 to
/// `PRESENCE_USERS_LEN_MAX` of them (a repeated id counts once); anything else is a 400.
pub fn presence_users(pairs: &[(String, String)]) -> Result<Vec<parley_domain::UserId>, ApiError> {
    check_names(pairs, &["users"])?;
    let raw = find(pairs, "users")
        .ok_or_else(|| ApiError::bad_request("query parameter `users` is required"))?;
    let mut users = Vec::new();
    for id in raw.split(',') {
        let user = fields::user_id(id)?;
        if !users.contains(&user) {
            users.push(user);
        }
        if users.len() > PRESENCE_USERS_LEN_MAX {
            return Err(ApiError::bad_request(format!(
                "at most {PRESENCE_USERS_LEN_MAX} users per request"
            )));
        }
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_domain::limits::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};

    fn pairs(q: &str) -> Vec<(String, String)> {
        q.split('&')
            .filter(|s| !s.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    fn parse(q: &str) -> Result<(EventsQuery, u32), &'static str> {
        events_query(&pairs(q)).map_err(|e| e.code())
    }

    #[test]
    fn cursors_choose_the_direction() {
        assert_eq!(
            parse("after=5&limit=10&epoch=2"),
            Ok((
                EventsQuery::After {
                    after: 5,
                    epoch: Some(2)
                },
                10
            ))
        );
        assert_eq!(
            parse("after=0"),
            Ok((
                EventsQuery::After {
                    after: 0,
                    epoch: None
                },
                PAGE_LIMIT_DEFAULT
            ))
        );
        assert_eq!(
            parse("before=7&limit=3"),
            Ok((EventsQuery::Before { before: Some(7) }, 3))
        );
        assert_eq!(
            parse(""),
            Ok((EventsQuery::Before { before: None }, PAGE_LIMIT_DEFAULT))
        );
    }

    #[test]
    fn large_limits_are_clamped() {
        assert_eq!(parse("limit=501").map(|(_, l)| l), Ok(PAGE_LIMIT_MAX));
        assert_eq!(
            parse("limit=4294967296").map(|(_, l)| l),
            Ok(PAGE_LIMIT_MAX)
        );
    }

    #[test]
    fn bad_and_conflicting_parameters_are_refused() {
        for q in [
            "after=1&before=5",
            "limit=0",
            "limit=-3",
            "limit=ten",
            "after=-1",
            "after=",
            "before=x",
            "before=5&epoch=1",
            "epoch=1",
            "after=1&after=2",
            "cursor=3",
        ] {
            assert_eq!(parse(q).map(|_| ()), Err("BAD_REQUEST"), "{q}");
        }
    }

    #[test]
    fn list_accepts_only_since() {
        assert_eq!(list_since(&pairs("")).ok(), Some(None));
        assert_eq!(
            list_since(&pairs("since=abc")).ok(),
            Some(Some("abc".to_owned()))
        );
        assert!(list_since(&pairs("after=1")).is_err());
    }
}
