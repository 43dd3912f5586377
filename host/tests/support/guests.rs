//! Builds the test guests in `host/tests/guests` for wasm32-wasip2, once per test process, and
//! hands out the paths of the resulting components. Cargo's own target-dir lock serialises test
//! binaries building at the same time; the build is bounded by a timeout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

fn build() -> Result<PathBuf, String> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.join("tests/guests");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir.join("../target"))
        .join("guests");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(workspace.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target_dir)
        // Host-side instrumentation flags (coverage, sanitizers) make no sense for wasm guests.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    // Drain stderr concurrently so a chatty build cannot fill the pipe and stall.
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        if let Some(mut s) = stderr {
            use std::io::Read;
            let _ = s.read_to_string(&mut err);
        }
        err
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() > BUILD_TIMEOUT => {
                let _ = child.kill();
                return Err(format!("guest build exceeded {BUILD_TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for cargo: {e}")),
        }
    };
    if !status.success() {
        let err = reader.join().unwrap_or_default();
        return Err(format!("guest build failed ({status}):\n{err}"));
    }
    Ok(target_dir.join("wasm32-wasip2/release"))
}

/// The path of test guest `name` (e.g. `noop`), building all guests on first use.
pub fn guest(name: &str) -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(build);
    match dir {
        Ok(d) => d.join(format!("guest_{}.wasm", name.replace('-', "_"))),
        Err(e) => panic!("{e}"),
    }
}
