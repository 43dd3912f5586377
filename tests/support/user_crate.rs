//! Building a user's controller crate as a newcomer's first `cargo test` does (the README
//! guide's crate, a `host new` crate), reusing what the repository's tests compiled: the
//! repository's lock files (the same versions), its target directory and its dev profile.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::guests::{repo_root, target_dir};

/// `lock` and then `more`'s packages not in it: one lock file pinning both workspaces' versions
/// (cargo keeps the entries a workspace uses and drops the others).
pub fn merged_lock(lock: &str, more: &str) -> String {
    let packages = |text: &str| -> Vec<String> {
        text.split("\n[[package]]\n")
            .skip(1)
            .map(|p| format!("[[package]]\n{}\n", p.trim_end()))
            .collect()
    };
    let header = lock.split("\n[[package]]\n").next().unwrap_or_default();
    let id = |p: &str| -> Vec<String> {
        p.lines()
            .filter(|l| {
                ["name = ", "version = ", "source = "]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(str::to_string)
            .collect()
    };
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in packages(lock).into_iter().chain(packages(more)) {
        if seen.insert(id(&p)) {
            out.push(p);
        }
    }
    format!("{}\n\n{}", header.trim_end(), out.join("\n"))
}

/// Runs `command` to completion within `timeout` (its whole process group killed past it).
pub fn run(mut command: Command, timeout: Duration) -> Output {
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > timeout {
            #[cfg(unix)]
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
            panic!("{shown} took more than {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The exit status and both streams of `out`, for a failure message.
pub fn text(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The tests `cargo test` reported as passed (`test NAME ... ok`), sorted.
pub fn passed_tests(stdout: &str) -> Vec<String> {
    let mut names: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... ok"))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// The `[profile.dev…]` tables of the workspace's manifest, as a cargo configuration file.
pub fn dev_profile(manifest: &str) -> String {
    let mut out = String::new();
    let mut keep = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            keep = line.starts_with("[profile.dev]") || line.starts_with("[profile.dev.");
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(
        out.contains("[profile.dev]"),
        "no [profile.dev] in Cargo.toml"
    );
    out
}

/// Gives the crate at `krate` the repository's lock files, merged, and writes the workspace's
/// dev profile beside it as a cargo configuration file, whose path it returns (for
/// `--config`).
pub fn prepare(krate: &Path) -> std::path::PathBuf {
    let read =
        |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let repo = repo_root();
    std::fs::write(
        krate.join("Cargo.lock"),
        merged_lock(
            &read(&repo.join("Cargo.lock")),
            &read(&repo.join("tests/guests/Cargo.lock")),
        ),
    )
    .expect("Cargo.lock");
    let profile = krate.join("repo-dev-profile.toml");
    std::fs::write(&profile, dev_profile(&read(&repo.join("Cargo.toml")))).expect("profile");
    profile
}

/// `cargo test` of the crate at `krate` (`extra` appended), with the repository's lock files,
/// dev profile and target directory ([`prepare`]), within `timeout`.
pub fn cargo_test(krate: &Path, extra: &[&str], timeout: Duration) -> Output {
    let profile = prepare(krate);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.arg("test")
        .arg("--manifest-path")
        .arg(krate.join("Cargo.toml"))
        .arg("--config")
        .arg(&profile)
        .args(extra)
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("RUST_LOG")
        .current_dir(krate);
    let started = Instant::now();
    let out = run(c, timeout);
    eprintln!(
        "cargo test {extra:?} of {} took {:.1?}",
        krate.display(),
        started.elapsed()
    );
    out
}
