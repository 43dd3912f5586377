//! Sets `cfg(kubectl)` when a `kubectl` runs on this machine, so the tests that drive the real
//! kubectl (the only independent oracle for strategic merge patch and protobuf bodies) are
//! reported as ignored, with the reason, where it is missing: never as passed. `.ci/run`
//! refuses to run without it, and the test `kubectl_is_present_where_ci_is_set` fails a run
//! with `CI` set that was built without it.

use std::process::{Command, Stdio};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kubectl)");
    println!("cargo::rerun-if-env-changed=PATH");
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        println!("cargo::rustc-cfg=kubectl");
    }
}
