//! The two-phase API on every backend: the filesystem, and the object store over a directory
//! (`file://`) and over memory (`memory://`).

use std::io::Cursor;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use image::{ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};
use sha2::{Digest, Sha256};

use super::*;

/// A backend under test with the directories it keeps its parts (and, for some, its blobs) in.
struct Fixture {
    backend: MediaBackend,
    parts: PathBuf,
    /// The directory under which blob files are, where the backend has one.
    blobs: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Fs,
    File,
    Memory,
}

const KINDS: [Kind; 3] = [Kind::Fs, Kind::File, Kind::Memory];

async fn open(kind: Kind) -> Fixture {
    let dir = tempfile::tempdir().expect("dir");
    let fixture = reopen(kind, dir.path()).await.0;
    Fixture {
        _dir: dir,
        ..fixture
    }
}

/// Opens a backend of `kind` in `dir`, answering it (with a throwaway temp dir) and how many
/// parts it swept.
async fn reopen(kind: Kind, dir: &Path) -> (Fixture, usize) {
    let placeholder = tempfile::tempdir().expect("dir");
    let (backend, swept, parts, blobs) = match kind {
        Kind::Fs => {
            let root = dir.join("media");
            let (backend, swept) = MediaBackend::open_fs(&root).await.expect("open fs");
            (backend, swept, root.join("parts"), Some(root.join("blobs")))
        }
        Kind::File => {
            let objects = dir.join("objects");
            let url = format!("file://{}", objects.display());
            let parts = dir.join("parts");
            let (backend, swept) = MediaBackend::open_url(&url, &parts)
                .await
                .expect("open file://");
            (backend, swept, parts, Some(objects.join("blobs")))
        }
        Kind::Memory => {
            let parts = dir.join("parts");
            let (backend, swept) = MediaBackend::open_url("memory://", &parts)
                .await
                .expect("open memory://");
            (backend, swept, parts, None)
        }
    };
    (
        Fixture {
            backend,
            parts,
            blobs,
            _dir: placeholder,
        },
        swept,
    )
}

impl Fixture {
    fn parts_left(&self) -> usize {
        std::fs::read_dir(&self.parts).expect("parts").count()
    }

    /// Every stored blob (thumbnails included), whatever the backend.
    async fn blob_count(&self) -> usize {
        match &self.backend {
            MediaBackend::Fs(_) => files_under(self.blobs.as_deref().expect("blobs")),
            MediaBackend::Object(store) => {
                let listed: Vec<_> = store
                    .store_for_tests()
                    .list(Some(&object_store::path::Path::from("blobs")))
                    .try_collect()
                    .await
                    .expect("list");
                listed.len()
            }
        }
    }

    async fn stage(&self, parts: &[&[u8]], declared: Option<&str>) -> Result<Staged, MediaError> {
        self.backend
            .stage(chunks(parts), declared, MEDIA_BYTES_MAX_DEFAULT)
            .await
    }

    async fn read_all(&self, id: &BlobId) -> Option<Vec<u8>> {
        let blob = self.backend.read(id, None).await.expect("read")?;
        let bytes = collect(blob.body).await;
        assert_eq!(blob.len, bytes.len() as u64);
        Some(bytes)
    }

    /// Removes a blob's bytes behind the backend's back, as a sweep racing an upload would.
    async fn lose(&self, id: &BlobId) {
        assert!(self.backend.delete(id).await.expect("delete"));
        assert!(self.backend.len(id).await.expect("len").is_none());
    }
}

fn files_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.expect("entry").path())
        .map(|p| if p.is_dir() { files_under(&p) } else { 1 })
        .sum()
}

fn chunks(parts: &[&[u8]]) -> impl Stream<Item = Result<Bytes, String>> + Unpin {
    let owned: Vec<Result<Bytes, String>> = parts
        .iter()
        .map(|p| Ok(Bytes::copy_from_slice(p)))
        .collect();
    futures::stream::iter(owned)
}

async fn collect(body: futures::stream::BoxStream<'static, std::io::Result<Bytes>>) -> Vec<u8> {
    let parts: Vec<Bytes> = body.try_collect().await.expect("body");
    parts.concat()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

fn png(image: &RgbImage) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image.write_to(&mut out, ImageFormat::Png).expect("png");
    out.into_inner()
}

fn gradient(width: u32, height: u32) -> RgbImage {
    RgbImage::from_fn(width, height, |x, y| {
        Rgb([(x % 256) as u8, (y % 256) as u8, 90])
    })
}

fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The CRC-32 of PNG chunks (ISO 3309), bit by bit: fast enough for a 17-byte chunk.
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

/// A real PNG whose IHDR is rewritten to claim `width` by `height`, with a correct CRC, so only
/// the header lies: the signature (8 bytes), then the IHDR chunk's length (4), type (4) and data,
/// whose first 8 bytes are the width and height.
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = png(&gradient(4, 4));
    assert_eq!(&bytes[12..16], b"IHDR");
    bytes[16..20].copy_from_slice(&width.to_be_bytes());
    bytes[20..24].copy_from_slice(&height.to_be_bytes());
    let crc = crc32(&bytes[12..29]);
    bytes[29..33].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn blob_ids_are_hex_digests_only() {
    let hex = "a".repeat(64);
    assert!(BlobId::parse(&hex).is_some());
    for bad in [
        "",
        "../etc/passwd",
        &"A".repeat(64),
        &"a".repeat(63),
        &format!("{}/", "a".repeat(63)),
    ] {
        assert!(BlobId::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn the_crafted_crc_is_the_png_crc() {
    // The IHDR of an unpatched PNG already carries a correct CRC: the helper must agree with it.
    let bytes = png(&gradient(4, 4));
    assert_eq!(crc32(&bytes[12..29]).to_be_bytes(), bytes[29..33]);
}

#[tokio::test]
async fn a_staged_upload_is_invisible_until_committed_on_every_backend() {
    for kind in KINDS {
        let f = open(kind).await;
        let staged = f
            .stage(&[b"hello, ", b"world"], Some("text/plain"))
            .await
            .expect("staged");
        assert_eq!(staged.id.as_str(), digest(b"hello, world"), "{kind:?}");
        assert_eq!(
            (staged.size, staged.content_type, staged.inline_safe),
            (12, "application/octet-stream", false)
        );
        assert_eq!((staged.image, staged.thumbnail.is_some()), (None, false));
        let id = staged.id.clone();
        assert_eq!(f.parts_left(), 1, "{kind:?}: the part holds the bytes");
        assert!(f.backend.read(&id, None).await.expect("read").is_none());
        assert_eq!(f.backend.len(&id).await.expect("len"), None);

        f.backend.commit(staged).await.expect("commit");
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(f.read_all(&id).await.expect("stored"), b"hello, world");
        assert_eq!(f.backend.len(&id).await.expect("len"), Some(12));
        assert_eq!(f.blob_count().await, 1, "{kind:?}");

        assert!(f.backend.delete(&id).await.expect("delete"));
        assert!(!f.backend.delete(&id).await.expect("delete again"));
        assert!(f.backend.read(&id, None).await.expect("read").is_none());
        assert_eq!(f.blob_count().await, 0, "{kind:?}");
    }
}

#[tokio::test]
async fn the_same_bytes_are_stored_once() {
    for kind in KINDS {
        let f = open(kind).await;
        let first = f.stage(&[b"same bytes"], None).await.expect("first");
        let again = f.stage(&[b"same", b" bytes"], None).await.expect("again");
        assert_eq!(first.id, again.id);
        let id = first.id.clone();
        f.backend.commit(first).await.expect("commit");
        f.backend.commit(again).await.expect("commit over it");
        assert_eq!(f.blob_count().await, 1, "{kind:?}");
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(f.read_all(&id).await.expect("stored"), b"same bytes");
    }
}

#[tokio::test]
async fn ranges_stream_only_the_bytes_asked_for() {
    let bytes: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
    for kind in KINDS {
        let f = open(kind).await;
        let staged = f.stage(&[&bytes], None).await.expect("staged");
        let id = staged.id.clone();
        f.backend.commit(staged).await.expect("commit");
        for range in [0..1, 2..5, 65_530..140_000, 199_999..200_000, 0..200_000] {
            let blob = f
                .backend
                .read(&id, Some(range.clone()))
                .await
                .expect("read")
                .expect("stored");
            assert_eq!(blob.len, 200_000, "{kind:?} {range:?}");
            let got = collect(blob.body).await;
            let want = &bytes[range.start as usize..range.end as usize];
            assert!(got == want, "{kind:?} {range:?}: {} bytes", got.len());
        }
        let empty = f
            .backend
            .read(&id, Some(7..7))
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(empty.len, 200_000);
        assert!(collect(empty.body).await.is_empty(), "{kind:?}");
    }
}

#[tokio::test]
async fn a_blob_larger_than_one_put_goes_in_parts() {
    // Past the object backend's single-put size, so the multipart path is the one taken.
    let bytes: Vec<u8> = (0..(9u32 * 1024 * 1024)).map(|i| (i % 251) as u8).collect();
    for kind in [Kind::File, Kind::Memory] {
        let f = open(kind).await;
        let staged = f
            .stage(&bytes.chunks(64 * 1024).collect::<Vec<_>>(), None)
            .await
            .expect("staged");
        let id = staged.id.clone();
        f.backend.commit(staged).await.expect("commit");
        assert_eq!(
            f.backend.len(&id).await.expect("len"),
            Some(bytes.len() as u64)
        );
        assert!(f.read_all(&id).await.expect("stored") == bytes, "{kind:?}");
        assert_eq!(f.parts_left(), 0);
    }
}

#[tokio::test]
async fn refused_uploads_leave_no_part_and_no_blob() {
    for kind in KINDS {
        let f = open(kind).await;
        let big = vec![7u8; 600];
        let over = f.backend.stage(chunks(&[&big, &big]), None, 1000).await;
        assert!(
            matches!(over, Err(MediaError::TooLarge { max: 1000 })),
            "{kind:?}: {over:?}"
        );
        let lying = f.stage(&[b"not a picture"], Some("image/jpeg")).await;
        assert!(matches!(lying, Err(MediaError::NotWhatWasDeclared { .. })));
        let cut: Vec<Result<Bytes, String>> = vec![
            Ok(Bytes::from_static(b"half")),
            Err("connection reset".into()),
        ];
        let broken = f
            .backend
            .stage(futures::stream::iter(cut), None, 1000)
            .await;
        assert!(matches!(broken, Err(MediaError::Body(_))), "{broken:?}");
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(
            f.blob_count().await,
            0,
            "{kind:?}: a refused upload left a blob"
        );
    }
}

#[tokio::test]
async fn too_large_is_answered_as_soon_as_the_count_passes_the_limit() {
    let f = open(Kind::Fs).await;
    // A body that never ends: only refusing it mid-stream lets the stage return at all.
    let endless =
        futures::stream::repeat_with(|| Ok::<_, String>(Bytes::from_static(&[1u8; 1024])));
    let over = f.backend.stage(endless, None, 10 * 1024).await;
    assert!(matches!(over, Err(MediaError::TooLarge { max: 10240 })));
    assert_eq!(f.parts_left(), 0);
}

#[tokio::test]
async fn a_header_claiming_a_huge_image_is_refused_before_decoding() {
    let bomb = png_claiming(100_000, 100_000);
    for kind in KINDS {
        let f = open(kind).await;
        let started = Instant::now();
        let refused = f.stage(&[&bomb], Some("image/png")).await;
        // Decoding 10^10 pixels would take minutes and 40 GB; the header alone takes nothing.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(
            matches!(
                refused,
                Err(MediaError::ImageTooLarge {
                    width: 100_000,
                    height: 100_000
                })
            ),
            "{kind:?}: {refused:?}"
        );
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(f.blob_count().await, 0, "{kind:?}");
    }
    // One side past the limit is enough, however few pixels in all.
    let f = open(Kind::Fs).await;
    let tall = f.stage(&[&png_claiming(10, 9000)], None).await;
    assert!(matches!(
        tall,
        Err(MediaError::ImageTooLarge {
            width: 10,
            height: 9000
        })
    ));
    let message = MediaError::ImageTooLarge {
        width: 10,
        height: 9000,
    }
    .to_string();
    assert!(
        message.contains("10x9000") && message.contains("8192"),
        "{message}"
    );
}

#[tokio::test]
async fn a_small_image_gets_a_thumbnail_that_decodes() {
    let bytes = png(&gradient(40, 30));
    for kind in KINDS {
        let f = open(kind).await;
        let staged = f.stage(&[&bytes], Some("image/png")).await.expect("staged");
        assert_eq!(
            (staged.content_type, staged.inline_safe),
            ("image/png", true)
        );
        assert_eq!(
            staged.image,
            Some(ImageSize {
                width: 40,
                height: 30
            })
        );
        let thumbnail = staged.thumbnail.clone().expect("a thumbnail");
        assert_eq!(thumbnail.id.as_str(), digest(&thumbnail.bytes));
        assert_eq!(thumbnail.size, thumbnail.bytes.len() as u64);
        assert_eq!(thumbnail.content_type, "image/jpeg", "an opaque image");
        let decoded = image::load_from_memory(&thumbnail.bytes).expect("decodes");
        assert_eq!((decoded.width(), decoded.height()), (40, 30));

        let id = staged.id.clone();
        f.backend.commit(staged).await.expect("commit");
        assert_eq!(f.read_all(&id).await.expect("image"), bytes);
        assert_eq!(
            f.read_all(&thumbnail.id).await.expect("thumbnail"),
            thumbnail.bytes
        );
        assert_eq!(f.blob_count().await, 2, "{kind:?}");
        assert_eq!(f.parts_left(), 0, "{kind:?}");
    }
}

#[tokio::test]
async fn a_large_image_thumbnail_fits_320_pixels_and_keeps_its_aspect() {
    let f = open(Kind::Fs).await;
    let staged = f
        .stage(&[&png(&gradient(2000, 1000))], None)
        .await
        .expect("staged");
    assert_eq!(
        staged.image,
        Some(ImageSize {
            width: 2000,
            height: 1000
        })
    );
    let thumbnail = staged.thumbnail.expect("a thumbnail");
    let decoded = image::load_from_memory(&thumbnail.bytes).expect("decodes");
    assert_eq!((decoded.width(), decoded.height()), (320, 160));
}

#[tokio::test]
async fn see_through_images_get_png_thumbnails_and_jpegs_get_jpegs() {
    let f = open(Kind::Memory).await;
    let clear = RgbaImage::from_fn(50, 20, |x, _| {
        Rgba([200, 10, 10, if x < 25 { 0 } else { 255 }])
    });
    let mut out = Cursor::new(Vec::new());
    clear.write_to(&mut out, ImageFormat::Png).expect("png");
    let staged = f.stage(&[out.get_ref()], None).await.expect("staged");
    let thumbnail = staged.thumbnail.expect("a thumbnail");
    assert_eq!(thumbnail.content_type, "image/png");
    let decoded = image::load_from_memory(&thumbnail.bytes).expect("decodes");
    assert!(decoded.color().has_alpha());

    // An alpha channel that is opaque everywhere makes a JPEG, like any photo.
    let opaque = RgbaImage::from_pixel(30, 30, Rgba([1, 2, 3, 255]));
    let mut out = Cursor::new(Vec::new());
    opaque.write_to(&mut out, ImageFormat::Png).expect("png");
    let staged = f.stage(&[out.get_ref()], None).await.expect("staged");
    assert_eq!(
        staged.thumbnail.expect("a thumbnail").content_type,
        "image/jpeg"
    );

    let mut out = Cursor::new(Vec::new());
    gradient(640, 480)
        .write_to(&mut out, ImageFormat::Jpeg)
        .expect("jpeg");
    let staged = f
        .stage(&[out.get_ref()], Some("image/jpeg"))
        .await
        .expect("staged");
    assert_eq!(staged.content_type, "image/jpeg");
    let thumbnail = staged.thumbnail.expect("a thumbnail");
    let decoded = image::load_from_memory(&thumbnail.bytes).expect("decodes");
    assert_eq!((decoded.width(), decoded.height()), (320, 240));
}

#[tokio::test]
async fn an_image_whose_pixels_do_not_decode_is_kept_without_a_thumbnail() {
    let mut bytes = png(&gradient(64, 64));
    // Past the header (signature and IHDR end at byte 33): the image data's CRC no longer holds.
    let middle = bytes.len() - 30;
    for b in &mut bytes[middle..middle + 8] {
        *b ^= 0x5a;
    }
    let f = open(Kind::Fs).await;
    let staged = f.stage(&[&bytes], Some("image/png")).await.expect("kept");
    assert_eq!(
        staged.image,
        Some(ImageSize {
            width: 64,
            height: 64
        })
    );
    assert!(staged.thumbnail.is_none());
    let id = staged.id.clone();
    f.backend.commit(staged).await.expect("commit");
    assert_eq!(f.read_all(&id).await.expect("stored"), bytes);

    // A sniffed PNG whose header does not parse is a plain file: no size, no thumbnail.
    let mut broken = png(&gradient(4, 4));
    broken[29] ^= 0xff;
    let staged = f.stage(&[&broken], None).await.expect("kept");
    assert_eq!((staged.image, staged.thumbnail.is_some()), (None, false));
}

#[tokio::test]
async fn a_discarded_or_dropped_stage_leaves_nothing() {
    let image = png(&gradient(30, 30));
    for kind in KINDS {
        let f = open(kind).await;
        let staged = f.stage(&[&image], None).await.expect("staged");
        assert!(staged.thumbnail.is_some());
        assert_eq!(f.parts_left(), 1);
        f.backend.discard(staged).await;
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(f.blob_count().await, 0, "{kind:?}");

        // A request cancelled between the phases drops its stage: the part goes with it.
        let staged = f.stage(&[b"abandoned"], None).await.expect("staged");
        drop(staged);
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(f.blob_count().await, 0, "{kind:?}");
    }
}

#[tokio::test]
async fn a_commit_over_a_blob_a_sweep_removed_writes_it_again() {
    let image = png(&gradient(30, 30));
    for kind in KINDS {
        let f = open(kind).await;
        let first = f.stage(&[&image], None).await.expect("staged");
        let id = first.id.clone();
        let thumbnail = first.thumbnail.clone().expect("a thumbnail").id;
        f.backend.commit(first).await.expect("commit");

        // The second upload of the same bytes is staged (and, in the server, registered); then
        // a sweep that saw the first one unreferenced removes the files; then the commit.
        let second = f.stage(&[&image], None).await.expect("staged");
        f.lose(&id).await;
        f.lose(&thumbnail).await;
        f.backend.commit(second).await.expect("commit");
        assert_eq!(f.read_all(&id).await.expect("healed"), image, "{kind:?}");
        assert!(f.read_all(&thumbnail).await.is_some(), "{kind:?}");
        assert_eq!(f.blob_count().await, 2, "{kind:?}");
    }
}

#[tokio::test]
async fn parts_left_by_a_crash_are_swept_at_open() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("dir");
        let (f, swept) = reopen(kind, dir.path()).await;
        assert_eq!(swept, 0);
        std::fs::write(f.parts.join("dead.part"), b"half an upload").expect("part");
        let staged = f.stage(&[b"interrupted"], None).await.expect("staged");
        // A crash now: the staged part is neither committed nor dropped.
        std::mem::forget(staged);
        assert_eq!(f.parts_left(), 2);
        drop(f);
        let (f, swept) = reopen(kind, dir.path()).await;
        assert_eq!(swept, 2, "{kind:?}");
        assert_eq!(f.parts_left(), 0, "{kind:?}");
        assert_eq!(mode(&f.parts), 0o700, "{kind:?}");
    }
}

#[tokio::test]
async fn files_are_owner_only() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("media");
    let (f, _) = reopen(Kind::Fs, dir.path()).await;
    // Modes loosened by hand are made owner-only again at the next open.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let staged = f
        .stage(&[&png(&gradient(10, 10))], None)
        .await
        .expect("staged");
    assert_eq!(mode(staged.part.path()), 0o600);
    let (id, thumbnail) = (
        staged.id.clone(),
        staged.thumbnail.clone().expect("thumb").id,
    );
    f.backend.commit(staged).await.expect("commit");
    drop(f);
    let (f, _) = reopen(Kind::Fs, dir.path()).await;
    let MediaBackend::Fs(store) = &f.backend else {
        panic!("a filesystem backend");
    };
    assert_eq!(mode(&root), 0o700, "the root is made owner-only again");
    assert_eq!(mode(&root.join("blobs")), 0o700);
    assert_eq!(mode(&root.join("parts")), 0o700);
    for id in [&id, &thumbnail] {
        let path = store.blob_path_for_tests(id);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("shard")), 0o700);
    }

    // The object backend over a directory keeps its root and parts owner-only too.
    let (f, _) = reopen(Kind::File, dir.path()).await;
    assert_eq!(mode(&dir.path().join("objects")), 0o700);
    assert_eq!(mode(&f.parts), 0o700);
}

#[tokio::test]
async fn media_urls_are_checked() {
    let dir = tempfile::tempdir().expect("dir");
    let parts = dir.path().join("parts");
    for bad in [
        "",
        "ftp://host/x",
        "file://relative/path",
        "s3://",
        "s3:///prefix",
        "memory://x",
    ] {
        let opened = MediaBackend::open_url(bad, &parts).await;
        assert!(
            matches!(opened, Err(MediaError::Url { .. })),
            "{bad}: {opened:?}"
        );
    }
    // An S3 backend builds without a request: the bucket is first asked at the first upload.
    let (backend, _) = MediaBackend::open_url("s3://bucket/some/prefix", &parts)
        .await
        .expect("s3 builds");
    assert!(matches!(backend, MediaBackend::Object(_)));
}

#[tokio::test]
async fn thumbnails_are_made_a_few_at_a_time() {
    // More concurrent image uploads than permits: all finish, each with its thumbnail.
    let f = open(Kind::Memory).await;
    let image = png(&gradient(900, 600));
    let parts: [&[u8]; 1] = [&image];
    let staged =
        futures::future::join_all((0..THUMBNAILS_IN_FLIGHT_MAX * 3).map(|_| f.stage(&parts, None)))
            .await;
    for s in staged {
        let thumbnail = s.expect("staged").thumbnail.expect("a thumbnail");
        let decoded = image::load_from_memory(&thumbnail.bytes).expect("decodes");
        assert_eq!((decoded.width(), decoded.height()), (320, 213));
    }
    // The permits are the process's, so this holds across every test running beside this one.
    let peak = crate::thumb::tests::in_flight_peak();
    assert!(
        (1..=THUMBNAILS_IN_FLIGHT_MAX).contains(&peak),
        "{peak} decodes at once"
    );
}
