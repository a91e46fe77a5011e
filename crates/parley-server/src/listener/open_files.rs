//! The process's open-file limit (`RLIMIT_NOFILE`) and the connection cap it leaves room for.
//!
//! Every connection holds one file descriptor. A process that accepts connections until the
//! kernel refuses (`EMFILE`) can no longer open a store connection, answer a health probe or
//! accept anyone at all. So the cap on connections stays a reserve below the limit, and the
//! files the store, the bus and the health probes need are always there.

use std::io;

/// Most descriptors kept back from connections, for the store's pool, the bus, logs and the
/// probes that arrive while the cap is reached.
pub const OPEN_FILES_RESERVE_MAX: u64 = 256;

/// The soft open-file limit of this process; `None` where there is none or it is unknown.
pub fn soft_limit() -> Option<u64> {
    current()
        .ok()
        .map(|(soft, _)| soft)
        .filter(|&soft| soft != UNLIMITED)
}

/// Connections allowed at once: the configured cap, lowered to stay a reserve below the
/// open-file limit (a quarter of the limit, at most [`OPEN_FILES_RESERVE_MAX`]). Never 0.
pub fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let Some(limit) = open_files else {
        return configured.max(1);
    };
    let reserve = (limit / 4).min(OPEN_FILES_RESERVE_MAX);
    let room = usize::try_from(limit - reserve).unwrap_or(usize::MAX);
    configured.min(room).max(1)
}

/// Raises the soft open-file limit to the hard one, as far as the kernel allows, and answers
/// the soft limit in effect afterwards. The soft limit is often far below the hard one (1,024
/// against 524,288 on common systems), and a server that keeps it holds far fewer clients than
/// the operator allowed.
pub fn raise_soft_limit() -> io::Result<u64> {
    let (soft, hard) = current()?;
    if soft >= hard {
        return Ok(soft);
    }
    match set_soft(hard) {
        Ok(()) => Ok(hard),
        // An unlimited hard limit is refused as a soft one above the kernel's `nr_open`.
        Err(_) => Ok(soft),
    }
}

// `rlim_t` is `u64` on 64-bit targets and narrower on some 32-bit ones: the casts are needed
// there and no-ops here.
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)]
const UNLIMITED: u64 = libc::RLIM_INFINITY as u64;
#[cfg(not(unix))]
const UNLIMITED: u64 = u64::MAX;

#[cfg(unix)]
#[allow(clippy::unnecessary_cast)]
fn current() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` into the struct it is given and keeps no pointer.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((limit.rlim_cur as u64, limit.rlim_max as u64))
}

#[cfg(unix)]
fn set_soft(soft: u64) -> io::Result<()> {
    let (_, hard) = current()?;
    let limit = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: `setrlimit` reads one `rlimit` from the struct it is given and keeps no pointer.
    let status = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(unix))]
fn current() -> io::Result<(u64, u64)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no RLIMIT_NOFILE",
    ))
}

#[cfg(not(unix))]
fn set_soft(_soft: u64) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no RLIMIT_NOFILE",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_a_reserve_below_the_open_file_limit() {
        assert_eq!(connection_cap(10_000, Some(1_024)), 768);
        assert_eq!(connection_cap(10_000, Some(65_536)), 10_000);
        assert_eq!(connection_cap(100_000, Some(65_536)), 65_280);
        assert_eq!(connection_cap(500, Some(1_024)), 500);
        // A tiny limit keeps three quarters for connections, and never nothing.
        assert_eq!(connection_cap(10_000, Some(64)), 48);
        assert_eq!(connection_cap(10_000, Some(1)), 1);
        assert_eq!(connection_cap(10_000, None), 10_000);
    }

    #[test]
    fn this_process_has_a_limit_and_keeps_it_when_raised() {
        let before = soft_limit().expect("a soft open-file limit");
        let after = raise_soft_limit().expect("the limit after raising");
        assert!(after >= before);
    }
}
