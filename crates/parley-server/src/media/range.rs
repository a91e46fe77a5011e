//! The `Range` header of a download: one `bytes=` range (RFC 9110 §14.1.2). A header this
//! server does not serve as a range (several ranges, another unit, bad syntax) is ignored and
//! the whole file is sent, as the RFC allows.

/// What a `Range` header asks of a file of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// The whole file (no header, or one this server ignores).
    Whole,
    /// Bytes `start..end` (end exclusive), within the file.
    Part { start: u64, end: u64 },
    /// A range that lies outside the file: 416.
    Unsatisfiable,
}

pub fn wanted(header: Option<&str>, len: u64) -> Wanted {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Wanted::Whole;
    };
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Wanted::Whole;
    };
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (first.trim(), last.trim()) {
        ("", suffix) => match number(suffix) {
            Some(0) => Wanted::Unsatisfiable,
            Some(_) if len == 0 => Wanted::Unsatisfiable,
            Some(n) => Wanted::Part {
                start: len.saturating_sub(n),
                end: len,
            },
            None => Wanted::Whole,
        },
        (start, "") => match number(start) {
            Some(s) if s < len => Wanted::Part { start: s, end: len },
            Some(_) => Wanted::Unsatisfiable,
            None => Wanted::Whole,
        },
        (start, last) => match (number(start), number(last)) {
            (Some(s), Some(l)) if s > l => Wanted::Whole,
            (Some(s), Some(_)) if s >= len => Wanted::Unsatisfiable,
            (Some(s), Some(l)) => Wanted::Part {
                start: s,
                end: l.saturating_add(1).min(len),
            },
            _ => Wanted::Whole,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_a_ten_byte_file() {
        let part = |start, end| Wanted::Part { start, end };
        assert_eq!(wanted(None, 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=0-3"), 10), part(0, 4));
        assert_eq!(wanted(Some("bytes=5-"), 10), part(5, 10));
        assert_eq!(wanted(Some("bytes=-3"), 10), part(7, 10));
        assert_eq!(wanted(Some("bytes=-30"), 10), part(0, 10));
        assert_eq!(wanted(Some("bytes=8-100"), 10), part(8, 10));
        assert_eq!(wanted(Some("bytes=10-"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=10-12"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-0"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=0-1,4-5"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("items=0-1"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=5-2"), 10), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=x-2"), 10), Wanted::Whole);
    }
}
