//! Children that never outlive the driver: killed when their handle is dropped (an error, the
//! end of a run) and, through `PR_SET_PDEATHSIG`, when the driver itself dies.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

/// Starts `program args…` with stderr appended to `log` (stdout too unless `piped_stdio`, which
/// pipes stdin and stdout for a line protocol).
pub fn child(
    program: &Path,
    args: &[String],
    log: &Path,
    piped_stdio: bool,
) -> anyhow::Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stderr(log_file.try_clone()?)
        .kill_on_drop(true);
    if piped_stdio {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    } else {
        cmd.stdin(Stdio::null()).stdout(log_file);
    }
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl, which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {}", program.display()))
}
