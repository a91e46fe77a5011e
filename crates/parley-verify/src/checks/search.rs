//! Message search (chapter 15, docs/SEARCH.md): `GET /v1/search` and the `search` frame find
//! only what the searcher may read. A hit is a message of a conversation the searcher is or was
//! a member of, inside one of their membership periods; a recalled or purged message is never
//! found, and an edited one only by its current body.
//!
//! Every check searches for words made of a nonce of its own (letters only, so every engine
//! keeps each one a single word), so no check sees another's messages, nor those of an earlier
//! run. A query's last word matches as a prefix: the nonce alone finds every word of the check.
//! Each check also finds what must be found, so it fails both ways: a search that found nothing
//! at all would not pass.

use std::time::Duration;

use parley_client::{Client, Method, NewConversation, SearchOptions};
use serde_json::{json, Value};

use super::Observed;
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

/// Letters of a check's nonce: 26^12 words, so runs never share one.
const NONCE_LEN: usize = 12;
/// Hits asked for per search: more than any check sends.
const HITS_MAX: u32 = 100;
/// Retention of the purge check's conversation: long enough that the message is found before
/// the server's purge takes it, short enough to wait for.
const PURGE_RETENTION_MS: i64 = 1_000;
/// Longest purge interval the purge check waits for; a longer one makes it NOT_RUN.
const PURGE_INTERVAL_MS_MAX: i64 = 5_000;
/// Polling interval while waiting for the purge.
const POLL_MS: u64 = 50;

/// A word of lower-case letters, new for each check.
fn nonce() -> String {
    let mut n = rand::random::<u64>();
    (0..NONCE_LEN)
        .map(|_| {
            let c = b'a' + (n % 26) as u8;
            n /= 26;
            char::from(c)
        })
        .collect()
}

/// `(conv_id, seq)` of each hit of `c`'s search for `q` (in `conv` when given), newest first.
async fn found(
    ctx: &Ctx,
    who: &str,
    c: &Client,
    q: &str,
    conv: Option<&str>,
) -> Result<Vec<(String, i64)>, CheckError> {
    let options = SearchOptions {
        conv_id: conv.map(str::to_owned),
        limit: Some(HITS_MAX),
        ..SearchOptions::new(q)
    };
    let page = c.search(&options).await?;
    let hits: Vec<(String, i64)> = page
        .hits
        .iter()
        .map(|h| (h.conv_id.clone(), h.seq))
        .collect();
    ctx.note(format!(
        "{who}: GET /v1/search?q={q}{} → seqs {:?}",
        conv.map(|c| format!("&conv_id={c}")).unwrap_or_default(),
        hits.iter().map(|h| h.1).collect::<Vec<_>>()
    ));
    Ok(hits)
}

/// The seqs of `conv` among `hits`, in their order; a hit of another conversation fails.
fn seqs_in(conv: &str, hits: &[(String, i64)]) -> Result<Vec<i64>, CheckError> {
    let others: Vec<&(String, i64)> = hits.iter().filter(|h| h.0 != conv).collect();
    ensure!(
        others.is_empty(),
        "hits of conversations this check did not write: {others:?}"
    );
    Ok(hits.iter().map(|h| h.1).collect())
}

/// ana and ben in a new group `name` of this check.
async fn pair(ctx: &Ctx, name: &str) -> Result<(String, Client, Client), CheckError> {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id(name);
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    Ok((conv, ana, ben))
}

/// A user who never was a member finds nothing of a conversation: not by its words, not by
/// `in:` (which answers exactly as for a conversation that does not exist), not by `from:`.
/// The member finds the same message every way.
pub async fn nonmember_finds_nothing(ctx: &Ctx) -> Observed {
    let n = nonce();
    let (conv, ana, ben) = pair(ctx, "c").await?;
    let cai = ctx.user("cai").await?;
    let secret = format!("{n}secret");
    let sent = ana
        .send(&conv, "m-1", &format!("the {secret} plan"))
        .await?;
    let from_ana = format!("from:{}", ctx.id("ana"));
    let want = vec![(conv.clone(), sent.seq)];
    for (q, scope) in [(n.as_str(), None), (&secret, Some(conv.as_str()))] {
        let hits = found(ctx, "ben", &ben, q, scope).await?;
        ensure!(hits == want, "the member ben searching {q}: {hits:?}");
    }
    let by_sender = found(ctx, "ben", &ben, &from_ana, None).await?;
    ensure!(
        by_sender == want,
        "the member ben by {from_ana}: {by_sender:?}"
    );

    for (q, scope) in [
        (n.as_str(), None),
        (secret.as_str(), None),
        (secret.as_str(), Some(conv.as_str())),
        (from_ana.as_str(), None),
    ] {
        let hits = found(ctx, "cai", &cai, q, scope).await?;
        ensure!(
            hits.is_empty(),
            "the non-member cai searching {q} found {hits:?}"
        );
    }
    let missing = ctx.id("missing");
    let path = |c: &str| format!("/v1/search?q={secret}&conv_id={c}");
    let others = cai.raw(Method::GET, &path(&conv)).send().await?;
    let absent = cai.raw(Method::GET, &path(&missing)).send().await?;
    ctx.note(format!(
        "cai: in: ana's {others:?}; in: a missing one {absent:?}"
    ));
    ensure!(
        others == absent,
        "in: a conversation of others answers {others:?}, in: a missing one {absent:?}"
    );
    Ok(format!(
        "ben finds seq {} by word, in: and from:; cai finds nothing, and in: ana's conversation \
         answers {} {} like a missing one",
        sent.seq, others.0, others.1
    ))
}

/// A member finds only what their periods hold: ben, added after the first message, leaving,
/// and added again, finds the messages of his two periods and neither the one sent before he
/// joined nor the one sent while he was away; ana, a member throughout, finds all four.
pub async fn outside_periods_not_found(ctx: &Ctx) -> Observed {
    let n = nonce();
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let ben_id = ctx.id("ben");
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?; // ana joins at 1
    let before = ana.send(&conv, "m-1", &format!("{n}before")).await?.seq;
    ana.add_member(&conv, &ben_id).await?;
    let during = ana.send(&conv, "m-2", &format!("{n}during")).await?.seq;
    ben.remove_member(&conv, &ben_id).await?; // ben leaves
    let after = ana.send(&conv, "m-3", &format!("{n}after")).await?.seq;
    ana.add_member(&conv, &ben_id).await?;
    let again = ana.send(&conv, "m-4", &format!("{n}again")).await?.seq;
    ctx.note(format!(
        "before {before}, ben joined, during {during}, ben left, after {after}, ben rejoined, again {again}"
    ));

    let all = seqs_in(&conv, &found(ctx, "ana", &ana, &n, None).await?)?;
    ensure!(
        all == vec![again, after, during, before],
        "ana, a member throughout, finds {all:?}, not all four messages"
    );
    let got = seqs_in(&conv, &found(ctx, "ben", &ben, &n, None).await?)?;
    let mut outside = Vec::new();
    if got.contains(&before) {
        outside.push(format!("seq {before} sent before he joined"));
    }
    if got.contains(&after) {
        outside.push(format!("seq {after} sent after he left"));
    }
    ensure!(
        outside.is_empty(),
        "outside his periods ben found {}: hits {got:?}",
        outside.join(" and ")
    );
    ensure!(
        got == vec![again, during],
        "inside his periods ben finds {got:?}, expected [{again}, {during}]"
    );
    for (word, want) in [
        ("before", vec![]),
        ("during", vec![during]),
        ("after", vec![]),
        ("again", vec![again]),
    ] {
        let q = format!("{n}{word}");
        let hits = seqs_in(&conv, &found(ctx, "ben", &ben, &q, Some(&conv)).await?)?;
        ensure!(
            hits == want,
            "ben searching {word} in the conversation finds {hits:?}, expected {want:?}"
        );
    }
    Ok(format!(
        "ana finds {all:?}; ben finds {got:?}: not {before} (before he joined) nor {after} \
         (after he left)"
    ))
}

/// A recalled message is found until its recall and never after, by the sender or anyone.
pub async fn recalled_not_found(ctx: &Ctx) -> Observed {
    let n = nonce();
    let (conv, ana, ben) = pair(ctx, "c").await?;
    let gone = ana.send(&conv, "m-1", &format!("{n}recalled")).await?.seq;
    let kept = ana.send(&conv, "m-2", &format!("{n}kept")).await?.seq;
    let first = seqs_in(&conv, &found(ctx, "ben", &ben, &n, None).await?)?;
    ensure!(
        first == vec![kept, gone],
        "before the recall ben finds {first:?}, expected [{kept}, {gone}]"
    );
    let ack = ana.recall(&conv, gone).await?;
    ctx.note(format!("ana recalls {gone} → {ack:?}"));
    for (who, c) in [("ben", &ben), ("ana", &ana)] {
        let hits = seqs_in(&conv, &found(ctx, who, c, &n, None).await?)?;
        ensure!(
            hits == vec![kept],
            "after the recall {who} finds {hits:?}, expected [{kept}]"
        );
        let by_word = found(ctx, who, c, &format!("{n}recalled"), None).await?;
        ensure!(
            by_word.is_empty(),
            "after the recall {who} finds the recalled word: {by_word:?}"
        );
    }
    Ok(format!(
        "seq {gone} found before its recall, by no one after; seq {kept} still found"
    ))
}

/// The server's purge interval, or NOT_RUN when it is too long to wait for.
fn purge_interval_ms(ctx: &Ctx) -> Result<i64, CheckError> {
    match ctx.target.limit("purge_interval_ms") {
        Some(ms) if ms <= PURGE_INTERVAL_MS_MAX => Ok(ms),
        other => Err(CheckError::NotRun(format!(
            "the server purges every {other:?} ms; verify waits for at most \
             {PURGE_INTERVAL_MS_MAX} ms (start it with --purge-interval-ms {PURGE_INTERVAL_MS_MAX} or less)"
        ))),
    }
}

/// A message past its conversation's retention is found until the server's purge takes it,
/// and never after; a message sent after the purge is found.
pub async fn purged_not_found(ctx: &Ctx) -> Observed {
    let interval = purge_interval_ms(ctx)?;
    let n = nonce();
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("ret");
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben")])
            .with_conv_id(&conv)
            .with_retention_ms(PURGE_RETENTION_MS),
    )
    .await?;
    let fleeting = ana.send(&conv, "m-1", &format!("{n}purged")).await?.seq;
    let first = seqs_in(&conv, &found(ctx, "ben", &ben, &n, None).await?)?;
    ensure!(
        first == vec![fleeting],
        "before the purge ben finds {first:?}, expected [{fleeting}]"
    );
    let bound = Duration::from_millis((PURGE_RETENTION_MS + 3 * interval) as u64) + FRAME_WAIT;
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let view = ana.get_conversation(&conv).await?;
        if view.min_seq > fleeting {
            ctx.note(format!("{conv}: min_seq {}", view.min_seq));
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "not purged within {bound:?}: min_seq still {}",
            view.min_seq
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    for (who, c) in [("ben", &ben), ("ana", &ana)] {
        let hits = found(ctx, who, c, &n, None).await?;
        ensure!(
            hits.is_empty(),
            "after the purge {who} still finds {hits:?}"
        );
    }
    let fresh = ana.send(&conv, "m-2", &format!("{n}fresh")).await?.seq;
    let later = seqs_in(&conv, &found(ctx, "ben", &ben, &n, None).await?)?;
    ensure!(
        later == vec![fresh],
        "after the purge ben finds {later:?}, expected only the new message [{fresh}]"
    );
    Ok(format!(
        "seq {fleeting} found before the purge, by no one after; seq {fresh}, sent after it, found"
    ))
}

/// An edited message is found by its current body only: after two edits neither the original
/// words nor the first edit's find it, the last edit's do, at the message's own seq, with a
/// snippet of the current body; the edits are no hits of their own.
pub async fn edit_matches_current_body(ctx: &Ctx) -> Observed {
    let n = nonce();
    let (conv, ana, ben) = pair(ctx, "c").await?;
    let (old, mid, new) = (format!("{n}old"), format!("{n}mid"), format!("{n}new"));
    let seq = ana
        .send(&conv, "m-1", &format!("the {old} text"))
        .await?
        .seq;
    let first = seqs_in(&conv, &found(ctx, "ben", &ben, &old, None).await?)?;
    ensure!(
        first == vec![seq],
        "before the edits ben finds {first:?} by the original words"
    );
    let e1 = ana
        .edit(&conv, seq, "e-1", &format!("the {mid} text"))
        .await?;
    let e2 = ana
        .edit(&conv, seq, "e-2", &format!("the {new} text"))
        .await?;
    ctx.note(format!("ana edits {seq}: {e1:?}, then {e2:?}"));
    for (word, label) in [(&old, "original"), (&mid, "first edit's")] {
        let hits = found(ctx, "ben", &ben, word, None).await?;
        ensure!(
            hits.is_empty(),
            "after the edits ben finds {hits:?} by the {label} words"
        );
    }
    let page = ben
        .search(&SearchOptions {
            limit: Some(HITS_MAX),
            ..SearchOptions::new(&n)
        })
        .await?;
    ctx.note(format!("ben: GET /v1/search?q={n} → {page:?}"));
    let hits: Vec<(String, i64)> = page
        .hits
        .iter()
        .map(|h| (h.conv_id.clone(), h.seq))
        .collect();
    ensure!(
        seqs_in(&conv, &hits)? == vec![seq],
        "by the nonce ben finds {hits:?}, expected the message {seq} only"
    );
    let hit = &page.hits[0];
    let body = format!("the {new} text");
    ensure!(
        hit.snippet == body && !hit.highlights.is_empty(),
        "the hit's snippet {:?} with highlights {:?}, expected {body:?} marked",
        hit.snippet,
        hit.highlights
    );
    let by_new = seqs_in(&conv, &found(ctx, "ben", &ben, &new, None).await?)?;
    ensure!(
        by_new == vec![seq],
        "by the current words ben finds {by_new:?}"
    );
    Ok(format!(
        "seq {seq} found by its original words, after two edits only by the last ({:?}), \
         snippet {:?}",
        new, hit.snippet
    ))
}

/// A query string value: every byte but the unreserved ones percent-encoded.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /v1/search` as raw JSON, and the `search` frame's answer with the same fields: the
/// status and body of the first, the frame of the second.
async fn both_ways(
    ctx: &Ctx,
    c: &Client,
    ws: &mut Ws,
    req_id: &str,
    fields: &[(&str, &str)],
) -> Result<((u16, Value), Value), CheckError> {
    let query: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect();
    let path = format!("/v1/search?{}", query.join("&"));
    let http = c.raw(Method::GET, &path).send().await?;
    let mut frame = json!({"type": "search", "req_id": req_id});
    for (k, v) in fields {
        frame[*k] = if *k == "limit" {
            json!(v.parse::<u32>().unwrap_or(0))
        } else {
            json!(v)
        };
    }
    ws.send(frame.clone()).await?;
    let answer = loop {
        let Some(f) = ws.next_json(FRAME_WAIT).await? else {
            return Err(CheckError::Failed(format!(
                "no answer to {frame} within {FRAME_WAIT:?}"
            )));
        };
        if f["req_id"] == req_id {
            break f;
        }
    };
    ctx.note(format!("GET {path} → {} {}", http.0, http.1));
    ctx.note(format!("ws {frame} → {answer}"));
    Ok((http, answer))
}

/// The `search` frame answers what `GET /v1/search` answers: the same hits (snippets,
/// highlights, cursors) page by page, newest first and by rank, and the same refusal.
pub async fn search_over_websocket(ctx: &Ctx) -> Observed {
    let n = nonce();
    let (conv, ana, ben) = pair(ctx, "c").await?;
    let mut sent = Vec::new();
    for (i, word) in ["one", "two", "three"].iter().enumerate() {
        let body = format!("message {n}{word} for the search");
        sent.push(ana.send(&conv, &format!("m-{i}"), &body).await?.seq);
    }
    let mut ws = Ws::connect(&ctx.target.base_url, ben.token()).await?;
    let mut pages = 0;
    let mut seen = Vec::new();
    for order in ["newest", "rank"] {
        let mut cursor: Option<String> = None;
        let mut order_seen = Vec::new();
        loop {
            let mut fields = vec![("q", n.as_str()), ("limit", "2"), ("order", order)];
            if let Some(c) = &cursor {
                fields.push(("cursor", c.as_str()));
            }
            let req_id = format!("{order}-{pages}");
            let ((status, http), frame) = both_ways(ctx, &ben, &mut ws, &req_id, &fields).await?;
            pages += 1;
            ensure!(status == 200, "GET /v1/search answered {status} {http}");
            ensure!(frame["type"] == "ack", "the search frame answered {frame}");
            ensure!(
                frame["hits"] == http["hits"] && frame["next_cursor"] == http["next_cursor"],
                "{order} page {pages}: the frame answered {frame}, HTTP {http}"
            );
            let hits = http["hits"].as_array().cloned().unwrap_or_default();
            ensure!(!hits.is_empty(), "{order}: an empty page {http}");
            for h in &hits {
                ensure!(
                    h["conv_id"] == conv.as_str(),
                    "{order}: a hit of another conversation {h}"
                );
                order_seen.push(h["seq"].as_i64().unwrap_or(0));
            }
            match http["next_cursor"].as_str() {
                Some(c) if order_seen.len() < 10 => cursor = Some(c.to_owned()),
                _ => break,
            }
        }
        let mut sorted = order_seen.clone();
        sorted.sort_unstable();
        ensure!(
            sorted == sent,
            "{order}: the pages held seqs {order_seen:?}, expected each of {sent:?} once"
        );
        if order == "newest" {
            let mut newest = sent.clone();
            newest.reverse();
            ensure!(order_seen == newest, "newest first: {order_seen:?}");
        }
        seen.push(format!("{order} {order_seen:?}"));
    }
    let ((status, http), frame) = both_ways(ctx, &ben, &mut ws, "bad", &[("q", "")]).await?;
    let http_code = http["error"]["code"].as_str().unwrap_or("");
    ensure!(
        status == 400 && frame["type"] == "error" && frame["code"] == http_code,
        "an empty query: HTTP {status} {http}, the frame {frame}"
    );
    Ok(format!(
        "{pages} pages of 2 alike over HTTP and WebSocket ({}); an empty query {status} {http_code} both ways",
        seen.join("; ")
    ))
}
