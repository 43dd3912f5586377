//! Builds guest workspaces for wasm32-wasip2 (the test guests in `tests/guests`, the example
//! controllers in `examples/`), each once per test process, and hands out the paths of the
//! resulting components. Both share one target directory, so the SDK and its dependencies are
//! compiled once; Cargo's own target-dir lock serialises test binaries building at the same
//! time; every build is bounded by a timeout. Guests written in other languages build through
//! the same bounded runner (`run_build`), each with its own script.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// The repository's root: the nearest ancestor of the including crate that holds the directory `wit/` (these
/// helpers are compiled into tests of several crates, each at its own depth).
pub fn repo_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A real directory: the crates that package the contract hold a link to it (`wit`).
    while !std::fs::symlink_metadata(dir.join("wit")).is_ok_and(|m| m.is_dir()) {
        dir = dir.parent().expect("the crate lies inside the repository");
    }
    dir.to_path_buf()
}

/// The target directory of this build (`CARGO_TARGET_DIR`, else the workspace's `target/`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// Runs a guest build command to completion within `timeout`, killing it past that. Its stdout
/// is discarded; its stderr is returned in the error when it fails.
pub fn run_build(what: &str, mut command: Command, timeout: Duration) -> Result<(), String> {
    // Its own process group, so a timeout ends the whole build (a script's children included).
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the {what} build: {e}"))?;
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
            Ok(None) if started.elapsed() > timeout => {
                #[cfg(unix)]
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} build exceeded {timeout:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for the {what} build: {e}")),
        }
    };
    if !status.success() {
        let err = reader.join().unwrap_or_default();
        return Err(format!("{what} build failed ({status}):\n{err}"));
    }
    Ok(())
}

/// Builds the Cargo workspace at `workspace` (relative to the repository's root) in release
/// mode for wasm32-wasip2 and returns the directory holding the `.wasm` files.
fn build(workspace: &str) -> Result<PathBuf, String> {
    let workspace = repo_root().join(workspace);
    let target_dir = target_dir().join("guests");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
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
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    run_build(&workspace.display().to_string(), command, BUILD_TIMEOUT)?;
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
    component(DIR.get_or_init(|| build("examples")), name)
}

/// Builds an example written in Python with its `build.sh` (which installs componentize-py into
/// a virtual environment under the target directory on first use, and rebuilds only when a
/// source changed), once per test process. Returns the component's path.
pub fn python_example(example: &str) -> PathBuf {
    type Built = (String, Result<PathBuf, String>);
    static BUILT: parking_lot::Mutex<Vec<Built>> = parking_lot::Mutex::new(Vec::new());
    let mut built = BUILT.lock();
    let i = match built.iter().position(|(name, _)| name == example) {
        Some(i) => i,
        None => {
            built.push((example.to_string(), build_python(example)));
            built.len() - 1
        }
    };
    match &built[i].1 {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// A first build downloads componentize-py (~17 MB) and snapshots CPython; later ones only the
/// latter, in seconds.
const PYTHON_BUILD_TIMEOUT: Duration = Duration::from_secs(600);

fn build_python(example: &str) -> Result<PathBuf, String> {
    let script = repo_root().join("examples").join(example).join("build.sh");
    let out = target_dir()
        .join("python-guests")
        .join(format!("{}.wasm", example.replace('-', "_")));
    let mut command = Command::new("sh");
    command
        .arg(&script)
        .arg(&out)
        .env("CARGO_TARGET_DIR", target_dir());
    run_build(
        &format!("{example} (componentize-py)"),
        command,
        PYTHON_BUILD_TIMEOUT,
    )?;
    Ok(out)
}

/// Writes `src`'s component to `dst` with a custom section appended: the same plugin (its
/// name, its code), other bytes, so another digest and a compile of its own, as a rebuilt
/// module is.
pub fn rebuilt(src: &Path, dst: &Path) {
    let mut bytes = std::fs::read(src).expect("read component");
    let (name, payload) = (b"kwh-test-rebuild", b"2");
    bytes.push(0); // a custom section: id 0, size, name length, name, payload
    bytes.push((1 + name.len() + payload.len()) as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    std::fs::write(dst, bytes).expect("write component");
}

/// `count` (at most 100) copies of the test guest `base` (named `{base}-00`, `{base}-01`…) in
/// `dir`: each plugin needs
/// its own name (queue metrics and field managers are per name), and the guest cannot learn one
/// from anywhere but its code. The placeholder occurs exactly once, in a data segment.
pub fn variants(base: &str, dir: &Path, count: usize) -> Vec<PathBuf> {
    let bytes = std::fs::read(guest(base)).expect("read guest");
    let placeholder = format!("{base}-00");
    let len = placeholder.len();
    let at: Vec<usize> = bytes
        .windows(len)
        .enumerate()
        .filter(|(_, w)| *w == placeholder.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the name placeholder occurs once");
    std::fs::create_dir_all(dir).expect("dir");
    (0..count)
        .map(|i| {
            let mut b = bytes.clone();
            b[at[0] + len - 2..at[0] + len].copy_from_slice(format!("{i:02}").as_bytes());
            let p = dir.join(format!("{base}-{i:02}.wasm"));
            std::fs::write(&p, b).expect("write");
            p
        })
        .collect()
}
