//! `host test --explore`: planted bugs of every class — coalesced updates (the `edge` test
//! guest acts on a transition it must see), notifications reordered across objects, a stale
//! cache, a crash between two writes, a lost update (the `planted` guest) — are each found
//! within a bounded number of runs, named by their class and oracle, and written as scenarios
//! that fail the same way when replayed; the fixed variant and the examples' own scenarios
//! explore clean (no false alarm).

mod support;

use std::time::Duration;

use support::guests::{example, guest};
use support::process::HostProcess;

const WAIT: Duration = Duration::from_secs(120);

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
    let text = support::guests::repo_root().join("tests/guests/edge/scenarios/phases.yaml");
    std::fs::copy(text, &scenario).expect("scenario");
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
    assert!(log.contains("(seed 7, "), "{log}");
    // A small scenario is explored exhaustively, each pair once, before its budget runs out.
    assert!(
        log.contains("23 of 23 single perturbations, every pair too"),
        "{log}"
    );
    assert!(
        log.contains(
            "unobserved state: coalesced updates: the end state differs: step 3 (an update) left out"
        ),
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

/// `host test --explore` with seed 3 and at most 400 runs (a minute's budget as a backstop):
/// the same runs on any machine.
async fn explore_bounded(
    plugin: &std::path::Path,
    scenario: &std::path::Path,
    out_dir: Option<&std::path::Path>,
) -> (bool, String) {
    let mut args: Vec<&std::ffi::OsStr> = ["--explore", "--budget", "60s", "--runs", "400"]
        .iter()
        .chain(&["--seed", "3"])
        .map(|a| a.as_ref())
        .collect();
    if let Some(d) = out_dir {
        args.extend(["--out-dir".as_ref(), d.as_os_str()]);
    }
    args.extend([
        "--plugin".as_ref(),
        plugin.as_os_str(),
        scenario.as_os_str(),
    ]);
    host_test(&args).await
}

/// Each planted bug: its scenario, the class and oracle explore must name.
const PLANTED: [(&str, &str, &str); 5] = [
    (
        "baseline",
        "unobserved state: notifications reordered across objects: the end state differs",
        "planted~1rolled",
    ),
    (
        "stale-delete",
        "stale state: a restart reading a lagging cache: the end state differs",
        "Secret deleted, which the unperturbed run keeps",
    ),
    (
        "crash-child",
        "crash: the process stopped between two writes: the end state differs",
        "default/p-child-2",
    ),
    (
        "lost-update",
        "stale state: a restart reading a lagging cache: a lost update",
        "data.owner set back to \"alice\" (the cluster had \"bob\"",
    ),
    (
        "lost-update",
        "stale state: a restart reading a lagging cache: the scenario's expectations fail",
        "data.owner: expected \"bob\", got \"alice\"",
    ),
];

/// Spec: "--explore finds each within its budget and names the right class"; each passes
/// unperturbed, and each reproducer fails when replayed. Bounded by a run count, so the same
/// runs happen on any machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_finds_each_planted_bug_and_names_its_class() {
    let plugin = guest("planted");
    let scenarios = support::guests::repo_root().join("tests/guests/planted/scenarios");
    let dir = support::temp_dir("explore-planted");
    for bug in ["baseline", "stale-delete", "crash-child", "lost-update"] {
        let scenario = scenarios.join(format!("{bug}.yaml"));
        let (ok, log) = host_test(&[
            "--plugin".as_ref(),
            plugin.as_os_str(),
            scenario.as_os_str(),
        ])
        .await;
        assert!(ok, "{bug} passes unperturbed: {log}");
        let out = dir.join(bug);
        std::fs::create_dir_all(&out).expect("out dir");
        let (ok, log) = explore_bounded(&plugin, &scenario, Some(&out)).await;
        assert!(!ok, "{bug}: a violation fails the run: {log}");
        for (_, class, detail) in PLANTED.iter().filter(|(b, ..)| *b == bug) {
            let line = log
                .lines()
                .position(|l| l.contains(&format!("|   {class}: ")))
                .unwrap_or_else(|| panic!("{bug}: no {class:?} in {log}"));
            let rest: String = log
                .lines()
                .skip(line)
                .take(6)
                .collect::<Vec<_>>()
                .join("\n");
            assert!(rest.contains(detail), "{bug}: {detail:?} not in {rest}");
        }
        // Every reproducer written fails when replayed: the bug shows without exploring.
        let repros: Vec<_> = std::fs::read_dir(&out)
            .expect("reproducers")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        assert!(!repros.is_empty(), "{bug}: {log}");
        for r in repros {
            let (ok, replayed) =
                host_test(&["--plugin".as_ref(), plugin.as_os_str(), r.as_os_str()]).await;
            assert!(!ok, "{bug}: {} passes: {replayed}", r.display());
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Spec: the lost update's fix (keep the resourceVersion: the 409, a retry from a fresh read)
/// explores clean: refusals on the way are the cluster doing its job, not a violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixed_lost_update_explores_clean() {
    let plugin = guest("planted");
    let dir = support::temp_dir("explore-fixed");
    let text = std::fs::read_to_string(
        support::guests::repo_root().join("tests/guests/planted/scenarios/lost-update.yaml"),
    )
    .expect("scenario");
    let fixed = text.replace("{bug: lost-update}", "{bug: lost-update, fixed: true}");
    assert_ne!(fixed, text);
    let scenario = dir.join("fixed.yaml");
    std::fs::write(&scenario, fixed).expect("scenario");
    let (ok, log) = explore_bounded(&plugin, &scenario, None).await;
    assert!(ok && log.contains("0 violation(s)"), "{log}");
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
                "30s".as_ref(),
                "--runs".as_ref(),
                "300".as_ref(),
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
