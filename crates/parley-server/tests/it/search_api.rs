//! Message search through the server (docs/SEARCH.md): `GET /v1/search` and the `search`
//! frame answer the same hits, with snippets, highlights and cursors; edits, recalls and
//! membership shape what is found; bad queries are 400 and write nothing; a conversation's
//! language; the admin view of the index.

use anyhow::{ensure, Context, Result};
use parley_client::{Client, Method, NewConversation, Realtime, RealtimeOptions, SearchOptions};
use parley_testkit::{test_on_both_stores, StoreKind, TestServer};

/// ana and ben on a fresh server, in the group `c`.
async fn pair(server: &TestServer) -> Result<(Client, Client)> {
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    ana.create_conversation(&NewConversation::group(["ben"]).with_conv_id("c"))
        .await?;
    Ok((ana, ben))
}

fn seqs(results: &parley_client::SearchResults) -> Vec<i64> {
    results.hits.iter().map(|h| h.seq).collect()
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    hits_snippets_pages_and_the_frame
);
/// Hits newest first with their sender, a plain-text snippet and the matched words marked;
/// pages by cursor; the WebSocket frame answers the same; an edit is found by its new body.
async fn hits_snippets_pages_and_the_frame(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, Default::default()).await;
    let (ana, ben) = pair(&server).await?;
    let mut sent = Vec::new();
    for i in 0..5 {
        let body = format!("<b>link</b> number {i} to https://example.com/{i}");
        sent.push(ana.send("c", &format!("k{i}"), &body).await?.seq);
    }
    ben.send("c", "kb", "no match here").await?;
    let first = ben
        .search(&SearchOptions {
            limit: Some(2),
            ..SearchOptions::new("link")
        })
        .await?;
    ensure!(
        seqs(&first) == vec![sent[4], sent[3]],
        "newest first: {first:?}"
    );
    let hit = &first.hits[0];
    ensure!(
        hit.conv_id == "c" && hit.sender == "ana" && hit.snippet.starts_with("<b>link</b>"),
        "a hit: {hit:?}"
    );
    let marked: String = hit
        .snippet
        .chars()
        .skip(hit.highlights[0].start as usize)
        .take((hit.highlights[0].end - hit.highlights[0].start) as usize)
        .collect();
    ensure!(marked == "link", "the mark covers the word: {marked:?}");
    let next = first.next_cursor.clone().context("a second page")?;
    ensure!(
        hit.cursor != next && first.hits[1].cursor == next,
        "cursors: {first:?}"
    );
    let second = ben
        .search(&SearchOptions {
            limit: Some(2),
            ..SearchOptions::new("link").after(next)
        })
        .await?;
    ensure!(
        seqs(&second) == vec![sent[2], sent[1]],
        "the second page: {second:?}"
    );
    let last = ben
        .search(&SearchOptions {
            limit: Some(2),
            ..SearchOptions::new("link").after(second.next_cursor.clone().context("third")?)
        })
        .await?;
    ensure!(
        seqs(&last) == vec![sent[0]] && last.next_cursor.is_none(),
        "the last page: {last:?}"
    );
    // The frame answers exactly what HTTP answers.
    let rt = Realtime::connect(&ben, RealtimeOptions::default()).await?;
    let by_frame = rt
        .handle()
        .search(&SearchOptions {
            limit: Some(2),
            ..SearchOptions::new("link")
        })
        .await?;
    ensure!(by_frame == first, "frame {by_frame:?} vs http {first:?}");
    // Filters as parameters and in the query; rank order.
    let from_ben = ben.search(&SearchOptions::new("from:ben")).await?;
    ensure!(seqs(&from_ben).len() == 1, "from: {from_ben:?}");
    let in_c = ben
        .search(&SearchOptions {
            conv_id: Some("c".into()),
            from: Some("ana".into()),
            ..SearchOptions::new("number")
        })
        .await?;
    ensure!(in_c.hits.len() == 5, "conv_id and from: {in_c:?}");
    let ranked = ben
        .search(&SearchOptions {
            by_rank: true,
            ..SearchOptions::new("\"number 3\"")
        })
        .await?;
    ensure!(
        seqs(&ranked) == vec![sent[3]],
        "a phrase by rank: {ranked:?}"
    );
    // An edit: the old words are gone, the new ones found.
    ana.edit("c", sent[0], "e0", "renamed entirely").await?;
    let old = ben.search(&SearchOptions::new("\"number 0\"")).await?;
    ensure!(old.hits.is_empty(), "the old body still matches: {old:?}");
    let new = ben.search(&SearchOptions::new("renamed")).await?;
    ensure!(
        seqs(&new) == vec![sent[0]] && new.hits[0].snippet == "renamed entirely",
        "the new body: {new:?}"
    );
    // A recall takes the message out.
    ana.recall("c", sent[4]).await?;
    let after = ben.search(&SearchOptions::new("link")).await?;
    ensure!(
        !seqs(&after).contains(&sent[4]),
        "a recalled message: {after:?}"
    );
    rt.close().await;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    membership_bounds_and_bad_queries
);
/// A non-member finds nothing, a late joiner nothing from before; bad queries are 400.
async fn membership_bounds_and_bad_queries(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, Default::default()).await;
    let (ana, ben) = pair(&server).await?;
    let cy = server.user_with_device("cy").await;
    let early = ana.send("c", "k1", "secret early plan").await?.seq;
    ensure!(
        cy.search(&SearchOptions::new("plan"))
            .await?
            .hits
            .is_empty(),
        "a non-member found something"
    );
    ana.add_member("c", "cy").await?;
    let late = ana.send("c", "k2", "public late plan").await?.seq;
    let seen = cy.search(&SearchOptions::new("plan")).await?;
    ensure!(seqs(&seen) == vec![late], "a late joiner: {seen:?}");
    ensure!(seqs(&ben.search(&SearchOptions::new("plan")).await?) == vec![late, early]);
    for query in [
        "/v1/search",
        "/v1/search?q=",
        "/v1/search?q=%20%21%21",
        "/v1/search?q=x&order=oldest",
        "/v1/search?q=x&cursor=r.1",
        "/v1/search?q=x&limit=0",
        "/v1/search?q=x&q=y",
        "/v1/search?q=x&color=red",
        "/v1/search?q=in%3Aa%20x&conv_id=b",
    ] {
        let (status, body) = ben.raw(Method::GET, query).send().await?;
        ensure!(
            status == 400 && body["error"]["code"] == "BAD_REQUEST",
            "{query}: {status} {body}"
        );
    }
    let (status, _) = server
        .admin()
        .raw(Method::GET, "/v1/search?q=x")
        .send()
        .await?;
    ensure!(
        status == 401 || status == 403,
        "the admin token searches: {status}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    language_and_admin_view
);
/// The language endpoints: the default, who may set it, the stemming it brings; the admin
/// view reports indexing in the transaction with no lag.
async fn language_and_admin_view(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, Default::default()).await;
    let (ana, ben) = pair(&server).await?;
    let cy = server.user_with_device("cy").await;
    let seq = ana.send("c", "k1", "she runs daily").await?.seq;
    ensure!(ben.search_language("c").await? == "simple");
    let refused = ben.set_search_language("c", "english").await;
    ensure!(
        refused.as_ref().err().and_then(|e| e.code()) == Some("FORBIDDEN"),
        "a member sets the language: {refused:?}"
    );
    let refused = cy.search_language("c").await;
    ensure!(
        refused.as_ref().err().and_then(|e| e.code()) == Some("NOT_MEMBER"),
        "a non-member reads the language: {refused:?}"
    );
    let refused = ana.set_search_language("c", "klingon").await;
    ensure!(
        refused.as_ref().err().and_then(|e| e.code()) == Some("BAD_REQUEST"),
        "an unknown language: {refused:?}"
    );
    ensure!(ben
        .search(&SearchOptions::new("running"))
        .await?
        .hits
        .is_empty());
    ensure!(ana.set_search_language("c", "english").await? == "english");
    let stemmed = ben.search(&SearchOptions::new("running")).await?;
    ensure!(seqs(&stemmed) == vec![seq], "stemmed: {stemmed:?}");
    let (status, info) = server
        .admin()
        .raw(Method::GET, "/v1/admin/server")
        .send()
        .await?;
    ensure!(
        status == 200
            && info["search"]["indexing"] == "in_transaction"
            && info["search"]["lag_events"] == 0
            && info["search"]["page_len_max"] == 100,
        "admin view: {info}"
    );
    Ok(())
}
