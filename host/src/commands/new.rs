//! `host new NAME`: a controller crate that builds as a component and passes its own tests on
//! the first `cargo test`, as `cargo new`, `kubebuilder init` and `spin new` start a project.
//!
//! The crate depends on the guest SDK (`kube-guest`) and, for its tests, on the harness
//! (`kwh-testing`) by version, with a `[patch.crates-io]` section pointing both at this
//! clone: one section to delete once they are published. It holds a manifest watching the
//! kinds asked for, a reconcile that reads its object from the cache and logs it, one scenario
//! file and the test that runs every scenario.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use clap::Args;
use kwh_plugin::rbac::OfflineKinds;

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The controller's name: its crate, its directory and its plugin name (lowercase
    /// letters, digits and '-', starting with a letter; at most 63 characters). A path
    /// (`../my-ctl`) is where to create it, named by its last part, as with `cargo new`.
    #[arg(value_name = "NAME")]
    path: PathBuf,
    /// A kind to watch, as `apiVersion/Kind` (`v1/ConfigMap`, `apps/v1/Deployment`);
    /// repeatable. Default: `v1/ConfigMap`.
    #[arg(long = "kind", value_name = "API_VERSION/KIND")]
    kinds: Vec<String>,
    /// Where to create it (default: NAME, as a path).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The language: `rust` (a crate: `cargo test`) or `python` (componentize-py: `./test.sh`).
    #[arg(long, default_value = "rust")]
    lang: String,
    /// The clone of kube-wasm-host the crate's `[patch]` section points at (default: the one
    /// this binary was built from).
    #[arg(long, value_name = "DIR")]
    sdk: Option<PathBuf>,
}

/// A kind the controller watches.
struct Kind {
    api_version: String,
    kind: String,
    namespaced: bool,
}

pub fn new(args: NewArgs) -> anyhow::Result<()> {
    let python = match args.lang.as_str() {
        "rust" => false,
        "python" => true,
        other => bail!("--lang {other}: host new writes rust or python"),
    };
    let name = args
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    check_name(&name)?;
    let kinds = if args.kinds.is_empty() {
        vec![kind("v1/ConfigMap")?]
    } else {
        args.kinds
            .iter()
            .map(|k| kind(k))
            .collect::<Result<_, _>>()?
    };
    let sdk = sdk_root(args.sdk.as_deref())?;
    let dir = args.dir.unwrap_or(args.path);
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("{}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let scenario_file = (format!("tests/{name}.yaml"), scenario(&name, &kinds[0]));
    let files = if python {
        vec![
            ("app.py".to_owned(), app_py(&name, &kinds)),
            ("build.sh".to_owned(), build_sh(&name, &sdk)),
            ("test.sh".to_owned(), test_sh(&name, &sdk)),
            scenario_file,
            (
                ".gitignore".to_owned(),
                "/target\n/.venv\n__pycache__/\n".to_owned(),
            ),
        ]
    } else {
        vec![
            ("Cargo.toml".to_owned(), cargo_toml(&name, &sdk)),
            ("src/lib.rs".to_owned(), lib_rs(&name, &kinds)),
            scenario_file,
            ("tests/scenarios.rs".to_owned(), SCENARIOS_RS.to_owned()),
            (".gitignore".to_owned(), "/target\n".to_owned()),
        ]
    };
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        #[cfg(unix)]
        if path.extension().is_some_and(|e| e == "sh") {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
    }
    let d = dir.display();
    if python {
        println!("created {d}: the Python controller {name}");
        println!();
        println!("  cd {d} && ./test.sh        # builds it with componentize-py, runs its scenario in host test");
        println!(
            "  host --emulator --plugin target/{}.wasm",
            name.replace('-', "_")
        );
        return Ok(());
    }
    ensure_wasm_target();
    let underscored = name.replace('-', "_");
    println!("created {d}: the controller {}, watching {}", name, {
        let names: Vec<String> = kinds
            .iter()
            .map(|k| format!("{}/{}", k.api_version, k.kind))
            .collect();
        names.join(", ")
    });
    println!();
    println!("  cd {d} && cargo test        # its scenario in the test harness (the first run builds the harness: minutes)");
    println!("  cargo build --target wasm32-wasip2 --release");
    println!("  host --emulator --plugin target/wasm32-wasip2/release/{underscored}.wasm");
    Ok(())
}

/// The crate's tests build it for `wasm32-wasip2`: where rustup manages the toolchain and the
/// target is missing, it is added now (one line says so), as `scripts/test` does, so that the
/// first `cargo test` needs nothing more. Without rustup, one line says what is needed.
fn ensure_wasm_target() {
    const TARGET: &str = "wasm32-wasip2";
    let installed = std::process::Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match installed {
        Ok(out) if out.status.success() => {
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
            {
                return;
            }
            println!("adding the {TARGET} target (rustup target add {TARGET}) …");
            let added = std::process::Command::new("rustup")
                .args(["target", "add", TARGET])
                .status();
            if !added.is_ok_and(|s| s.success()) {
                eprintln!("warning: rustup target add {TARGET} failed: cargo test needs that target");
            }
        }
        _ => println!(
            "note: the crate's tests build it for {TARGET}; without rustup, make sure your toolchain has that target"
        ),
    }
}

/// The name must do as a crate name, a directory name and a plugin name (a DNS-1123 label,
/// as the host uses it in metric labels, field managers and Lease names).
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!("{name:?} is not a controller name: lowercase letters, digits and '-', starting with a letter, not ending with '-', at most 63 characters");
    }
    Ok(())
}

/// `apiVersion/Kind` of a kind the API server serves out of the box.
fn kind(text: &str) -> anyhow::Result<Kind> {
    let Some((api_version, kind)) = text.rsplit_once('/') else {
        bail!("--kind {text}: expected apiVersion/Kind, e.g. v1/ConfigMap or apps/v1/Deployment");
    };
    let Some(r) = OfflineKinds::new().resolve(api_version, kind) else {
        bail!("--kind {text}: not a kind kube-apiserver serves out of the box (host new writes a scenario for it, and the test harness knows the built-in kinds only without a CRD)");
    };
    Ok(Kind {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespaced: r.namespaced,
    })
}

/// The clone the crate's `[patch]` points at: `--sdk`, else the one this binary was built
/// from, if it is still there.
fn sdk_root(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let root = match given {
        Some(p) => p.to_path_buf(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let guest = root.join("guests/kube-guest/Cargo.toml");
    if !guest.is_file() {
        bail!(
            "{} is not a clone of kube-wasm-host (no guests/kube-guest): give one with --sdk DIR",
            root.display()
        );
    }
    root.canonicalize()
        .with_context(|| format!("{}", root.display()))
}

fn cargo_toml(name: &str, sdk: &Path) -> String {
    let sdk = sdk.display();
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

# A Wasm component: `cargo build --target wasm32-wasip2 --release`.
[lib]
crate-type = ["cdylib"]

[dependencies]
kube-guest = "0.1"

[dev-dependencies]
kwh-testing = "0.1"

# Until kube-guest and kwh-testing are on crates.io, this clone's: delete this section once
# they are.
[patch.crates-io]
kube-guest = {{ path = "{sdk}/guests/kube-guest" }}
kwh-testing = {{ path = "{sdk}/host/testing" }}
"#
    )
}

/// `my-ctl` → `MyCtl`.
fn type_name(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn lib_rs(name: &str, kinds: &[Kind]) -> String {
    let ty = type_name(name);
    let mut list = String::new();
    for k in kinds {
        let _ = writeln!(list, "    (\"{}\", \"{}\"),", k.api_version, k.kind);
    }
    format!(
        r#"//! {name}: a controller for kube-wasm-host.
//!
//! `cargo test` runs the scenarios in `tests/` in the test harness (a fake cluster on a
//! virtual clock); `cargo build --target wasm32-wasip2 --release` builds the component, which
//! `host --plugin target/wasm32-wasip2/release/{underscored}.wasm` runs.

use kube_guest::{{info, Action, Api, Controller, Manifest, Result, Watch}};

/// The kinds it watches, as (apiVersion, kind).
const KINDS: &[(&str, &str)] = &[
{list}];

struct {ty};

impl Controller for {ty} {{
    // Settings an operator can give this plugin (`config:` in a plugins file); none yet.
    type Config = ();

    // What it reads and writes: the host checks every call against it, and `host rbac` turns
    // it into the RBAC the plugin needs. Declare `.write(Write::new(...))` before writing.
    fn manifest() -> Manifest {{
        KINDS
            .iter()
            .fold(Manifest::new("{name}"), |m, (api_version, kind)| {{
                m.watch(Watch::new(api_version, kind))
            }})
    }}

    // on_add / on_update / on_delete are not written: by default each enqueues the object's key.

    fn reconcile(key: &str) -> Result<Action> {{
        for (api_version, kind) in KINDS {{
            // Reads come from the host's cache, never from the API server.
            if let Some(obj) = Api::all(api_version, kind).get_by_key(key)? {{
                let version = obj.resource_version().unwrap_or("-");
                info!("{{key}}: {{kind}} at resourceVersion {{version}}");
            }}
        }}
        Ok(Action::Done)
    }}
}}

kube_guest::export_controller!({ty});
"#,
        underscored = name.replace('-', "_"),
    )
}

fn scenario(name: &str, k: &Kind) -> String {
    let (meta, key) = if k.namespaced {
        ("{name: example, namespace: default}", "default/example")
    } else {
        ("{name: example}", "example")
    };
    format!(
        r#"# A scenario: what should happen, step by step (the harness's format: see kwh-testing).
name: {name} reconciles a {kind}
steps:
  - add: {{apiVersion: {api_version}, kind: {kind}, metadata: {meta}}}
    expect:
      enqueued: [{key}]
  - reconcile: {key}
    expect:
      outcome: done
      writes: []
"#,
        kind = k.kind,
        api_version = k.api_version,
    )
}

/// componentize-py, pinned (as the Python example's build).
const COMPONENTIZE_PY: &str = "0.25.1";

fn app_py(name: &str, kinds: &[Kind]) -> String {
    let mut list = String::new();
    for k in kinds {
        let _ = writeln!(list, "    (\"{}\", \"{}\"),", k.api_version, k.kind);
    }
    format!(
        r#""""{name}: a controller for kube-wasm-host, in Python.

`./test.sh` builds it into a component (componentize-py) and runs the scenarios in tests/ in
the host's test harness; `host --plugin target/{underscored}.wasm` runs it.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import lister, log, queue, types

NAME = "{name}"

# The kinds it watches, as (apiVersion, kind).
KINDS = [
{list}]


def _key(obj):
    """The key of a notification's object: namespace/name, or name when cluster-scoped."""
    meta = json.loads(bytes(obj.json)).get("metadata") or {{}}
    namespace = meta.get("namespace")
    return f"{{namespace}}/{{meta.get('name', '')}}" if namespace else meta.get("name", "")


class WitWorld(wit_world.WitWorld):
    def validate_config(self, raw: bytes) -> None:
        # Settings an operator can give this plugin (`config:` in a plugins file): none yet.
        return None

    def manifest(self) -> types.Manifest:
        # What it reads and writes: the host checks every call against it, and `host rbac`
        # turns it into the RBAC the plugin needs. Declare `writes` before writing.
        return types.Manifest(
            name=NAME,
            watches=[
                types.Watch(
                    api_version=api_version,
                    kind=kind,
                    namespace=None,
                    label_selector=None,
                    field_selector=None,
                    indexes=[],
                )
                for api_version, kind in KINDS
            ],
            writes=[],
            resync_period_ms=0,
            workers=1,
        )

    def on_add(self, watch: int, obj: types.CachedObject) -> None:
        queue.add(_key(obj))

    def on_update(self, watch: int, old: types.CachedObject, new: types.CachedObject) -> None:
        queue.add(_key(new))

    def on_delete(self, watch: int, obj: types.CachedObject, tombstone: bool) -> None:
        queue.add(_key(obj))

    def reconcile(self, key: str) -> types.Outcome:
        for watch, (api_version, kind) in enumerate(KINDS):
            # Reads come from the host's cache, never from the API server.
            try:
                raw = lister.get_by_key(watch, key)
            except Err as e:
                raise Err(f"reading {{kind}} {{key}}: {{e.value}}")
            if raw is not None:
                meta = json.loads(bytes(raw)).get("metadata") or {{}}
                version = meta.get("resourceVersion", "-")
                log.log(types.Level.INFO, f"{{key}}: {{kind}} at resourceVersion {{version}}")
        return types.Outcome_Done()
"#,
        underscored = name.replace('-', "_"),
    )
}

fn build_sh(name: &str, sdk: &Path) -> String {
    format!(
        r#"#!/bin/sh
# Builds {name} into a WebAssembly component, target/{underscored}.wasm, with componentize-py
# (CPython inside the component), against the host's contract in {sdk}/wit.
# componentize-py {version} comes from PyPI into .venv on first use (python3 with venv and pip);
# COMPONENTIZE_PY names another componentize-py to use instead.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/target/{underscored}.wasm"
componentize=${{COMPONENTIZE_PY:-$here/.venv/bin/componentize-py}}
if ! "$componentize" --version >/dev/null 2>&1; then
    echo "installing componentize-py {version} into $here/.venv" >&2
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "componentize-py=={version}"
    componentize=$here/.venv/bin/componentize-py
fi
mkdir -p "$here/target"
cd "$here"
env -u VIRTUAL_ENV PYTHONDONTWRITEBYTECODE=1 "$componentize" --quiet \
    -d "{sdk}/wit" -w kube:controller/controller \
    componentize app -p "$here" -o "$out.tmp" >&2
mv "$out.tmp" "$out"
echo "$out"
"#,
        underscored = name.replace('-', "_"),
        sdk = sdk.display(),
        version = COMPONENTIZE_PY,
    )
}

fn test_sh(name: &str, sdk: &Path) -> String {
    format!(
        r#"#!/bin/sh
# Builds {name} (./build.sh) and runs every scenario in tests/ against it in the host's test
# harness (a fake cluster on a virtual clock): a pass/fail table; exits 0 only when all pass.
# The host is $KWH_HOST, else `host` on the PATH (if it is this host), else built from {sdk}.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wasm=$("$here/build.sh")
if [ -n "${{KWH_HOST:-}}" ]; then
    exec "$KWH_HOST" test --plugin "$wasm" "$here"/tests/*.yaml
elif command -v host >/dev/null 2>&1 && host test --help >/dev/null 2>&1; then
    exec host test --plugin "$wasm" "$here"/tests/*.yaml
else
    exec cargo run --quiet --release --manifest-path "{sdk}/Cargo.toml" -p host -- \
        test --plugin "$wasm" "$here"/tests/*.yaml
fi
"#,
        sdk = sdk.display(),
    )
}

const SCENARIOS_RS: &str = r#"//! Every scenario in tests/*.yaml, against this crate's component (built for wasm32-wasip2
//! by the harness when it is stale).

#[test]
fn scenarios() {
    kwh_testing::run_scenarios();
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_are_checked() {
        for ok in ["a", "my-ctl", "ctl2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "My", "-a", "a-", "a_b", "2a", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(kind("apps/v1/Deployment").is_ok_and(|k| k.namespaced));
        assert!(kind("v1/Namespace").is_ok_and(|k| !k.namespaced));
        assert!(kind("Deployment").is_err());
        assert!(kind("example.com/v1/Widget").is_err());
        assert_eq!(type_name("my-ctl-2"), "MyCtl2");
    }
}
