//! What a run cost the processes on this machine, read from `/proc` and
//! `pg_stat_database`: CPU ticks of PostgreSQL, RabbitMQ and docflow, and
//! commits.

use std::process::Command;
use std::time::Duration;

/// `(utime + stime, cutime + cstime)` of a process, in clock ticks.
pub fn ticks(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((n(11)? + n(12)?, n(13)? + n(14)?))
}

pub fn processes() -> Vec<(u32, String, u32)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, comm.trim().to_string(), ppid))
        })
        .collect()
}

/// CPU ticks of every process named `name`, plus what those whose parent
/// is not also `name` (the postmaster) collected from exited children.
pub fn cpu_of(name: &str) -> u64 {
    let all = processes();
    all.iter()
        .filter(|(_, c, _)| c == name)
        .map(|(pid, _, ppid)| {
            let (own, children) = ticks(*pid).unwrap_or_default();
            let root = !all.iter().any(|(p, c, _)| p == ppid && c == name);
            own + if root { children } else { 0 }
        })
        .sum()
}

/// CPU ticks of `pid` and its live children.
pub fn cpu_of_tree(pid: u32) -> u64 {
    let own = ticks(pid).map_or(0, |(o, _)| o);
    own + processes()
        .iter()
        .filter(|(_, _, ppid)| *ppid == pid)
        .map(|(p, _, _)| ticks(*p).map_or(0, |(o, c)| o + c))
        .sum::<u64>()
}

/// Commits of database `db` so far. PostgreSQL sends a backend's counts
/// at most once a second while it works, and an idle backend's within 10 s
/// (`PGSTAT_IDLE_INTERVAL`), so the reading waits that long: with less, the
/// last second of every pooled connection was missing (short runs read
/// fewer commits than uploads). The background tasks' few commits during
/// the wait are counted. `BENCH_STATS_WAIT_MS` shortens the wait for the
/// test command's smoke runs, whose counts are no measurement.
pub async fn commits(pool: &sqlx::PgPool, db: &str) -> i64 {
    let wait = std::env::var("BENCH_STATS_WAIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_500);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(db)
        .fetch_one(pool)
        .await
        .expect("xact_commit")
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`; 100 on Linux).
pub fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
