//! Message search (docs/SEARCH.md) on every store: the query language, the order and pages,
//! the visibility rule of reads, and the index following recalls, edits, purges and a
//! conversation's language.

use anyhow::{ensure, Context, Result};
use chrono::Duration;
use parley_domain::{
    Body, ClientMsgId, ConvId, ConvKind, DeviceId, Rejection, SearchCursor, SearchLanguage,
    SearchOrder, SearchQuery, UserId,
};
use parley_store::{EditRequest, SearchHit, SearchRequest, Store, StoreError};

use super::{event_at, new_conv, send, user, RETENTION_TEST_MS};

pub async fn search(
    store: &dyn Store,
    who: &UserId,
    q: &str,
    order: SearchOrder,
    cursor: Option<SearchCursor>,
    limit: u32,
) -> Result<Vec<SearchHit>> {
    let req = SearchRequest {
        user: who.clone(),
        query: SearchQuery::parse(q).context("query")?,
        order,
        cursor,
        limit,
    };
    Ok(store.search(&req).await?)
}

/// The `(conv, seq)` of each hit of a newest-first search, at most 50.
pub async fn found(store: &dyn Store, who: &UserId, q: &str) -> Result<Vec<(String, i64)>> {
    let hits = search(store, who, q, SearchOrder::Newest, None, 50).await?;
    Ok(hits
        .into_iter()
        .map(|h| (h.conv_id.as_str().to_owned(), h.seq))
        .collect())
}

fn at(conv: &str, seq: i64) -> (String, i64) {
    (conv.to_owned(), seq)
}

async fn edit(
    store: &dyn Store,
    conv: &ConvId,
    from: &UserId,
    key: &str,
    target: i64,
    text: &str,
) -> Result<()> {
    let req = EditRequest::new(
        conv.clone(),
        from.clone(),
        DeviceId::parse("d1")?,
        ClientMsgId::parse(key)?,
        target,
        Body::parse(text, 16 * 1024)?,
    );
    store.edit(&req).await?;
    Ok(())
}

/// Words, phrases, the last word as a prefix, `from:` and `in:`, every term required.
pub async fn query_language(store: &dyn Store) -> Result<()> {
    let ana = user(store, "ana").await?;
    let bob = user(store, "bob").await?;
    let one = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("s-one"), &[&bob]))
        .await?
        .conv_id;
    let two = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("s-two"), &[&bob]))
        .await?
        .conv_id;
    // Joins are seqs 1 and 2 of each.
    send(
        store,
        &one,
        &ana,
        "m1",
        "Here is the LINK: https://example.com/x",
    )
    .await?; // 3
    send(store, &one, &bob, "m2", "lunch at noon?").await?; // 4
    send(store, &two, &ana, "m3", "the report of last week").await?; // 3
    ensure!(
        found(store, &bob, "link").await? == vec![at("s-one", 3)],
        "a word, any case"
    );
    ensure!(
        found(store, &bob, "lun").await? == vec![at("s-one", 4)],
        "the last word as a prefix"
    );
    ensure!(
        found(store, &bob, "lun noon").await?.is_empty(),
        "only the last word is a prefix"
    );
    ensure!(
        found(store, &bob, "\"last week\"").await? == vec![at("s-two", 3)],
        "a phrase"
    );
    ensure!(
        found(store, &bob, "\"week last\"").await?.is_empty(),
        "a phrase keeps its order"
    );
    ensure!(
        found(store, &bob, "link report").await?.is_empty(),
        "every term is required"
    );
    ensure!(
        found(store, &ana, "from:bob").await? == vec![at("s-one", 4)],
        "from: alone"
    );
    ensure!(
        found(store, &ana, "the from:bob").await?.is_empty(),
        "from: narrows"
    );
    ensure!(
        found(store, &ana, "the in:s-two").await? == vec![at("s-two", 3)],
        "in: narrows"
    );
    ensure!(
        found(store, &ana, "the").await? == vec![at("s-two", 3), at("s-one", 3)],
        "newest first"
    );
    let hits = search(store, &ana, "the", SearchOrder::Newest, None, 1).await?;
    let last = hits.last().context("a first page")?;
    let next = SearchCursor::Before {
        at_us: last.at_us,
        conv_id: last.conv_id.clone(),
        seq: last.seq,
    };
    let page = search(store, &ana, "the", SearchOrder::Newest, Some(next), 5).await?;
    ensure!(
        page.iter()
            .map(|h| (h.conv_id.as_str(), h.seq))
            .collect::<Vec<_>>()
            == [("s-one", 3)],
        "the second page: {page:?}"
    );
    ensure!(
        hits[0].sender_user.as_str() == "ana" && hits[0].body == "the report of last week",
        "a hit carries its sender and body: {hits:?}"
    );
    // The engines' own syntax is only ever text to match: no query is an error.
    for q in [
        "\\",
        "''",
        "a'b",
        "(a|b)",
        "!x",
        "<->",
        "a:*",
        "x:* & y",
        "NEAR(a b)",
        "body:x",
        "x OR y",
        "-x",
        "* x",
        "^x",
        "é",
        "日本語",
        "🙂 link",
        "\"unclosed",
        "a\"b\"c",
        "x AND",
        "'link'",
        "link\\",
        "{x}",
        "[link]",
        "x:1",
        "link*",
    ] {
        // A query without a word is refused before the store (400 at the edge).
        let Ok(query) = SearchQuery::parse(q) else {
            continue;
        };
        for order in [SearchOrder::Newest, SearchOrder::Rank] {
            let req = SearchRequest {
                user: ana.clone(),
                query: query.clone(),
                order,
                cursor: None,
                limit: 5,
            };
            store
                .search(&req)
                .await
                .with_context(|| format!("query {q:?} {order:?}"))?;
        }
    }
    ensure!(
        found(store, &bob, "[link]").await? == vec![at("s-one", 3)],
        "punctuation around"
    );
    let ranked = search(store, &ana, "the", SearchOrder::Rank, None, 5).await?;
    ensure!(ranked.len() == 2, "rank order finds the same: {ranked:?}");
    let rest = search(
        store,
        &ana,
        "the",
        SearchOrder::Rank,
        Some(SearchCursor::Offset(1)),
        5,
    )
    .await?;
    ensure!(
        rest.len() == 1 && rest[0] != ranked[0],
        "a rank page skips: {rest:?}"
    );
    Ok(())
}

/// A hit is a message the searcher may read: nothing of a conversation they never joined, and
/// nothing from before they joined or after they left.
pub async fn visibility_follows_periods(store: &dyn Store) -> Result<()> {
    let ana = user(store, "ana").await?;
    let cy = user(store, "cy").await?;
    let dan = user(store, "dan").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("s-vis"), &[]))
        .await?
        .conv_id;
    let before = send(store, &conv, &ana, "m1", "alpha before").await?.seq;
    store.add_member(&conv, &ana, &cy).await?;
    let during = send(store, &conv, &ana, "m2", "alpha during").await?.seq;
    store.remove_member(&conv, &cy, &cy).await?;
    let after = send(store, &conv, &ana, "m3", "alpha after").await?.seq;
    ensure!(
        found(store, &ana, "alpha").await?
            == vec![at("s-vis", after), at("s-vis", during), at("s-vis", before)],
        "the member of the whole log finds all three"
    );
    ensure!(
        found(store, &cy, "alpha").await? == vec![at("s-vis", during)],
        "a member finds only what their period holds"
    );
    ensure!(
        found(store, &cy, "from:ana").await? == vec![at("s-vis", during)],
        "filters too"
    );
    ensure!(
        found(store, &dan, "alpha").await?.is_empty(),
        "a non-member finds nothing"
    );
    ensure!(
        found(store, &dan, "in:s-vis").await?.is_empty(),
        "in: a conversation of others"
    );
    Ok(())
}

/// A recall takes a message's words out, an edit replaces them, a purge deletes them.
pub async fn index_follows_recall_edit_purge(store: &dyn Store) -> Result<ConvId> {
    let ana = user(store, "ana").await?;
    let mut req = new_conv(&ana, ConvKind::Group, Some("s-idx"), &[]);
    req.retention_ms = Some(RETENTION_TEST_MS);
    let conv = store.create_conversation(&req).await?.conv_id;
    let zebra = send(store, &conv, &ana, "m1", "zebra crossing").await?.seq;
    let giraffe = send(store, &conv, &ana, "m2", "giraffe").await?.seq;
    ensure!(
        found(store, &ana, "zebra").await? == vec![at("s-idx", zebra)],
        "before recall"
    );
    store.recall(&conv, &ana, zebra, chrono::Utc::now()).await?;
    ensure!(
        found(store, &ana, "zebra").await?.is_empty(),
        "a recalled message is not found"
    );
    edit(store, &conv, &ana, "e1", giraffe, "elephant").await?;
    ensure!(
        found(store, &ana, "giraffe").await?.is_empty(),
        "an edit replaces the words"
    );
    let hits = search(store, &ana, "elephant", SearchOrder::Newest, None, 5).await?;
    ensure!(
        hits.len() == 1 && hits[0].seq == giraffe && hits[0].body == "elephant",
        "the edited message is found by its current body: {hits:?}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let late = send(store, &conv, &ana, "m3", "elephant again").await?.seq;
    let cut_at = event_at(store, &conv, &ana, late).await?.created_at
        + Duration::milliseconds(RETENTION_TEST_MS)
        - Duration::microseconds(1);
    store.purge_batch(cut_at, 100).await?;
    ensure!(
        found(store, &ana, "elephant").await? == vec![at("s-idx", late)],
        "a purged message is not found"
    );
    Ok(conv)
}

/// A conversation's language: English stems, the default does not; only an owner or admin
/// sets it, and a change splits the messages already sent again.
pub async fn language_per_conversation(store: &dyn Store) -> Result<()> {
    let ana = user(store, "ana").await?;
    let bob = user(store, "bob").await?;
    let dan = user(store, "dan").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("s-lang"), &[&bob]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m1", "she runs daily").await?; // 3
    ensure!(
        store.search_language(&conv, &bob).await? == SearchLanguage::Simple,
        "default"
    );
    ensure!(
        found(store, &bob, "running").await?.is_empty(),
        "simple does not stem"
    );
    let refused = store
        .set_search_language(&conv, &bob, SearchLanguage::English)
        .await;
    ensure!(
        matches!(refused, Err(StoreError::Rejected(Rejection::Forbidden(_)))),
        "a plain member may not: {refused:?}"
    );
    let refused = store.search_language(&conv, &dan).await;
    ensure!(
        matches!(refused, Err(StoreError::Rejected(Rejection::NotMember))),
        "a non-member sees nothing: {refused:?}"
    );
    store
        .set_search_language(&conv, &ana, SearchLanguage::English)
        .await?;
    ensure!(
        store.search_language(&conv, &bob).await? == SearchLanguage::English,
        "set"
    );
    ensure!(
        found(store, &bob, "running").await? == vec![at("s-lang", 3)],
        "re-split, stemmed"
    );
    // PostgreSQL's English drops stop words: a query of them alone matches nothing, quietly.
    ensure!(found(store, &bob, "the a").await?.is_empty(), "stop words");
    send(store, &conv, &ana, "m2", "two dogs").await?; // 4
    ensure!(
        found(store, &bob, "dog").await? == vec![at("s-lang", 4)],
        "new messages stemmed"
    );
    store
        .set_search_language(&conv, &ana, SearchLanguage::Simple)
        .await?;
    ensure!(found(store, &bob, "running").await?.is_empty(), "and back");
    ensure!(
        found(store, &bob, "runs").await? == vec![at("s-lang", 3)],
        "by the exact word"
    );
    Ok(())
}
