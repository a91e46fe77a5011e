//! Conversation creation and membership changes. Each takes the conversation's row lock,
//! allocates a seq from the same counter as messages (P4) and opens or closes a period (P3).

use chrono::{DateTime, Utc};
use parley_domain::membership::{next_owner, CurrentMember};
use parley_domain::{ConvId, ConvKind, DeliveryMode, Event, EventKind, Rejection, Role, UserId};
use sqlx::{PgPool, Postgres, Row, Transaction};

use super::rows::commit;
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

pub(super) async fn create_conversation(
    pool: &PgPool,
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

    let mut tx = pool.begin().await?;
    let known: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE user_id = ANY($1)")
        .bind(&all)
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
    // A concurrent create of the same id waits on the unique key here and then sees it taken.
    let created_at: Option<DateTime<Utc>> = sqlx::query_scalar(
        "INSERT INTO conversations (conv_id, kind, title, delivery_mode, pull_threshold,
                                    next_seq, recall_window_ms, retention_ms, member_count)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $6 - 1)
         ON CONFLICT (conv_id) DO NOTHING
         RETURNING created_at",
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
    .fetch_optional(&mut *tx)
    .await?;
    let Some(created_at) = created_at else {
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

    // One join per initial member in the given order, creator first: member i joins at seq i.
    let seqs: Vec<i64> = (1..=count).collect();
    let roles: Vec<&str> = (0..all.len())
        .map(|i| match (req.kind, i) {
            (ConvKind::Group, 0) => Role::Owner.as_str(),
            _ => Role::Member.as_str(),
        })
        .collect();
    sqlx::query(
        "WITH ev AS (
           INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, created_at, msg_ordinal)
           SELECT $1, s, 'join', $2, u, $5, 0 FROM UNNEST($3::text[], $4::bigint[]) AS t(u, s)
         )
         INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
         SELECT $1, u, s, r FROM UNNEST($3::text[], $4::bigint[], $6::text[]) AS t(u, s, r)",
    )
    .bind(conv_id.as_str())
    .bind(req.creator.as_str())
    .bind(&all)
    .bind(&seqs)
    .bind(created_at)
    .bind(&roles)
    .execute(&mut *tx)
    .await?;
    commit(tx).await?;

    let events = all
        .iter()
        .zip(&seqs)
        .map(|(u, s)| {
            let subject = UserId::from_trusted((*u).to_owned());
            membership_event(
                &conv_id,
                *s,
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

/// The locked conversation row and the actor's open period.
struct Locked {
    kind: ConvKind,
    next_seq: i64,
    member_count: i64,
    /// msg events so far: the msg_ordinal of a membership event written now.
    msg_count: i64,
    /// Member count at which this push group becomes pull, if it may switch.
    pull_threshold: Option<i64>,
    actor_role: Role,
}

/// Locks the conversation and checks the actor holds an open period; both failures answer
/// `NotMember` (P10, P11).
async fn lock_for_actor(
    tx: &mut Transaction<'_, Postgres>,
    conv_id: &ConvId,
    actor: &UserId,
) -> Result<Locked, StoreError> {
    let row = sqlx::query(
        "SELECT kind, next_seq, member_count, msg_count, delivery_mode, pull_threshold
         FROM conversations WHERE conv_id = $1 FOR NO KEY UPDATE",
    )
    .bind(conv_id.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else {
        return Err(Rejection::NotMember.into());
    };
    let role = open_role(tx, conv_id, actor)
        .await?
        .ok_or(Rejection::NotMember)?;
    let kind: String = row.try_get("kind")?;
    let mode: String = row.try_get("delivery_mode")?;
    let threshold: Option<i32> = row.try_get("pull_threshold")?;
    Ok(Locked {
        kind: ConvKind::parse(&kind).unwrap_or(ConvKind::Group),
        next_seq: row.try_get("next_seq")?,
        member_count: i64::from(row.try_get::<i32, _>("member_count")?),
        msg_count: row.try_get("msg_count")?,
        pull_threshold: threshold.filter(|_| mode == "push").map(i64::from),
        actor_role: role,
    })
}

async fn open_role(
    tx: &mut Transaction<'_, Postgres>,
    conv_id: &ConvId,
    user: &UserId,
) -> Result<Option<Role>, StoreError> {
    let role: Option<String> = sqlx::query_scalar(
        "SELECT role FROM membership_periods WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL",
    )
    .bind(conv_id.as_str())
    .bind(user.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    Ok(role.as_deref().and_then(Role::parse))
}

pub(super) async fn add_member(
    pool: &PgPool,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<MembershipChange, StoreError> {
    let mut tx = pool.begin().await?;
    let locked = lock_for_actor(&mut tx, conv_id, actor).await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM users WHERE user_id = $1")
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
    let at: DateTime<Utc> = sqlx::query_scalar(
        "WITH ev AS (
           INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, msg_ordinal)
           VALUES ($1, $2, 'join', $3, $4, $6) RETURNING created_at
         ), period AS (
           INSERT INTO membership_periods (conv_id, user_id, from_seq, role) VALUES ($1, $4, $2, 'member')
         ), counter AS (
           UPDATE conversations
              SET next_seq = $2 + 1, member_count = member_count + 1,
                  delivery_mode = CASE WHEN $5 THEN 'pull' ELSE delivery_mode END,
                  change_xid = pg_current_xact_id()
            WHERE conv_id = $1
         )
         SELECT created_at FROM ev",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(actor.as_str())
    .bind(target.as_str())
    .bind(switch_to_pull)
    .bind(locked.msg_count)
    .fetch_one(&mut *tx)
    .await?;
    commit(tx).await?;
    Ok(MembershipChange {
        event: membership_event(conv_id, seq, EventKind::Join, actor, target, at),
    })
}

pub(super) async fn remove_member(
    pool: &PgPool,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
) -> Result<MembershipChange, StoreError> {
    let mut tx = pool.begin().await?;
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
    // The leave seq closes the period, so the leaver sees their own leave event and nothing after.
    let at: DateTime<Utc> = sqlx::query_scalar(
        "WITH ev AS (
           INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, msg_ordinal)
           VALUES ($1, $2, 'leave', $3, $4, $5) RETURNING created_at
         ), period AS (
           UPDATE membership_periods SET to_seq = $2
            WHERE conv_id = $1 AND user_id = $4 AND to_seq IS NULL
         ), counter AS (
           UPDATE conversations
              SET next_seq = $2 + 1, member_count = member_count - 1, change_xid = pg_current_xact_id()
            WHERE conv_id = $1
         )
         SELECT created_at FROM ev",
    )
    .bind(conv_id.as_str())
    .bind(seq)
    .bind(actor.as_str())
    .bind(target.as_str())
    .bind(locked.msg_count)
    .fetch_one(&mut *tx)
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
    tx: &mut Transaction<'_, Postgres>,
    conv_id: &ConvId,
    leaver: &UserId,
) -> Result<(), StoreError> {
    let rows = sqlx::query(
        "SELECT user_id, role, from_seq FROM membership_periods
          WHERE conv_id = $1 AND to_seq IS NULL AND user_id <> $2",
    )
    .bind(conv_id.as_str())
    .bind(leaver.as_str())
    .fetch_all(&mut **tx)
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
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

pub(super) async fn set_role(
    pool: &PgPool,
    conv_id: &ConvId,
    actor: &UserId,
    target: &UserId,
    role: Role,
) -> Result<Role, StoreError> {
    if role == Role::Owner {
        return Err(Rejection::BadRequest("role must be admin or member".into()).into());
    }
    let mut tx = pool.begin().await?;
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
    sqlx::query("UPDATE conversations SET change_xid = pg_current_xact_id() WHERE conv_id = $1")
        .bind(conv_id.as_str())
        .execute(&mut *tx)
        .await?;
    commit(tx).await?;
    Ok(role)
}
