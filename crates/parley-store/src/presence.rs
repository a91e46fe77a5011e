//! Presence and typing (SPEC §7): who is online (a user with at least one route), when a user
//! was last seen, and which users an ephemeral frame may reach. Every read here is one
//! bounded statement; none runs per pushed frame.

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, DeliveryMode, UserId};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::StoreFuture;
use crate::query::{Arg, Sql, SqlRow};
use crate::rows;
use crate::types::{TypingTargets, UserPresence};

/// What a backend writes or reads differently for presence.
pub(crate) trait Presence {
    /// `user_id`, `last_seen_at`, `routes` of the users among the ids of `$2` (`Arg::Texts`)
    /// that are user `$1` or share a conversation with them now (an open period each).
    const PRESENCE_OF_SQL: &'static str;

    /// Sets the user's `last_seen_at` to now; answers the routes the user has left and the time
    /// written, or `None` when there is no such user.
    fn mark_seen(&self, user_id: &UserId) -> impl StoreFuture<Option<(i64, DateTime<Utc>)>>;
}

/// The routes of a user's devices, on every gateway. One primary-key prefix read.
const USER_ROUTES_SQL: &str = "SELECT count(*) AS routes FROM routes WHERE user_id = $1";

/// `$1` the user, `$2` the bound: the distinct users with a route who share a direct
/// conversation or a `push` group with `$1` now. Pull groups are left out: telling each of
/// thousands of members about every connect and disconnect is the cost pull mode avoids.
const PRESENCE_PEERS_SQL: &str = "SELECT DISTINCT o.user_id FROM membership_periods m
     JOIN conversations c ON c.conv_id = m.conv_id
       AND (c.kind = 'direct' OR c.delivery_mode = 'push')
     JOIN membership_periods o ON o.conv_id = m.conv_id AND o.to_seq IS NULL
       AND o.user_id <> m.user_id
     WHERE m.user_id = $1 AND m.to_seq IS NULL
       AND EXISTS (SELECT 1 FROM routes r WHERE r.user_id = o.user_id)
     LIMIT $2";

/// `$1` the conversation, `$2` the typist, `$3` the bound: one row per other current member
/// with a route (`other` NULL when there is none) while `$2` has an open period; no row when
/// the conversation does not exist or `$2` is not a current member. In a pull conversation
/// no member is read: typing is not relayed there.
const TYPING_TARGETS_SQL: &str = "SELECT c.delivery_mode, o.user_id AS other
     FROM conversations c
     JOIN membership_periods m ON m.conv_id = c.conv_id AND m.user_id = $2 AND m.to_seq IS NULL
     LEFT JOIN membership_periods o ON o.conv_id = c.conv_id AND o.to_seq IS NULL
       AND o.user_id <> $2 AND c.delivery_mode = 'push'
       AND EXISTS (SELECT 1 FROM routes r WHERE r.user_id = o.user_id)
     WHERE c.conv_id = $1
     LIMIT $3";

/// Stored ids were parsed before they were written.
fn user_id(s: &str) -> Result<UserId, StoreError> {
    Ok(UserId::from_trusted(s.to_owned()))
}

pub(crate) async fn user_routes<B: Backend>(backend: &B, user: &UserId) -> Result<i64, StoreError> {
    let mut conn = backend.connection().await?;
    let found = conn
        .fetch_optional(USER_ROUTES_SQL, &[Arg::Text(user.as_str())])
        .await?;
    found.map_or(Ok(0), |row| row.int("routes"))
}

pub(crate) async fn presence_peers<B: Backend>(
    backend: &B,
    user: &UserId,
    limit: u32,
) -> Result<Vec<UserId>, StoreError> {
    let mut conn = backend.connection().await?;
    let args = [Arg::Text(user.as_str()), Arg::Int(i64::from(limit))];
    let found = conn.fetch_all(PRESENCE_PEERS_SQL, &args).await?;
    found.iter().map(|r| user_id(r.str("user_id")?)).collect()
}

pub(crate) async fn typing_targets<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    user: &UserId,
    limit: u32,
) -> Result<Option<TypingTargets>, StoreError> {
    let mut conn = backend.connection().await?;
    let args = [
        Arg::Text(conv_id.as_str()),
        Arg::Text(user.as_str()),
        // One more than the bound: the member row of a lone typist carries no other.
        Arg::Int(i64::from(limit) + 1),
    ];
    let found = conn.fetch_all(TYPING_TARGETS_SQL, &args).await?;
    let Some(first) = found.first() else {
        return Ok(None);
    };
    let mode: DeliveryMode = rows::delivery_mode(first.str("delivery_mode")?)?;
    let mut online_others = Vec::new();
    for row in &found {
        if let Some(other) = row.opt_str("other")? {
            online_others.push(user_id(other)?);
        }
    }
    online_others.truncate(limit as usize);
    Ok(Some(TypingTargets {
        mode,
        online_others,
    }))
}

pub(crate) async fn presence_of<B: Backend + Presence>(
    backend: &B,
    viewer: &UserId,
    users: &[UserId],
) -> Result<Vec<UserPresence>, StoreError> {
    let ids: Vec<String> = users.iter().map(ToString::to_string).collect();
    let mut conn = backend.connection().await?;
    let args = [Arg::Text(viewer.as_str()), Arg::Texts(&ids)];
    let found = conn.fetch_all(B::PRESENCE_OF_SQL, &args).await?;
    let mut seen = found
        .iter()
        .map(|r| {
            Ok(UserPresence {
                user_id: user_id(r.str("user_id")?)?,
                online: r.int("routes")? > 0,
                last_seen: if r.is_null("last_seen_at")? {
                    None
                } else {
                    Some(r.time("last_seen_at")?)
                },
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    seen.sort_by(|a, b| a.user_id.as_str().cmp(b.user_id.as_str()));
    Ok(seen)
}
