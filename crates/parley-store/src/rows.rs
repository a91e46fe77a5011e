//! Rows as every store decodes them, through the query interface (`query.rs`), and the
//! enumerations every store keeps as text.

use parley_domain::decide::send::{KeyCheckRow, StoredRequest};
use parley_domain::decide::LogCounter;
use parley_domain::event::{MlsFields, WelcomeDevice};
use parley_domain::relations::ThreadSummary;
use parley_domain::{
    Attachment, ConvId, ConvKind, DeliveryMode, DeviceId, Event, EventKind, MemberView, Period,
    Relations, RequestHash, Role, UserId,
};

use crate::error::StoreError;
use crate::flow::membership::Locked;
use crate::flow::recall::RecallLock;
use crate::query::SqlRow;
use crate::types::DeviceIdentity;
use crate::views::ConvRow;

/// An event row (the columns of `EVENTS_RANGE_ASC_SQL`). A recalled message has no body.
pub(crate) fn event(conv_id: &ConvId, row: &impl SqlRow) -> Result<Event, StoreError> {
    let recalled = !row.is_null("recalled_at")?;
    Ok(Event {
        conv_id: conv_id.clone(),
        seq: row.int("seq")?,
        kind: event_kind(row.str("kind")?)?,
        created_at: row.time("created_at")?,
        message_id: row.opt_uuid("message_id")?,
        sender_user: row.opt_string("sender_user")?.map(UserId::from_trusted),
        sender_device: row.opt_string("sender_device")?,
        client_msg_id: row.opt_string("client_msg_id")?,
        body: if recalled {
            None
        } else {
            row.opt_string("body")?
        },
        recalled,
        subject_user: row.opt_string("subject_user")?.map(UserId::from_trusted),
        target_seq: row.opt_int("target_seq")?,
        rel: relations(row, recalled)?.boxed(),
        mls: mls_fields(row)?.map(Box::new),
    })
}

/// The MLS columns of an event row (docs/E2EE.md); `None` for every other kind.
fn mls_fields(row: &impl SqlRow) -> Result<Option<MlsFields>, StoreError> {
    let Some(mls_epoch) = row.opt_int("mls_epoch")? else {
        return Ok(None);
    };
    let mls_devices = match row.opt_str("mls_devices")? {
        Some(json) => serde_json::from_str::<Vec<WelcomeDevice>>(json)
            .map_err(|e| StoreError::Unavailable(format!("mls_devices column: {e}")))?,
        None => Vec::new(),
    };
    Ok(Some(MlsFields {
        mls_epoch,
        mls_message: row.opt_string("mls_message")?,
        mls_devices,
    }))
}

/// The relation columns of an event row (`docs/RELATIONS.md`); reactions are folded in by
/// `read::fold_reactions` after the page is read. A recalled message shows no edit time.
fn relations(row: &impl SqlRow, recalled: bool) -> Result<Relations, StoreError> {
    let mentions = match row.opt_str("mentions")? {
        Some(json) => serde_json::from_str::<Vec<String>>(json)
            .map_err(|e| StoreError::Unavailable(format!("mentions column: {e}")))?
            .into_iter()
            .map(UserId::from_trusted)
            .collect(),
        None => Vec::new(),
    };
    let attachments = match row.opt_str("attachments")? {
        Some(json) if !recalled => serde_json::from_str::<Vec<Attachment>>(json)
            .map_err(|e| StoreError::Unavailable(format!("attachments column: {e}")))?,
        _ => Vec::new(),
    };
    let replies = row.int("thread_replies")?;
    let thread = match row.opt_int("thread_latest_seq")? {
        Some(latest_seq) if replies > 0 => Some(ThreadSummary {
            reply_count: replies,
            latest_seq,
        }),
        _ => None,
    };
    Ok(Relations {
        reply_to: row.opt_int("reply_to")?,
        thread_root: row.opt_int("thread_root")?,
        mentions,
        key: row.opt_string("reaction_key")?,
        edited_at: if recalled {
            None
        } else {
            row.opt_time("edited_at")?
        },
        reactions: Vec::new(),
        thread,
        attachments,
    })
}

/// A row of a send's key check: where the key was found (`src`: `event`, `tombstone` or
/// `member`) and, for a stored key, its `seq`, `message_id` and `request_hash`.
pub(crate) fn key_check(row: &impl SqlRow) -> Result<KeyCheckRow, StoreError> {
    let stored = || -> Result<StoredRequest, StoreError> {
        Ok(StoredRequest {
            seq: row.int("seq")?,
            message_id: row
                .opt_uuid("message_id")?
                .ok_or_else(|| StoreError::Unavailable("stored message without id".into()))?,
            request_hash: RequestHash::from_stored(row.string("request_hash")?),
        })
    };
    match row.str("src")? {
        "event" => Ok(KeyCheckRow::Log(stored()?)),
        "tombstone" => Ok(KeyCheckRow::Tombstone(stored()?)),
        "member" => Ok(KeyCheckRow::OpenPeriod),
        src => Err(StoreError::Unavailable(format!("key check row from {src}"))),
    }
}

/// `next_seq`, `msg_count` of a locked conversation.
pub(crate) fn counter(row: &impl SqlRow) -> Result<LogCounter, StoreError> {
    Ok(LogCounter::new(row.int("next_seq")?, row.int("msg_count")?))
}

/// A conversation as a membership change locked it.
pub(crate) fn locked(row: &impl SqlRow) -> Result<Locked, StoreError> {
    Ok(Locked {
        kind: conv_kind(row.str("kind")?)?,
        counter: counter(row)?,
        member_count: count(row.int("member_count")?)?,
        delivery_mode: delivery_mode(row.str("delivery_mode")?)?,
        pull_threshold: threshold(row.opt_int("pull_threshold")?),
        mls_epoch: row.opt_int("mls_epoch")?,
    })
}

/// A conversation as a recall locked it.
pub(crate) fn recall_lock(row: &impl SqlRow) -> Result<RecallLock, StoreError> {
    Ok(RecallLock {
        counter: counter(row)?,
        recall_window_ms: row.int("recall_window_ms")?,
    })
}

/// `from_seq`, `to_seq`.
pub(crate) fn period(row: &impl SqlRow) -> Result<Period, StoreError> {
    Ok(Period {
        from_seq: row.int("from_seq")?,
        to_seq: row.opt_int("to_seq")?,
    })
}

/// A conversation as a view shows it.
pub(crate) fn conv_row(row: &impl SqlRow) -> Result<ConvRow, StoreError> {
    Ok(ConvRow {
        conv_id: row.string("conv_id")?,
        kind: conv_kind(row.str("kind")?)?,
        title: row.opt_string("title")?,
        delivery_mode: delivery_mode(row.str("delivery_mode")?)?,
        next_seq: row.int("next_seq")?,
        min_seq: row.int("min_seq")?,
        epoch: row.int("epoch")?,
        recall_window_ms: row.int("recall_window_ms")?,
        retention_ms: row.opt_int("retention_ms")?,
    })
}

/// `user_id`, `role`.
pub(crate) fn member_view(row: &impl SqlRow) -> Result<MemberView, StoreError> {
    Ok(MemberView {
        user_id: UserId::from_trusted(row.string("user_id")?),
        role: role(row.str("role")?)?,
    })
}

/// `user_id`, `device_id`.
pub(crate) fn device_identity(row: &impl SqlRow) -> Result<DeviceIdentity, StoreError> {
    Ok(DeviceIdentity {
        user_id: UserId::from_trusted(row.string("user_id")?),
        device_id: DeviceId::from_trusted(row.string("device_id")?),
    })
}

/// A device's route: `(gateway_id, conn_id)`.
pub(crate) fn route(row: &impl SqlRow) -> Result<(String, String), StoreError> {
    Ok((row.string("gateway_id")?, row.string("conn_id")?))
}

/// Every row of `rows`, decoded.
pub(crate) fn all<R, T>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    rows.iter().map(decode).collect()
}

fn unknown(what: &str, value: &str) -> StoreError {
    StoreError::Unavailable(format!("unknown {what} in store: {value}"))
}

pub(crate) fn conv_kind(s: &str) -> Result<ConvKind, StoreError> {
    ConvKind::parse(s).ok_or_else(|| unknown("conversation kind", s))
}

pub(crate) fn delivery_mode(s: &str) -> Result<DeliveryMode, StoreError> {
    DeliveryMode::parse(s).ok_or_else(|| unknown("delivery mode", s))
}

pub(crate) fn event_kind(s: &str) -> Result<EventKind, StoreError> {
    EventKind::parse(s).ok_or_else(|| unknown("event kind", s))
}

pub(crate) fn role(s: &str) -> Result<Role, StoreError> {
    Role::parse(s).ok_or_else(|| unknown("role", s))
}

/// A stored count (of members, say) as a size; the schema keeps it non-negative.
pub(crate) fn count(n: i64) -> Result<usize, StoreError> {
    usize::try_from(n).map_err(|_| StoreError::Unavailable(format!("negative count in store: {n}")))
}

/// A count or threshold as PostgreSQL's `integer`, saturating (thresholds are clamped to it at
/// creation, member counts are far below it).
pub(crate) fn int4<N: TryInto<i32>>(n: N) -> i32 {
    n.try_into().unwrap_or(i32::MAX)
}

/// A stored member-count threshold; the schema keeps it non-negative.
pub(crate) fn threshold(t: Option<i64>) -> Option<u32> {
    t.and_then(|t| u32::try_from(t).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_are_errors_not_defaults() {
        assert_eq!(conv_kind("group").ok(), Some(ConvKind::Group));
        assert!(matches!(
            conv_kind("channel"),
            Err(StoreError::Unavailable(_))
        ));
        assert!(matches!(role("king"), Err(StoreError::Unavailable(_))));
        assert_eq!(delivery_mode("pull").ok(), Some(DeliveryMode::Pull));
        assert_eq!(event_kind("leave").ok(), Some(EventKind::Leave));
        assert!(count(-1).is_err());
        assert_eq!(threshold(Some(-1)), None);
        assert_eq!(threshold(Some(500)), Some(500));
    }
}
