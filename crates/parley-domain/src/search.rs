//! Message search (docs/SEARCH.md): the query language parsed once, the match expression each
//! store's full-text engine takes, the cursor of a result page, and the snippet a hit shows.
//! No IO.
//!
//! A query is words, `"quoted phrases"`, and the filters `from:USER` and `in:CONVERSATION`.
//! Every word and phrase must match (AND); the last word, when the query ends with one, also
//! matches as a prefix, so a search box can search as the user types.

use std::fmt;

use crate::ids::{ConvId, UserId};

/// The longest query, in characters.
pub const SEARCH_QUERY_CHARS_MAX: usize = 256;
/// The most words and phrases one query may hold; more would only make the engine's work grow.
pub const SEARCH_TERMS_MAX: usize = 16;
/// The longest snippet, in characters, ellipses excluded.
pub const SNIPPET_CHARS_MAX: usize = 160;
/// How many characters of context a snippet keeps before its first hit.
const SNIPPET_LEAD_CHARS: usize = 40;
/// The deepest a rank-ordered page may start: rank pages are numbered by offset, and an offset
/// costs the engine the rows it skips.
pub const SEARCH_RANK_OFFSET_MAX: u32 = 1_000;
/// The default and the largest page of hits.
pub const SEARCH_LIMIT_DEFAULT: u32 = 20;
pub const SEARCH_LIMIT_MAX: u32 = 100;

/// The text-search language of a conversation: how its messages are split into words and
/// normalised. Both stores implement exactly these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SearchLanguage {
    /// Lower-cased words, no stemming, no stop words (PostgreSQL `simple`, SQLite FTS5
    /// `unicode61`).
    #[default]
    Simple,
    /// English stemming (PostgreSQL `english`, SQLite FTS5 `porter`).
    English,
}

impl SearchLanguage {
    pub const ALL: [SearchLanguage; 2] = [SearchLanguage::Simple, SearchLanguage::English];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Simple => "simple",
            Self::English => "english",
        }
    }

    pub fn parse(s: &str) -> Result<Self, SearchError> {
        match s {
            "simple" => Ok(Self::Simple),
            "english" => Ok(Self::English),
            _ => Err(SearchError::Language),
        }
    }
}

impl fmt::Display for SearchLanguage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a query, order or cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("q is empty: give a word, a phrase, from: or in:")]
    Empty,
    #[error("q is longer than {SEARCH_QUERY_CHARS_MAX} characters")]
    TooLong,
    #[error("q holds U+0000, which no message can hold")]
    Nul,
    #[error("q has more than {SEARCH_TERMS_MAX} words and phrases")]
    TooManyTerms,
    #[error("from: needs a user id")]
    From,
    #[error("in: needs a conversation id")]
    In,
    #[error("q gives from: or in: twice")]
    Repeated,
    #[error("language must be simple or english")]
    Language,
    #[error("order must be newest or rank")]
    Order,
    #[error("cursor is not one this search answered")]
    Cursor,
}

/// The order of hits: newest first (the default), or best match first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchOrder {
    #[default]
    Newest,
    Rank,
}

impl SearchOrder {
    pub fn parse(s: &str) -> Result<Self, SearchError> {
        match s {
            "newest" => Ok(Self::Newest),
            "rank" => Ok(Self::Rank),
            _ => Err(SearchError::Order),
        }
    }
}

/// A parsed query. Words and phrases keep their text as typed: each store's engine splits and
/// normalises them with the conversation's language, as it did the messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// Words every hit holds.
    pub words: Vec<String>,
    /// The query's last word, matched as a prefix.
    pub prefix: Option<String>,
    /// Phrases every hit holds, their words in order.
    pub phrases: Vec<String>,
    /// `from:USER`.
    pub from: Option<UserId>,
    /// `in:CONVERSATION`.
    pub in_conv: Option<ConvId>,
}

impl SearchQuery {
    /// Parses `q`. A word or phrase without a letter or digit matches nothing an engine could
    /// index, so it is dropped; a query left with neither a term nor a filter is `Empty`.
    pub fn parse(q: &str) -> Result<Self, SearchError> {
        if q.chars().count() > SEARCH_QUERY_CHARS_MAX {
            return Err(SearchError::TooLong);
        }
        if q.contains('\0') {
            return Err(SearchError::Nul);
        }
        let mut query = Self::default();
        let mut last_bare: Option<String> = None;
        for token in tokens(q) {
            // Only a bare word that ends the query becomes the prefix.
            if let Some(word) = last_bare.take() {
                query.words.push(word);
            }
            match token {
                Token::Phrase(p) => {
                    if has_word(&p) {
                        query.phrases.push(p);
                    }
                }
                Token::Bare(w) => {
                    if let Some(user) = w.strip_prefix("from:") {
                        let user = UserId::parse(user).map_err(|_| SearchError::From)?;
                        if query.from.replace(user).is_some() {
                            return Err(SearchError::Repeated);
                        }
                    } else if let Some(conv) = w.strip_prefix("in:") {
                        let conv = ConvId::parse(conv).map_err(|_| SearchError::In)?;
                        if query.in_conv.replace(conv).is_some() {
                            return Err(SearchError::Repeated);
                        }
                    } else if has_word(&w) {
                        last_bare = Some(w);
                    }
                }
            }
        }
        query.prefix = last_bare;
        if query.term_count() > SEARCH_TERMS_MAX {
            return Err(SearchError::TooManyTerms);
        }
        if query.term_count() == 0 && query.from.is_none() && query.in_conv.is_none() {
            return Err(SearchError::Empty);
        }
        Ok(query)
    }

    /// Words, phrases and the prefix.
    pub fn term_count(&self) -> usize {
        self.words.len() + self.phrases.len() + usize::from(self.prefix.is_some())
    }

    /// Whether the query matches text at all, or only filters (`from:ana`): a query of filters
    /// lists the messages they select.
    pub fn has_terms(&self) -> bool {
        self.term_count() > 0
    }

    /// The query as PostgreSQL's `to_tsquery` takes it: every term single-quoted (so the
    /// configuration splits and normalises it, and a quoted run of words becomes a phrase),
    /// the prefix marked `:*`, all joined by `&`.
    pub fn to_tsquery_text(&self) -> String {
        let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"));
        let mut parts: Vec<String> = self.words.iter().map(|w| quote(w)).collect();
        parts.extend(self.phrases.iter().map(|p| quote(p)));
        if let Some(p) = &self.prefix {
            parts.push(format!("{}:*", quote(p)));
        }
        parts.join(" & ")
    }

    /// The query as SQLite FTS5's `MATCH` takes it: every term a double-quoted string (so the
    /// table's tokenizer splits it, and a run of words becomes a phrase), the prefix followed
    /// by `*`, all joined by spaces (AND).
    pub fn to_fts5_text(&self) -> String {
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let mut parts: Vec<String> = self.words.iter().map(|w| quote(w)).collect();
        parts.extend(self.phrases.iter().map(|p| quote(p)));
        if let Some(p) = &self.prefix {
            parts.push(format!("{} *", quote(p)));
        }
        parts.join(" ")
    }
}

enum Token {
    Bare(String),
    Phrase(String),
}

/// Splits a query on white space, keeping `"…"` runs whole (an unclosed quote runs to the end).
fn tokens(q: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            chars.next();
            let phrase: String = chars.by_ref().take_while(|&c| c != '"').collect();
            out.push(Token::Phrase(phrase));
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '"' {
                    break;
                }
                word.push(c);
                chars.next();
            }
            out.push(Token::Bare(word));
        }
    }
    out
}

fn has_word(s: &str) -> bool {
    s.chars().any(char::is_alphanumeric)
}

/// Where a page of hits starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchCursor {
    /// Newest first: hits strictly older than this one, ordered by the time of the message,
    /// then conversation, then seq.
    Before {
        at_us: i64,
        conv_id: ConvId,
        seq: i64,
    },
    /// Best match first: skip this many hits.
    Offset(u32),
}

impl SearchCursor {
    /// The cursor as the API gives it: opaque to clients, plain text to the server.
    pub fn encode(&self) -> String {
        match self {
            Self::Before {
                at_us,
                conv_id,
                seq,
            } => format!("n.{at_us}.{seq}.{conv_id}"),
            Self::Offset(n) => format!("r.{n}"),
        }
    }

    /// Reads a cursor back; it must suit `order`.
    pub fn decode(s: &str, order: SearchOrder) -> Result<Self, SearchError> {
        let mut parts = s.splitn(4, '.');
        let bad = || SearchError::Cursor;
        match (parts.next(), order) {
            (Some("n"), SearchOrder::Newest) => {
                let at_us = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
                let seq: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
                let conv_id = parts
                    .next()
                    .and_then(|p| ConvId::parse(p).ok())
                    .ok_or_else(bad)?;
                if seq < 1 {
                    return Err(bad());
                }
                Ok(Self::Before {
                    at_us,
                    conv_id,
                    seq,
                })
            }
            (Some("r"), SearchOrder::Rank) => {
                let n: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
                if parts.next().is_some() || n > SEARCH_RANK_OFFSET_MAX {
                    return Err(bad());
                }
                Ok(Self::Offset(n))
            }
            _ => Err(bad()),
        }
    }
}

/// A snippet of a message around its first hit, with the hits marked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// Plain text, never markup; `…` where the message was cut.
    pub text: String,
    /// `[start, end)` of each hit, in characters (Unicode scalar values) of `text`.
    pub highlights: Vec<(usize, usize)>,
}

/// Cuts `body` to at most `SNIPPET_CHARS_MAX` characters around its first word that matches a
/// term of `query`, and marks every matching word inside the cut. Words are runs of letters and
/// digits compared lower-cased, in English by their stems; the prefix matches the start of a
/// word. Engines split a little differently (PostgreSQL keeps `example.com` whole), so a hit
/// may show no mark: the snippet is then the message's start.
pub fn snippet(body: &str, query: &SearchQuery, language: SearchLanguage) -> Snippet {
    let norm = Normaliser::new(language);
    let mut wanted: Vec<String> = Vec::new();
    for term in query.words.iter().chain(query.phrases.iter()) {
        wanted.extend(words_of(term).map(|(_, _, w)| norm.word(w)));
    }
    // The prefix's last word, as typed and normalised: the engines normalise a prefix too
    // (PostgreSQL's English `runs:*` is `run:*`).
    let prefix: Option<(String, String)> = query.prefix.as_deref().and_then(|p| {
        words_of(p)
            .last()
            .map(|(_, _, w)| (w.to_lowercase(), norm.word(w)))
    });
    let mut prefix_words: Vec<String> = Vec::new();
    if let Some(p) = query.prefix.as_deref() {
        // A prefix of several words ("e.g") matches its earlier words whole.
        let all: Vec<String> = words_of(p).map(|(_, _, w)| norm.word(w)).collect();
        prefix_words.extend(all.iter().take(all.len().saturating_sub(1)).cloned());
    }
    let chars: Vec<char> = body.chars().collect();
    let hits: Vec<(usize, usize)> = words_of(body)
        .filter(|(_, _, w)| {
            let n = norm.word(w);
            wanted.contains(&n)
                || prefix_words.contains(&n)
                || prefix.as_ref().is_some_and(|(typed, normal)| {
                    w.to_lowercase().starts_with(typed.as_str()) || n.starts_with(normal.as_str())
                })
        })
        .map(|(start, end, _)| (start, end))
        .collect();
    let (from, to) = window(chars.len(), hits.first().map(|h| h.0));
    let mut text = String::new();
    let lead = usize::from(from > 0);
    if from > 0 {
        text.push('…');
    }
    text.extend(&chars[from..to]);
    if to < chars.len() {
        text.push('…');
    }
    let highlights = hits
        .into_iter()
        .filter(|&(s, e)| s >= from && e <= to)
        .map(|(s, e)| (s - from + lead, e - from + lead))
        .collect();
    Snippet { text, highlights }
}

/// The `[from, to)` characters a snippet keeps of a body of `len` characters.
fn window(len: usize, first_hit: Option<usize>) -> (usize, usize) {
    if len <= SNIPPET_CHARS_MAX {
        return (0, len);
    }
    let from = first_hit
        .map_or(0, |h| h.saturating_sub(SNIPPET_LEAD_CHARS))
        .min(len - SNIPPET_CHARS_MAX);
    (from, from + SNIPPET_CHARS_MAX)
}

/// The words of `text` as `(start, end, word)`, positions in characters.
fn words_of(text: &str) -> impl Iterator<Item = (usize, usize, &str)> {
    let mut out = Vec::new();
    let mut start: Option<(usize, usize)> = None;
    let mut char_ix = 0;
    for (byte_ix, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some((char_ix, byte_ix)),
            (false, Some((cs, bs))) => {
                out.push((cs, char_ix, &text[bs..byte_ix]));
                start = None;
            }
            _ => {}
        }
        char_ix += 1;
    }
    if let Some((cs, bs)) = start {
        out.push((cs, char_ix, &text[bs..]));
    }
    out.into_iter()
}

/// Lower-cases a word and, in English, stems it.
struct Normaliser(Option<rust_stemmers::Stemmer>);

impl Normaliser {
    fn new(language: SearchLanguage) -> Self {
        Self(match language {
            SearchLanguage::Simple => None,
            SearchLanguage::English => Some(rust_stemmers::Stemmer::create(
                rust_stemmers::Algorithm::English,
            )),
        })
    }

    fn word(&self, w: &str) -> String {
        let lower = w.to_lowercase();
        match &self.0 {
            Some(stemmer) => stemmer.stem(&lower).into_owned(),
            None => lower,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_into_words_phrases_prefix_and_filters() {
        let q = SearchQuery::parse(r#"link "last week" from:ana in:team-1 exa"#).expect("parses");
        assert_eq!(q.words, vec!["link"]);
        assert_eq!(q.phrases, vec!["last week"]);
        assert_eq!(q.prefix.as_deref(), Some("exa"));
        assert_eq!(q.from.as_ref().map(UserId::as_str), Some("ana"));
        assert_eq!(q.in_conv.as_ref().map(ConvId::as_str), Some("team-1"));
        // A phrase last leaves no prefix.
        let q = SearchQuery::parse(r#"link "last week""#).expect("parses");
        assert_eq!(q.prefix, None);
        assert_eq!(q.words, vec!["link"]);
    }

    #[test]
    fn bad_queries_are_refused() {
        assert_eq!(SearchQuery::parse("  "), Err(SearchError::Empty));
        assert_eq!(SearchQuery::parse("!!! \"...\""), Err(SearchError::Empty));
        assert_eq!(SearchQuery::parse("from:"), Err(SearchError::From));
        assert_eq!(SearchQuery::parse("a\0b"), Err(SearchError::Nul));
        assert_eq!(SearchQuery::parse("in:a in:b"), Err(SearchError::Repeated));
        let long = "a".repeat(SEARCH_QUERY_CHARS_MAX + 1);
        assert_eq!(SearchQuery::parse(&long), Err(SearchError::TooLong));
        let many = vec!["w"; SEARCH_TERMS_MAX + 1].join(" ");
        assert_eq!(SearchQuery::parse(&many), Err(SearchError::TooManyTerms));
        // Filters alone are a query.
        assert!(SearchQuery::parse("from:ana").is_ok());
    }

    #[test]
    fn engine_texts_quote_every_term() {
        let q = SearchQuery::parse(r#"it's "a\b" d"#).expect("parses");
        assert_eq!(q.to_tsquery_text(), r"'it''s' & 'a\\b' & 'd':*");
        assert_eq!(q.to_fts5_text(), r#""it's" "a\b" "d" *"#);
        let q = SearchQuery::parse(r#"say "x""y"#).expect("parses");
        // A quote always ends a word, so no term holds one.
        assert_eq!(q.to_fts5_text(), r#""say" "x" "y""#);
    }

    #[test]
    fn cursors_round_trip_and_refuse_the_other_order() {
        let c = SearchCursor::Before {
            at_us: 1_700_000_000_123_456,
            conv_id: ConvId::parse("g:a.b").expect("id"),
            seq: 7,
        };
        let text = c.encode();
        assert_eq!(SearchCursor::decode(&text, SearchOrder::Newest), Ok(c));
        assert!(SearchCursor::decode(&text, SearchOrder::Rank).is_err());
        assert_eq!(
            SearchCursor::decode("r.40", SearchOrder::Rank),
            Ok(SearchCursor::Offset(40))
        );
        assert!(SearchCursor::decode("r.1001", SearchOrder::Rank).is_err());
        assert!(SearchCursor::decode("n.x.1.c", SearchOrder::Newest).is_err());
        assert!(SearchCursor::decode("", SearchOrder::Newest).is_err());
    }

    #[test]
    fn snippets_mark_words_prefixes_and_stems() {
        let q = SearchQuery::parse("link exa").expect("parses");
        let s = snippet(
            "Here is the Link: https://example.com ok",
            &q,
            SearchLanguage::Simple,
        );
        assert_eq!(s.text, "Here is the Link: https://example.com ok");
        let marked: Vec<String> = s
            .highlights
            .iter()
            .map(|&(a, b)| s.text.chars().skip(a).take(b - a).collect())
            .collect();
        assert_eq!(marked, vec!["Link", "example"]);
        let q = SearchQuery::parse("running \"dogs\"").expect("parses");
        let s = snippet("He runs with the dog", &q, SearchLanguage::English);
        assert_eq!(s.highlights, vec![(3, 7), (17, 20)]);
        // A lone word is a prefix, normalised like the engine normalises it.
        let q = SearchQuery::parse("gates").expect("parses");
        let s = snippet("the gate opened", &q, SearchLanguage::English);
        assert_eq!(s.highlights, vec![(4, 8)]);
    }

    #[test]
    fn long_bodies_are_cut_around_the_first_hit() {
        let body = format!("{} needle {}", "x ".repeat(200), "y ".repeat(200));
        let q = SearchQuery::parse("needle").expect("parses");
        let s = snippet(&body, &q, SearchLanguage::Simple);
        assert!(s.text.starts_with('…') && s.text.ends_with('…'));
        assert_eq!(s.text.chars().count(), SNIPPET_CHARS_MAX + 2);
        let (a, b) = s.highlights[0];
        let hit: String = s.text.chars().skip(a).take(b - a).collect();
        assert_eq!(hit, "needle");
        // Multi-byte text keeps character positions.
        let s = snippet(
            "héllo wörld",
            &SearchQuery::parse("wörld").expect("q"),
            SearchLanguage::Simple,
        );
        assert_eq!(s.highlights, vec![(6, 11)]);
    }
}
