//! Chapter 13: attachments (docs/MEDIA.md). Uploads are content-addressed and typed from their
//! bytes; a message's media are served to those who may read the message, with the headers
//! that keep a browser from running them; a recall stops serving them, signed URLs included.

use parley_client::{Client, Media, NewConversation, SendOptions};
use reqwest::header::{self, HeaderMap};
use sha2::{Digest, Sha256};

use super::Observed;
use crate::context::Ctx;
use crate::error::{ensure, CheckError};

/// A valid 1×1 PNG with an alpha channel.
pub const PNG_1X1: [u8; 70] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x64, 0x60, 0xf8, 0x5f,
    0x0f, 0x00, 0x02, 0x87, 0x01, 0x80, 0xeb, 0x47, 0xba, 0x92, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// An SVG that would run script if a browser rendered it in the server's origin.
const SVG_WITH_SCRIPT: &str =
    "<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(document.cookie)</script></svg>";

fn api(e: &parley_client::ClientError) -> String {
    match (e.status(), e.code()) {
        (Some(s), Some(c)) => format!("{s} {c}"),
        _ => e.to_string(),
    }
}

/// A GET of `path` with `token` (or none), answering the status, the headers and the bytes.
async fn fetch(
    ctx: &Ctx,
    path: &str,
    token: Option<&str>,
    extra: &[(header::HeaderName, &str)],
) -> Result<(u16, HeaderMap, Vec<u8>), CheckError> {
    let http = reqwest::Client::new();
    let mut req = http.get(format!("{}{path}", ctx.target.base_url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (name, value) in extra {
        req = req.header(name.clone(), *value);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| CheckError::Failed(format!("GET {path}: {e}")))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .bytes()
        .await
        .map_err(|e| CheckError::Failed(format!("GET {path} body: {e}")))?;
    Ok((status, headers, body.to_vec()))
}

fn head(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// ana, ben and cai; ana's group with ben; cai joins later.
async fn group(ctx: &Ctx) -> Result<(String, Client, Client, Client), CheckError> {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let cai = ctx.user("cai").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    Ok((conv, ana, ben, cai))
}

async fn send_with(
    c: &Client,
    conv: &str,
    key: &str,
    body: &str,
    media: &[&Media],
) -> Result<i64, CheckError> {
    let options = SendOptions {
        attachments: Some(media.iter().map(|m| m.media_id.clone()).collect()),
        ..SendOptions::default()
    };
    Ok(c.send_with(conv, key, body, &options).await?.seq)
}

/// The same bytes are stored once and named by their SHA-256; one user uploading them again
/// gets the same media id, another user another id; the type is sniffed, never declared.
pub async fn upload_stored_once(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let first = ana
        .upload(PNG_1X1.to_vec(), Some("../../dot.png"), Some("text/plain"))
        .await?;
    let again = ana.upload(PNG_1X1.to_vec(), Some("dot.png"), None).await?;
    let bens = ben.upload(PNG_1X1.to_vec(), None, None).await?;
    let sha = hex::encode(Sha256::digest(PNG_1X1));
    ensure!(first.sha256 == sha, "sha256 {} for {sha}", first.sha256);
    ensure!(
        first.media_id == again.media_id && first.media_id != bens.media_id && bens.sha256 == sha,
        "ids ana {} / {}, ben {}",
        first.media_id,
        again.media_id,
        bens.media_id
    );
    ensure!(
        first.content_type == "image/png" && first.size == 70,
        "sniffed {} size {}",
        first.content_type,
        first.size
    );
    ensure!(
        first.filename.as_deref() == Some("dot.png")
            && (first.width, first.height) == (Some(1), Some(1)),
        "name {:?}, {:?}x{:?}",
        first.filename,
        first.width,
        first.height
    );
    let text = ana
        .upload(b"not a picture".to_vec(), None, Some("image/png"))
        .await;
    ensure!(
        matches!(&text, Err(e) if e.code() == Some("MEDIA_TYPE_MISMATCH")),
        "text declared image/png: {:?}",
        text.map(|m| m.content_type)
    );
    Ok(format!(
        "one sha256 {}…, ana's id twice, ben's another; sniffed image/png 1x1; path stripped from the name; a text declared image/png 415",
        &sha[..12]
    ))
}

/// A message's media are served to its readers with the headers of the contract; a member who
/// joined after it, a stranger and a wrong id get the same 404; a send naming another's upload
/// is 400 and writes nothing.
pub async fn media_served_to_readers(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, cai) = group(ctx).await?;
    let png = ana.upload(PNG_1X1.to_vec(), Some("dot.png"), None).await?;
    let svg = ana
        .upload(
            SVG_WITH_SCRIPT.as_bytes().to_vec(),
            Some("x.svg"),
            Some("image/svg+xml"),
        )
        .await?;
    let seq = send_with(&ana, &conv, "m-1", "", &[&png, &svg]).await?;
    let read = ben.events_after(&conv, 0, Some(100), None).await?;
    let msg = read
        .events
        .iter()
        .find(|e| e.seq == seq)
        .ok_or_else(|| CheckError::Failed(format!("ben has no {seq}")))?;
    ensure!(
        msg.attachments.len() == 2 && msg.attachments[0].media_id == png.media_id,
        "ben reads attachments {:?}",
        msg.attachments
    );
    let path = format!("/v1/media/{}", png.media_id);
    let (status, h, body) = fetch(ctx, &path, Some(ben.token()), &[]).await?;
    ensure!(
        status == 200 && body == PNG_1X1,
        "ben's download: {status}, {} bytes",
        body.len()
    );
    let etag = format!("\"{}\"", png.sha256);
    ensure!(
        head(&h, header::ETAG) == etag
            && head(&h, header::CACHE_CONTROL).starts_with("private")
            && head(&h, header::X_CONTENT_TYPE_OPTIONS) == "nosniff"
            && head(&h, header::CONTENT_TYPE) == "image/png"
            && head(&h, header::CONTENT_DISPOSITION).starts_with("inline"),
        "png headers {h:?}"
    );
    let (status, h, body) = fetch(
        ctx,
        &format!("/v1/media/{}", svg.media_id),
        Some(ben.token()),
        &[],
    )
    .await?;
    ensure!(
        status == 200
            && body == SVG_WITH_SCRIPT.as_bytes()
            && head(&h, header::CONTENT_DISPOSITION).starts_with("attachment")
            && head(&h, header::X_CONTENT_TYPE_OPTIONS) == "nosniff"
            && head(&h, header::CONTENT_SECURITY_POLICY).contains("sandbox"),
        "svg: {status} {h:?}"
    );
    let (status, h, body) = fetch(
        ctx,
        &path,
        Some(ben.token()),
        &[(header::RANGE, "bytes=1-3")],
    )
    .await?;
    ensure!(
        status == 206 && body == PNG_1X1[1..4] && head(&h, header::CONTENT_RANGE) == "bytes 1-3/70",
        "range: {status} {h:?}"
    );
    let (status, ..) = fetch(
        ctx,
        &path,
        Some(ben.token()),
        &[(header::RANGE, "bytes=70-")],
    )
    .await?;
    ensure!(status == 416, "range past the end: {status}");
    let (status, ..) = fetch(
        ctx,
        &path,
        Some(ben.token()),
        &[(header::IF_NONE_MATCH, &etag)],
    )
    .await?;
    ensure!(status == 304, "if-none-match: {status}");
    ana.add_member(&conv, &ctx.id("cai")).await?;
    let dan = ctx.user("dan").await?;
    let missing = format!("/v1/media/{}", "0".repeat(32));
    let (_, _, nothing) = fetch(ctx, &missing, Some(cai.token()), &[]).await?;
    for (who, c) in [("cai (joined later)", &cai), ("dan (stranger)", &dan)] {
        let (status, _, body) = fetch(ctx, &path, Some(c.token()), &[]).await?;
        ensure!(
            status == 404 && body == nothing,
            "{who}: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    let (status, ..) = fetch(ctx, &path, None, &[]).await?;
    ensure!(status == 401, "no token: {status}");
    let foreign = send_with(&ben, &conv, "b-1", "mine?", &[&png]).await;
    ensure!(
        matches!(&foreign, Err(CheckError::Client(e)) if e.code() == Some("BAD_REQUEST")),
        "ben sends ana's upload: {foreign:?}"
    );
    let head_seq = ben.get_conversation(&conv).await?.head;
    ensure!(
        head_seq == seq + 1,
        "head {head_seq} after the refused send (join of cai at {})",
        seq + 1
    );
    Ok(format!(
        "ben reads 2 attachments, downloads png inline with ETag, private cache, nosniff; svg as attachment with sandbox CSP; 206, 416, 304; cai (later) and dan 404 like a missing id; no token 401; ben sending ana's upload {}",
        "400, nothing written"
    ))
}

/// A recall takes the message's media from everyone, signed URLs included.
pub async fn recall_stops_serving(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, _cai) = group(ctx).await?;
    let png = ana.upload(PNG_1X1.to_vec(), Some("dot.png"), None).await?;
    let seq = send_with(&ana, &conv, "m-1", "look", &[&png]).await?;
    let signed = ben.media_url(&png.media_id).await?;
    let (before, ..) = fetch(ctx, &signed.url, None, &[]).await?;
    ensure!(before == 200, "signed url before the recall: {before}");
    ana.recall(&conv, seq).await?;
    let path = format!("/v1/media/{}", png.media_id);
    for (who, c) in [("ben", &ben), ("ana", &ana)] {
        let (status, ..) = fetch(ctx, &path, Some(c.token()), &[]).await?;
        ensure!(status == 404, "{who} after the recall: {status}");
    }
    let (after, ..) = fetch(ctx, &signed.url, None, &[]).await?;
    ensure!(after == 404, "signed url after the recall: {after}");
    let read = ben.events_after(&conv, 0, Some(100), None).await?;
    let recalled = read.events.iter().find(|e| e.seq == seq);
    ensure!(
        recalled.is_some_and(|e| e.recalled && e.attachments.is_empty()),
        "the recalled message reads {recalled:?}"
    );
    Ok("before: signed url 200; after the recall: ben, ana and the signed url 404; the message lists no attachments".into())
}

/// A signed URL needs no header, binds its user, variant and expiry; a changed one is 404.
pub async fn signed_urls(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, _cai) = group(ctx).await?;
    let png = ana.upload(PNG_1X1.to_vec(), Some("dot.png"), None).await?;
    ensure!(png.thumbnail, "no thumbnail for a png");
    send_with(&ana, &conv, "m-1", "", &[&png]).await?;
    let urls = ben.media_url(&png.media_id).await?;
    let (status, _, body) = fetch(ctx, &urls.url, None, &[]).await?;
    ensure!(status == 200 && body == PNG_1X1, "signed url: {status}");
    let thumb = urls
        .thumbnail_url
        .ok_or_else(|| CheckError::Failed("no thumbnail url".into()))?;
    let (status, h, body) = fetch(ctx, &thumb, None, &[]).await?;
    ensure!(
        status == 200 && !body.is_empty() && head(&h, header::CONTENT_TYPE).starts_with("image/"),
        "thumbnail: {status} {h:?}"
    );
    let other_user = urls.url.replace(
        &format!("u={}", ctx.id("ben")),
        &format!("u={}", ctx.id("ana")),
    );
    let other_variant = urls.url.replacen('?', "/thumbnail?", 1);
    let later = {
        let exp = urls
            .url
            .split("exp=")
            .nth(1)
            .and_then(|s| s.split('&').next())
            .unwrap_or("0");
        let later: i64 = exp.parse().unwrap_or(0) + 1;
        urls.url
            .replace(&format!("exp={exp}"), &format!("exp={later}"))
    };
    for (what, url) in [
        ("user", other_user),
        ("variant", other_variant),
        ("expiry", later),
    ] {
        let (status, ..) = fetch(ctx, &url, None, &[]).await?;
        ensure!(status == 404, "a signed url with another {what}: {status}");
    }
    let refused = ana.media_url(&"0".repeat(32)).await;
    ensure!(
        matches!(&refused, Err(e) if e.code() == Some("NOT_FOUND")),
        "a url for a missing id: {:?}",
        refused.as_ref().map_err(api)
    );
    Ok("signed url and thumbnail url fetched without a header; another user, variant or expiry 404; a url for a missing id 404".into())
}
