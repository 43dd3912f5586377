//! Where Cranelift runs on a compile-cache miss: in this process, or in a child process.
//!
//! Compiling a large component takes Cranelift hundreds of megabytes (a 19 MB CPython component
//! made by componentize-py: about 370 MB), and the allocator keeps most of it for the life of
//! the process. A child process gives all of it back to the system when it exits; the parent then
//! maps the artifact the child wrote to the compile cache, exactly as a start with a warm cache
//! does, so a cold start leaves what a warm one leaves.
//!
//! The child is `EXE compile --cache-dir DIR -` (the `host` binary's `host compile`), reading the
//! component from its standard input: it compiles exactly the bytes the parent read, whatever
//! happens to the file meanwhile. It builds its engine with the same code-generation settings as
//! the parent's (the pooling allocator and the memory sizes do not change the generated code,
//! so they are not passed; a unit test of the cache key checks that), so its cache key is the
//! parent's. Its standard error is captured and reported in one line when it fails.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a child compile may take by default: a CPython component compiles in about 10 s on
/// one core; a pod with a small CPU share may take many times that.
pub const DEFAULT_CHILD_TIMEOUT: Duration = Duration::from_secs(600);

/// The exit status with which `host compile` says it compiled but could not write the cache:
/// the parent then compiles in process, as it would with an unwritable cache.
pub const EXIT_CACHE_NOT_WRITTEN: i32 = 3;

/// Where components are compiled on a compile-cache miss.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Compiler {
    /// In this process (the default, and always when there is no cache directory).
    #[default]
    InProcess,
    /// In a child process, `exe compile --cache-dir DIR -` with the component on its standard
    /// input (`exe` is the `host` binary), within `timeout`; the parent then loads the artifact
    /// from the cache. If the process cannot be started, the component is compiled in process,
    /// with one warning.
    Child {
        /// The program: the `host` binary (`std::env::current_exe()` in the binary itself).
        exe: PathBuf,
        /// How long the compile may take before the child is killed and the load fails.
        timeout: Duration,
    },
}

impl Compiler {
    /// A child process running `exe`, with the default timeout.
    pub fn child(exe: impl Into<PathBuf>) -> Self {
        Compiler::Child {
            exe: exe.into(),
            timeout: DEFAULT_CHILD_TIMEOUT,
        }
    }
}

/// A child compile that succeeded.
#[derive(Debug)]
pub(crate) struct ChildReport {
    /// From spawn to exit.
    pub(crate) elapsed: Duration,
    /// Its report line (`compiled <stdin> in 6.71 s (peak RSS 180 MiB)`).
    pub(crate) said: String,
}

/// Why a child compile did not produce a cache entry.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ChildError {
    /// The process could not be started (the parent compiles in process instead).
    Spawn(String),
    /// It compiled, but could not write the cache (the parent compiles in process instead).
    CacheNotWritten(String),
    /// The component did not compile, or the process was killed or ran past its time.
    Failed(String),
}

/// Compiles `wasm` in `exe compile --cache-dir cache_dir -`.
pub(crate) fn compile_in_child(
    exe: &Path,
    timeout: Duration,
    cache_dir: &Path,
    wasm: &[u8],
) -> Result<ChildReport, ChildError> {
    let mut command = Command::new(exe);
    command
        .arg("compile")
        .arg("--cache-dir")
        .arg(cache_dir)
        .arg("-")
        // Only what goes wrong: the parent reports it.
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1");
    run(command, wasm, timeout)
}

/// How much of the child's output is kept (the rest is read and dropped, so it never stalls).
const OUTPUT_KEPT: u64 = 16 << 10;

/// Runs `command` with `input` on its standard input, its output captured, within `timeout`.
pub(crate) fn run(
    mut command: Command,
    input: &[u8],
    timeout: Duration,
) -> Result<ChildReport, ChildError> {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ChildError::Spawn(e.to_string()))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (status, out, err) = std::thread::scope(|s| {
        // A child that exits early (a refused component) closes its end: the write then fails,
        // which is not the error to report.
        s.spawn(move || {
            if let Some(mut w) = stdin {
                let _ = w.write_all(input);
            }
        });
        let out = s.spawn(move || read_kept(stdout));
        let err = s.spawn(move || read_kept(stderr));
        let status = wait_until(&mut child, started + timeout);
        (
            status,
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        )
    });
    let status = match status {
        Ok(Some(status)) => status,
        Ok(None) => {
            return Err(ChildError::Failed(format!(
                "no result within {} s; stopped it{}",
                timeout.as_secs_f64(),
                said(&err).map_or(String::new(), |e| format!(" ({e})"))
            )))
        }
        Err(e) => return Err(ChildError::Failed(format!("cannot wait for it: {e}"))),
    };
    if status.success() {
        return Ok(ChildReport {
            elapsed: started.elapsed(),
            said: said(&out).unwrap_or_default(),
        });
    }
    let why = said(&err).unwrap_or_else(|| describe(status));
    match status.code() {
        Some(EXIT_CACHE_NOT_WRITTEN) => Err(ChildError::CacheNotWritten(why)),
        Some(_) => Err(ChildError::Failed(why)),
        None => Err(ChildError::Failed(match said(&err) {
            Some(e) => format!("{} ({e})", describe(status)),
            None => describe(status),
        })),
    }
}

/// Waits for `child` until `deadline`; past it, kills it and returns `None`.
fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = child.kill();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn read_kept(r: Option<impl Read>) -> String {
    let Some(r) = r else { return String::new() };
    let mut kept = Vec::new();
    let mut r = r.take(OUTPUT_KEPT);
    let _ = r.read_to_end(&mut kept);
    let _ = std::io::copy(&mut r.into_inner(), &mut std::io::sink());
    String::from_utf8_lossy(&kept).into_owned()
}

/// The child's output as one line: its non-empty lines joined, `error: <stdin>: ` dropped (the
/// parent names the file itself); `None` when it said nothing.
fn said(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .map(|l| {
            l.strip_prefix(STDIN_NAME)
                .and_then(|l| l.strip_prefix(": "))
                .unwrap_or(l)
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// How `host compile` names its standard input in what it prints.
pub const STDIN_NAME: &str = "<stdin>";

fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        match status.signal() {
            Some(9) => return "killed by signal 9 (SIGKILL; out of memory?)".into(),
            Some(n) => return format!("killed by signal {n}"),
            None => {}
        }
    }
    match status.code() {
        Some(c) => format!("exit status {c}"),
        None => status.to_string(),
    }
}

/// The process's peak resident set so far (`VmHWM`), where the system reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    const BOUND: Duration = Duration::from_secs(20);

    #[test]
    fn a_child_that_succeeds_reports_its_line_having_read_all_its_input() {
        // Input larger than a pipe's buffer: the child reads it all, counts it and answers.
        let input = vec![7u8; 1 << 20];
        let r = run(
            sh("n=$(wc -c); echo \"compiled <stdin>: $n bytes\""),
            &input,
            BOUND,
        )
        .expect("success");
        assert_eq!(r.said, "compiled <stdin>: 1048576 bytes");
        assert!(r.elapsed < BOUND);
    }

    #[test]
    fn a_failure_is_the_childs_error_output_in_one_line_without_its_stdin_name() {
        let e = run(
            sh("cat >/dev/null; echo 'WARN something' >&2; \
                echo 'error: <stdin>: invalid component: bad section' >&2; exit 1"),
            b"x",
            BOUND,
        )
        .expect_err("fails");
        assert_eq!(
            e,
            ChildError::Failed("WARN something; invalid component: bad section".into())
        );
        // Silent: the exit status is the message.
        let e = run(sh("exit 5"), b"", BOUND).expect_err("fails");
        assert_eq!(e, ChildError::Failed("exit status 5".into()));
    }

    #[test]
    fn an_unwritable_cache_is_told_apart() {
        let e = run(
            sh("cat >/dev/null; echo 'error: <stdin>: cannot write the cache' >&2; exit 3"),
            b"x",
            BOUND,
        )
        .expect_err("fails");
        assert_eq!(
            e,
            ChildError::CacheNotWritten("cannot write the cache".into())
        );
    }

    #[test]
    fn a_killed_child_is_named_by_its_signal() {
        let e = run(sh("kill -9 $$"), b"", BOUND).expect_err("killed");
        assert_eq!(
            e,
            ChildError::Failed("killed by signal 9 (SIGKILL; out of memory?)".into())
        );
    }

    #[test]
    fn a_child_past_its_time_is_killed() {
        let started = Instant::now();
        // `exec`: the sleep is the child itself, so killing it closes its pipes.
        let e = run(sh("exec sleep 30"), b"", Duration::from_millis(300)).expect_err("too long");
        assert_eq!(
            e,
            ChildError::Failed("no result within 0.3 s; stopped it".into())
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_program_that_cannot_be_started_is_a_spawn_error() {
        let e = compile_in_child(
            Path::new("/nonexistent/kube-wasm-host/host"),
            BOUND,
            Path::new("/nonexistent"),
            b"",
        )
        .expect_err("no such program");
        assert!(matches!(e, ChildError::Spawn(_)), "{e:?}");
    }

    #[test]
    fn the_peak_resident_set_is_read_where_the_system_reports_it() {
        if Path::new("/proc/self/status").exists() {
            let peak = peak_rss_bytes().expect("VmHWM");
            assert!(peak > 1 << 20, "{peak}");
        }
    }
}
