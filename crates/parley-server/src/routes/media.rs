//! Attachments over HTTP (docs/MEDIA.md): upload, download (with a token or a signed URL),
//! thumbnails and signed URLs. The work is in `crate::media`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use parley_domain::{Attachment, MediaId, UserId};
use parley_media::BlobId;
use parley_store::MediaRecord;
use parley_wire::ErrorBody;
use serde::Serialize;

use crate::auth::{authenticate_device, bearer_from_headers, Device};
use crate::error::ApiError;
use crate::media::media_error;
use crate::media::range::{wanted, Wanted};
use crate::media::signed::{self, Variant};
use crate::media::upload::{upload as run_upload, UploadHead};
use crate::path::{DeferredPath, MediaPath};
use crate::query::{check_names, QueryPairs};
use crate::state::AppState;

/// The bytes behind a media id never change, so a browser may keep them as long as it likes;
/// `private` keeps shared caches out, since access depends on who asks.
const CACHE_CONTROL: &str = "private, max-age=31536000, immutable";
/// A response that a browser opens anyway runs no script and loads nothing.
const MEDIA_CSP: &str = "sandbox; default-src 'none'";

/// `POST /v1/media`: the request body is the file.
#[utoipa::path(
    post,
    path = "/v1/media",
    tag = "media",
    security(("device_token" = [])),
    params(
        ("filename" = Option<String>, Query, description = "The file's name to show; path \
            parts and control characters are dropped, at most 255 bytes are kept."),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The file's bytes, streamed. `Content-Type` may declare its type; only \
            an `image/*` claim is checked, the type is sniffed from the bytes."),
    responses(
        (status = 200, description = "Stored (the same bytes again by the same user answer \
            the same `media_id`).", body = Attachment),
        (status = 400, description = "`BAD_REQUEST`: an unknown query parameter; \
            `UPLOAD_INCOMPLETE`: the body ended early.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`.", body = ErrorBody),
        (status = 408, description = "`REQUEST_TIMEOUT`: the body stalled or took too long.",
            body = ErrorBody),
        (status = 413, description = "`MEDIA_TOO_LARGE` (over `--max-media-bytes`) or \
            `QUOTA_EXCEEDED` (over `--media-quota-bytes`).", body = ErrorBody),
        (status = 415, description = "`MEDIA_TYPE_MISMATCH`: declared an image, is not one.",
            body = ErrorBody),
        (status = 422, description = "`IMAGE_TOO_LARGE`: an image over 8192 px on a side or \
            40 megapixels.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`: the store or the media storage failed.",
            body = ErrorBody),
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Device(identity): Device,
    query: QueryPairs,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Attachment>, ApiError> {
    let pairs = query.into_inner()?;
    check_names(&pairs, &["filename"])?;
    let filename = pairs
        .into_iter()
        .find(|(k, _)| k == "filename")
        .map(|(_, v)| v);
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_length = match text(header::CONTENT_LENGTH) {
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request("Content-Length is not a number"))?,
        ),
        None => None,
    };
    let head = UploadHead {
        declared: text(header::CONTENT_TYPE),
        filename,
        content_length,
    };
    Ok(Json(run_upload(&state, &identity, head, body).await?))
}

/// `GET /v1/media/{media_id}`: the file, to a member who may see a message naming it, or to
/// its uploader before any message did; with a token or a signed URL.
#[utoipa::path(
    get,
    path = "/v1/media/{media_id}",
    tag = "media",
    security(("device_token" = []), ()),
    params(
        ("media_id" = String, Path, pattern = "^[0-9a-f]{32}$", description = "The media id."),
        ("u" = Option<String>, Query, description = "Signed URL: the user it was issued to."),
        ("exp" = Option<i64>, Query, description = "Signed URL: its expiry, Unix seconds."),
        ("sig" = Option<String>, Query, description = "Signed URL: its signature."),
        ("Range" = Option<String>, Header, description = "One `bytes=` range."),
    ),
    responses(
        (status = 200, description = "The bytes, with `ETag`, `Cache-Control: private`, \
            `X-Content-Type-Options: nosniff` and a `Content-Disposition` (`inline` only for \
            raster images, audio and video).", content_type = "application/octet-stream"),
        (status = 206, description = "The range asked for, with `Content-Range`."),
        (status = 304, description = "`If-None-Match` named the current `ETag`."),
        (status = 400, description = "`BAD_REQUEST`: an unknown or incomplete query.",
            body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`: no token and no signature.",
            body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such media, or not for the caller \
            (one answer), or a wrong or expired signature.", body = ErrorBody),
        (status = 416, description = "`RANGE_NOT_SATISFIABLE`: the range lies outside the \
            file; `Content-Range: bytes */LEN`.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`.", body = ErrorBody),
    )
)]
pub async fn download(
    State(state): State<AppState>,
    path: DeferredPath<MediaPath>,
    query: QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, path, query, &headers, Variant::Original).await
}

/// `GET /v1/media/{media_id}/thumbnail`: an image's thumbnail (at most 320 px on a side), to
/// whoever may read the image.
#[utoipa::path(
    get,
    path = "/v1/media/{media_id}/thumbnail",
    tag = "media",
    security(("device_token" = []), ()),
    params(
        ("media_id" = String, Path, pattern = "^[0-9a-f]{32}$", description = "The media id."),
        ("u" = Option<String>, Query, description = "Signed URL: the user."),
        ("exp" = Option<i64>, Query, description = "Signed URL: the expiry, Unix seconds."),
        ("sig" = Option<String>, Query, description = "Signed URL: the signature."),
    ),
    responses(
        (status = 200, description = "A JPEG or PNG thumbnail.", content_type = "image/jpeg"),
        (status = 304, description = "`If-None-Match` named the current `ETag`."),
        (status = 400, description = "`BAD_REQUEST`.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: as the file, or the media has no \
            thumbnail.", body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`.", body = ErrorBody),
    )
)]
pub async fn thumbnail(
    State(state): State<AppState>,
    path: DeferredPath<MediaPath>,
    query: QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, path, query, &headers, Variant::Thumbnail).await
}

/// Signed URLs of one upload.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SignedUrls {
    /// `/v1/media/{id}?u=…&exp=…&sig=…`, relative to the server.
    pub url: String,
    /// The thumbnail's, when there is one.
    pub thumbnail_url: Option<String>,
    /// When both stop working (RFC 3339).
    pub expires_at: String,
}

/// `POST /v1/media/{media_id}/url`: links that need no header, good for five minutes, checked
/// again at each fetch.
#[utoipa::path(
    post,
    path = "/v1/media/{media_id}/url",
    tag = "media",
    security(("device_token" = [])),
    params(
        ("media_id" = String, Path, pattern = "^[0-9a-f]{32}$", description = "The media id."),
    ),
    responses(
        (status = 200, description = "The signed URLs.", body = SignedUrls),
        (status = 400, description = "`BAD_REQUEST`: an invalid media id.", body = ErrorBody),
        (status = 401, description = "`UNAUTHENTICATED`.", body = ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such media, or not for the caller.",
            body = ErrorBody),
        (status = 503, description = "`UNAVAILABLE`.", body = ErrorBody),
    )
)]
pub async fn sign_url(
    State(state): State<AppState>,
    Device(identity): Device,
    path: DeferredPath<MediaPath>,
) -> Result<Json<SignedUrls>, ApiError> {
    let media_id = media_id(path)?;
    let media = state.media()?;
    let record = readable(&state, &media_id, &identity.user_id).await?;
    let key = media.url_key(&**state.store()).await?;
    let ttl_ms = i64::try_from(state.config().media.url_ttl_ms).unwrap_or(i64::MAX);
    let expires = chrono::Utc::now() + chrono::Duration::milliseconds(ttl_ms);
    let exp_s = expires.timestamp();
    let user = identity.user_id.as_str();
    let url_of = |variant: Variant, suffix: &str| {
        let sig = signed::sign(&key, variant, media_id.as_str(), user, exp_s);
        format!(
            "/v1/media/{media_id}{suffix}?u={}&exp={exp_s}&sig={sig}",
            percent_encode(user)
        )
    };
    Ok(Json(SignedUrls {
        url: url_of(Variant::Original, ""),
        thumbnail_url: record
            .thumbnail
            .is_some()
            .then(|| url_of(Variant::Thumbnail, "/thumbnail")),
        expires_at: expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
}

/// User ids hold letters, digits and `. _ - @`; `@` is the only one a query needs escaped.
fn percent_encode(user: &str) -> String {
    user.replace('@', "%40")
}

fn media_id(path: DeferredPath<MediaPath>) -> Result<MediaId, ApiError> {
    let raw = path.into_inner()?.media_id;
    // A malformed id is answered like a missing one: ids are not guessable either way.
    MediaId::parse(&raw).ok_or_else(|| ApiError::NotFound("no such media".into()))
}

async fn readable(
    state: &AppState,
    media_id: &MediaId,
    user: &UserId,
) -> Result<MediaRecord, ApiError> {
    state
        .store()
        .readable_media(media_id, user)
        .await?
        .ok_or_else(|| ApiError::NotFound("no such media".into()))
}

/// Who asks: the signed URL's user when the query carries a signature, else the token's.
async fn caller(
    state: &AppState,
    pairs: &[(String, String)],
    headers: &HeaderMap,
    media_id: &MediaId,
    variant: Variant,
) -> Result<UserId, ApiError> {
    check_names(pairs, &["u", "exp", "sig"])?;
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    match (get("u"), get("exp"), get("sig")) {
        (None, None, None) => {
            let token = bearer_from_headers(headers).ok_or(ApiError::Unauthenticated)?;
            Ok(authenticate_device(state, token).await?.0.user_id)
        }
        (Some(u), Some(exp), Some(sig)) => {
            let exp_s: i64 = exp
                .parse()
                .map_err(|_| ApiError::bad_request("`exp` must be Unix seconds"))?;
            let key = state.media()?.url_key(&**state.store()).await?;
            let now_s = chrono::Utc::now().timestamp();
            if !signed::verify(&key, variant, media_id.as_str(), u, exp_s, sig, now_s) {
                return Err(ApiError::NotFound("no such media".into()));
            }
            Ok(UserId::from_trusted(u.to_owned()))
        }
        _ => Err(ApiError::bad_request(
            "a signed URL carries `u`, `exp` and `sig` together",
        )),
    }
}

async fn serve(
    state: &AppState,
    path: DeferredPath<MediaPath>,
    query: QueryPairs,
    headers: &HeaderMap,
    variant: Variant,
) -> Result<Response, ApiError> {
    let pairs = query.into_inner()?;
    let media_id = match path.into_inner() {
        Ok(p) => MediaId::parse(&p.media_id),
        Err(e) => return Err(e),
    };
    // The caller first (401 before 404), with an id that names nothing standing in for a
    // malformed one, so the signature check runs the same either way.
    let checked_id = media_id
        .clone()
        .unwrap_or_else(|| MediaId::from_trusted(String::new()));
    let user = caller(state, &pairs, headers, &checked_id, variant).await?;
    let Some(media_id) = media_id else {
        return Err(ApiError::NotFound("no such media".into()));
    };
    let record = readable(state, &media_id, &user).await?;
    let (sha256, content_type, inline) = match variant {
        Variant::Original => (
            record.sha256.clone(),
            record.content_type.clone(),
            record.inline_safe,
        ),
        Variant::Thumbnail => match &record.thumbnail {
            Some(t) => (t.sha256.clone(), t.content_type.clone(), true),
            None => return Err(ApiError::NotFound("this media has no thumbnail".into())),
        },
    };
    let etag = format!("\"{sha256}\"");
    let mut common = HeaderMap::new();
    let value = |s: &str| HeaderValue::from_str(s).ok();
    if let Some(v) = value(&etag) {
        common.insert(header::ETAG, v);
    }
    common.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    common.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    common.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(MEDIA_CSP),
    );
    common.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let if_none_match = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    if if_none_match.is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*")) {
        return Ok((StatusCode::NOT_MODIFIED, common).into_response());
    }
    let blob_id =
        BlobId::parse(&sha256).ok_or_else(|| ApiError::NotFound("no such media".into()))?;
    let backend = state.media()?.backend();
    let len = backend
        .len(&blob_id)
        .await
        .map_err(|e| media_error(e, false))?
        .ok_or_else(|| ApiError::NotFound("no such media".into()))?;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, span) = match wanted(range, len) {
        Wanted::Whole => (StatusCode::OK, None),
        Wanted::Part { start, end } => (StatusCode::PARTIAL_CONTENT, Some(start..end)),
        Wanted::Unsatisfiable => return Err(ApiError::RangeNotSatisfiable { len }),
    };
    let blob = backend
        .read(&blob_id, span.clone())
        .await
        .map_err(|e| media_error(e, false))?
        .ok_or_else(|| ApiError::NotFound("no such media".into()))?;
    let body_len = span.as_ref().map_or(len, |r| r.end - r.start);
    if let Some(r) = &span {
        if let Some(v) = value(&format!("bytes {}-{}/{len}", r.start, r.end - 1)) {
            common.insert(header::CONTENT_RANGE, v);
        }
    }
    // Anything that could run script is served as what it is but never shown in place.
    let served_type = content_type.as_str();
    if let Some(v) = value(served_type) {
        common.insert(header::CONTENT_TYPE, v);
    }
    common.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    let disposition = disposition(inline, record.filename.as_deref(), variant);
    if let Some(v) = value(&disposition) {
        common.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok((status, common, Body::from_stream(blob.body)).into_response())
}

/// `inline` only for what a browser shows without running anything; the file name as an
/// RFC 8187 `filename*` (any character, percent-encoded) beside an ASCII `filename`.
fn disposition(inline: bool, filename: Option<&str>, variant: Variant) -> String {
    let kind = if inline { "inline" } else { "attachment" };
    let Some(name) = filename.filter(|_| variant == Variant::Original) else {
        return kind.to_owned();
    };
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && !matches!(c, '"' | '\\' | ';' | '%') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispositions_never_carry_a_raw_name() {
        assert_eq!(
            disposition(false, Some("a\"b;c é.svg"), Variant::Original),
            "attachment; filename=\"a_b_c _.svg\"; filename*=UTF-8''a%22b%3Bc%20%C3%A9.svg"
        );
        assert_eq!(disposition(true, None, Variant::Original), "inline");
        assert_eq!(
            disposition(true, Some("x.png"), Variant::Thumbnail),
            "inline"
        );
    }
}
