//! Conversation creation and membership changes. Each runs in a write transaction (which holds
//! the database's write lock), allocates a seq from the same counter as messages (P4) and opens
//! or closes a period (P3).

use chrono::{DateTime, Utc};
use parley_domain::membership::{next_owner, CurrentMember};
use parley_domain::{ConvId, ConvKind, DeliveryMode, Event, EventKind, Rejection, Role, UserId};
use sqlx::{Row, SqliteConnection};

use super::rows::{commit, now, tick, ts};
use super::SqliteStore;
use crate::error::StoreError;
use crate::types::{CreatedConversation, MembershipChange, NewConversation};

fn membership_event(
    conv_id: &ConvId,
    seq: i64,
    kind: EventKind,
    actor: &UserId,
    subject: &UserId,
    at: DateTime<Utc>,
) -> Event {
    Event {
        conv_id: conv_id.clone(),
        seq,
        kind,
        created_at: at,
        message_id: None,
        sender_user: Some(actor.clone()),
        sender_device: None,
        client_msg_id: None,
        body: None,
        recalled: false,
        subject_user: Some(subject.clone()),
        target_seq: None,
    }
}

/// A list of ids as one JSON array parameter, which `json_each` turns back into rows: SQLite has
/// no array type.
fn json_list<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<String, StoreError> {
    let items: Vec<&str> = items.into_iter().collect();
    serde_json::to_string(&items).map_err(|e| StoreError::Unavailable(e.to_string()))
}

pub(super) async fn create_conversation(
    store: &SqliteStore,
    req: &NewConversation,
) -> Result<CreatedConversation, StoreError> {
    let conv_id = match req.kind {
        ConvKind::Direct => {
            let [other] = req.members.as_slice() else {
                return Err(Rejection::BadRequest(
                    "a direct conversation has exactly one other member".into(),
                )
                .into());
            };
            ConvId::direct(&req.creator, other)
        }
        ConvKind::Group => req.conv_id.clone().unwrap_or_else(ConvId::generated_group),
    };
    let mut all: Vec<&str> = Vec::with_capacity(req.members.len() + 1);
    all.push(req.creator.as_str());
    all.extend(req.members.iter().map(UserId::as_str));
    let all_json = json_list(all.iter().copied())?;

    let mut tx = store.begin_write().await?;
    let known: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM users WHERE user_id IN (SELECT value FROM json_each($1))",
    )
    .bind(&all_json)
    .fetch_one(&mut *tx)
    .await?;
    if known != all.len() as i64 {
        return Err(Rejection::NotFound("no such user").into());
    }

    let count = all.len() as i64;
    let mode = match (req.delivery_mode, req.kind) {
        (Some(mode), _) => mode,
        (None, ConvKind::Group) if count >= i64::from(req.pull_threshold) => DeliveryMode::Pull,
        (None, _) => DeliveryMode::Push,
    };
    let created_at = now();
    let at = ts(created_at);
    let change = tick(&mut tx).await?;
    let inserted = sqlx::query(
        "INSERT INTO conversations (conv_id, kind, title, delivery_mode, pull_threshold, next_seq,
                                    recall_window_ms, retention_ms, member_count, change_seq, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $6 - 1, $10, $9)
         ON CONFLICT (conv_id) DO NOTHING",
    )
    .bind(conv_id.as_str())
    .bind(req.kind.as_str())
    .bind(req.title.as_deref())
    .bind(mode.as_str())
    .bind(match (req.delivery_mode, req.kind) {
        (None, ConvKind::Group) => Some(i32::try_from(req.pull_threshold).unwrap_or(i32::MAX)),
        _ => None,
    })
    .bind(count + 1)
    .bind(req.recall_window_ms)
    .bind(req.retention_ms)
    .bind(&at)
    .bind(change)
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return match req.kind {
            // Asking again for a pair's direct chat returns the one that exists.
            ConvKind::Direct => Ok(CreatedConversation {
                conv_id,
                created: false,
                events: Vec::new(),
            }),
            ConvKind::Group => Err(Rejection::AlreadyExists("conversation").into()),
        };
    };

    // One join per initial member in the given order, creator first: member i joins at seq i
    // (json_each's key is the 0-based array index).
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at)
         SELECT $1, key + 1, 'join', $2, value, $3 FROM json_each($4)",
    )
    .bind(conv_id.as_str())
    .bind(req.creator.as_str())
    .bind(&at)
    .bind(&all_json)
    .execute(&mut *tx)
    .await?;
    let creator_role = match req.kind {
        ConvKind::Group => Role::Owner.as_str(),
        ConvKind::Direct => Role::Member.as_str(),
    };
    sqlx::query(
        "INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
         SELECT $1, value, key + 1, CASE WHEN key = 0 THEN $2 ELSE 'member' END FROM json_each($3)",
    )
    .bind(conv_id.as_str())
    .bind(creator_role)
    .bind(&all_json)
    .execute(&mut *tx)
    .await?;
    commit(tx).await?;

    let events = all
        .iter()
        .zip(1..)
        .map(|(u, s)| {
            let subject = UserId::from_trusted((*u).to_owned());
            membership_event(
                &conv_id,
                s,
                EventKind::Join,
                &req.creator,
                &subject,
                created_at,
            )
        })
        .collect();
    Ok(CreatedConversation {
        conv_id,
        created: true,
        events,
    })
}

/// The conversation row and the actor's open period, read under the write lock.
struct Locked {
    kind: ConvKind,
    next_seq: i64,
    member_count: i64,
    /// Member count at which this push group becomes pull, if it may switch.
    pull_threshold: Option<i64>,
    actor_role: Role,
}

/// Reads the conversation (the transaction already holds the write lock) and checks the actor
/// holds an open period; both failures answer `NotMember` (P10, P11).
async fn lock_for_actor(
    conn: &mut SqliteConnection,
    conv_id: &ConvId,
    actor: &UserId,
) -> Result<Locked, StoreError> {
    let row = sqlx::query(
        "SELECT kind, next_seq, member_count, delivery_mode, pull_threshold
         FROM conversations WHERE conv_id = $1",
    )
    .bind(conv_id.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Err(Rejection::NotMember.into());
    };
    let role = open_role(conn, conv_id, actor)
        .await?
        .ok_or(Rejection::NotMember)?;
    let kind: String = row.try_get("kind")?;
    let mode: String = row.try_get("delivery_mode")?;
    let threshold: Option<i64> = row.try_get("pull_threshold")?;
    Ok(Locked {
        kind: ConvKind::parse(&kind).unwrap_or(ConvKind::Group),
        next_seq: row.try_get("next_seq")?,
        member_count: row.try_get("member_count")?,
        pull_threshold: threshold.filter(|_| mode == "push"),
        actor_role: role,
    })
}

async fn open_role(
    conn: &mut SqliteConnection,
    conv_id: &ConvId,
    user: &UserId,
) -> Result<Option<Role>, StoreError> {
    let role: Option<String> = sqlx::query_scalar(
        "SELECT role FROM membership_periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL",
    )
    .bind(conv_id.as_str())
    .bind(user.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    Ok(role.as_deref().and_then(Role::parse))
}

pub(super) async fn add_member(
    store: &SqliteStore,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<MembershipChange, StoreError> {
    let mut tx = store.begin_write().await?;
    let locked = lock_for_actor(&mut tx, conv_id, actor).await?;
    let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM users WHERE user_id = $1")
        .bind(target.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Err(Rejection::NotFound("no such user").into());
    }
    if locked.kind == ConvKind::Direct {
        return Err(Rejection::Forbidden("a direct conversation has fixed membership").into());
    }
    if !locked.actor_role.manages_members() {
        return Err(Rejection::Forbidden("only owners and admins add members").into());
    }
    if open_role(&mut tx, conv_id, target).await?.is_some() {
        return Err(Rejection::AlreadyMember.into());
    }
    let seq = locked.next_seq;
    let members_after = locked.member_count + 1;
    let switch_to_pull = locked.pull_threshold.is_some_and(|t| members_after >= t);
    let at = now();
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at)
         VALUES ($1, $2, 'join', $3, $4, $5)",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(actor.as_str())
    .bind(target.as_str())
    .bind(ts(at))
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO membership_periods (conv_id, user_id, from_seq, role) VALUES ($1, $2, $3, 'member')",
    )
    .bind(conv_id.as_str())
    .bind(target.as_str())
    .bind(seq)
    .execute(&mut *tx)
    .await?;
    let change = tick(&mut tx).await?;
    sqlx::query(
        "UPDATE conversations
            SET next_seq = $2 + 1, member_count = member_count + 1,
                delivery_mode = CASE WHEN $3 THEN 'pull' ELSE delivery_mode END, change_seq = $4
          WHERE conv_id = $1",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(switch_to_pull)
    .bind(change)
    .execute(&mut *tx)
    .await?;
    commit(tx).await?;
    Ok(MembershipChange {
        event: membership_event(conv_id, seq, EventKind::Join, actor, target, at),
    })
}

pub(super) async fn remove_member(
    store: &SqliteStore,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<MembershipChange, StoreError> {
    let mut tx = store.begin_write().await?;
    let locked = lock_for_actor(&mut tx, conv_id, actor).await?;
    let target_role = if target == actor {
        locked.actor_role
    } else {
        open_role(&mut tx, conv_id, target)
            .await?
            .ok_or(Rejection::NotFound("no such member"))?
    };
    if locked.kind == ConvKind::Direct {
        return Err(Rejection::Forbidden("a direct conversation has fixed membership").into());
    }
    if target != actor && !locked.actor_role.may_remove(target_role) {
        return Err(Rejection::Forbidden("this role may not remove that member").into());
    }
    let seq = locked.next_seq;
    let at = now();
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at)
         VALUES ($1, $2, 'leave', $3, $4, $5)",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(actor.as_str())
    .bind(target.as_str())
    .bind(ts(at))
    .execute(&mut *tx)
    .await?;
    // The leave seq closes the period, so the leaver sees their own leave event and nothing after.
    sqlx::query(
        "UPDATE membership_periods SET to_seq = $2
          WHERE conv_id = $1 AND user_id = $3 AND to_seq IS NULL",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(target.as_str())
    .execute(&mut *tx)
    .await?;
    let change = tick(&mut tx).await?;
    sqlx::query(
        "UPDATE conversations SET next_seq = $2 + 1, member_count = member_count - 1, change_seq = $3
          WHERE conv_id = $1",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(change)
    .execute(&mut *tx)
    .await?;
    if target_role == Role::Owner {
        pass_ownership(&mut tx, conv_id, target).await?;
    }
    commit(tx).await?;
    Ok(MembershipChange {
        event: membership_event(conv_id, seq, EventKind::Leave, actor, target, at),
    })
}

/// Gives the group to the earliest-joined remaining admin, else member (SPEC §4).
async fn pass_ownership(
    conn: &mut SqliteConnection,
    conv_id: &ConvId,
    leaver: &UserId,
) -> Result<(), StoreError> {
    let rows = sqlx::query(
        "SELECT user_id, role, from_seq FROM membership_periods
          WHERE conv_id = $1 AND to_seq IS NULL AND user_id <> $2",
    )
    .bind(conv_id.as_str())
    .bind(leaver.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let mut remaining = Vec::with_capacity(rows.len());
    for row in &rows {
        let role: String = row.try_get("role")?;
        remaining.push(CurrentMember {
            user: row.try_get::<String, _>("user_id")?,
            role: Role::parse(&role).unwrap_or(Role::Member),
            from_seq: row.try_get("from_seq")?,
        });
    }
    if let Some(owner) = next_owner(&remaining) {
        sqlx::query("UPDATE membership_periods SET role = 'owner' WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL")
            .bind(conv_id.as_str())
            .bind(owner)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

pub(super) async fn set_role(
    store: &SqliteStore,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
    role: Role,
) -> Result<Role, StoreError> {
    if role == Role::Owner {
        return Err(Rejection::BadRequest("role must be admin or member".into()).into());
    }
    let mut tx = store.begin_write().await?;
    let locked = lock_for_actor(&mut tx, conv_id, actor).await?;
    let target_role = open_role(&mut tx, conv_id, target)
        .await?
        .ok_or(Rejection::NotFound("no such member"))?;
    if locked.kind == ConvKind::Direct {
        return Err(Rejection::Forbidden("a direct conversation has no roles to set").into());
    }
    if locked.actor_role != Role::Owner {
        return Err(Rejection::Forbidden("only the owner sets roles").into());
    }
    if target_role == Role::Owner {
        return Err(
            Rejection::Forbidden("the owner's role changes only when the owner leaves").into(),
        );
    }
    sqlx::query("UPDATE membership_periods SET role = $3 WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL")
        .bind(conv_id.as_str())
        .bind(target.as_str())
        .bind(role.as_str())
        .execute(&mut *tx)
        .await?;
    // Roles show in the members list of the feed, so the conversation counts as changed.
    let change = tick(&mut tx).await?;
    sqlx::query("UPDATE conversations SET change_seq = $2 WHERE conv_id = $1")
        .bind(conv_id.as_str())
        .bind(change)
        .execute(&mut *tx)
        .await?;
    commit(tx).await?;
    Ok(role)
}
