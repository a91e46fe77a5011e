//! CPU time of processes on this machine, read from `/proc`: the server's, PostgreSQL's
//! backends', and the benchmark's own.

use std::collections::HashMap;

/// Linux reports process CPU times in ticks of 1/100 s (USER_HZ) on every architecture Parley
/// targets.
const CLOCK_TICKS_PER_S: u64 = 100;

/// User plus system CPU time of one process, in milliseconds.
pub fn process_cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it are positional (proc(5)).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1000 / CLOCK_TICKS_PER_S)
}

/// CPU time of the PostgreSQL processes, in milliseconds, by pid: every process named
/// `postgres`, or with `database` only the backends serving it (their title names it).
pub fn postgres_cpu_ms(database: Option<&str>) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let serves = |db: &str| {
            let title = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            // "postgres: [<cluster>: ]<user> <database> <client> <state>", NUL-padded.
            title
                .split(|c: char| c.is_whitespace() || c == '\0')
                .any(|word| word == db)
        };
        if comm.trim() == "postgres" && database.is_none_or(serves) {
            if let Some(ms) = process_cpu_ms(pid) {
                out.insert(pid, ms);
            }
        }
    }
    out
}

/// PostgreSQL CPU spent between two readings; processes that started in between count whole.
pub fn postgres_delta_ms(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .map(|(pid, ms)| ms.saturating_sub(before.get(pid).copied().unwrap_or(0)))
        .sum()
}

/// CPU times read at one moment: the server's and the benchmark's processes, and PostgreSQL's.
pub struct CpuReadings {
    server_ms: Option<u64>,
    bench_ms: Option<u64>,
    postgres_ms: HashMap<u32, u64>,
}

/// CPU spent between two readings.
pub struct CpuSpent {
    /// `None` without a server pid, or when its `/proc` entry could not be read.
    pub server_ms: Option<u64>,
    pub bench_ms: Option<u64>,
    pub postgres_ms: u64,
}

impl CpuReadings {
    /// Reads the server `server_pid`, this process, and PostgreSQL's processes (only the
    /// backends of `postgres_database` when given).
    pub fn now(server_pid: Option<u32>, postgres_database: Option<&str>) -> Self {
        Self {
            server_ms: server_pid.and_then(process_cpu_ms),
            bench_ms: process_cpu_ms(std::process::id()),
            postgres_ms: postgres_cpu_ms(postgres_database),
        }
    }

    /// What was spent from `before` to this reading.
    pub fn since(&self, before: &CpuReadings) -> CpuSpent {
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        CpuSpent {
            server_ms: delta(before.server_ms, self.server_ms),
            bench_ms: delta(before.bench_ms, self.bench_ms),
            postgres_ms: postgres_delta_ms(&before.postgres_ms, &self.postgres_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_times_are_read_from_proc() {
        let me = std::process::id();
        // Burn a little CPU so the reading is positive on any clock.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        let ms = process_cpu_ms(me).expect("own /proc/<pid>/stat");
        assert!(ms > 0, "cpu ms {ms}");
        assert_eq!(process_cpu_ms(u32::MAX), None);
        let before = HashMap::from([(1, 10), (2, 5)]);
        let after = HashMap::from([(1, 15), (3, 7)]);
        assert_eq!(postgres_delta_ms(&before, &after), 12);
    }

    #[test]
    fn a_window_without_a_server_pid_has_no_server_figure() {
        let before = CpuReadings::now(None, Some("no such database"));
        let spent = CpuReadings::now(None, Some("no such database")).since(&before);
        assert_eq!(spent.server_ms, None);
        assert_eq!(spent.postgres_ms, 0, "no backend serves that database");
        assert!(spent.bench_ms.is_some(), "this process is always readable");
    }
}
