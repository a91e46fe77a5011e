//! Browser origins (RFC 6454): `scheme://host[:port]`, compared by scheme, host and port, with
//! the scheme's default port when none is written. A page may open a WebSocket from the
//! server's own origin or from one of the allow-list (`--ws-allowed-origin`).

use std::fmt;

/// An origin as a browser sends it in the `Origin` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Lower case.
    scheme: String,
    /// Lower case; an IPv6 address keeps its brackets.
    host: String,
    /// The written port, else the scheme's default; `None` for a scheme without one.
    port: Option<u16>,
}

/// An allow-list entry that is neither `*` nor an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an origin: write scheme://host[:port], e.g. https://chat.example.com")]
pub struct BadOrigin(pub String);

/// The entry of the allow-list that admits every origin.
pub const ANY_ORIGIN: &str = "*";

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// `host[:port]` of an origin or of a `Host` header: the host in lower case and the written
/// port. `None` when it is malformed.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (format!("[{v6}]"), port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~[]:".contains(&b));
    if !host_ok {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    Some((host.to_ascii_lowercase(), port))
}

impl Origin {
    /// Parses `scheme://host[:port]`; anything more (a path, user information, `null`) is not
    /// an origin.
    pub fn parse(text: &str) -> Option<Self> {
        let (scheme, authority) = text.split_once("://")?;
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
        if !scheme_ok {
            return None;
        }
        let scheme = scheme.to_ascii_lowercase();
        let (host, port) = split_authority(authority)?;
        let port = port.or_else(|| default_port(&scheme));
        Some(Self { scheme, host, port })
    }

    /// Whether this is the origin of a page served by this server, as named by the request's
    /// `Host` header: `http` or `https` (a TLS proxy may stand in front), the same host, and
    /// the same port, a `Host` without one meaning the scheme's default.
    pub fn is_served_at(&self, host_header: &str) -> bool {
        let Some((host, port)) = split_authority(host_header) else {
            return false;
        };
        matches!(self.scheme.as_str(), "http" | "https")
            && self.host == host
            && self.port == port.or_else(|| default_port(&self.scheme))
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Checks an allow-list: every entry is `*` or an origin.
pub fn check_allow_list(entries: &[String]) -> Result<(), BadOrigin> {
    match entries
        .iter()
        .find(|e| e.as_str() != ANY_ORIGIN && Origin::parse(e).is_none())
    {
        Some(bad) => Err(BadOrigin(bad.clone())),
        None => Ok(()),
    }
}

/// Whether a page of `origin` may open a WebSocket to a server reached as `host_header`.
pub fn is_allowed(origin: &str, host_header: &str, allow_list: &[String]) -> bool {
    if allow_list.iter().any(|a| a == ANY_ORIGIN) {
        return true;
    }
    let Some(origin) = Origin::parse(origin) else {
        return false;
    };
    origin.is_served_at(host_header)
        || allow_list
            .iter()
            .filter_map(|a| Origin::parse(a))
            .any(|allowed| allowed == origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_with_default_ports() {
        let o = Origin::parse("HTTPS://Chat.Example.com").map(|o| o.to_string());
        assert_eq!(o.as_deref(), Some("https://chat.example.com:443"));
        let o = Origin::parse("http://[::1]:8080").map(|o| o.to_string());
        assert_eq!(o.as_deref(), Some("http://[::1]:8080"));
        let o = Origin::parse("app://x").map(|o| o.to_string());
        assert_eq!(o.as_deref(), Some("app://x"));
        for bad in [
            "null",
            "",
            "example.com",
            "http://",
            "http://a/b",
            "http://u@a",
            "http://a:",
            "http://a:x",
            "http://a:70000",
            "http://a?b",
            "1http://a",
            "ht tp://a",
        ] {
            assert_eq!(Origin::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_own_origin_needs_scheme_host_and_port() {
        let own = |origin: &str, host: &str| is_allowed(origin, host, &[]);
        assert!(own("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(own("https://chat.example", "chat.example"));
        assert!(own("http://chat.example", "chat.example"));
        assert!(own("https://chat.example:443", "Chat.Example"));
        assert!(own("http://[::1]:8080", "[::1]:8080"));
        assert!(!own("evil://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(!own("ws://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(!own("http://127.0.0.1:8081", "127.0.0.1:8080"));
        assert!(!own("http://127.0.0.1", "127.0.0.1:8080"));
        assert!(!own("http://chat.example:8080", "chat.example"));
        assert!(!own("http://other.example:8080", "chat.example:8080"));
        assert!(!own("http://127.0.0.1:8080", ""));
    }

    #[test]
    fn the_allow_list_compares_whole_origins() {
        let list = vec!["https://app.example".to_owned(), "app://x".to_owned()];
        let allowed = |origin: &str| is_allowed(origin, "server:8080", &list);
        assert!(allowed("https://app.example"));
        assert!(allowed("https://APP.example:443"));
        assert!(allowed("app://x"));
        assert!(!allowed("http://app.example"));
        assert!(!allowed("https://app.example:8443"));
        assert!(!allowed("https://app.example.evil"));
        assert!(!allowed("app://x:1"));
        assert!(is_allowed("evil://x", "h", &["*".to_owned()]));
    }

    #[test]
    fn allow_lists_are_checked() {
        assert!(check_allow_list(&["*".into(), "https://a.example:8443".into()]).is_ok());
        assert_eq!(
            check_allow_list(&["a.example".into()]),
            Err(BadOrigin("a.example".into()))
        );
        assert!(check_allow_list(&["https://a.example/".into()]).is_err());
    }
}
