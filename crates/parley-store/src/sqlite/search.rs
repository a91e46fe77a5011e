//! Message search on SQLite (docs/SEARCH.md): one contentless FTS5 table of words per language,
//! keyed by `search_docs.doc_id`, which holds what a search filters and orders by.

use parley_domain::SearchQuery;

use super::Tx;
use crate::flow::search::SearchTx;

/// The visibility rule of a read, then the filters and the newest-first cursor: the searcher
/// has a period of the conversation that holds the message.
macro_rules! visible_and_filtered {
    () => {
        " AND ($10 = 1 OR EXISTS (SELECT 1 FROM membership_periods p
                       WHERE p.conv_id = d.conv_id AND p.user_id = $1 AND d.seq >= p.from_seq
                         AND (p.to_seq IS NULL OR d.seq <= p.to_seq)))
          AND ($3 IS NULL OR d.conv_id = $3)
          AND ($4 IS NULL OR d.sender_user = $4)
          AND ($5 IS NULL OR (d.at_us, d.conv_id, d.seq) < ($5, $6, $7))"
    };
}

/// A page of hits chosen from the index alone (`$inner`, ordered and limited), then joined to
/// their events for the bodies: only the page's rows are read from `events`.
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

/// The hits of one language's table, with bm25's score (lower is better).
macro_rules! matching {
    ($table:literal) => {
        concat!(
            "SELECT d.conv_id, d.seq, d.sender_user, d.at_us, d.lang, bm25(",
            $table,
            ") AS score FROM ",
            $table,
            " w JOIN search_docs d ON d.doc_id = w.rowid WHERE ",
            $table,
            " MATCH $2",
            visible_and_filtered!()
        )
    };
}

/// Both languages' hits.
macro_rules! both {
    () => {
        concat!(
            "SELECT * FROM (",
            matching!("search_words_simple"),
            " UNION ALL ",
            matching!("search_words_english"),
            ")"
        )
    };
}

/// The statement of a newest-first search, for running and for explaining.
macro_rules! newest {
    () => {
        with_bodies!(
            concat!(
                both!(),
                " ORDER BY at_us DESC, conv_id DESC, seq DESC LIMIT $8 OFFSET 0 * $9"
            ),
            "h.at_us DESC, h.conv_id DESC, h.seq DESC"
        )
    };
}

impl SearchTx for Tx<'_> {
    const SEARCH_NEWEST_SQL: &'static str = newest!();
    const EXPLAIN_NEWEST_SQL: &'static str = concat!("EXPLAIN QUERY PLAN ", newest!());
    const PLAN_COLUMN: &'static str = "detail";
    const SEARCH_RANK_SQL: &'static str = with_bodies!(
        concat!(
            both!(),
            " ORDER BY score, at_us DESC, conv_id DESC, seq DESC LIMIT $8 OFFSET $9"
        ),
        "h.score, h.at_us DESC, h.conv_id DESC, h.seq DESC"
    );
    const SEARCH_FILTERS_SQL: &'static str = with_bodies!(
        concat!(
            "SELECT d.conv_id, d.seq, d.sender_user, d.at_us, d.lang, 0 AS score
               FROM search_docs d WHERE $2 IS NOT NULL",
            visible_and_filtered!(),
            " ORDER BY d.at_us DESC, d.conv_id DESC, d.seq DESC LIMIT $8 OFFSET 0 * $9"
        ),
        "h.at_us DESC, h.conv_id DESC, h.seq DESC"
    );
    const INDEXING_SQL: &'static str = "SELECT count(*) AS enabled FROM sqlite_master
        WHERE type = 'trigger' AND name = 'events_search_insert'";

    const SET_LANGUAGE_SQL: &'static str =
        "UPDATE conversations SET search_lang = $2 WHERE conv_id = $1";

    fn match_text(query: &SearchQuery) -> String {
        query.to_fts5_text()
    }
}

impl super::SqliteStore {
    /// The plan SQLite chooses for a newest-first search with words: the same statement and
    /// arguments as [`crate::Store::search`], so a test can check that FTS5 answers it.
    pub async fn explain_search(
        &self,
        req: &crate::SearchRequest,
    ) -> Result<String, crate::StoreError> {
        crate::flow::search::explain(self, req).await
    }
}
