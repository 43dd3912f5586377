//! A guest crate's tests under plain `cargo test`: no async runtime to set up, and its scenario
//! files run by one `#[test]`.
//!
//! ```no_run
//! // tests/scenarios.rs of a guest crate: every tests/*.yaml against the crate's component.
//! #[test]
//! fn scenarios() {
//!     kwh_testing::run_scenarios();
//! }
//! # fn main() {}
//! ```

use std::future::Future;
use std::path::{Path, PathBuf};

use crate::component::{component, crate_dir};
use crate::harness::default_engine;
use crate::scenario::{self, Scenario, ScenarioReport};

/// Runs `future` to completion on a runtime of its own (tokio, current thread, with timers and
/// I/O), so a plain `#[test]` can drive a [`Harness`](crate::Harness):
///
/// ```no_run
/// use kwh_testing::{Harness, ReconcileOutcome};
///
/// #[test]
/// fn reconciles() {
///     kwh_testing::block_on(async {
///         let mut h = Harness::for_this_crate().build().await.unwrap();
///         assert_eq!(h.reconcile("default/web").await, ReconcileOutcome::Done);
///     });
/// }
/// # fn main() {}
/// ```
///
/// # Panics
///
/// Inside another tokio runtime (a `#[tokio::test]` needs no `block_on`: await directly).
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
        .block_on(future)
}

/// Runs every `tests/*.yaml` of the crate under test against its [`component`], each in a fresh
/// harness, as `host test` would; see [`run_scenarios_in`].
#[track_caller]
pub fn run_scenarios() {
    run_scenarios_in("tests");
}

/// Runs every `*.yaml` file of `dir` (relative to the crate's directory; not its
/// subdirectories) against the crate's [`component`], in file-name order, each in a fresh
/// harness, as `host test` would. The report table is printed (cargo shows it with
/// `-- --nocapture`).
///
/// # Panics
///
/// With the report table and what the guest logged in each failed step, when a scenario fails;
/// with one line per bad file, when a file cannot be parsed (then nothing runs); with cargo's
/// diagnostics, when the component does not build; when `dir` holds no scenario file.
#[track_caller]
pub fn run_scenarios_in(dir: impl AsRef<Path>) {
    match scenarios_in(dir.as_ref()) {
        Ok(table) => print!("{table}"),
        Err(failure) => panic!("{failure}"),
    }
}

/// Runs the scenarios of `dir`; the table when all pass, else the message to fail with.
fn scenarios_in(dir: &Path) -> Result<String, String> {
    let crate_dir = crate_dir().map_err(|e| e.to_string())?;
    let dir = crate_dir.join(dir);
    let files = scenario_files(&dir)?;
    let mut scenarios = Vec::new();
    let mut bad = Vec::new();
    for f in &files {
        match Scenario::from_file(f) {
            Ok(s) => scenarios.push(s),
            Err(e) => bad.push(format!("error: scenario {e}")),
        }
    }
    if !bad.is_empty() {
        return Err(bad.join("\n"));
    }
    let wasm = component().map_err(|e| e.to_string())?;
    let engine = default_engine().map_err(|e| e.to_string())?;
    let mut reports = block_on(async {
        let mut reports = Vec::new();
        for s in &scenarios {
            reports.push(scenario::run(s, &wasm, &engine).await);
        }
        reports
    });
    // Files named as the author knows them, `tests/greets.yaml`.
    for r in &mut reports {
        if let Ok(rel) = r.file.strip_prefix(&crate_dir) {
            r.file = rel.to_path_buf();
        }
    }
    outcome(&reports)
}

/// The `*.yaml` files directly in `dir`, sorted; an error when there is none.
fn scenario_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read the scenario directory {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no scenario file (*.yaml) in {}", dir.display()));
    }
    Ok(files)
}

/// The table when every scenario passed; else the table and the failed steps' logs.
fn outcome(reports: &[ScenarioReport]) -> Result<String, String> {
    let table = scenario::render_table(reports);
    if reports.iter().all(ScenarioReport::passed) {
        Ok(table)
    } else {
        Err(format!(
            "scenarios failed:\n{table}{}",
            scenario::render_failure_logs(reports)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::StepFailure;

    fn report(file: &str, failure: Option<StepFailure>) -> ScenarioReport {
        ScenarioReport {
            file: file.into(),
            name: file.trim_end_matches(".yaml").into(),
            steps: 2,
            passed_steps: if failure.is_some() { 1 } else { 2 },
            failure,
        }
    }

    #[test]
    fn all_passing_is_the_table_and_a_failure_the_table_with_the_step_s_logs() {
        let ok = report("tests/a.yaml", None);
        assert_eq!(
            outcome(std::slice::from_ref(&ok)),
            Ok("RESULT  FILE          SCENARIO  STEPS  DETAIL\n\
                PASS    tests/a.yaml  tests/a   2/2\n\
                1 scenario: 1 passed, 0 failed\n"
                .into())
        );
        let bad = report(
            "tests/b.yaml",
            Some(StepFailure {
                step: Some(2),
                action: "reconcile default/team".into(),
                problems: vec!["outcome: expected done, got error: boom".into()],
                logs: vec!["[error log] boom".into()],
            }),
        );
        let failed = outcome(&[ok, bad]).unwrap_err();
        assert!(failed.starts_with("scenarios failed:\nRESULT"), "{failed}");
        assert!(
            failed.contains(
                "FAIL    tests/b.yaml  tests/b   1/2    step 2 (reconcile default/team): \
                 outcome: expected done, got error: boom\n"
            ),
            "{failed}"
        );
        assert!(
            failed.ends_with(
                "2 scenarios: 1 passed, 1 failed\n\n\
                 tests/b.yaml step 2 (reconcile default/team) logged:\n  [error log] boom\n"
            ),
            "{failed}"
        );
    }

    #[test]
    fn scenario_files_are_the_directory_s_yaml_files_in_name_order() {
        let dir = std::env::temp_dir().join(format!("kwh-scenario-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("fails.yaml")).unwrap(); // a directory: skipped
        for f in ["b.yaml", "a.yaml", "notes.md", "scenarios.rs"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        assert_eq!(
            scenario_files(&dir).unwrap(),
            [dir.join("a.yaml"), dir.join("b.yaml")]
        );
        for f in ["b.yaml", "a.yaml"] {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
        assert_eq!(
            scenario_files(&dir).unwrap_err(),
            format!("no scenario file (*.yaml) in {}", dir.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(scenario_files(&dir)
            .unwrap_err()
            .starts_with("cannot read the scenario directory"));
    }

    #[test]
    fn block_on_runs_a_future_with_timers() {
        let v = block_on(async {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            7
        });
        assert_eq!(v, 7);
    }
}
