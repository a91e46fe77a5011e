//! Attachments under hostile input (docs/MEDIA.md): bodies over the limit, cut short, stalled;
//! file names that try to be paths; decompression bombs; polyglots; and the sweep of uploads
//! no message names. Each refusal keeps nothing: no part file, no blob.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use parley_server::config::MediaLimits;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use tokio::io::AsyncWriteExt;

use crate::raw_tcp::{connect, read_answer, server_addr};

/// The upload limit of these servers: small, so a test goes past it with a few kilobytes.
const BYTES_MAX: u64 = 4096;
/// The idle limit of these servers' upload bodies.
const CHUNK_IDLE_MS: u64 = 300;
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The grace of the sweep tests' servers: short, so the sweep is seen within a test, and longer
/// than the moments between an upload and the send naming it, which a grace of 0 would race.
const SWEEP_GRACE_MS: u64 = 1_000;

/// These servers' configuration; `grace_ms` is the grace of unsent uploads (the sweep runs
/// every 50 ms).
fn config(grace_ms: u64) -> ServerConfig {
    ServerConfig {
        purge_interval_ms: 50,
        media: MediaLimits {
            bytes_max: BYTES_MAX,
            chunk_idle_ms: CHUNK_IDLE_MS,
            grace_ms,
            ..MediaLimits::default()
        },
        ..ServerConfig::default()
    }
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// An upload's request head with `Content-Length: len`.
fn upload_head(token: &str, len: usize, query: &str) -> Vec<u8> {
    format!(
        "POST /v1/media{query} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    )
    .into_bytes()
}

/// Waits until nothing but `keep` blobs is left in the media directory (the part file of a
/// refused upload goes when its request ends).
async fn settles_to(dir: &Path, keep: usize) -> Result<()> {
    let deadline = Instant::now() + ANSWER_WAIT;
    loop {
        let files = files_under(dir);
        if files.len() == keep {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "files left: {files:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    refused_uploads_keep_nothing
);
/// Over the limit by `Content-Length` (413 before the body), over it while streaming without
/// a length (413), cut short (400 UPLOAD_INCOMPLETE), stalled (408 REQUEST_TIMEOUT), a declared
/// image that is text (415), a PNG whose header claims 100000×100000 (422): each answered with
/// its code and nothing kept.
async fn refused_uploads_keep_nothing(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, config(SWEEP_GRACE_MS)).await;
    let ana = server.user_with_device("u-ana").await;
    let addr = server_addr(server.base_url())?;
    let token = ana.token().to_owned();

    let mut s = connect(addr).await?;
    s.write_all(&upload_head(&token, BYTES_MAX as usize + 1, ""))
        .await?;
    let over = read_answer(&mut s, ANSWER_WAIT).await?;
    ensure!(
        over.status == 413 && over.json()?["error"]["code"] == "MEDIA_TOO_LARGE",
        "by Content-Length: {} {:?}",
        over.status,
        over.json()
    );

    let long = vec![7u8; BYTES_MAX as usize * 2];
    let chunked = reqwest::Client::new()
        .post(format!("{}/v1/media", server.base_url()))
        .bearer_auth(&token)
        .body(reqwest::Body::wrap_stream(futures::stream::iter(
            long.chunks(1024)
                .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
                .collect::<Vec<_>>(),
        )))
        .send()
        .await;
    if let Ok(resp) = chunked {
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        ensure!(
            status == 413 && body["error"]["code"] == "MEDIA_TOO_LARGE",
            "streamed past the limit: {status} {body}"
        );
    }

    let mut s = connect(addr).await?;
    s.write_all(&upload_head(&token, 1000, "")).await?;
    s.write_all(&[1u8; 10]).await?;
    s.shutdown().await?;
    let cut = read_answer(&mut s, ANSWER_WAIT).await;
    if let Ok(cut) = cut {
        ensure!(
            cut.status == 400 && cut.json()?["error"]["code"] == "UPLOAD_INCOMPLETE",
            "cut short: {} {:?}",
            cut.status,
            cut.json()
        );
    }

    let mut s = connect(addr).await?;
    s.write_all(&upload_head(&token, 1000, "")).await?;
    s.write_all(&[2u8; 10]).await?;
    let started = Instant::now();
    let stalled = read_answer(&mut s, ANSWER_WAIT).await?;
    ensure!(
        stalled.status == 408 && stalled.json()?["error"]["code"] == "REQUEST_TIMEOUT",
        "stalled: {} {:?}",
        stalled.status,
        stalled.json()
    );
    ensure!(
        started.elapsed() >= Duration::from_millis(CHUNK_IDLE_MS),
        "answered the stall after {:?}",
        started.elapsed()
    );

    let text = ana
        .upload(b"plain words".to_vec(), None, Some("image/png"))
        .await;
    ensure!(
        matches!(&text, Err(e) if e.code() == Some("MEDIA_TYPE_MISMATCH")),
        "text declared an image: {:?}",
        text.map(|m| m.content_type)
    );
    let bomb = ana
        .upload(png_claiming(100_000, 100_000), Some("bomb.png"), None)
        .await;
    ensure!(
        matches!(&bomb, Err(e) if e.code() == Some("IMAGE_TOO_LARGE") && e.status() == Some(422)),
        "bomb: {:?}",
        bomb.map(|m| m.content_type)
    );
    settles_to(server.media_dir(), 0).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    names_and_polyglots_stay_harmless
);
/// A file name that is a path is cut to its last part and the bytes land under the media
/// directory only; the classic GIF/script polyglot (its width bytes open a comment) is refused
/// by its dimensions; a PNG with script after its end is served as a PNG under `nosniff` and a
/// sandbox; HTML named `.png` is served as an attachment, never as HTML.
async fn names_and_polyglots_stay_harmless(store: StoreKind) -> Result<()> {
    // No sweep while the test reads its unsent uploads back.
    let server = TestServer::start_on(store, config(MediaLimits::default().grace_ms)).await;
    let ana = server.user_with_device("u-ana").await;
    let traversal = ana
        .upload(
            b"secret".to_vec(),
            Some("../../../../tmp/parley-escape"),
            None,
        )
        .await?;
    ensure!(
        traversal.filename.as_deref() == Some("parley-escape"),
        "name kept as {:?}",
        traversal.filename
    );
    ensure!(
        !Path::new("/tmp/parley-escape").exists(),
        "a file was written outside the media directory"
    );
    let polyglot = b"GIF89a/*\x00\x00\x00\x00*/=1;alert(document.domain)//".to_vec();
    let refused = ana.upload(polyglot, Some("x.gif"), None).await;
    ensure!(
        matches!(&refused, Err(e) if e.code() == Some("IMAGE_TOO_LARGE")),
        "gif polyglot: {:?}",
        refused.map(|m| m.content_type)
    );
    let mut png_then_script = parley_verify::PNG_1X1.to_vec();
    png_then_script.extend_from_slice(b"<script>alert(document.domain)</script>");
    let gif = ana.upload(png_then_script, Some("x.png"), None).await?;
    let html = ana
        .upload(
            b"<html><script>alert(1)</script></html>".to_vec(),
            Some("x.png"),
            Some("text/html"),
        )
        .await?;
    for (media, inline_ok) in [(&gif, true), (&html, false)] {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/media/{}", server.base_url(), media.media_id))
            .bearer_auth(ana.token())
            .send()
            .await?;
        let h = resp.headers().clone();
        let get = |n: &str| {
            h.get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        ensure!(
            resp.status() == 200
                && get("x-content-type-options") == "nosniff"
                && get("content-security-policy").contains("sandbox"),
            "{}: {h:?}",
            media.content_type
        );
        let disposition = get("content-disposition");
        ensure!(
            disposition.starts_with(if inline_ok { "inline" } else { "attachment" }),
            "{} served {disposition}",
            media.content_type
        );
        ensure!(
            !get("content-type").contains("html"),
            "served as {}",
            get("content-type")
        );
    }
    ensure!(
        gif.content_type == "image/png",
        "polyglot sniffed {}",
        gif.content_type
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    unsent_uploads_are_swept
);
/// After a short grace, an upload no message names is deleted by the server's own sweep, bytes
/// included; a sent one stays.
async fn unsent_uploads_are_swept(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, config(SWEEP_GRACE_MS)).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(
        &parley_client::NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"),
    )
    .await?;
    let kept = ana
        .upload(b"kept bytes".to_vec(), Some("k.txt"), None)
        .await?;
    ana.send_with(
        "c-1",
        "m-1",
        "",
        &parley_client::SendOptions {
            attachments: Some(vec![kept.media_id.clone()]),
            ..Default::default()
        },
    )
    .await
    .context("send with the attachment")?;
    let gone = ana
        .upload(b"swept bytes".to_vec(), Some("s.txt"), None)
        .await?;
    let deadline = Instant::now() + ANSWER_WAIT;
    loop {
        let answer = ana.download(&gone.media_id).await;
        if matches!(&answer, Err(e) if e.status() == Some(404)) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the unsent upload was never swept"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settles_to(server.media_dir(), 1).await?;
    let bytes = ana.download(&kept.media_id).await?;
    ensure!(&bytes[..] == b"kept bytes", "the sent upload changed");
    Ok(())
}

/// A PNG whose IHDR claims `width`×`height` (each chunk with its CRC), with one tiny IDAT (a
/// stored zlib block) and its IEND: a bomb's shape, a few dozen bytes.
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    let idat = [
        0x78, 0x01, 0x01, 0x01, 0x00, 0xfe, 0xff, 0x00, 0x00, 0x01, 0x00, 0x01,
    ];
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(&b"IHDR"[..], &ihdr[..]), (b"IDAT", &idat), (b"IEND", &[])] {
        png.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut chunk = kind.to_vec();
        chunk.extend_from_slice(data);
        png.extend_from_slice(&chunk);
        png.extend_from_slice(&crc32(&chunk).to_be_bytes());
    }
    png
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    the_object_store_backend_serves_the_same
);
/// With the object-store backend (its local filesystem, as `--media-url file://…`), an upload
/// is served whole and by range, its thumbnail made and stored, and an unsent one swept.
async fn the_object_store_backend_serves_the_same(store: StoreKind) -> Result<()> {
    let server = TestServer::start_with_object_media(store, config(SWEEP_GRACE_MS)).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(
        &parley_client::NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"),
    )
    .await?;
    let png = ana
        .upload(parley_verify::PNG_1X1.to_vec(), Some("dot.png"), None)
        .await?;
    ensure!(png.thumbnail, "no thumbnail: {png:?}");
    ana.send_with(
        "c-1",
        "m-1",
        "",
        &parley_client::SendOptions {
            attachments: Some(vec![png.media_id.clone()]),
            ..Default::default()
        },
    )
    .await?;
    ensure!(
        ana.download(&png.media_id).await?[..] == parley_verify::PNG_1X1[..],
        "bytes differ"
    );
    ensure!(
        !ana.thumbnail(&png.media_id).await?.is_empty(),
        "empty thumbnail"
    );
    let part = reqwest::Client::new()
        .get(format!("{}/v1/media/{}", server.base_url(), png.media_id))
        .bearer_auth(ana.token())
        .header("range", "bytes=0-7")
        .send()
        .await?;
    ensure!(part.status() == 206, "range: {}", part.status());
    ensure!(
        part.bytes().await?[..] == parley_verify::PNG_1X1[..8],
        "range bytes differ"
    );
    let objects = server.media_dir().join("objects");
    let stored = files_under(&objects).len();
    ensure!(
        stored == 2,
        "objects stored: {stored} (want the png and its thumbnail)"
    );
    let gone = ana.upload(b"swept bytes".to_vec(), None, None).await?;
    let deadline = Instant::now() + ANSWER_WAIT;
    while !matches!(ana.download(&gone.media_id).await, Err(e) if e.status() == Some(404)) {
        ensure!(
            Instant::now() < deadline,
            "the unsent upload was never swept"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settles_to(&objects, 2).await?;
    Ok(())
}
