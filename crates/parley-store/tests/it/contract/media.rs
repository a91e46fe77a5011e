//! Attachments in the store (docs/MEDIA.md): uploads registered once per uploader and bytes,
//! readable by the readers of a message naming them (and their uploader before any does), taken
//! by a recall, counted against a quota, and swept when no message names them.

use std::sync::{Arc, Mutex};

use anyhow::{ensure, Result};
use parley_domain::{
    Body, ClientMsgId, ConvId, ConvKind, DeviceId, MediaId, Rejection, SendRelations, UserId,
};
use parley_store::{BlobRemover, NewMedia, SendRequest, Store, StoreError};

use super::{new_conv, user};

fn upload(uploader: &UserId, sha: char, size: i64, now_ms: i64) -> NewMedia {
    NewMedia {
        media_id: MediaId::new_random(),
        uploader: uploader.clone(),
        sha256: sha.to_string().repeat(64),
        size,
        content_type: "image/png".into(),
        inline_safe: true,
        filename: Some("a.png".into()),
        width: Some(1),
        height: Some(1),
        thumbnail: None,
        now_ms,
        quota_bytes: None,
    }
}

async fn send_media(
    store: &dyn Store,
    conv: &ConvId,
    from: &UserId,
    key: &str,
    media: &[&MediaId],
) -> Result<i64, StoreError> {
    let req = SendRequest::related(
        conv.clone(),
        from.clone(),
        DeviceId::parse("d1").expect("device"),
        ClientMsgId::parse(key).expect("key"),
        Body::caption("", 1024).expect("caption"),
        SendRelations {
            attachments: media.iter().map(|m| (*m).clone()).collect(),
            ..SendRelations::default()
        },
    );
    Ok(store.send(&req).await?.seq)
}

/// ana's group with ben, an upload of ana's sent to it, and dan who joins after the message.
async fn shared(store: &dyn Store) -> Result<(ConvId, UserId, UserId, UserId, MediaId, i64)> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let dan = user(store, "u-dan").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-media"), &[&ben]))
        .await?
        .conv_id;
    let record = store.register_media(&upload(&ana, 'a', 10, 1_000)).await?;
    let seq = send_media(store, &conv, &ana, "m-1", &[&record.media_id]).await?;
    store.add_member(&conv, &ana, &dan).await?;
    Ok((conv, ana, ben, dan, record.media_id, seq))
}

/// A member who joined after the message cannot read its media (`13-media-served-to-readers`);
/// the negative control `no-media-visibility` makes this fail.
pub async fn late_member_cannot_read(store: &dyn Store) -> Result<()> {
    let (_conv, _ana, ben, dan, media, _) = shared(store).await?;
    ensure!(
        store.readable_media(&media, &ben).await?.is_some(),
        "ben, a member when it was sent, cannot read it"
    );
    let late = store.readable_media(&media, &dan).await?;
    ensure!(
        late.is_none(),
        "late member: dan reads media sent before he joined"
    );
    Ok(())
}

/// The whole life of an upload in the store.
pub async fn media_rules(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben, _dan, media, seq) = shared(store).await?;
    let again = store.register_media(&upload(&ana, 'a', 10, 2_000)).await?;
    ensure!(
        again.media_id == media,
        "the same bytes again: {} vs {media}",
        again.media_id
    );
    let bens = store.register_media(&upload(&ben, 'a', 10, 2_000)).await?;
    ensure!(
        bens.media_id != media,
        "ben's upload of the same bytes shares ana's id"
    );
    ensure!(
        store.readable_media(&bens.media_id, &ben).await?.is_some()
            && store.readable_media(&bens.media_id, &ana).await?.is_none(),
        "an unsent upload is its uploader's only"
    );
    let foreign = send_media(store, &conv, &ana, "m-2", &[&bens.media_id]).await;
    ensure!(
        matches!(
            &foreign,
            Err(StoreError::Rejected(Rejection::BadRequest(_)))
        ),
        "ana sends ben's upload: {foreign:?}"
    );
    let page = store
        .events(
            &conv,
            &ben,
            parley_store::EventsQuery::After {
                after: 0,
                epoch: None,
            },
            100,
        )
        .await?;
    let msg = page.events.iter().find(|e| e.seq == seq);
    ensure!(
        msg.is_some_and(|e| e.relations().attachments.len() == 1
            && e.relations().attachments[0].media_id == media),
        "ben reads {msg:?}"
    );
    store.recall(&conv, &ana, seq, chrono::Utc::now()).await?;
    for who in [&ana, &ben] {
        ensure!(
            store.readable_media(&media, who).await?.is_none(),
            "{who} reads recalled media"
        );
    }
    let page = store
        .events(
            &conv,
            &ben,
            parley_store::EventsQuery::After {
                after: 0,
                epoch: None,
            },
            100,
        )
        .await?;
    let msg = page.events.iter().find(|e| e.seq == seq);
    ensure!(
        msg.is_some_and(|e| e.recalled && e.relations().attachments.is_empty()),
        "recalled reads {msg:?}"
    );

    let mut capped = upload(&ben, 'b', 100, 3_000);
    capped.quota_bytes = Some(105);
    let over = store.register_media(&capped).await;
    ensure!(
        matches!(&over, Err(StoreError::Rejected(Rejection::QuotaExceeded))),
        "ben over his quota: {over:?}"
    );
    capped.quota_bytes = Some(110);
    store.register_media(&capped).await?;

    let removed: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = removed.clone();
    let remover = move |sha: String| -> BlobRemover {
        let seen = seen.clone();
        Box::new(move || {
            Box::pin(async move {
                seen.lock().map_err(|e| e.to_string())?.push(sha);
                Ok(())
            })
        })
    };
    // Within the grace period nothing goes.
    let early = store.sweep_media(1_000, 100, &remover).await?;
    ensure!(
        early.media_deleted == 0 && early.blobs_deleted == 0,
        "swept within the grace: {early:?}"
    );
    // Past it: ana's recalled upload and both of ben's unsent ones; blob 'a' only once no
    // upload names it, blob 'b' with ben's.
    let swept = store.sweep_media(10_000, 100, &remover).await?;
    let mut gone = removed.lock().map_err(|e| anyhow::anyhow!("{e}"))?.clone();
    gone.sort();
    ensure!(
        swept.media_deleted == 3 && swept.blobs_deleted == 2,
        "swept {swept:?}, removed {gone:?}"
    );
    ensure!(
        gone == vec!["a".repeat(64), "b".repeat(64)],
        "removed blobs {gone:?}"
    );
    let after = store.register_media(&upload(&ana, 'a', 10, 20_000)).await?;
    ensure!(
        store.readable_media(&after.media_id, &ana).await?.is_some(),
        "a new upload of swept bytes"
    );
    Ok(())
}

/// A purge takes the media of the messages it deletes: no reader is served them after it, and
/// no message names them any more, so the sweep may delete them.
pub async fn purge_takes_media(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let mut req = new_conv(&ana, ConvKind::Group, Some("c-ret"), &[&ben]);
    req.retention_ms = Some(super::RETENTION_TEST_MS);
    let conv = store.create_conversation(&req).await?.conv_id;
    let old = store.register_media(&upload(&ana, 'c', 10, 1_000)).await?;
    let seq = send_media(store, &conv, &ana, "m-1", &[&old.media_id]).await?;
    ensure!(
        store.readable_media(&old.media_id, &ben).await?.is_some(),
        "ben cannot read before the purge"
    );
    let cut_at = chrono::Utc::now()
        + chrono::Duration::milliseconds(super::RETENTION_TEST_MS)
        + chrono::Duration::seconds(1);
    let report = store.purge_batch(cut_at, 100).await?;
    ensure!(
        report.events_deleted >= 3,
        "purge {report:?} (message at {seq})"
    );
    for who in [&ana, &ben] {
        ensure!(
            store.readable_media(&old.media_id, who).await?.is_none(),
            "{who} reads the media of a purged message"
        );
    }
    let noop = |_: String| -> BlobRemover { Box::new(|| Box::pin(async { Ok(()) })) };
    let swept = store.sweep_media(i64::MAX, 100, &noop).await?;
    ensure!(swept.media_deleted == 1, "swept after the purge {swept:?}");
    Ok(())
}
