//! The pass/fail table `host test` prints.

use std::fmt::Write as _;
use std::path::PathBuf;

/// How one scenario went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioReport {
    /// The file.
    pub file: PathBuf,
    /// The scenario's name.
    pub name: String,
    /// Steps in the scenario.
    pub steps: usize,
    /// Steps that passed (all of them when the scenario passed).
    pub passed_steps: usize,
    /// The first failing step; none when the scenario passed.
    pub failure: Option<StepFailure>,
}

impl ScenarioReport {
    /// Whether every step passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// The step that failed and every expectation of it that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    /// 1-based step number; none when the harness could not be set up (plugin, `given`).
    pub step: Option<usize>,
    /// The step's action, e.g. `reconcile apps/web`.
    pub action: String,
    /// What did not hold, e.g. `outcome: expected done, got requeue-after 1s`.
    pub problems: Vec<String>,
    /// What the guest logged during the step, `[level source] message`, for diagnosis.
    pub logs: Vec<String>,
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(n) => write!(
                f,
                "step {n} ({}): {}",
                self.action,
                self.problems.join("; ")
            ),
            None => write!(f, "{}: {}", self.action, self.problems.join("; ")),
        }
    }
}

/// The logs of each failed step, under a heading naming the scenario and step (empty when no
/// failed step logged anything): what `host test --show-logs` prints after the table.
pub fn render_failure_logs(reports: &[ScenarioReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let Some(f) = &r.failure else { continue };
        if f.logs.is_empty() {
            continue;
        }
        let step = f
            .step
            .map_or_else(|| "setup".to_string(), |n| format!("step {n}"));
        let _ = writeln!(out, "\n{} {step} ({}) logged:", r.file.display(), f.action);
        for l in &f.logs {
            let _ = writeln!(out, "  {l}");
        }
    }
    out
}

/// One row per scenario (result, file, name, steps passed, first failure), then a summary line.
pub fn render_table(reports: &[ScenarioReport]) -> String {
    let rows: Vec<[String; 5]> = reports
        .iter()
        .map(|r| {
            [
                if r.passed() { "PASS" } else { "FAIL" }.to_string(),
                r.file.display().to_string(),
                r.name.clone(),
                format!("{}/{}", r.passed_steps, r.steps),
                r.failure
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let header = ["RESULT", "FILE", "SCENARIO", "STEPS", "DETAIL"].map(str::to_string);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    let _ = writeln!(
        out,
        "{} scenario{}: {} passed, {failed} failed",
        reports.len(),
        if reports.len() == 1 { "" } else { "s" },
        reports.len() - failed
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_names_the_failure() {
        let ok = ScenarioReport {
            file: "a.yaml".into(),
            name: "copies".into(),
            steps: 3,
            passed_steps: 3,
            failure: None,
        };
        let bad = ScenarioReport {
            file: "longer-name.yaml".into(),
            name: "breaks".into(),
            steps: 4,
            passed_steps: 1,
            failure: Some(StepFailure {
                step: Some(2),
                action: "reconcile a/b".into(),
                problems: vec!["outcome: expected done, got error: x".into()],
                logs: vec!["[info log] hello".into()],
            }),
        };
        let t = render_table(&[ok.clone(), bad.clone()]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "RESULT  FILE              SCENARIO  STEPS  DETAIL"
        );
        assert_eq!(lines[1], "PASS    a.yaml            copies    3/3");
        assert_eq!(
            lines[2],
            "FAIL    longer-name.yaml  breaks    1/4    step 2 (reconcile a/b): outcome: expected done, got error: x"
        );
        assert_eq!(lines[3], "2 scenarios: 1 passed, 1 failed");
        let reports = [ok, bad];
        assert_eq!(
            render_failure_logs(&reports),
            "\nlonger-name.yaml step 2 (reconcile a/b) logged:\n  [info log] hello\n"
        );
    }
}
