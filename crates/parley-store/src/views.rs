//! Conversation views (SPEC §6 conversation object) for one conversation or a whole feed, for
//! every store: the rows of all asked conversations, the viewer's periods and read marks are
//! read in three statements whatever their number; each view is planned by the domain's view
//! rule (`decide::view`); the backend then counts the unread messages and finds the last event
//! of every plan its own way.

use std::collections::HashMap;

use parley_domain::decide::view::{plan, ViewPlan};
use parley_domain::{
    ConvId, ConvKind, ConversationView, DeliveryMode, Event, MemberView, Period, Rejection, UserId,
};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::{ReadTx, StoreFuture};
use crate::query::{Arg, SqlRow};
use crate::types::ConversationFeed;
use crate::{rows, sql};

/// A conversation row as a view shows it.
pub(crate) struct ConvRow {
    pub conv_id: String,
    pub kind: ConvKind,
    pub title: Option<String>,
    pub delivery_mode: DeliveryMode,
    pub next_seq: i64,
    pub min_seq: i64,
    pub epoch: i64,
    pub recall_window_ms: i64,
    pub retention_ms: Option<i64>,
}

/// One view to count: its conversation and plan.
pub(crate) struct Planned<'a> {
    pub conv: &'a ConvRow,
    pub plan: ViewPlan,
}

/// The unread count and the last visible event of one planned view.
pub(crate) struct Counted {
    pub unread: i64,
    pub last_event: Option<Event>,
}

pub(crate) trait ViewTx: ReadTx {
    /// The rows (the columns `rows::conv_row` reads) of the conversations among the ids of `$1`
    /// (`Arg::Texts`).
    const CONVERSATION_ROWS_SQL: &'static str;
    /// `conv_id`, `from_seq`, `to_seq` of the periods of user `$1` in the ids of `$2`.
    const VIEWER_PERIODS_SQL: &'static str;
    /// `conv_id`, `read_seq` of the read marks of user `$1` in the ids of `$2`.
    const READ_MARKS_SQL: &'static str;

    /// The rows of those of `ids` that exist.
    fn conversation_rows(&mut self, ids: &[String]) -> impl StoreFuture<Vec<ConvRow>> {
        async move {
            let found = self
                .fetch_all(Self::CONVERSATION_ROWS_SQL, &[Arg::Texts(ids)])
                .await?;
            rows::all(&found, rows::conv_row)
        }
    }
    /// `viewer`'s periods in those of `ids` they ever joined, by conversation.
    fn viewer_periods(
        &mut self,
        viewer: &UserId,
        ids: &[String],
    ) -> impl StoreFuture<Vec<(String, Period)>> {
        async move {
            let args = [Arg::Text(viewer.as_str()), Arg::Texts(ids)];
            let found = self.fetch_all(Self::VIEWER_PERIODS_SQL, &args).await?;
            rows::all(&found, |r| Ok((r.string("conv_id")?, rows::period(r)?)))
        }
    }
    /// `viewer`'s stored read positions in `ids`, by conversation.
    fn read_marks(
        &mut self,
        viewer: &UserId,
        ids: &[String],
    ) -> impl StoreFuture<Vec<(String, i64)>> {
        async move {
            let args = [Arg::Text(viewer.as_str()), Arg::Texts(ids)];
            let found = self.fetch_all(Self::READ_MARKS_SQL, &args).await?;
            rows::all(&found, |r| Ok((r.string("conv_id")?, r.int("read_seq")?)))
        }
    }
    /// `viewer`'s mentions after their read position in each of `ids` that has any.
    const MENTION_COUNTS_SQL: &'static str;
    fn mention_counts(
        &mut self,
        viewer: &UserId,
        ids: &[String],
    ) -> impl StoreFuture<Vec<(String, i64)>> {
        async move {
            let args = [Arg::Text(viewer.as_str()), Arg::Texts(ids)];
            let found = self.fetch_all(Self::MENTION_COUNTS_SQL, &args).await?;
            rows::all(&found, |r| Ok((r.string("conv_id")?, r.int("n")?)))
        }
    }
    /// Each plan's unread messages (msg events of others in its unread ranges, not recalled)
    /// and the event at its last visible seq, in the order given.
    fn count_unread(
        &mut self,
        viewer: &UserId,
        planned: &[Planned<'_>],
    ) -> impl StoreFuture<Vec<Counted>>;
    /// The current members with their roles, earliest first.
    fn member_list(&mut self, conv_id: &str) -> impl StoreFuture<Vec<MemberView>> {
        sql::member_list(self, conv_id)
    }
}

/// The feed's change tracking, which each backend keeps its own way.
pub(crate) trait FeedTx: ViewTx {
    /// A parsed sync token.
    type Since: Send + Sync;
    /// Parses a token this backend handed out; anything else is `BadRequest`.
    fn parse_since(token: &str) -> Result<Self::Since, StoreError>;
    /// The conversations in which `viewer` ever had a period that changed since `since` (all
    /// of them without it), ascending, and the token of this snapshot.
    fn changed_since(
        &mut self,
        viewer: &UserId,
        since: Option<&Self::Since>,
    ) -> impl StoreFuture<(Vec<String>, String)>;
}

/// Views of `ids` as `viewer` sees them, in the order given. Conversations in which the viewer
/// never had a period are left out. The member list only when asked for (a single
/// conversation's view has it, feed entries do not) and only for a current member.
pub(crate) async fn build<T: ViewTx>(
    tx: &mut T,
    viewer: &UserId,
    ids: &[String],
    with_members: bool,
) -> Result<Vec<ConversationView>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: HashMap<String, ConvRow> = tx
        .conversation_rows(ids)
        .await?
        .into_iter()
        .map(|row| (row.conv_id.clone(), row))
        .collect();
    let mut periods: HashMap<String, Vec<Period>> = HashMap::new();
    for (conv, period) in tx.viewer_periods(viewer, ids).await? {
        periods.entry(conv).or_default().push(period);
    }
    let marks: HashMap<String, i64> = tx.read_marks(viewer, ids).await?.into_iter().collect();
    let planned: Vec<Planned<'_>> = ids
        .iter()
        .filter_map(|id| {
            let (conv, ps) = (rows.get(id)?, periods.get(id)?);
            let plan = plan(ps, conv.next_seq, conv.min_seq, marks.get(id).copied());
            Some(Planned { conv, plan })
        })
        .collect();
    let counted = tx.count_unread(viewer, &planned).await?;
    let mentions: HashMap<String, i64> =
        tx.mention_counts(viewer, ids).await?.into_iter().collect();
    assert_eq!(counted.len(), planned.len(), "a count per planned view");
    let mut views = Vec::with_capacity(planned.len());
    for (Planned { conv, plan }, Counted { unread, last_event }) in planned.into_iter().zip(counted)
    {
        let members = if with_members && plan.is_member {
            Some(tx.member_list(&conv.conv_id).await?)
        } else {
            None
        };
        views.push(ConversationView {
            conv_id: ConvId::from_trusted(conv.conv_id.clone()),
            kind: conv.kind,
            title: conv.title.clone(),
            delivery_mode: conv.delivery_mode,
            head: plan.head,
            min_seq: conv.min_seq,
            epoch: conv.epoch,
            read_seq: plan.read_seq,
            unread: unread.max(0),
            mentions: mentions.get(&conv.conv_id).copied().unwrap_or(0),
            members,
            recall_window_ms: conv.recall_window_ms,
            retention_ms: conv.retention_ms,
            last_event,
        });
    }
    Ok(views)
}

/// The conversation as `viewer` sees it; `NotMember` for an unknown conversation and for a
/// reader who never had a period (P10).
pub(crate) async fn get_conversation<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<ConversationView, StoreError> {
    let mut tx = backend.begin_read().await?;
    let ids = [conv_id.as_str().to_owned()];
    let view = build(&mut tx, viewer, &ids, true).await?.into_iter().next();
    tx.finish().await?;
    view.ok_or_else(|| Rejection::NotMember.into())
}

/// The feed of SPEC §5: the conversations that changed for `viewer` since `since`, in one
/// snapshot with the token it hands out.
pub(crate) async fn list_conversations<B: Backend>(
    backend: &B,
    viewer: &UserId,
    since: Option<&str>,
) -> Result<ConversationFeed, StoreError> {
    let since = since.map(<B::Tx as FeedTx>::parse_since).transpose()?;
    let mut tx = backend.begin_read().await?;
    let (ids, sync_token) = tx.changed_since(viewer, since.as_ref()).await?;
    let conversations = build(&mut tx, viewer, &ids, false).await?;
    tx.finish().await?;
    Ok(ConversationFeed {
        conversations,
        sync_token,
    })
}
