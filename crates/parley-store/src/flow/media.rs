//! Uploads, who may read them, and the sweep of what no message names (docs/MEDIA.md).
//!
//! The bytes are the media backend's; the store keeps the rows that say which blobs exist
//! (`media_blobs`), which uploads name them (`media`) and which messages name an upload
//! (`attachments`). Two orders make the pair safe without a lock spanning both:
//! - an upload registers its blob here (taking the blob's row lock) and only then makes the
//!   bytes visible, always writing them even when a blob of that digest exists;
//! - the sweep deletes a blob's bytes only while it holds that row lock and has seen, in a
//!   statement after taking it, that no upload names the blob.
//!
//! So a sweep either deletes first (and the upload then writes the bytes again) or sees the
//! upload's row (and deletes nothing).

use parley_domain::{Attachment, MediaId, UserId};

use super::{ReadTx, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::query::{Arg, Sql, SqlRow};
use crate::rows;
use crate::types::{BlobRemover, MediaRecord, MediaSweep, MediaThumbnail, NewMedia};
use parley_domain::Rejection;

/// The backend's locking statements, which differ: PostgreSQL locks rows, SQLite's write
/// transaction already holds the database's one write lock.
pub(crate) trait MediaTx: Sql {
    /// Locks the blob row `$1`, answering it if it exists.
    const LOCK_BLOB_SQL: &'static str;
    /// Locks the uploader `$1`, so that two uploads of theirs check the quota one after the other.
    const LOCK_UPLOADER_SQL: &'static str;
}

const EXISTING_SQL: &str = "SELECT media_id FROM media WHERE uploader = $1 AND sha256 = $2";
const USED_BYTES_SQL: &str =
    "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) AS n FROM media WHERE uploader = $1";
const UPSERT_BLOB_SQL: &str = "INSERT INTO media_blobs (sha256, size) VALUES ($1, $2)
   ON CONFLICT (sha256) DO UPDATE SET size = EXCLUDED.size";
const INSERT_MEDIA_SQL: &str = "INSERT INTO media (media_id, uploader, sha256, size,
     content_type, inline_safe, filename, width, height, thumb_sha256, thumb_size,
     thumb_content_type, uploaded_at_ms)
   VALUES ($1, $2, $3, $4, $5, $6 = 1, $7, $8, $9, $10, $11, $12, $13)";
/// A repeated upload keeps its id, takes the new file name and restarts the grace period.
const TOUCH_MEDIA_SQL: &str = "UPDATE media SET filename = COALESCE($2, filename),
     thumb_sha256 = COALESCE($3, thumb_sha256), thumb_size = COALESCE($4, thumb_size),
     thumb_content_type = COALESCE($5, thumb_content_type), uploaded_at_ms = $6
   WHERE media_id = $1";

/// Registers a staged upload: its blobs, then its media row (a new one, or the uploader's
/// earlier one for the same bytes), under the quota. Nothing is registered on a refusal.
pub(crate) async fn register<B: Backend>(
    backend: &B,
    new: &NewMedia,
) -> Result<MediaRecord, StoreError> {
    let mut tx = backend.begin_write().await?;
    let uploader = new.uploader.as_str();
    if new.quota_bytes.is_some() {
        tx.execute(B::Tx::LOCK_UPLOADER_SQL, &[Arg::Text(uploader)])
            .await?;
    }
    let args = [Arg::Text(uploader), Arg::Text(&new.sha256)];
    let existing = tx.fetch_optional(EXISTING_SQL, &args).await?;
    let media_id = match &existing {
        Some(row) => row.string("media_id")?,
        None => {
            if let Some(quota) = new.quota_bytes {
                let used = tx
                    .fetch_optional(USED_BYTES_SQL, &[Arg::Text(uploader)])
                    .await?;
                let used = used.map(|r| r.int("n")).transpose()?.unwrap_or(0);
                if used.saturating_add(new.size) > quota {
                    return Err(Rejection::QuotaExceeded.into());
                }
            }
            new.media_id.as_str().to_owned()
        }
    };
    tx.execute(
        UPSERT_BLOB_SQL,
        &[Arg::Text(&new.sha256), Arg::Int(new.size)],
    )
    .await?;
    let thumb = new.thumbnail.as_ref();
    if let Some(t) = thumb {
        tx.execute(UPSERT_BLOB_SQL, &[Arg::Text(&t.sha256), Arg::Int(t.size)])
            .await?;
    }
    let thumb_sha = thumb.map(|t| t.sha256.as_str());
    let thumb_size = thumb.map(|t| t.size);
    let thumb_type = thumb.map(|t| t.content_type.as_str());
    if existing.is_some() {
        let args = [
            Arg::Text(&media_id),
            Arg::OptText(new.filename.as_deref()),
            Arg::OptText(thumb_sha),
            Arg::OptInt(thumb_size),
            Arg::OptText(thumb_type),
            Arg::Int(new.now_ms),
        ];
        tx.execute(TOUCH_MEDIA_SQL, &args).await?;
    } else {
        let args = [
            Arg::Text(&media_id),
            Arg::Text(uploader),
            Arg::Text(&new.sha256),
            Arg::Int(new.size),
            Arg::Text(&new.content_type),
            Arg::Int(i64::from(new.inline_safe)),
            Arg::OptText(new.filename.as_deref()),
            Arg::OptInt(new.width.map(i64::from)),
            Arg::OptInt(new.height.map(i64::from)),
            Arg::OptText(thumb_sha),
            Arg::OptInt(thumb_size),
            Arg::OptText(thumb_type),
            Arg::Int(new.now_ms),
        ];
        tx.execute(INSERT_MEDIA_SQL, &args).await?;
    }
    let record = media_row(&mut tx, &media_id).await?;
    tx.commit_or_unknown().await?;
    record.ok_or_else(|| StoreError::Unavailable("a registered upload vanished".into()))
}

const MEDIA_ROW_SQL: &str = "SELECT media_id, uploader, sha256, size, content_type, \
     CAST(CASE WHEN inline_safe THEN 1 ELSE 0 END AS BIGINT) AS inline_safe, filename, width, height, \
     thumb_sha256, thumb_size, thumb_content_type FROM media WHERE media_id = $1";

async fn media_row(tx: &mut impl Sql, media_id: &str) -> Result<Option<MediaRecord>, StoreError> {
    let found = tx
        .fetch_optional(MEDIA_ROW_SQL, &[Arg::Text(media_id)])
        .await?;
    found.map(|r| media_record(&r)).transpose()
}

fn media_record(r: &impl SqlRow) -> Result<MediaRecord, StoreError> {
    let dim = |c: &str| -> Result<Option<u32>, StoreError> {
        Ok(r.opt_int(c)?.and_then(|v| u32::try_from(v).ok()))
    };
    let thumbnail = match r.opt_string("thumb_sha256")? {
        Some(sha256) => Some(MediaThumbnail {
            sha256,
            size: r.opt_int("thumb_size")?.unwrap_or(0),
            content_type: r.opt_string("thumb_content_type")?.unwrap_or_default(),
        }),
        None => None,
    };
    Ok(MediaRecord {
        media_id: MediaId::from_trusted(r.string("media_id")?),
        uploader: UserId::from_trusted(r.string("uploader")?),
        sha256: r.string("sha256")?,
        size: r.int("size")?,
        content_type: r.string("content_type")?,
        inline_safe: r.int("inline_safe")? != 0,
        filename: r.opt_string("filename")?,
        width: dim("width")?,
        height: dim("height")?,
        thumbnail,
    })
}

/// Whether `$2` may read the upload `$1`: a message naming it lies in one of their membership
/// periods and past the conversation's purge point (a recall or a purge deleted the rows of
/// its messages), or they uploaded it and no message has named it yet.
const MAY_READ_SQL: &str = "SELECT CAST(CASE WHEN EXISTS (
     SELECT 1 FROM attachments a
       JOIN conversations c ON c.conv_id = a.conv_id
       JOIN membership_periods p ON p.conv_id = a.conv_id AND p.user_id = $2
      WHERE a.media_id = $1 AND a.seq >= c.min_seq AND a.seq >= p.from_seq
        AND (p.to_seq IS NULL OR a.seq <= p.to_seq))
   OR EXISTS (SELECT 1 FROM media m
      WHERE m.media_id = $1 AND m.uploader = $2 AND m.sent_at_ms IS NULL)
   THEN 1 ELSE 0 END AS BIGINT) AS may_read";
/// The same under the test break `no-media-visibility`: any message naming it will do.
const MAY_READ_ANY_MEMBER_SQL: &str = "SELECT CAST(CASE WHEN EXISTS (
     SELECT 1 FROM attachments a WHERE a.media_id = $1)
   OR EXISTS (SELECT 1 FROM media m
      WHERE m.media_id = $1 AND m.uploader = $2 AND m.sent_at_ms IS NULL)
   THEN 1 ELSE 0 END AS BIGINT) AS may_read";

/// The upload `media_id` when `viewer` may read it; `None` both when it does not exist and
/// when they may not (the hidden-target rule).
pub(crate) async fn readable<B: Backend>(
    backend: &B,
    media_id: &MediaId,
    viewer: &UserId,
) -> Result<Option<MediaRecord>, StoreError> {
    let mut tx = backend.begin_read().await?;
    let sql = if backend.breaks().no_media_visibility() {
        MAY_READ_ANY_MEMBER_SQL
    } else {
        MAY_READ_SQL
    };
    let args = [Arg::Text(media_id.as_str()), Arg::Text(viewer.as_str())];
    let may = tx.fetch_optional(sql, &args).await?;
    let may = may.map(|r| r.int("may_read")).transpose()?.unwrap_or(0) != 0;
    let record = if may {
        media_row(&mut tx, media_id.as_str()).await?
    } else {
        None
    };
    tx.finish().await?;
    Ok(record)
}

const SENDERS_MEDIA_SQL: &str = "SELECT media_id, uploader, sha256, size, content_type, \
     CAST(CASE WHEN inline_safe THEN 1 ELSE 0 END AS BIGINT) AS inline_safe, filename, width, height, \
     thumb_sha256, thumb_size, thumb_content_type FROM media WHERE media_id = $1 AND uploader = $2";
const INSERT_ATTACHMENT_SQL: &str =
    "INSERT INTO attachments (media_id, conv_id, seq) VALUES ($1, $2, $3)";
const MARK_SENT_SQL: &str =
    "UPDATE media SET sent_at_ms = $2 WHERE media_id = $1 AND sent_at_ms IS NULL";

/// The attachments a send names, each an upload of the sender's, in the order named;
/// `BadRequest` for any other id, before anything is written.
pub(crate) async fn senders_media(
    tx: &mut impl Sql,
    sender: &UserId,
    ids: &[MediaId],
) -> Result<Vec<Attachment>, StoreError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let args = [Arg::Text(id.as_str()), Arg::Text(sender.as_str())];
        let Some(row) = tx.fetch_optional(SENDERS_MEDIA_SQL, &args).await? else {
            return Err(Rejection::BadRequest(format!(
                "attachment {id} is no upload of the sender's"
            ))
            .into());
        };
        out.push(media_record(&row)?.attachment());
    }
    Ok(out)
}

/// Records that the message at `seq` names `attachments`.
pub(crate) async fn attach(
    tx: &mut impl Sql,
    conv_id: &str,
    seq: i64,
    attachments: &[Attachment],
    now_ms: i64,
) -> Result<(), StoreError> {
    for a in attachments {
        let id = a.media_id.as_str();
        tx.execute(
            INSERT_ATTACHMENT_SQL,
            &[Arg::Text(id), Arg::Text(conv_id), Arg::Int(seq)],
        )
        .await?;
        tx.execute(MARK_SENT_SQL, &[Arg::Text(id), Arg::Int(now_ms)])
            .await?;
    }
    Ok(())
}

const DELETE_ATTACHMENTS_AT_SQL: &str = "DELETE FROM attachments WHERE conv_id = $1 AND seq = $2";
const ERASE_ATTACHMENTS_AT_SQL: &str =
    "UPDATE events SET attachments = NULL WHERE conv_id = $1 AND seq = $2";
const DELETE_PURGED_ATTACHMENTS_SQL: &str =
    "DELETE FROM attachments WHERE conv_id = $1 AND seq <= $2";

/// A recall takes the message's attachments: no longer listed, no longer served.
pub(crate) async fn forget_recalled(
    tx: &mut impl Sql,
    conv_id: &str,
    seq: i64,
) -> Result<(), StoreError> {
    let args = [Arg::Text(conv_id), Arg::Int(seq)];
    tx.execute(DELETE_ATTACHMENTS_AT_SQL, &args).await?;
    tx.execute(ERASE_ATTACHMENTS_AT_SQL, &args).await?;
    Ok(())
}

/// A purge through `through_seq` takes the attachments of the purged messages.
pub(crate) async fn forget_purged(
    tx: &mut impl Sql,
    conv_id: &str,
    through_seq: i64,
) -> Result<(), StoreError> {
    let args = [Arg::Text(conv_id), Arg::Int(through_seq)];
    tx.execute(DELETE_PURGED_ATTACHMENTS_SQL, &args).await?;
    Ok(())
}

const SWEEP_MEDIA_SQL: &str = "DELETE FROM media WHERE media_id IN (
     SELECT m.media_id FROM media m
      WHERE m.uploaded_at_ms < $1
        AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.media_id = m.media_id)
      LIMIT $2)";
const UNNAMED_BLOBS_SQL: &str = "SELECT b.sha256 FROM media_blobs b
    WHERE NOT EXISTS (SELECT 1 FROM media m WHERE m.sha256 = b.sha256)
      AND NOT EXISTS (SELECT 1 FROM media m WHERE m.thumb_sha256 = b.sha256)
    LIMIT $1";
const BLOB_NAMED_SQL: &str = "SELECT CAST(CASE WHEN EXISTS (
     SELECT 1 FROM media m WHERE m.sha256 = $1 OR m.thumb_sha256 = $1)
   THEN 1 ELSE 0 END AS BIGINT) AS named";
const DELETE_BLOB_SQL: &str = "DELETE FROM media_blobs WHERE sha256 = $1";

/// Deletes at most `batch_len_max` uploads that no message names and that were last uploaded
/// before `uploaded_before_ms`, then the bytes of at most `batch_len_max` blobs no upload names.
pub(crate) async fn sweep<B: Backend>(
    backend: &B,
    uploaded_before_ms: i64,
    batch_len_max: u32,
    remover: &(dyn Fn(String) -> BlobRemover + Send + Sync),
) -> Result<MediaSweep, StoreError> {
    let mut report = MediaSweep::default();
    let mut tx = backend.begin_write().await?;
    let args = [
        Arg::Int(uploaded_before_ms),
        Arg::Int(i64::from(batch_len_max)),
    ];
    report.media_deleted = tx.execute(SWEEP_MEDIA_SQL, &args).await?;
    tx.commit_or_unknown().await?;
    let mut conn = backend.begin_read().await?;
    let found = conn
        .fetch_all(UNNAMED_BLOBS_SQL, &[Arg::Int(i64::from(batch_len_max))])
        .await?;
    let blobs = rows::all(&found, |r| r.string("sha256"))?;
    conn.finish().await?;
    for sha256 in blobs {
        if delete_blob(backend, &sha256, remover(sha256.clone())).await? {
            report.blobs_deleted += 1;
        }
    }
    Ok(report)
}

/// Deletes the blob's bytes and row when no upload names it, holding its row lock throughout.
async fn delete_blob<B: Backend>(
    backend: &B,
    sha256: &str,
    remove: BlobRemover,
) -> Result<bool, StoreError> {
    let mut tx = backend.begin_write().await?;
    let args = [Arg::Text(sha256)];
    if tx
        .fetch_optional(B::Tx::LOCK_BLOB_SQL, &args)
        .await?
        .is_none()
    {
        return Ok(false);
    }
    // A statement after the lock: it sees every upload committed before the lock was granted.
    let named = tx.fetch_optional(BLOB_NAMED_SQL, &args).await?;
    if named.map(|r| r.int("named")).transpose()?.unwrap_or(0) != 0 {
        return Ok(false);
    }
    remove().await.map_err(StoreError::Unavailable)?;
    tx.execute(DELETE_BLOB_SQL, &args).await?;
    tx.commit_or_unknown().await?;
    Ok(true)
}

const INSERT_KEY_SQL: &str =
    "INSERT INTO server_keys (name, key) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
const KEY_SQL: &str = "SELECT key FROM server_keys WHERE name = $1";

/// The key named `name` all gateways share: `candidate` when this call made it first.
pub(crate) async fn shared_key<B: Backend>(
    backend: &B,
    name: &str,
    candidate: &str,
) -> Result<String, StoreError> {
    let mut tx = backend.begin_write().await?;
    tx.execute(INSERT_KEY_SQL, &[Arg::Text(name), Arg::Text(candidate)])
        .await?;
    let key = tx.fetch_optional(KEY_SQL, &[Arg::Text(name)]).await?;
    let key = key
        .map(|r| r.string("key"))
        .transpose()?
        .ok_or_else(|| StoreError::Unavailable("a shared key vanished".into()))?;
    tx.commit_or_unknown().await?;
    Ok(key)
}
