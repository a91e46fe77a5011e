//! The media type of an upload, from its first bytes (magic numbers), never from the client's
//! `Content-Type`; the client's word only refuses an upload that claims to be an image and is
//! not one.

use crate::MediaError;

/// How many leading bytes the sniffer looks at.
pub const SNIFF_BYTES_MAX: usize = 8 * 1024;

/// What the first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sniffed {
    pub content_type: &'static str,
    /// Safe to show inline in a browser: raster images, audio and video. Everything else is
    /// served as an attachment.
    pub inline_safe: bool,
}

/// Types that render as documents in a browser and may carry script, however they are named.
const SCRIPTABLE_MARKERS: [&[u8]; 6] = [
    b"<svg",
    b"<?xml",
    b"<html",
    b"<!doctype html",
    b"<script",
    b"%pdf",
];

/// The type of `head` (the upload's first bytes). A `declared` type starting with `image/` must
/// be matched by an image (an SVG counts, but is never inline), else `NotWhatWasDeclared`.
pub fn sniff(head: &[u8], declared: Option<&str>) -> Result<Sniffed, MediaError> {
    let lowered: Vec<u8> = head
        .iter()
        .take(SNIFF_BYTES_MAX)
        .skip_while(|b| b.is_ascii_whitespace())
        .take(64)
        .map(u8::to_ascii_lowercase)
        .collect();
    let scriptable = SCRIPTABLE_MARKERS.iter().any(|m| lowered.starts_with(m));
    let known = infer::get(&head[..head.len().min(SNIFF_BYTES_MAX)]);
    let sniffed = match known {
        Some(t) if !scriptable => {
            let inline = matches!(
                t.matcher_type(),
                infer::MatcherType::Image | infer::MatcherType::Audio | infer::MatcherType::Video
            ) && t.mime_type() != "image/svg+xml";
            Sniffed {
                content_type: t.mime_type(),
                inline_safe: inline,
            }
        }
        _ if lowered.starts_with(b"<svg") => Sniffed {
            content_type: "image/svg+xml",
            inline_safe: false,
        },
        _ => Sniffed {
            content_type: "application/octet-stream",
            inline_safe: false,
        },
    };
    if let Some(declared) = declared {
        let claims_image = declared.trim().to_ascii_lowercase().starts_with("image/");
        if claims_image && !sniffed.content_type.starts_with("image/") {
            return Err(MediaError::NotWhatWasDeclared {
                declared: declared.chars().take(64).collect(),
                sniffed: sniffed.content_type,
            });
        }
    }
    Ok(sniffed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = &[
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d,
    ];

    #[test]
    fn a_png_is_an_inline_image_whatever_it_was_called() {
        let s = sniff(PNG, Some("text/plain")).expect("sniffed");
        assert_eq!(s.content_type, "image/png");
        assert!(s.inline_safe);
        assert!(sniff(PNG, Some("image/png")).is_ok());
    }

    #[test]
    fn a_declared_image_that_is_not_one_is_refused() {
        let err = sniff(b"hello, world", Some("image/jpeg")).expect_err("refused");
        assert!(matches!(err, MediaError::NotWhatWasDeclared { .. }));
        // An SVG declared as one is kept, as an attachment only: it may carry script.
        let svg = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>";
        let s = sniff(svg, Some("image/svg+xml")).expect("an svg");
        assert_eq!((s.content_type, s.inline_safe), ("image/svg+xml", false));
    }

    #[test]
    fn script_carrying_documents_are_never_inline() {
        for doc in [
            &b"  <svg onload='x'></svg>"[..],
            b"<?xml version='1.0'?><svg/>",
            b"<!DOCTYPE html><p>hi",
            b"%PDF-1.7",
        ] {
            let s = sniff(doc, None).expect("sniffed");
            assert!(!s.inline_safe, "{:?} is inline", std::str::from_utf8(doc));
        }
        // A polyglot: PNG magic followed by HTML is still a PNG to a browser that sniffs, and
        // served as image/png with nosniff.
        let mut poly = PNG.to_vec();
        poly.extend_from_slice(b"<html><script>alert(1)</script>");
        assert_eq!(
            sniff(&poly, None).expect("sniffed").content_type,
            "image/png"
        );
    }

    #[test]
    fn unknown_bytes_are_an_octet_stream_attachment() {
        let s = sniff(b"just text", None).expect("sniffed");
        assert_eq!(
            (s.content_type, s.inline_safe),
            ("application/octet-stream", false)
        );
    }
}
