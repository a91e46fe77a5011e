//! Conversation views (SPEC §6 conversation object) for one conversation or a whole feed, built
//! with a fixed number of queries however many conversations are asked for.
//!
//! Unread counts cost O(1) per conversation: every event row carries `msg_ordinal`, the number
//! of msg events up to it, so the msg events in a seq range are the difference of two ordinals,
//! less the recalled ones in the range (a partial index holds only those). Own messages need no
//! subtraction: a send moves the sender's read position to it in the same transaction, so no
//! own message lies above `read_seq`.

use std::collections::HashMap;

use parley_domain::membership::visible_ranges;
use parley_domain::{
    ConvId, ConvKind, ConversationView, DeliveryMode, Event, EventKind, MemberView, Period, Role,
    UserId,
};
use sqlx::{PgConnection, Row};

use super::rows::event_from_row;
use crate::error::StoreError;

struct ConvRow {
    kind: ConvKind,
    title: Option<String>,
    delivery_mode: DeliveryMode,
    next_seq: i64,
    min_seq: i64,
    epoch: i64,
    recall_window_ms: i64,
    retention_ms: Option<i64>,
}

/// What one view needs from the probes of step 4.
struct Plan {
    conv_id: String,
    head: i64,
    read_seq: i64,
    is_member: bool,
    unread_ranges: Vec<(i64, i64)>,
    last_seq: Option<i64>,
}

/// Views of `conv_ids` as `viewer` sees them, in the order given. Conversations in which the
/// viewer never had a period are left out (callers that need `NotMember` check first).
pub(super) async fn build(
    conn: &mut PgConnection,
    viewer: &UserId,
    conv_ids: &[String],
    with_members: bool,
) -> Result<Vec<ConversationView>, StoreError> {
    if conv_ids.is_empty() {
        return Ok(Vec::new());
    }
    // 1. Conversation rows.
    let rows = sqlx::query(
        "SELECT conv_id, kind, title, delivery_mode, next_seq, min_seq, epoch, recall_window_ms, retention_ms
         FROM conversations WHERE conv_id = ANY($1)",
    )
    .bind(conv_ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut convs: HashMap<String, ConvRow> = HashMap::with_capacity(rows.len());
    for r in &rows {
        let kind: String = r.try_get("kind")?;
        let mode: String = r.try_get("delivery_mode")?;
        convs.insert(
            r.try_get("conv_id")?,
            ConvRow {
                kind: ConvKind::parse(&kind).unwrap_or(ConvKind::Group),
                title: r.try_get("title")?,
                delivery_mode: DeliveryMode::parse(&mode).unwrap_or(DeliveryMode::Push),
                next_seq: r.try_get("next_seq")?,
                min_seq: r.try_get("min_seq")?,
                epoch: r.try_get("epoch")?,
                recall_window_ms: r.try_get("recall_window_ms")?,
                retention_ms: r.try_get("retention_ms")?,
            },
        );
    }
    // 2. The viewer's periods and 3. read positions.
    let rows = sqlx::query(
        "SELECT conv_id, from_seq, to_seq FROM membership_periods WHERE user_id = $1 AND conv_id = ANY($2)",
    )
    .bind(viewer.as_str())
    .bind(conv_ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut periods: HashMap<String, Vec<Period>> = HashMap::new();
    for r in &rows {
        let p = Period {
            from_seq: r.try_get("from_seq")?,
            to_seq: r.try_get("to_seq")?,
        };
        periods.entry(r.try_get("conv_id")?).or_default().push(p);
    }
    let rows = sqlx::query(
        "SELECT conv_id, read_seq FROM read_marks WHERE user_id = $1 AND conv_id = ANY($2)",
    )
    .bind(viewer.as_str())
    .bind(conv_ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut marks: HashMap<String, i64> = HashMap::new();
    for r in &rows {
        marks.insert(r.try_get("conv_id")?, r.try_get("read_seq")?);
    }

    // Which seqs to probe: both ends of every unread range and the last visible event.
    let mut plans = Vec::with_capacity(conv_ids.len());
    let (mut probe_conv, mut probe_seq): (Vec<&str>, Vec<i64>) = (Vec::new(), Vec::new());
    for id in conv_ids {
        let (Some(conv), Some(ps)) = (convs.get(id), periods.get(id)) else {
            continue;
        };
        let is_member = ps.iter().any(|p| p.to_seq.is_none());
        let log_head = conv.next_seq - 1;
        let head = if is_member {
            log_head
        } else {
            ps.iter().filter_map(|p| p.to_seq).max().unwrap_or(0)
        };
        let read_seq = marks.get(id).copied().unwrap_or(0).min(head);
        let unread_ranges = visible_ranges(ps, (read_seq + 1).max(conv.min_seq), head);
        let last_seq = visible_ranges(ps, conv.min_seq, head).last().map(|r| r.1);
        for (lo, hi) in &unread_ranges {
            for s in [(lo - 1).max(conv.min_seq), *hi] {
                probe_conv.push(id);
                probe_seq.push(s);
            }
        }
        if let Some(s) = last_seq {
            probe_conv.push(id);
            probe_seq.push(s);
        }
        plans.push(Plan {
            conv_id: id.clone(),
            head,
            read_seq,
            is_member,
            unread_ranges,
            last_seq,
        });
    }

    // 4. The probed events by primary key, with their ordinals.
    let rows = sqlx::query(
        "SELECT e.conv_id, e.seq, e.kind, e.created_at, e.message_id, e.sender_user, e.sender_device,
                e.client_msg_id, e.body, e.subject_user, e.target_seq, e.recalled_at, e.msg_ordinal
         FROM UNNEST($1::text[], $2::bigint[]) AS t(c, s)
         JOIN events e ON e.conv_id = t.c AND e.seq = t.s",
    )
    .bind(&probe_conv)
    .bind(&probe_seq)
    .fetch_all(&mut *conn)
    .await?;
    let mut probed: HashMap<(String, i64), (i64, Event)> = HashMap::with_capacity(rows.len());
    for r in &rows {
        let conv_id: String = r.try_get("conv_id")?;
        let event = event_from_row(&ConvId::from_trusted(conv_id.clone()), r)?;
        probed.insert((conv_id, event.seq), (r.try_get("msg_ordinal")?, event));
    }

    // 5. Recalled messages inside the unread ranges (rare: a partial index holds only them).
    let (mut rc, mut rlo, mut rhi, mut ri): (Vec<&str>, Vec<i64>, Vec<i64>, Vec<i32>) =
        Default::default();
    for (i, plan) in plans.iter().enumerate() {
        for (lo, hi) in &plan.unread_ranges {
            rc.push(&plan.conv_id);
            rlo.push(*lo);
            rhi.push(*hi);
            ri.push(i as i32);
        }
    }
    let mut recalled: HashMap<i32, i64> = HashMap::new();
    if !rc.is_empty() {
        let rows = sqlx::query(
            "SELECT t.i, count(*) AS n FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::int[]) AS t(c, lo, hi, i)
             JOIN events e ON e.conv_id = t.c AND e.seq BETWEEN t.lo AND t.hi
                          AND e.recalled_at IS NOT NULL AND e.kind = 'msg'
             GROUP BY t.i",
        )
        .bind(&rc)
        .bind(&rlo)
        .bind(&rhi)
        .bind(&ri)
        .fetch_all(&mut *conn)
        .await?;
        for r in &rows {
            recalled.insert(r.try_get("i")?, r.try_get("n")?);
        }
    }

    let mut out = Vec::with_capacity(plans.len());
    for (i, plan) in plans.into_iter().enumerate() {
        let Some(conv) = convs.remove(&plan.conv_id) else {
            continue;
        };
        // msg events up to and including `seq`; `seq` below min_seq is read off the event at
        // min_seq (its own ordinal, less itself when it is a msg).
        let ordinal = |seq: i64| -> Option<i64> {
            if seq < conv.min_seq {
                let (ord, ev) = probed.get(&(plan.conv_id.clone(), conv.min_seq))?;
                return Some(ord - i64::from(ev.kind == EventKind::Msg));
            }
            probed
                .get(&(plan.conv_id.clone(), seq))
                .map(|(ord, _)| *ord)
        };
        let mut unread = 0;
        for (lo, hi) in &plan.unread_ranges {
            let (Some(a), Some(b)) = (ordinal(lo - 1), ordinal(*hi)) else {
                return Err(StoreError::Unavailable(
                    "a seq inside [min_seq, head] has no event".into(),
                ));
            };
            unread += b - a;
        }
        unread -= recalled.get(&(i as i32)).copied().unwrap_or(0);
        let last_event = plan
            .last_seq
            .and_then(|s| probed.get(&(plan.conv_id.clone(), s)))
            .map(|(_, e)| e.clone());
        let members = if with_members && plan.is_member {
            Some(current_members(conn, &plan.conv_id).await?)
        } else {
            None
        };
        out.push(ConversationView {
            conv_id: ConvId::from_trusted(plan.conv_id),
            kind: conv.kind,
            title: conv.title,
            delivery_mode: conv.delivery_mode,
            head: plan.head,
            min_seq: conv.min_seq,
            epoch: conv.epoch,
            read_seq: plan.read_seq,
            unread: unread.max(0),
            members,
            recall_window_ms: conv.recall_window_ms,
            retention_ms: conv.retention_ms,
            last_event,
        });
    }
    Ok(out)
}

async fn current_members(
    conn: &mut PgConnection,
    conv_id: &str,
) -> Result<Vec<MemberView>, StoreError> {
    let rows = sqlx::query(
        "SELECT user_id, role FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL ORDER BY from_seq",
    )
    .bind(conv_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let role: String = r.try_get("role")?;
        out.push(MemberView {
            user_id: UserId::from_trusted(r.try_get("user_id")?),
            role: Role::parse(&role).unwrap_or(Role::Member),
        });
    }
    Ok(out)
}
