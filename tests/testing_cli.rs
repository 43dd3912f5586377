//! `host test`: scenario files run against a plugin, a pass/fail table, exit 0 only when every
//! scenario passes, and one clear line for a scenario file that cannot be read.

mod support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use support::guests::guest;

const T: Duration = Duration::from_secs(120);

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/scenarios")
        .join(name)
}

async fn host_test(plugin: &str, files: &[PathBuf]) -> Output {
    let cache = std::env::temp_dir().join("kube-wasm-host-test-cache");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_host"));
    cmd.arg("test")
        .arg("--plugin")
        .arg(guest(plugin))
        .args(files)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    tokio::time::timeout(T, cmd.output())
        .await
        .expect("host finishes")
        .expect("host runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn passing_scenario_exits_zero_with_a_pass_row() {
    let out = host_test("copier", &[scenario("copier.yaml")]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}\n{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("RESULT"), "{stdout}");
    assert!(lines[1].starts_with("PASS"), "{stdout}");
    assert!(lines[1].contains("copier.yaml"), "{stdout}");
    assert!(lines[1].contains("12/12"), "{stdout}");
    assert_eq!(lines[2], "1 scenario: 1 passed, 0 failed");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[tokio::test]
async fn the_guest_sees_virtual_time_through_the_cli_too() {
    let out = host_test("ttl", &[scenario("ttl.yaml")]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}\n{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
    assert!(stdout.contains("5/5"), "{stdout}");
}

#[tokio::test]
async fn a_failing_scenario_exits_non_zero_and_the_table_names_the_failure() {
    let out = host_test(
        "copier",
        &[scenario("copier.yaml"), scenario("copier-failing.yaml")],
    )
    .await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let fail = stdout
        .lines()
        .find(|l| l.starts_with("FAIL"))
        .unwrap_or_else(|| panic!("no FAIL row in {stdout}"));
    assert!(fail.contains("copier-failing.yaml"), "{fail}");
    assert!(fail.contains("1/3"), "{fail}");
    assert!(
        fail.ends_with(
            "step 2 (reconcile default/web): outcome: expected requeue-after 1s, got done"
        ),
        "{fail}"
    );
    assert!(stdout.lines().any(|l| l.starts_with("PASS")), "{stdout}");
    assert!(
        stdout.ends_with("2 scenarios: 1 passed, 1 failed\n"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_bad_scenario_file_is_one_line_naming_the_file_and_cause() {
    let dir = support::temp_dir("scenario");
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "steps:\n  - reconcile: default/web\n    expect:\n      outcome: maybe\n",
    )
    .expect("write");
    let out = host_test("copier", &[scenario("copier.yaml"), bad.clone()]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing runs: {}", text(&out.stdout));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains(&bad.display().to_string()), "{stderr}");
    assert!(
        lines[0].contains("steps[0].expect.outcome: expected done, error, trap"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `host test --compare OLD NEW` (issue "Shadow runs"): two revisions over the same scenario;
/// what the new one leaves different is printed as shadow runs report it, and the exit code
/// says whether anything differs.
#[tokio::test]
async fn compare_prints_what_a_new_revision_leaves_different() {
    let dir = support::temp_dir("test-compare");
    let builds = support::guests::variants("reviser", &dir, 2);
    let scenario = dir.join("annotate.yaml");
    std::fs::write(
        &scenario,
        "name: reviser annotates\nconfig: {revision: a, annotate: true}\nsteps:\n  \
         - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: web, namespace: default}}\n  \
         - reconcile: default/web\n",
    )
    .expect("scenario");
    let compare = |old: &std::path::Path, new: &std::path::Path| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_host"));
        cmd.arg("test")
            .arg("--compare")
            .arg(old)
            .arg(new)
            .arg(&scenario)
            .env(
                "XDG_CACHE_HOME",
                std::env::temp_dir().join("kube-wasm-host-test-cache"),
            )
            .env_remove("RUST_LOG")
            .kill_on_drop(true);
        async move {
            tokio::time::timeout(T, cmd.output())
                .await
                .expect("host finishes")
                .expect("host runs")
        }
    };
    let same = compare(&builds[0], &builds[0]).await;
    assert!(same.status.success(), "{}", text(&same.stderr));
    assert_eq!(
        text(&same.stdout),
        "reviser annotates: 0 kind(s) of difference\n"
    );
    let other = compare(&builds[0], &builds[1]).await;
    assert_eq!(other.status.code(), Some(1), "{}", text(&other.stderr));
    let out = text(&other.stdout);
    assert!(
        out.starts_with("reviser annotates: 1 kind(s) of difference\n")
            && out.contains(
                "  state ConfigMap /metadata/annotations/reviser~1build: 1 object(s): default/web\n"
            )
            && out.contains("\"value\":\"reviser-01\""),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
