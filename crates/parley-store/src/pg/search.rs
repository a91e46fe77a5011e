//! Message search on PostgreSQL (docs/SEARCH.md): `search_docs` holds each message's words as a
//! `tsvector` in its conversation's language, every lexeme scoped to the conversation
//! (`conv:word`, the migration's `search_words`), under one GIN index: a search looks up the
//! query's words in each of the searcher's conversations, never a word's list over all of them.

use parley_domain::SearchQuery;

use super::PgTx;
use crate::flow::search::SearchTx;

/// The visibility rule of a read, then the filters and the newest-first cursor: the searcher
/// has a period of the conversation that holds the message.
macro_rules! visible_and_filtered {
    () => {
        " AND ($10::bigint = 1 OR EXISTS (SELECT 1 FROM membership_periods p
                       WHERE p.conv_id = d.conv_id AND p.user_id = $1 AND d.seq >= p.from_seq
                         AND (p.to_seq IS NULL OR d.seq <= p.to_seq)))
          AND ($3::text IS NULL OR d.conv_id = $3)
          AND ($4::text IS NULL OR d.sender_user = $4)
          AND ($5::bigint IS NULL OR (d.at_us, d.conv_id, d.seq) < ($5, $6::text, $7::bigint))"
    };
}

/// A page of hits chosen from `search_docs` alone (`$inner`, ordered and limited), then joined
/// to their events for the bodies: only the page's rows are read from `events`.
macro_rules! with_bodies {
    ($inner:expr, $order:literal) => {
        concat!(
            "SELECT h.conv_id, h.seq, h.sender_user, h.at_us, h.lang, e.body, e.created_at
               FROM (",
            $inner,
            ") h JOIN events e ON e.conv_id = h.conv_id AND e.seq = h.seq ORDER BY ",
            $order
        )
    };
}

/// The query: for each conversation of the searcher (or the one of `in:`), the query in that
/// conversation's language scoped to it (`search_query`), all joined by OR, so one lookup of the
/// GIN index answers every conversation; then the visibility rule and the filters.
macro_rules! matching {
    ($score:literal) => {
        concat!(
            "WITH q AS (
               SELECT string_agg('(' || search_query(c.conv_id, c.search_lang, $2)::text || ')',
                                 ' | ')::tsquery AS tq
                 FROM conversations c
                WHERE c.conv_id IN (SELECT m.conv_id FROM membership_periods m
                                     WHERE m.user_id = $1)
                  AND ($3::text IS NULL OR c.conv_id = $3))
             SELECT d.conv_id, d.seq, d.sender_user, d.at_us, d.lang::text AS lang, ",
            $score,
            " AS score
               FROM search_docs d, q
              WHERE d.words @@ q.tq",
            visible_and_filtered!()
        )
    };
}

/// The statement of a newest-first search, for running and for explaining.
macro_rules! newest {
    () => {
        with_bodies!(
            concat!(
                matching!("0"),
                " ORDER BY d.at_us DESC, d.conv_id DESC, d.seq DESC LIMIT $8 OFFSET 0 * $9"
            ),
            "h.at_us DESC, h.conv_id DESC, h.seq DESC"
        )
    };
}

impl SearchTx for PgTx<'_> {
    const SEARCH_NEWEST_SQL: &'static str = newest!();
    const EXPLAIN_NEWEST_SQL: &'static str = concat!("EXPLAIN ", newest!());
    const PLAN_COLUMN: &'static str = "QUERY PLAN";
    const SEARCH_RANK_SQL: &'static str = with_bodies!(
        concat!(
            matching!("ts_rank(d.words, q.tq)"),
            " ORDER BY score DESC, d.at_us DESC, d.conv_id DESC, d.seq DESC LIMIT $8 OFFSET $9"
        ),
        "h.score DESC, h.at_us DESC, h.conv_id DESC, h.seq DESC"
    );
    const SEARCH_FILTERS_SQL: &'static str = with_bodies!(
        concat!(
            "SELECT d.conv_id, d.seq, d.sender_user, d.at_us, d.lang::text AS lang, 0 AS score
               FROM search_docs d
              WHERE d.conv_id IN (SELECT m.conv_id FROM membership_periods m WHERE m.user_id = $1)
                AND $2::text IS NOT NULL",
            visible_and_filtered!(),
            " ORDER BY d.at_us DESC, d.conv_id DESC, d.seq DESC LIMIT $8 OFFSET 0 * $9"
        ),
        "h.at_us DESC, h.conv_id DESC, h.seq DESC"
    );
    const INDEXING_SQL: &'static str = "SELECT CAST(count(*) AS BIGINT) AS enabled FROM pg_trigger
        WHERE tgname = 'events_search_insert' AND tgenabled <> 'D'";

    const SET_LANGUAGE_SQL: &'static str =
        "UPDATE conversations SET search_lang = CAST($2 AS regconfig) WHERE conv_id = $1";

    fn match_text(query: &SearchQuery) -> String {
        query.to_tsquery_text()
    }
}

impl super::PgStore {
    /// The plan PostgreSQL chooses for a newest-first search with words: the same statement
    /// and arguments as [`crate::Store::search`], so a test can check that the index is used.
    pub async fn explain_search(
        &self,
        req: &crate::SearchRequest,
    ) -> Result<String, crate::StoreError> {
        crate::flow::search::explain(self, req).await
    }
}
