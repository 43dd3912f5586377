//! The component of the crate under test: what lets a guest crate's own `cargo test` load the
//! controller it defines, with no separate `cargo build --target wasm32-wasip2` first.
//!
//! [`component`] builds the crate whose tests are running (cargo gives a test process
//! `CARGO_MANIFEST_DIR`) for `wasm32-wasip2` in release, once per test process, and returns the
//! path of its `.wasm`. The build goes to a target directory of its own,
//! `<target dir>/kwh-component`, so it never waits on the lock of the `cargo test` that runs it,
//! and cargo's own freshness check makes a warm run cost a fraction of a second.
//! [`build_component`] does the same for any crate, uncached.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The target components are built for.
pub const COMPONENT_TARGET: &str = "wasm32-wasip2";

/// The directory under the crate's target directory that [`component`] builds in.
pub const COMPONENT_TARGET_SUBDIR: &str = "kwh-component";

/// Why the component of the crate under test is not available.
///
/// Its `Debug` is its `Display`, so a test that unwraps it (or returns it) prints cargo's
/// diagnostics as they are, not as an escaped string.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// The process was not started by `cargo test` (this variable is missing).
    #[error(
        "{0} is not set: kwh-testing finds the crate under test from the environment cargo gives \
         its tests; run them with `cargo test`"
    )]
    NotUnderCargo(&'static str),
    /// Cargo could not be started.
    #[error("cannot run `{command}`: {error}")]
    Spawn {
        /// The command line.
        command: String,
        /// The operating system's answer.
        error: String,
    },
    /// The build failed: cargo's diagnostics follow.
    #[error("building the component failed ({status}): `{command}`\n{diagnostics}")]
    Build {
        /// The command line.
        command: String,
        /// How it ended (`exit status: 101`).
        status: String,
        /// Cargo's and rustc's messages, progress lines left out.
        diagnostics: String,
    },
    /// The build succeeded but made no `.wasm` of the crate.
    #[error(
        "`{command}` built no component of {}: the library must be a cdylib (in Cargo.toml, \
         `[lib]` with `crate-type = [\"cdylib\"]`)",
        manifest.display()
    )]
    NoComponent {
        /// The command line.
        command: String,
        /// The crate's manifest.
        manifest: PathBuf,
    },
}

impl fmt::Debug for ComponentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The component of the crate whose tests are running, built on first use.
///
/// On the first call in a test process this is [`build_component`] of
/// `$CARGO_MANIFEST_DIR/Cargo.toml` (cargo sets it for the tests it runs) into
/// `<target dir>/kwh-component`; later calls return the same answer.
///
/// ```no_run
/// let wasm = kwh_testing::component().unwrap();
/// assert_eq!(wasm.extension().unwrap(), "wasm");
/// ```
pub fn component() -> Result<PathBuf, ComponentError> {
    static BUILT: OnceLock<Result<PathBuf, ComponentError>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_component(&crate_dir()?.join("Cargo.toml"), None))
        .clone()
}

/// The directory of the crate under test (`CARGO_MANIFEST_DIR`).
pub(crate) fn crate_dir() -> Result<PathBuf, ComponentError> {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .ok_or(ComponentError::NotUnderCargo("CARGO_MANIFEST_DIR"))
}

/// Builds the crate at `manifest` (a package's `Cargo.toml`) for `wasm32-wasip2` in release and
/// returns the path of its component, the `.wasm` of its `cdylib`.
///
/// It runs `cargo build --lib --release --target wasm32-wasip2 --package <the crate>` with
/// `$CARGO` (the cargo running the tests) else `cargo` from `PATH`, after
/// `rustup target add wasm32-wasip2` when rustup is installed, into `target_dir`, by default
/// `<the crate's target dir>/kwh-component` (a directory of its own, so the build never waits
/// on the lock of the `cargo test` running it). `RUSTFLAGS` meant for the host (coverage,
/// sanitizers) are not passed on. Nothing is cached here: cargo's freshness check makes a
/// repeated build cheap; [`component`] builds once per process.
pub fn build_component(
    manifest: &Path,
    target_dir: Option<&Path>,
) -> Result<PathBuf, ComponentError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    add_rustup_target();
    let metadata = metadata(&cargo, manifest);
    let target_dir = match target_dir {
        Some(d) => d.to_path_buf(),
        None => metadata
            .as_ref()
            .and_then(target_directory)
            .unwrap_or_else(|| {
                fallback_target_dir(
                    std::env::var_os("CARGO_TARGET_DIR"),
                    manifest.parent().unwrap_or(Path::new(".")),
                )
            })
            .join(COMPONENT_TARGET_SUBDIR),
    };
    let package = metadata.as_ref().and_then(|m| package_of(m, manifest));
    let mut command = Command::new(&cargo);
    command.args(build_args(manifest, &target_dir, package.as_deref()));
    // Host-side instrumentation flags make no sense for a wasm guest.
    command
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    let shown = show_command(&cargo, &command);
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ComponentError::Spawn {
            command: shown.clone(),
            error: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(ComponentError::Build {
            command: shown,
            status: out.status.to_string(),
            diagnostics: diagnostics(&String::from_utf8_lossy(&out.stderr)),
        });
    }
    let artifacts = cdylib_artifacts(&String::from_utf8_lossy(&out.stdout));
    pick_artifact(&artifacts, manifest).ok_or_else(|| ComponentError::NoComponent {
        command: shown,
        manifest: manifest.to_path_buf(),
    })
}

/// The arguments of the component build.
fn build_args(manifest: &Path, target_dir: &Path, package: Option<&str>) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["build", "--lib", "--release", "--target", COMPONENT_TARGET]
        .map(OsString::from)
        .into();
    args.push("--manifest-path".into());
    args.push(manifest.into());
    // The package itself, not a workspace's default members when the crate is the root.
    if let Some(p) = package {
        args.push("--package".into());
        args.push(p.into());
    }
    args.push("--target-dir".into());
    args.push(target_dir.into());
    args.push("--message-format=json-render-diagnostics".into());
    args
}

fn show_command(program: &OsString, command: &Command) -> String {
    std::iter::once(program.to_string_lossy().into_owned())
        .chain(command.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `rustup target add wasm32-wasip2`, once per process, when rustup manages the toolchain. Best
/// effort: without it, or offline, the build's own error says what is missing.
fn add_rustup_target() {
    static ADDED: OnceLock<()> = OnceLock::new();
    ADDED.get_or_init(|| {
        let _ = Command::new("rustup")
            .args(["target", "add", COMPONENT_TARGET])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    });
}

/// `cargo metadata --no-deps` of the crate's workspace: where its target directory is (as cargo
/// sees it: `CARGO_TARGET_DIR`, a config file's `build.target-dir`, else the workspace's
/// `target/`) and which package `manifest` is. None when cargo cannot answer.
fn metadata(cargo: &OsString, manifest: &Path) -> Option<Value> {
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(manifest)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    serde_json::from_slice(&out.stdout).ok()
}

/// `target_directory` of `cargo metadata`'s output.
fn target_directory(metadata: &Value) -> Option<PathBuf> {
    metadata["target_directory"].as_str().map(PathBuf::from)
}

/// The name of the package of `cargo metadata`'s output whose manifest is `manifest`.
fn package_of(metadata: &Value, manifest: &Path) -> Option<String> {
    metadata["packages"].as_array()?.iter().find(|p| {
        p["manifest_path"]
            .as_str()
            .is_some_and(|m| same_file(Path::new(m), manifest))
    })?["name"]
        .as_str()
        .map(str::to_string)
}

/// Whether two paths name the same file, however spelt.
fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (a.canonicalize(), b.canonicalize()),
            (Ok(a), Ok(b)) if a == b
        )
}

/// `CARGO_TARGET_DIR` (relative to the crate when relative), else the crate's `target/`.
fn fallback_target_dir(env: Option<OsString>, crate_dir: &Path) -> PathBuf {
    match env.filter(|e| !e.is_empty()) {
        Some(dir) => crate_dir.join(dir),
        None => crate_dir.join("target"),
    }
}

/// Every `.wasm` of a `cdylib` in cargo's JSON messages, with the manifest of its package.
fn cdylib_artifacts(messages: &str) -> Vec<(PathBuf, PathBuf)> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["target"]["crate_types"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "cdylib"))
        })
        .filter_map(|m| {
            let manifest = PathBuf::from(m["manifest_path"].as_str()?);
            let wasm = m["filenames"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .find(|f| f.ends_with(".wasm"))?;
            Some((manifest, PathBuf::from(wasm)))
        })
        .collect()
}

/// The artifact of the crate at `manifest` (the same file, whatever the spelling of its path).
fn pick_artifact(artifacts: &[(PathBuf, PathBuf)], manifest: &Path) -> Option<PathBuf> {
    artifacts
        .iter()
        .find(|(m, _)| same_file(m, manifest))
        .map(|(_, wasm)| wasm.clone())
}

/// Cargo's stderr without its progress lines (`Compiling x`, `Finished …`): the diagnostics.
fn diagnostics(stderr: &str) -> String {
    const PROGRESS: &[&str] = &[
        "Compiling",
        "Checking",
        "Downloading",
        "Downloaded",
        "Updating",
        "Locking",
        "Adding",
        "Blocking",
        "Finished",
        "Fresh",
    ];
    let kept: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            // Progress lines are a verb right-aligned in 12 columns.
            let t = l.trim_start();
            !(l.len() - t.len() > 0 && PROGRESS.iter().any(|p| t.starts_with(&format!("{p} "))))
        })
        .collect();
    let text = kept.join("\n");
    let text = text.trim();
    if text.is_empty() {
        "(cargo printed nothing)".into()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(manifest: &str, crate_types: &[&str], files: &[&str]) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "package_id": "path+file:///x#0.1.0",
            "manifest_path": manifest,
            "target": {"kind": crate_types, "crate_types": crate_types, "name": "x"},
            "filenames": files,
            "fresh": false,
        })
        .to_string()
    }

    #[test]
    fn the_crate_s_cdylib_is_picked_among_cargo_s_messages() {
        let messages = [
            "not json: a stray line".to_string(),
            artifact("/dep/Cargo.toml", &["lib"], &["/t/libdep.rlib"]),
            // A dependency that is a cdylib too: not the crate under test.
            artifact(
                "/other/Cargo.toml",
                &["cdylib", "rlib"],
                &["/t/other.wasm", "/t/libother.rlib"],
            ),
            artifact(
                "/crate/Cargo.toml",
                &["cdylib"],
                &["/t/wasm32-wasip2/release/greeter.wasm"],
            ),
            r#"{"reason":"build-finished","success":true}"#.to_string(),
        ]
        .join("\n");
        let found = cdylib_artifacts(&messages);
        assert_eq!(
            found,
            [
                ("/other/Cargo.toml".into(), "/t/other.wasm".into()),
                (
                    "/crate/Cargo.toml".into(),
                    "/t/wasm32-wasip2/release/greeter.wasm".into()
                ),
            ]
        );
        assert_eq!(
            pick_artifact(&found, Path::new("/crate/Cargo.toml")),
            Some("/t/wasm32-wasip2/release/greeter.wasm".into())
        );
        assert_eq!(pick_artifact(&found, Path::new("/none/Cargo.toml")), None);
    }

    #[test]
    fn a_library_that_is_not_a_cdylib_is_no_component() {
        let messages = artifact("/crate/Cargo.toml", &["lib"], &["/t/libgreeter.rlib"]);
        assert!(cdylib_artifacts(&messages).is_empty());
    }

    #[test]
    fn the_crate_is_matched_by_file_not_by_spelling() {
        let dir = std::env::temp_dir().join(format!("kwh-component-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "").unwrap();
        let spelled = dir.join(".").join("Cargo.toml");
        let found = [(dir.join("Cargo.toml"), PathBuf::from("/t/x.wasm"))];
        assert_eq!(pick_artifact(&found, &spelled), Some("/t/x.wasm".into()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_target_dir_comes_from_cargo_metadata_else_the_environment_else_the_crate() {
        let meta = serde_json::json!({
            "packages": [
                {"name": "other", "manifest_path": "/ws/other/Cargo.toml"},
                {"name": "greeter", "manifest_path": "/ws/greeter/Cargo.toml"},
            ],
            "target_directory": "/ws/target",
            "version": 1,
        });
        assert_eq!(target_directory(&meta), Some("/ws/target".into()));
        assert_eq!(target_directory(&Value::Null), None);
        assert_eq!(
            package_of(&meta, Path::new("/ws/greeter/Cargo.toml")).as_deref(),
            Some("greeter")
        );
        assert_eq!(package_of(&meta, Path::new("/ws/Cargo.toml")), None);
        let krate = Path::new("/ws/greeter");
        assert_eq!(
            fallback_target_dir(Some("/t".into()), krate),
            Path::new("/t")
        );
        assert_eq!(
            fallback_target_dir(Some("out".into()), krate),
            Path::new("/ws/greeter/out")
        );
        assert_eq!(
            fallback_target_dir(Some("".into()), krate),
            Path::new("/ws/greeter/target")
        );
        assert_eq!(
            fallback_target_dir(None, krate),
            Path::new("/ws/greeter/target")
        );
    }

    #[test]
    fn the_build_is_the_crate_s_library_in_release_for_wasm32_wasip2_in_its_own_dir() {
        let args = build_args(
            Path::new("/ws/greeter/Cargo.toml"),
            Path::new("/ws/target/kwh-component"),
            Some("greeter"),
        );
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            args.join(" "),
            "build --lib --release --target wasm32-wasip2 --manifest-path /ws/greeter/Cargo.toml \
             --package greeter --target-dir /ws/target/kwh-component \
             --message-format=json-render-diagnostics"
        );
    }

    #[test]
    fn a_failed_build_reads_as_cargo_s_diagnostics_without_progress_lines() {
        let stderr = "   Compiling serde v1.0.0\n   Compiling greeter v0.1.0 (/ws/greeter)\n\
                      error[E0425]: cannot find value `x` in this scope\n --> src/lib.rs:3:5\n  |\n\
                      3 |     x\n  |     ^ not found in this scope\n\n\
                      error: could not compile `greeter` (lib) due to 1 previous error\n";
        let e = ComponentError::Build {
            command: "cargo build --lib".into(),
            status: "exit status: 101".into(),
            diagnostics: diagnostics(stderr),
        };
        let expected = "building the component failed (exit status: 101): `cargo build --lib`\n\
                        error[E0425]: cannot find value `x` in this scope\n --> \
                        src/lib.rs:3:5\n  |\n3 |     x\n  |     ^ not found in this scope\n\n\
                        error: could not compile `greeter` (lib) due to 1 previous error";
        assert_eq!(e.to_string(), expected);
        // What `unwrap` and a test returning the error print: the same text, not escaped, also
        // from a harness that could not be built.
        assert_eq!(format!("{e:?}"), expected);
        assert_eq!(format!("{:?}", crate::HarnessError::from(e)), expected);
        assert_eq!(
            diagnostics("    Finished `release` profile\n"),
            "(cargo printed nothing)"
        );
    }

    #[test]
    fn outside_cargo_the_error_says_to_run_cargo_test() {
        assert_eq!(
            ComponentError::NotUnderCargo("CARGO_MANIFEST_DIR").to_string(),
            "CARGO_MANIFEST_DIR is not set: kwh-testing finds the crate under test from the \
             environment cargo gives its tests; run them with `cargo test`"
        );
        let e = ComponentError::NoComponent {
            command: "cargo build".into(),
            manifest: "/ws/greeter/Cargo.toml".into(),
        };
        assert_eq!(
            format!("{e:?}"),
            "`cargo build` built no component of /ws/greeter/Cargo.toml: the library must be a \
             cdylib (in Cargo.toml, `[lib]` with `crate-type = [\"cdylib\"]`)"
        );
    }
}
