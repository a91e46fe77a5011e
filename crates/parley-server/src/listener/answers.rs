//! Answers written below the router, as raw HTTP/1.1 with the usual error body: the refusal
//! of a connection over a cap, and hyper's own answers to requests it cannot parse.

use parley_wire::{ErrorBody, ErrorCode};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The process holds as many connections as it may, and none of them is idle.
    Full,
    /// The client's address holds as many connections as one address may.
    PerAddress,
}

/// Seconds a refused client is told to wait (`Retry-After`): connections free up as the
/// timeouts close idle ones.
const REFUSAL_RETRY_AFTER_S: u32 = 1;

/// The 503 `UNAVAILABLE` a refused connection gets before it is closed. The code says
/// "retry", which is right: the refusal is about this moment, not about the request.
pub fn refusal(reason: Refusal) -> Vec<u8> {
    let message = match reason {
        Refusal::Full => "the server holds as many connections as it can; retry later",
        Refusal::PerAddress => "too many connections from this address; retry later",
    };
    raw_answer(
        "HTTP/1.1 503 Service Unavailable",
        ErrorCode::Unavailable.as_str(),
        message,
        &format!("retry-after: {REFUSAL_RETRY_AFTER_S}\r\n"),
    )
}

/// hyper answers a request it cannot parse by itself, with a status and no body: 400 for a
/// malformed head, 414 for a URL over 65,534 bytes, 431 for a head over its buffer. Given
/// the bytes hyper writes, answers the same status with the error body, or `None` when the
/// bytes are anything else. The head must be the whole write and declare no body, which no
/// answer of the router does: every refusal of the router carries a body.
pub fn rewrite_parse_error(written: &[u8]) -> Option<Vec<u8>> {
    let head = written.strip_suffix(b"\r\n\r\n")?;
    if !(head.starts_with(b"HTTP/1.1 ") || head.starts_with(b"HTTP/1.0 ")) {
        return None;
    }
    let status_line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let status_line = std::str::from_utf8(&head[..status_line_end]).ok()?;
    let headers = head[status_line_end..].to_ascii_lowercase();
    let declares_no_body = headers
        .split(|&b| b == b'\n')
        .any(|line| line.trim_ascii() == b"content-length: 0");
    if !declares_no_body || headers.windows(4).any(|w| w == b"\r\n\r\n") {
        return None;
    }
    let (code, message) = match status_line.get(9..12)? {
        "400" => (ErrorCode::BadRequest, "the request is not valid HTTP/1.1"),
        "414" => (
            ErrorCode::RequestTooLarge,
            "the request URL is over its limit of 65534 bytes",
        ),
        "431" => (
            ErrorCode::RequestTooLarge,
            "the request head is over its size limit",
        ),
        _ => return None,
    };
    Some(raw_answer(status_line, code.as_str(), message, ""))
}

/// A complete answer that closes the connection: `status_line`, the error body of `code`
/// and `message`, and `extra_headers` (each ending in CRLF).
fn raw_answer(status_line: &str, code: &str, message: &str, extra_headers: &str) -> Vec<u8> {
    // Serialising two strings into a fixed shape cannot fail; the fallback is never taken.
    let body = serde_json::to_vec(&ErrorBody::new(code, message)).unwrap_or_default();
    let mut answer = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n{extra_headers}\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(answer: &[u8]) -> (String, serde_json::Value) {
        let text = String::from_utf8(answer.to_vec()).expect("utf-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        let declared = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.parse::<usize>().ok());
        assert_eq!(declared, Some(body.len()), "{head}");
        (
            head.to_owned(),
            serde_json::from_str(body).expect("a JSON body"),
        )
    }

    #[test]
    fn a_long_url_answer_gets_its_error_body() {
        let hyper = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n";
        let answer = rewrite_parse_error(hyper).expect("rewritten");
        let (head, body) = split(&answer);
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("connection: close"));
        assert_eq!(body["error"]["code"], "REQUEST_TOO_LARGE");
        let bad = rewrite_parse_error(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(
            split(&bad.expect("rewritten")).1["error"]["code"],
            "BAD_REQUEST"
        );
    }

    #[test]
    fn answers_of_the_router_are_left_alone() {
        for written in [
            // A router refusal: it has a body.
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n"[..],
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 10\r\n\r\n{\"error\":1}"[..],
            // Other statuses, partial writes and bodies.
            &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"[..],
            &b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n"[..],
            &b"{\"error\":{}}"[..],
            &b""[..],
        ] {
            assert!(
                rewrite_parse_error(written).is_none(),
                "{}",
                String::from_utf8_lossy(written)
            );
        }
    }

    #[test]
    fn refusals_say_unavailable_and_when_to_retry() {
        for reason in [Refusal::Full, Refusal::PerAddress] {
            let (head, body) = split(&refusal(reason));
            assert!(head.starts_with("HTTP/1.1 503 "));
            assert!(head.contains("retry-after: 1"));
            assert_eq!(body["error"]["code"], "UNAVAILABLE");
        }
    }
}
