//! Sets `cfg(kubectl)` when a `kubectl` runs on this machine, so the tests that drive the real
//! kubectl (the only independent oracle for strategic merge patch and protobuf bodies) are
//! reported as ignored, with the reason, where it is missing: never as passed. `.ci/run`
//! refuses to run without it, and the test `kubectl_is_present_where_ci_is_set` fails a run
//! with `CI` set that was built without it. The same for a real OCI registry
//! (`cfg(docker_registry)`, Debian's `docker-registry`) and the registry tests.

use std::process::{Command, Stdio};

/// Sets `cfg(name)` when `program args…` runs and succeeds.
fn cfg_if_runs(name: &str, program: &str, args: &[&str]) {
    println!("cargo::rustc-check-cfg=cfg({name})");
    let found = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        println!("cargo::rustc-cfg={name}");
    }
}

fn main() {
    println!("cargo::rerun-if-env-changed=PATH");
    cfg_if_runs("kubectl", "kubectl", &["version", "--client"]);
    cfg_if_runs("docker_registry", "docker-registry", &["--version"]);
}
