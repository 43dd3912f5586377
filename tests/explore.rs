//! `host test --explore`: a planted bug of the class "coalesced updates" (the `edge` test
//! guest acts on a transition it must see) is found within its budget, named by its class,
//! and written as a scenario that fails the same way when replayed; the examples' own
//! scenarios explore clean (no false alarm).

mod support;

use std::time::Duration;

use support::guests::{example, guest};
use support::process::HostProcess;

const WAIT: Duration = Duration::from_secs(120);

const SCENARIO: &str = "name: a ConfigMap goes through phases a, b and c
given: []
steps:
  - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: p, namespace: default}, data: {phase: a}}
  - runQueue: true
  - update: {apiVersion: v1, kind: ConfigMap, metadata: {name: p, namespace: default}, data: {phase: b}}
  - runQueue: true
  - update: {apiVersion: v1, kind: ConfigMap, metadata: {name: p, namespace: default}, data: {phase: c}}
  - runQueue: true
    expect:
      objects:
        - {apiVersion: v1, kind: ConfigMap, metadata: {name: p-passed-b, namespace: default}}
";

async fn host_test(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let mut args: Vec<&std::ffi::OsStr> = args.to_vec();
    args.insert(0, "test".as_ref());
    let mut p = HostProcess::spawn(args, "warn");
    let status = p.exit(WAIT).await;
    (status.success(), p.log())
}

/// Spec: the planted bug is found, with the right class, reproducibly from the printed seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_finds_a_coalesced_update_bug_and_writes_its_reproducer() {
    let dir = support::temp_dir("explore");
    let scenario = dir.join("phases.yaml");
    std::fs::write(&scenario, SCENARIO).expect("scenario");
    let plugin = guest("edge");
    // Unperturbed, the scenario passes: the bug needs a perturbation to show.
    let (ok, log) = host_test(&[
        "--plugin".as_ref(),
        plugin.as_os_str(),
        scenario.as_os_str(),
    ])
    .await;
    assert!(ok, "{log}");
    let (ok, log) = host_test(&[
        "--explore".as_ref(),
        "--budget".as_ref(),
        "8s".as_ref(),
        "--seed".as_ref(),
        "7".as_ref(),
        "--out-dir".as_ref(),
        dir.as_os_str(),
        "--plugin".as_ref(),
        plugin.as_os_str(),
        scenario.as_os_str(),
    ])
    .await;
    assert!(!ok, "a violation fails the run: {log}");
    assert!(log.contains("(seed 7)"), "{log}");
    assert!(
        log.contains("unobserved state: coalesced updates: step 3 (an update) left out"),
        "{log}"
    );
    let repro = dir.join("phases.explore-1.yaml");
    assert!(log.contains(&repro.display().to_string()), "{log}");
    // The reproducer expects the unperturbed end state: it fails as the bug does.
    let text = std::fs::read_to_string(&repro).expect("reproducer");
    assert!(
        !text.contains("phase: b"),
        "the intermediate update is left out: {text}"
    );
    let (ok, log) = host_test(&["--plugin".as_ref(), plugin.as_os_str(), repro.as_os_str()]).await;
    assert!(
        !ok && log.contains("ConfigMap default/p-passed-b not found"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Spec: zero false alarms on the examples' scenarios.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_scenarios_explore_clean() {
    let root = support::guests::repo_root();
    for (wasm, dir) in [
        ("config_reloader", "config-reloader"),
        ("janitor", "janitor"),
        ("namespace_defaults", "namespace-defaults"),
    ] {
        let plugin = example(wasm);
        let scenarios = std::fs::read_dir(root.join("examples").join(dir).join("scenarios"))
            .expect("scenarios")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"));
        for s in scenarios {
            let (ok, log) = host_test(&[
                "--explore".as_ref(),
                "--budget".as_ref(),
                "3s".as_ref(),
                "--seed".as_ref(),
                "1".as_ref(),
                "--plugin".as_ref(),
                plugin.as_os_str(),
                s.as_os_str(),
            ])
            .await;
            assert!(
                ok && log.contains("0 violation(s)"),
                "{}: {log}",
                s.display()
            );
        }
    }
}
