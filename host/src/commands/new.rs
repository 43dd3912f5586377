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
    /// The language: `rust` (the only one `host new` writes so far).
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
    if args.lang != "rust" {
        bail!(
            "--lang {}: host new writes Rust crates only so far (see examples/secret-replicator-py for a Python controller)",
            args.lang
        );
    }
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
    let files = [
        ("Cargo.toml".to_owned(), cargo_toml(&name, &sdk)),
        ("src/lib.rs".to_owned(), lib_rs(&name, &kinds)),
        (format!("tests/{}.yaml", name), scenario(&name, &kinds[0])),
        ("tests/scenarios.rs".to_owned(), SCENARIOS_RS.to_owned()),
        (".gitignore".to_owned(), "/target\n".to_owned()),
    ];
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    ensure_wasm_target();
    let d = dir.display();
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
