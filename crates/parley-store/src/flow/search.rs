//! Message search (docs/SEARCH.md). The index itself is kept by triggers in each backend's
//! migration, in the transaction of every event that changes a body; this module only reads it,
//! under the same visibility rule as a read of the log: a hit is a message of a conversation
//! the searcher is a member of, inside one of their membership periods.

use parley_domain::{
    ConvId, Rejection, Role, SearchCursor, SearchLanguage, SearchOrder, SearchQuery, UserId,
};

use super::send::SendTx;
use super::{ReadTx, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::query::{Arg, Sql, SqlRow};
use crate::types::{SearchHit, SearchRequest, SearchStatus};

/// The backend's statements. Each search statement takes `$1` the searcher, `$2` the match
/// expression in the engine's syntax, `$3` `in:`, `$4` `from:`, `$5`–`$7` a newest-first cursor
/// (time, conversation, seq), `$8` the limit, `$9` the offset of a rank page and `$10` 1 to skip
/// the period check (the test break `search-ignores-periods`, 0 otherwise); it answers
/// `conv_id, seq, sender_user, at_us, lang, body, created_at`.
pub(crate) trait SearchTx: Sql {
    /// Hits newest first.
    const SEARCH_NEWEST_SQL: &'static str;
    /// Hits best match first, then newest.
    const SEARCH_RANK_SQL: &'static str;
    /// `SEARCH_NEWEST_SQL` explained: the plan, one row per line.
    const EXPLAIN_NEWEST_SQL: &'static str;
    /// The column of `EXPLAIN_NEWEST_SQL`'s rows that holds the plan's text.
    const PLAN_COLUMN: &'static str;
    /// Messages the filters select, newest first, for a query without words (`$2` unused).
    const SEARCH_FILTERS_SQL: &'static str;
    /// Answers `enabled` 1 when the trigger that indexes new messages is in place.
    const INDEXING_SQL: &'static str;
    /// Sets conversation `$1`'s language to `$2`.
    const SET_LANGUAGE_SQL: &'static str;
    /// The match expression of `query` in this engine's syntax.
    fn match_text(query: &SearchQuery) -> String;
}

/// Runs a search in one read snapshot.
pub(crate) async fn search<B: Backend>(
    backend: &B,
    req: &SearchRequest,
) -> Result<Vec<SearchHit>, StoreError> {
    let sql = match (req.query.has_terms(), req.order) {
        (false, _) => <B::Tx as SearchTx>::SEARCH_FILTERS_SQL,
        (true, SearchOrder::Newest) => <B::Tx as SearchTx>::SEARCH_NEWEST_SQL,
        (true, SearchOrder::Rank) => <B::Tx as SearchTx>::SEARCH_RANK_SQL,
    };
    let rows = run(backend, req, sql).await?;
    rows.iter().map(hit).collect()
}

/// The plan the database chooses for a newest-first search with words, one line per row: the
/// statement of [`search`] with the same arguments, so a test reads the real plan.
pub(crate) async fn explain<B: Backend>(
    backend: &B,
    req: &SearchRequest,
) -> Result<String, StoreError> {
    let rows = run(backend, req, <B::Tx as SearchTx>::EXPLAIN_NEWEST_SQL).await?;
    let lines: Result<Vec<&str>, StoreError> = rows
        .iter()
        .map(|r| r.str(<B::Tx as SearchTx>::PLAN_COLUMN))
        .collect();
    Ok(lines?.join("\n"))
}

async fn run<B: Backend>(
    backend: &B,
    req: &SearchRequest,
    sql: &'static str,
) -> Result<Vec<<B::Tx as Sql>::Row>, StoreError> {
    let text = <B::Tx as SearchTx>::match_text(&req.query);
    let (at_us, conv, seq, offset) = match &req.cursor {
        Some(SearchCursor::Before {
            at_us,
            conv_id,
            seq,
        }) => (Some(*at_us), Some(conv_id.as_str()), Some(*seq), 0),
        Some(SearchCursor::Offset(n)) => (None, None, None, i64::from(*n)),
        None => (None, None, None, 0),
    };
    let args = [
        Arg::Text(req.user.as_str()),
        Arg::Text(&text),
        Arg::OptText(req.query.in_conv.as_ref().map(ConvId::as_str)),
        Arg::OptText(req.query.from.as_ref().map(UserId::as_str)),
        Arg::OptInt(at_us),
        Arg::OptText(conv),
        Arg::OptInt(seq),
        Arg::Int(i64::from(req.limit)),
        Arg::Int(offset),
        // 1 only under the test break `search-ignores-periods`.
        Arg::Int(i64::from(backend.breaks().search_ignores_periods())),
    ];
    let mut tx = backend.begin_read().await?;
    let rows = tx.fetch_all(sql, &args).await?;
    tx.finish().await?;
    Ok(rows)
}

fn hit<R: SqlRow>(row: &R) -> Result<SearchHit, StoreError> {
    Ok(SearchHit {
        conv_id: ConvId::from_trusted(row.string("conv_id")?),
        seq: row.int("seq")?,
        sender_user: UserId::from_trusted(row.string("sender_user")?),
        created_at: row.time("created_at")?,
        at_us: row.int("at_us")?,
        language: language_of(row.str("lang")?)?,
        body: row.opt_string("body")?.unwrap_or_default(),
    })
}

fn language_of(s: &str) -> Result<SearchLanguage, StoreError> {
    SearchLanguage::parse(s)
        .map_err(|_| StoreError::Unavailable(format!("unknown search language in store: {s}")))
}

/// Whether new messages are being indexed.
pub(crate) async fn status<B: Backend>(backend: &B) -> Result<SearchStatus, StoreError> {
    let mut tx = backend.begin_read().await?;
    let row = tx
        .fetch_optional(<B::Tx as SearchTx>::INDEXING_SQL, &[])
        .await?;
    tx.finish().await?;
    let indexing = match row {
        Some(r) => r.int("enabled")? == 1,
        None => false,
    };
    Ok(SearchStatus {
        indexing,
        lag_events: 0,
    })
}

const LANGUAGE_SQL: &str = "SELECT CAST(search_lang AS TEXT) AS lang FROM conversations
   WHERE conv_id = $1";
const OPEN_ROLE_SQL: &str = "SELECT role FROM membership_periods
   WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL";

/// The conversation's search language, as `viewer` (a member, past or present) sees it.
pub(crate) async fn language<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<SearchLanguage, StoreError> {
    let mut tx = backend.begin_read().await?;
    let periods = tx.periods(conv_id, viewer).await?;
    if periods.is_empty() {
        return Err(Rejection::NotMember.into());
    }
    let row = tx
        .fetch_optional(LANGUAGE_SQL, &[Arg::Text(conv_id.as_str())])
        .await?
        .ok_or(Rejection::NotMember)?;
    let language = language_of(row.str("lang")?)?;
    tx.finish().await?;
    Ok(language)
}

/// Sets the conversation's search language: an owner or admin only. The migration's trigger
/// splits the conversation's messages again in this transaction, so no search ever sees a
/// conversation half in one language.
pub(crate) async fn set_language<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    actor: &UserId,
    language: SearchLanguage,
) -> Result<SearchLanguage, StoreError> {
    let mut tx = backend.begin_write().await?;
    let locked = tx.lock_for_send(conv_id, backend.breaks()).await?;
    if locked.is_none() {
        return Err(Rejection::NotMember.into());
    }
    let args = [Arg::Text(conv_id.as_str()), Arg::Text(actor.as_str())];
    let role = tx
        .fetch_optional(OPEN_ROLE_SQL, &args)
        .await?
        .ok_or(Rejection::NotMember)?;
    if !Role::parse(role.str("role")?).is_some_and(Role::manages_members) {
        return Err(Rejection::Forbidden("only an owner or admin sets the search language").into());
    }
    let args = [Arg::Text(conv_id.as_str()), Arg::Text(language.as_str())];
    tx.execute(<B::Tx as SearchTx>::SET_LANGUAGE_SQL, &args)
        .await?;
    tx.commit_or_unknown().await?;
    Ok(language)
}
