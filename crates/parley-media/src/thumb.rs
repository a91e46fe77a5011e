//! Images at staging: dimensions from the header, a decompression bomb refused before a pixel
//! of it is decoded, and a thumbnail decoded under memory limits, a few at a time.

use std::io::Cursor;
use std::path::Path;

use bytes::Bytes;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageReader, Limits};
use tokio::sync::Semaphore;

use crate::{BlobId, ImageSize, MediaError, Thumbnail};

/// Largest image side accepted, in pixels; a larger image is refused.
pub const IMAGE_SIDE_PX_MAX: u32 = 8192;
/// Most pixels an image may have (40 megapixels); a larger image is refused.
pub const IMAGE_PIXELS_MAX: u64 = 40_000_000;
/// Longest side of a thumbnail, in pixels.
pub const THUMBNAIL_SIDE_PX_MAX: u32 = 320;
/// Images decoded at once in the process: each may take up to [`IMAGE_DECODE_BYTES_MAX`], so
/// this bounds the memory thumbnails take whatever the number of uploads.
pub const THUMBNAILS_IN_FLIGHT_MAX: usize = 2;
/// Most memory one decode may allocate: 256 MiB, above a 40-megapixel RGBA image (160 MB); an
/// image needing more (16 bits per channel) keeps no thumbnail.
pub const IMAGE_DECODE_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// JPEG quality of opaque thumbnails: small files without visible blocks at 320 pixels.
const THUMBNAIL_JPEG_QUALITY: u8 = 80;

/// The types the `image` crate is built here to read; only these get dimensions and thumbnails.
const DECODED_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The permits of [`THUMBNAILS_IN_FLIGHT_MAX`], shared by every backend of the process.
static DECODES: Semaphore = Semaphore::const_new(THUMBNAILS_IN_FLIGHT_MAX);

#[derive(Debug, Default)]
pub(crate) struct Examined {
    pub(crate) image: Option<ImageSize>,
    pub(crate) thumbnail: Option<Thumbnail>,
}

/// What the header says, before any pixel is decoded.
#[derive(Debug, Clone, Copy)]
struct Header {
    width: u32,
    height: u32,
    orientation: Orientation,
}

impl Header {
    fn too_large(&self) -> bool {
        self.width > IMAGE_SIDE_PX_MAX
            || self.height > IMAGE_SIDE_PX_MAX
            || u64::from(self.width) * u64::from(self.height) > IMAGE_PIXELS_MAX
    }

    fn displayed(&self) -> ImageSize {
        if turns_a_quarter(self.orientation) {
            ImageSize {
                width: self.height,
                height: self.width,
            }
        } else {
            ImageSize {
                width: self.width,
                height: self.height,
            }
        }
    }
}

fn turns_a_quarter(orientation: Orientation) -> bool {
    matches!(
        orientation,
        Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH
    )
}

/// Examines the staged upload at `part` of the sniffed `content_type`. Anything but a PNG,
/// JPEG, GIF or WebP, or one whose header does not parse, is kept as a plain file: nothing to
/// report. An image past the limits is [`MediaError::ImageTooLarge`]. Otherwise it is decoded
/// for a thumbnail; a decode that fails only leaves it without one.
pub(crate) async fn examine(part: &Path, content_type: &str) -> Result<Examined, MediaError> {
    if !DECODED_TYPES.contains(&content_type) {
        return Ok(Examined::default());
    }
    let path = part.to_owned();
    let header = match tokio::task::spawn_blocking(move || read_header(&path)).await {
        Ok(header) => header?,
        Err(e) => {
            // A parser that panicked on these bytes has told nothing; the file is kept as one.
            tracing::warn!(error = %e, "reading an image header failed");
            None
        }
    };
    let Some(header) = header else {
        return Ok(Examined::default());
    };
    if header.too_large() {
        return Err(MediaError::ImageTooLarge {
            width: header.width,
            height: header.height,
        });
    }
    // The permit moves into the blocking task: a request cancelled while its image decodes
    // cannot free the permit before the memory it stands for is freed.
    let permit = DECODES
        .acquire()
        .await
        .map_err(|e| MediaError::Io(std::io::Error::other(e)))?;
    let path = part.to_owned();
    let made = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        #[cfg(test)]
        let _counted = tests::InFlight::enter();
        make_thumbnail(&path, header.orientation)
    })
    .await;
    let thumbnail = match made {
        Ok(Ok(thumbnail)) => Some(thumbnail),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "an image whose header parsed did not decode; no thumbnail");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "decoding an image failed; no thumbnail");
            None
        }
    };
    Ok(Examined {
        image: Some(header.displayed()),
        thumbnail,
    })
}

/// The header's dimensions and orientation, or `None` when it does not parse. Only the header
/// (and, for a JPEG, the file's bytes, at most an upload's limit) is read, so no limit is set
/// here: the dimensions are what is checked.
fn read_header(path: &Path) -> std::io::Result<Option<Header>> {
    let mut reader = ImageReader::open(path)?.with_guessed_format()?;
    reader.no_limits();
    let mut decoder = match reader.into_decoder() {
        Ok(decoder) => decoder,
        Err(e) => {
            tracing::debug!(error = %e, "an image's header did not parse; kept as a file");
            return Ok(None);
        }
    };
    let (width, height) = decoder.dimensions();
    // A bad EXIF block says nothing about the pixels: the image is shown as it is stored.
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    Ok(Some(Header {
        width,
        height,
        orientation,
    }))
}

/// Limits of one decode: the sides the header was checked against (so a header that lied is
/// stopped by the decoder too) and [`IMAGE_DECODE_BYTES_MAX`] of memory.
fn decode_limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = Some(IMAGE_SIDE_PX_MAX);
    limits.max_image_height = Some(IMAGE_SIDE_PX_MAX);
    limits.max_alloc = Some(IMAGE_DECODE_BYTES_MAX);
    limits
}

#[derive(Debug, thiserror::Error)]
enum ThumbnailError {
    #[error(transparent)]
    Image(#[from] image::ImageError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Decodes the image at `path` and makes its thumbnail, turned as its EXIF orientation says.
fn make_thumbnail(path: &Path, orientation: Orientation) -> Result<Thumbnail, ThumbnailError> {
    let mut reader = ImageReader::open(path)?.with_guessed_format()?;
    reader.limits(decode_limits());
    let decoder = reader.into_decoder()?;
    // The decoder's own limits do not count the image buffer itself; as `ImageReader::decode`
    // does, reserve it before anything is allocated.
    let mut budget = decode_limits();
    budget.reserve(decoder.total_bytes())?;
    let image = DynamicImage::from_decoder(decoder)?;
    let (width, height) = fit(image.width(), image.height(), THUMBNAIL_SIDE_PX_MAX);
    // Scaled first, turned after: turning the small image is cheap, the large one is a copy.
    let mut small = image.thumbnail_exact(width, height);
    drop(image);
    small.apply_orientation(orientation);
    encode(&small)
}

/// The size of `width` by `height` scaled to fit `side_max` on its longer side, the aspect kept
/// (each side at least one pixel); an image already within it keeps its size.
pub(crate) fn fit(width: u32, height: u32, side_max: u32) -> (u32, u32) {
    let longer = width.max(height);
    if longer <= side_max {
        return (width.max(1), height.max(1));
    }
    let scale = |side: u32| {
        let scaled =
            (u64::from(side) * u64::from(side_max) + u64::from(longer) / 2) / u64::from(longer);
        u32::try_from(scaled).unwrap_or(side_max).clamp(1, side_max)
    };
    (scale(width), scale(height))
}

/// A JPEG when every pixel is opaque (smaller, and what photos are), a PNG when any pixel is
/// see-through, since JPEG would paint it black.
fn encode(small: &DynamicImage) -> Result<Thumbnail, ThumbnailError> {
    let mut out = Cursor::new(Vec::new());
    let see_through = small.color().has_alpha() && small.to_rgba8().pixels().any(|p| p[3] < 255);
    let content_type = if see_through {
        small
            .to_rgba8()
            .write_with_encoder(PngEncoder::new(&mut out))?;
        "image/png"
    } else {
        small
            .to_rgb8()
            .write_with_encoder(JpegEncoder::new_with_quality(
                &mut out,
                THUMBNAIL_JPEG_QUALITY,
            ))?;
        "image/jpeg"
    };
    let bytes = Bytes::from(out.into_inner());
    Ok(Thumbnail {
        id: BlobId::of(&bytes),
        size: bytes.len() as u64,
        content_type,
        bytes,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
    static IN_FLIGHT_PEAK: AtomicUsize = AtomicUsize::new(0);

    /// Counts a decode while it runs, so tests can see how many ever ran at once.
    pub(crate) struct InFlight;

    impl InFlight {
        pub(crate) fn enter() -> Self {
            let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
            IN_FLIGHT_PEAK.fetch_max(now, Ordering::SeqCst);
            Self
        }
    }

    impl Drop for InFlight {
        fn drop(&mut self) {
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The most decodes that ever ran at once in this test process.
    pub(crate) fn in_flight_peak() -> usize {
        IN_FLIGHT_PEAK.load(Ordering::SeqCst)
    }

    #[test]
    fn thumbnails_fit_the_longer_side_and_keep_the_aspect() {
        assert_eq!(fit(2000, 1000, 320), (320, 160));
        assert_eq!(fit(1000, 2000, 320), (160, 320));
        assert_eq!(fit(100, 50, 320), (100, 50));
        assert_eq!(fit(320, 320, 320), (320, 320));
        assert_eq!(fit(8192, 1, 320), (320, 1));
        assert_eq!(fit(3, 1000, 320), (1, 320));
    }

    #[test]
    fn bombs_are_judged_by_side_and_by_area() {
        let header = |width, height| Header {
            width,
            height,
            orientation: Orientation::NoTransforms,
        };
        assert!(!header(8192, 4882).too_large());
        assert!(header(8193, 10).too_large());
        assert!(header(10, 8193).too_large());
        assert!(header(8000, 8000).too_large());
        assert!(header(100_000, 100_000).too_large());
        assert_eq!(
            Header {
                width: 40,
                height: 30,
                orientation: Orientation::Rotate90,
            }
            .displayed(),
            ImageSize {
                width: 30,
                height: 40
            }
        );
    }
}
