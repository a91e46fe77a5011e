//! Resident memory of a process, read from `/proc/<pid>/status`.

/// `VmRSS` of process `pid` in bytes; `None` when its `/proc` entry cannot be read.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    rss_bytes_of(&status)
}

/// The `VmRSS:   1234 kB` line of a status file, in bytes.
fn rss_bytes_of(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_from_proc() {
        assert_eq!(
            rss_bytes_of("Name:\tx\nVmRSS:\t   2048 kB\n"),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(rss_bytes_of("Name:\tx\n"), None);
        let own = process_rss_bytes(std::process::id()).expect("own /proc/<pid>/status");
        assert!(own > 1024 * 1024, "rss {own}");
        assert_eq!(process_rss_bytes(u32::MAX), None);
    }
}
