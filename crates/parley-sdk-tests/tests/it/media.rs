//! Attachments (docs/MEDIA.md) through the SDK against a real server on both stores: a file
//! streamed up with its progress, a send naming it over the realtime session, the event pushed
//! with the attachment, a download streamed to disk with its progress, signed URLs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use parley_client::media::Progress;
use parley_client::{code, Delivery, NewConversation, Realtime, RealtimeOptions, SendOptions};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

use crate::deliveries::next_delivery;

/// Bytes of the file: several upload chunks, so progress is reported more than once.
const FILE_BYTES: usize = 300 * 1024;

fn counter() -> (Progress, Arc<AtomicU64>, Arc<AtomicU64>) {
    let last = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let (l, c) = (last.clone(), calls.clone());
    let progress: Progress = Arc::new(move |done, _total| {
        l.store(done, Ordering::SeqCst);
        c.fetch_add(1, Ordering::SeqCst);
    });
    (progress, last, calls)
}

test_on_both_stores!(
    #[tokio::test]
    files_go_up_and_down_with_progress
);
async fn files_go_up_and_down_with_progress(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    ana.create_conversation(&NewConversation::group(["ben"]).with_conv_id("g"))
        .await?;
    let start = ben.get_conversation("g").await?;
    let mut rt_ben = Realtime::connect(&ben, RealtimeOptions::default()).await?;
    rt_ben.track("g", start.epoch, start.head);
    let rt_ana = Realtime::connect(&ana, RealtimeOptions::default()).await?;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notes.bin");
    let bytes: Vec<u8> = (0..FILE_BYTES).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&path, &bytes)?;
    let (progress, last, calls) = counter();
    let media = ana.upload_file(&path, None, Some(progress)).await?;
    ensure!(
        last.load(Ordering::SeqCst) == FILE_BYTES as u64 && calls.load(Ordering::SeqCst) > 1,
        "upload progress ended at {} after {} calls",
        last.load(Ordering::SeqCst),
        calls.load(Ordering::SeqCst)
    );
    ensure!(
        media.size == FILE_BYTES as i64 && media.filename.as_deref() == Some("notes.bin"),
        "{media:?}"
    );

    let options = SendOptions {
        attachments: Some(vec![media.media_id.clone()]),
        ..SendOptions::default()
    };
    let ack = rt_ana.send_with("g", "a-1", "", &options).await?;
    let pushed = loop {
        match next_delivery(&mut rt_ben).await? {
            Delivery::Event(incoming) if incoming.event.seq == ack.seq => break incoming.event,
            _ => continue,
        }
    };
    ensure!(
        pushed.attachments.len() == 1 && pushed.attachments[0].media_id == media.media_id,
        "pushed {pushed:?}"
    );
    let foreign = rt_ana
        .send_with(
            "g",
            "a-2",
            "x",
            &SendOptions {
                attachments: Some(vec!["0".repeat(32)]),
                ..SendOptions::default()
            },
        )
        .await
        .expect_err("an id nobody uploaded");
    ensure!(foreign.code() == Some(code::BAD_REQUEST), "{foreign}");

    let (progress, last, _) = counter();
    let out = dir.path().join("copy.bin");
    let written = ben
        .download_to(&media.media_id, &out, Some(progress))
        .await?;
    ensure!(
        written == FILE_BYTES as u64 && last.load(Ordering::SeqCst) == written,
        "downloaded {written}"
    );
    ensure!(std::fs::read(&out)? == bytes, "the downloaded bytes differ");
    let urls = ben.media_url(&media.media_id).await?;
    let via_url = reqwest::get(format!("{}{}", server.base_url(), urls.url))
        .await?
        .bytes()
        .await
        .context("signed url")?;
    ensure!(via_url[..] == bytes[..], "signed url bytes differ");
    ensure!(
        urls.thumbnail_url.is_none(),
        "a thumbnail for bytes that are no image"
    );
    Ok(())
}
