//! A child's CPU time and memory, read from outside without disturbing it.
//!
//! CPU comes from the process's CPU-time clock (`clock_getcpuclockid`): the same user + system
//! time `getrusage` reports, but in nanoseconds, where `/proc/PID/stat` counts 10 ms ticks (a
//! 10,000-object sync takes a few of those), and including threads that have exited, which a sum
//! over `/proc/PID/task/*` would lose.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// User + system CPU time of process `pid` so far.
pub fn cpu(pid: u32) -> anyhow::Result<Duration> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid out-pointer for the call's duration.
    let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) };
    if rc != 0 {
        bail!(
            "the CPU clock of process {pid}: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call's duration.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        bail!(
            "reading the CPU clock of process {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Resident memory now and at its peak, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mem {
    pub rss: u64,
    pub hwm: u64,
}

pub fn mem(pid: u32) -> anyhow::Result<Mem> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| kb_field(&text, &path, name);
    Ok(Mem {
        rss: field("VmRSS:")?,
        hwm: field("VmHWM:")?,
    })
}

/// The `name` line of a `/proc` file of sizes in kB (`VmRSS:   123 kB`), in bytes.
fn kb_field(text: &str, path: &str, name: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .with_context(|| format!("{path} has no {name}"))?;
    let kb = line
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .with_context(|| format!("{path}: {name}{line} is not a size in kB"))?;
    Ok(kb * 1024)
}

/// Proportional set size (`/proc/PID/smaps_rollup`), in bytes: each shared page divided among
/// the processes that map it. Several processes of one binary share its code, so their summed
/// RSS counts it once per process; their summed PSS counts it once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pss {
    pub total: u64,
    pub anon: u64,
    pub file: u64,
}

pub fn pss(pid: u32) -> anyhow::Result<Pss> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| kb_field(&text, &path, name);
    Ok(Pss {
        total: field("Pss:")?,
        anon: field("Pss_Anon:")?,
        file: field("Pss_File:")?,
    })
}

/// Waits until the process has been (almost) idle for one `window` (under 1 % of a core), so
/// that work still queued when its last event was seen (a reconcile, a store update) is inside
/// the phase's CPU; returns its CPU time then.
pub async fn settle(pid: u32, window: Duration, deadline: Duration) -> anyhow::Result<Duration> {
    settle_all(&[pid], window, deadline).await
}

/// [`settle`] for several processes together: idle means their summed CPU grew by under 1 % of
/// a core over the window; returns their summed CPU time then.
pub async fn settle_all(
    pids: &[u32],
    window: Duration,
    deadline: Duration,
) -> anyhow::Result<Duration> {
    let until = Instant::now() + deadline;
    let mut before = cpu_sum(pids)?;
    loop {
        tokio::time::sleep(window).await;
        let now = cpu_sum(pids)?;
        if now.saturating_sub(before) < window / 100 {
            return Ok(now);
        }
        if Instant::now() > until {
            let who = match pids {
                [one] => format!("process {one}"),
                _ => format!("{} processes", pids.len()),
            };
            bail!(
                "{who} did not go idle within {deadline:?} (used {:?} in the last {window:?})",
                now - before
            );
        }
        before = now;
    }
}

/// The summed CPU time of `pids`.
pub fn cpu_sum(pids: &[u32]) -> anyhow::Result<Duration> {
    pids.iter().map(|&p| cpu(p)).sum()
}
