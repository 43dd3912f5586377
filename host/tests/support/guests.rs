//! Builds guest workspaces for wasm32-wasip2 (the test guests in `host/tests/guests`, the example
//! controllers in `examples/`), each once per test process, and hands out the paths of the
//! resulting components. Both share one target directory, so the SDK and its dependencies are
//! compiled once; Cargo's own target-dir lock serialises test binaries building at the same
//! time; every build is bounded by a timeout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// Builds the Cargo workspace at `workspace` (relative to the host crate) in release mode for
/// wasm32-wasip2 and returns the directory holding the `.wasm` files.
fn build(workspace: &str) -> Result<PathBuf, String> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.join(workspace);
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
                return Err(format!(
                    "build of {} exceeded {BUILD_TIMEOUT:?}",
                    workspace.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for cargo: {e}")),
        }
    };
    if !status.success() {
        let err = reader.join().unwrap_or_default();
        return Err(format!(
            "build of {} failed ({status}):\n{err}",
            workspace.display()
        ));
    }
    Ok(target_dir.join("wasm32-wasip2/release"))
}

/// The component built from crate `name` (`-` in the name become `_`) of `dir`'s build.
fn component(dir: &Result<PathBuf, String>, name: &str) -> PathBuf {
    match dir {
        Ok(d) => d.join(format!("{}.wasm", name.replace('-', "_"))),
        Err(e) => panic!("{e}"),
    }
}

/// The path of test guest `name` (e.g. `noop`), building all test guests on first use.
pub fn guest(name: &str) -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    component(
        DIR.get_or_init(|| build("tests/guests")),
        &format!("guest_{name}"),
    )
}

/// The path of example controller `name` (e.g. `config-reloader`), building the `examples/`
/// workspace on first use.
pub fn example(name: &str) -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    component(DIR.get_or_init(|| build("../examples")), name)
}
