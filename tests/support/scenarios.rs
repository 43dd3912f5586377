//! Runs a guest's scenario files through the real `host test` binary, as a guest author would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::guests::example;

const TIMEOUT: Duration = Duration::from_secs(120);
const EXPLORE_TIMEOUT: Duration = Duration::from_secs(900);

/// Runs every `examples/<name>/scenarios/*.yaml` with `host test --plugin <name>.wasm` and
/// asserts that the process succeeds and its summary line says every scenario passed.
pub async fn assert_example_scenarios_pass(name: &str) {
    let dir = super::guests::repo_root()
        .join("examples")
        .join(name)
        .join("scenarios");
    assert_scenarios_pass(&example(name), &dir, None).await;
}

/// Runs every `*.yaml` in `dir` with `host test --plugin <plugin>` and asserts that the process
/// succeeds and its summary line says every scenario passed. `cache_dir` is the compile cache to
/// use (one already holding a large component spares a cold compile); else a shared one under
/// the temp dir.
pub async fn assert_scenarios_pass(plugin: &Path, dir: &Path, cache_dir: Option<&Path>) {
    let files = yaml_files(dir);
    let stdout = host_test_succeeds(&[], plugin, cache_dir, &files, TIMEOUT).await;
    let n = files.len();
    let plural = if n == 1 { "" } else { "s" };
    assert!(
        stdout.ends_with(&format!("{n} scenario{plural}: {n} passed, 0 failed\n")),
        "{stdout}"
    );
}

/// Explores every `*.yaml` in `dir` with `host test --explore --runs <runs> --seed 1 --plugin
/// <plugin>` (bounded by runs, so the same runs on any machine) and asserts that it succeeds
/// with no violation, every single perturbation tried.
pub async fn assert_scenarios_explore_clean(
    plugin: &Path,
    dir: &Path,
    cache_dir: Option<&Path>,
    runs: usize,
) {
    let files = yaml_files(dir);
    let runs = runs.to_string();
    let explore = [
        "--explore",
        "--seed",
        "1",
        "--budget",
        "10m",
        "--runs",
        &runs,
    ];
    let stdout = host_test_succeeds(&explore, plugin, cache_dir, &files, EXPLORE_TIMEOUT).await;
    let summaries: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" perturbed runs in "))
        .collect();
    assert_eq!(summaries.len(), files.len(), "{stdout}");
    for s in summaries {
        let (n, of) = s
            .split_once(" single perturbations")
            .and_then(|(head, _)| head.rsplit_once(", ")?.1.split_once(" of "))
            .expect("the summary says how many singles were tried");
        assert_eq!(n, of, "every single perturbation tried: {s}");
        assert!(s.ends_with(": 0 violation(s)"), "{stdout}");
    }
}

/// The `*.yaml` files in `dir`, sorted; at least one.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("scenarios dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario files in {}", dir.display());
    files
}

/// Runs `host test <extra> --plugin <plugin> [--cache-dir …] <files>` within `timeout`, asserts
/// that it succeeds, and returns what it printed.
async fn host_test_succeeds(
    extra: &[&str],
    plugin: &Path,
    cache_dir: Option<&Path>,
    files: &[PathBuf],
    timeout: Duration,
) -> String {
    let mut cmd = tokio::process::Command::new(super::host_bin());
    cmd.arg("test").args(extra).arg("--plugin").arg(plugin);
    if let Some(cache) = cache_dir {
        cmd.arg("--cache-dir").arg(cache);
    }
    cmd.args(files)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("kube-wasm-host-test-cache"),
        )
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    let out = tokio::time::timeout(timeout, cmd.output())
        .await
        .expect("host test finishes")
        .expect("host runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
