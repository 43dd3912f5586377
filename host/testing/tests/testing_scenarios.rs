//! Scenario files against a real guest: `config:` reaches the plugin (and a config its
//! `validate-config` refuses fails the scenario with the guest's message), and `events:` checks
//! the Events it recorded in each step, every field that does not hold reported. The files are
//! the herald test guest's, `tests/guests/herald/tests/` (those under `fails/` are meant to fail).

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kwh_testing::scenario::{self, render_table, Scenario, ScenarioReport, StepFailure};
use support::guests::{guest, repo_root};

const DEADLINE: Duration = Duration::from_secs(120);

fn scenarios_dir() -> PathBuf {
    repo_root().join("tests/guests/herald/tests")
}

/// Parses and runs `path` against herald, under an overall deadline.
async fn run_file(path: &Path) -> ScenarioReport {
    let s = Scenario::from_file(path).unwrap_or_else(|e| panic!("{e}"));
    run(&s).await
}

async fn run(s: &Scenario) -> ScenarioReport {
    tokio::time::timeout(
        DEADLINE,
        scenario::run(s, &guest("herald"), &support::engine()),
    )
    .await
    .expect("test deadline")
}

#[tokio::test]
async fn herald_s_scenarios_pass_with_their_config_and_events() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .expect("scenarios dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(names, ["defaults.yaml", "herald.yaml", "silent.yaml"]);
    let mut reports = Vec::new();
    for f in &files {
        reports.push(run_file(f).await);
    }
    assert!(
        reports.iter().all(ScenarioReport::passed),
        "{}",
        render_table(&reports)
    );
    assert_eq!(
        reports.iter().map(|r| r.passed_steps).collect::<Vec<_>>(),
        [1, 4, 1]
    );
}

#[tokio::test]
async fn a_config_the_guest_refuses_fails_the_scenario_at_setup_with_the_guest_s_message() {
    let file = scenarios_dir().join("fails/refused-config.yaml");
    let r = run_file(&file).await;
    assert_eq!(r.file, file);
    assert_eq!((r.steps, r.passed_steps), (1, 0));
    assert_eq!(
        r.failure,
        Some(StepFailure {
            step: None,
            action: "setup".into(),
            problems: vec![
                "config: refused by the plugin's validate-config: repeat must be at most 100000, not 100001"
                    .into()
            ],
            logs: Vec::new(),
        })
    );
    // One table row names the file and carries the guest's message.
    let table = render_table(std::slice::from_ref(&r));
    let row = table.lines().nth(1).expect("a row");
    assert!(row.starts_with("FAIL"), "{table}");
    assert!(row.contains(&file.display().to_string()), "{table}");
    assert!(
        row.ends_with("0/1    setup: config: refused by the plugin's validate-config: repeat must be at most 100000, not 100001"),
        "{table}"
    );
}

#[tokio::test]
async fn every_event_field_that_does_not_hold_is_reported() {
    let r = run_file(&scenarios_dir().join("fails/wrong-events.yaml")).await;
    let f = r.failure.expect("must fail");
    assert_eq!(
        (f.step, f.action.as_str()),
        (Some(1), "reconcile default/loud")
    );
    assert_eq!(
        f.problems,
        [
            "events[1] (Normal Hello Observe ConfigMap default/loud): type: expected Warning, got Normal, \
             reason: expected \"Bye\", got \"Hello\", note: expected \"shouted\" in \"heralded default/loud\", \
             regarding.apiVersion: expected \"apps/v1\", got \"v1\", regarding.kind: expected \"Deployment\", \
             got \"ConfigMap\", regarding.namespace: expected \"other\", got \"default\""
        ]
    );
    assert_eq!(f.logs, ["[info log] heralded default/loud 2 times"]);
}

#[tokio::test]
async fn events_are_counted_per_step_and_a_wrong_count_lists_what_was_recorded() {
    let s = scenario::parse(
        Path::new("inline.yaml"),
        r#"
config: {repeat: 3, reason: Thrice}
given:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: default, labels: {herald: "yes"}}}
steps:
  - reconcile: default/a
    expect: {events: [{}, {}, {}]}
  - expect: {events: []}
  - reconcile: default/a
    expect: {events: [{reason: Thrice}]}
"#,
    )
    .expect("parses");
    let r = run(&s).await;
    assert_eq!(r.passed_steps, 2, "{r:?}");
    let f = r.failure.expect("must fail");
    assert_eq!(f.step, Some(3));
    assert_eq!(
        f.problems,
        [
            r#"events: expected 1, got 3 ["Normal Thrice Observe ConfigMap default/a", "Normal Thrice Observe ConfigMap default/a", "Normal Thrice Observe ConfigMap default/a"]"#
        ]
    );
}
