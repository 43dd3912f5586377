//! Running a parsed scenario against a plugin with the [`Harness`].

use std::path::Path;

use super::matcher::{contained, short};
use super::report::{ScenarioReport, StepFailure};
use super::{Action, Expect, OutcomeExpect, ResultExpect, Scenario, Step};
use crate::{
    Enqueued, Harness, HarnessError, LogLine, Origin, ReconcileOutcome, RecordedEvent,
    RecordedWrite,
};
use kwh_plugin::{Limits, LoadCause, PluginEngine};

/// What one step did, collected for its expectations.
#[derive(Default)]
struct Observed {
    outcome: Option<ReconcileOutcome>,
    reconciled: Option<Vec<(String, ReconcileOutcome)>>,
    enqueued: Vec<Enqueued>,
    writes: Vec<RecordedWrite>,
    events: Vec<RecordedEvent>,
    logs: Vec<LogLine>,
    handler_failure: Option<String>,
}

/// What a plugin did over a scenario, for comparing two revisions of it: every write it made,
/// and the final state of each object it wrote (none: absent).
#[derive(Debug, Default)]
pub struct Trace {
    pub writes: Vec<RecordedWrite>,
    /// How many writes each step made, in step order.
    pub step_writes: Vec<usize>,
    /// How many watches the plugin's manifest has.
    pub watches: usize,
    /// Keys whose reconciles still failed (an error or a trap) in the last step, if it ran the
    /// queue, with the failure: a run that ends in an error loop.
    pub end_failures: Vec<String>,
    /// The keys the last step reconciled, if it ran the queue.
    pub end_reconciled: Vec<String>,
    /// Writes that set back a change the plugin had not seen ([`Harness::lost_updates`]).
    pub lost_updates: Vec<String>,
    /// `(apiVersion, kind, namespace, name)` → the object at the end.
    pub finals: std::collections::BTreeMap<
        (String, String, Option<String>, String),
        Option<serde_json::Value>,
    >,
}

/// Runs `scenario` against the component at `plugin`, stopping at the first failing step
/// (later steps build on its state).
pub async fn run(scenario: &Scenario, plugin: &Path, engine: &PluginEngine) -> ScenarioReport {
    run_inner(scenario, plugin, engine, None).await
}

/// [`run`], also tracing what the plugin wrote (see [`Trace`]).
pub async fn run_traced(
    scenario: &Scenario,
    plugin: &Path,
    engine: &PluginEngine,
) -> (ScenarioReport, Trace) {
    let mut trace = Trace::default();
    let report = run_inner(scenario, plugin, engine, Some(&mut trace)).await;
    (report, trace)
}

async fn run_inner(
    scenario: &Scenario,
    plugin: &Path,
    engine: &PluginEngine,
    mut trace: Option<&mut Trace>,
) -> ScenarioReport {
    let mut report = ScenarioReport {
        file: scenario.file.clone(),
        name: scenario.name.clone(),
        steps: scenario.steps.len(),
        passed_steps: 0,
        failure: None,
    };
    let mut limits = Limits::default();
    if let Some(d) = scenario.handler_deadline {
        limits.handler_deadline = d;
    }
    if let Some(d) = scenario.reconcile_deadline {
        limits.reconcile_deadline = d;
    }
    let mut b = Harness::builder(plugin)
        .engine(engine.clone())
        .limits(limits)
        .config(scenario.config.clone());
    if let Some(t) = scenario.start {
        b = b.start_time(t);
    }
    for g in &scenario.given {
        b = b.seed_yaml(g.clone());
    }
    let mut h = match b.build().await {
        Ok(h) => h,
        Err(e) => {
            let problem = match &e {
                // The scenario's own `config:` is at fault, not the plugin file: say so.
                HarnessError::Load(l) => match &l.cause {
                    LoadCause::ConfigRefused(msg) => {
                        format!("config: refused by the plugin's validate-config: {msg}")
                    }
                    _ => e.to_string(),
                },
                _ => e.to_string(),
            };
            report.failure = Some(StepFailure {
                step: None,
                action: "setup".into(),
                problems: vec![problem],
                logs: Vec::new(),
            });
            return report;
        }
    };
    if let Some(t) = trace.as_deref_mut() {
        t.watches = h.manifest().watches.len();
    }
    for (i, step) in scenario.steps.iter().enumerate() {
        let (problems, logs, writes, reconciled) = run_step(&mut h, step).await;
        if let Some(t) = trace.as_deref_mut() {
            t.step_writes.push(writes.len());
            t.writes.extend(writes);
            t.end_reconciled = reconciled.iter().map(|(k, _)| k.clone()).collect();
            t.end_failures = reconciled
                .iter()
                .filter(|(_, o)| {
                    matches!(o, ReconcileOutcome::Error(_) | ReconcileOutcome::Trap(_))
                })
                .map(|(k, o)| format!("{k}: {}", o.describe()))
                .collect();
            if reconciled.len() >= crate::harness::RUN_QUEUE_LIMIT {
                t.end_failures.push(format!(
                    "the queue never emptied: {} reconciles in one run",
                    reconciled.len()
                ));
            }
        }
        if !problems.is_empty() {
            report.failure = Some(StepFailure {
                step: Some(i + 1),
                action: step.action.describe(),
                problems,
                logs: logs
                    .iter()
                    .map(|l| format!("[{} {}] {}", l.level.as_str(), l.source.as_str(), l.message))
                    .collect(),
            });
            if let Some(t) = trace {
                finish_trace(&h, t);
            }
            return report;
        }
        report.passed_steps += 1;
    }
    if let Some(t) = trace {
        finish_trace(&h, t);
    }
    report
}

/// The final state of every object `t`'s writes touched.
fn finish_trace(h: &Harness, t: &mut Trace) {
    t.lost_updates = h.lost_updates();
    for w in &t.writes {
        let r = &w.request;
        let key = (
            r.api_version.clone(),
            r.kind.clone(),
            r.namespace.clone(),
            w.name.clone(),
        );
        let now = h
            .cluster()
            .get(&r.api_version, &r.kind, r.namespace.as_deref(), &w.name)
            .and_then(|o| serde_json::from_slice(o.raw()).ok());
        t.finals.insert(key, now);
    }
}

/// What one step left: its problems, what the guest logged, the writes it made and the
/// reconciles it ran.
type StepResult = (
    Vec<String>,
    Vec<LogLine>,
    Vec<RecordedWrite>,
    Vec<(String, ReconcileOutcome)>,
);

/// One step.
async fn run_step(h: &mut Harness, step: &Step) -> StepResult {
    h.clear_records();
    let mut problems = Vec::new();
    let mut seen = Observed::default();
    let event = match &step.action {
        Action::Seed(text) => h.seed_yaml(text).map(drop),
        Action::Add(o) => h.add(o.clone()).await.map(drop),
        Action::Update(o) => h.update(o.clone()).await.map(drop),
        Action::UpdateStatus(o) => h.update_status(o.clone()).await.map(drop),
        Action::Delete(r) => h
            .delete(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name)
            .await
            .map(drop),
        Action::DeleteMissed(r) => h
            .delete_missed(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name)
            .await
            .map(drop),
        Action::Deliver => h.deliver_pending().await.map(drop),
        Action::InitialList => h.deliver_initial_list().await.map(drop),
        Action::Resync => h.resync().await.map(drop),
        Action::Reconcile(key) => {
            seen.outcome = Some(h.reconcile(key).await);
            Ok(())
        }
        Action::RunQueue => {
            seen.reconciled = Some(h.run_queue().await);
            Ok(())
        }
        Action::Advance(d) => {
            h.advance(*d);
            Ok(())
        }
        Action::Hold => {
            h.hold_next_event();
            Ok(())
        }
        Action::Restart { watch, lag } => h.restart_lagging(*watch, *lag).await.map(drop),
        Action::Crash(n) => {
            h.crash_after_writes(*n);
            Ok(())
        }
        Action::Check => Ok(()),
    };
    // The process the step stopped starts again before anything else happens.
    let event = if h.crashed() {
        let restarted = h.restart().await.map(drop);
        event.and(restarted)
    } else {
        event
    };
    match event {
        Ok(()) => {}
        Err(HarnessError::Handler(f)) => seen.handler_failure = Some(f.to_string()),
        Err(e) => problems.push(format!("{} failed: {e}", step.action.describe())),
    }
    seen.writes = h.take_writes();
    seen.events = h.take_events();
    seen.enqueued = h
        .take_enqueued()
        .into_iter()
        .filter(|e| e.origin == Origin::Guest)
        .collect();
    seen.logs = h.take_logs();
    check(h, &step.expect, &seen, &mut problems);
    (
        problems,
        seen.logs,
        seen.writes,
        seen.reconciled.unwrap_or_default(),
    )
}

fn check(h: &Harness, e: &Expect, seen: &Observed, problems: &mut Vec<String>) {
    match (&e.handler_failure, &seen.handler_failure) {
        (None, Some(f)) => problems.push(format!("handler failed: {f}")),
        (Some(_), None) => {
            problems.push("handlerFailure: expected a handler to fail, none did".into())
        }
        (Some(Some(sub)), Some(f)) if !f.contains(sub.as_str()) => {
            problems.push(format!("handlerFailure: expected {sub:?} in {f:?}"))
        }
        _ => {}
    }
    if let Some(got) = &seen.outcome {
        match &e.outcome {
            Some(want) if !outcome_matches(want, got) => problems.push(format!(
                "outcome: expected {}, got {}",
                describe_outcome(want),
                got.describe()
            )),
            None if matches!(got, ReconcileOutcome::Trap(_)) => problems.push(format!(
                "outcome: {} (expect `trap` if intended)",
                got.describe()
            )),
            _ => {}
        }
    }
    if let Some(done) = &seen.reconciled {
        for (k, o) in done {
            if matches!(o, ReconcileOutcome::Trap(_)) {
                problems.push(format!("reconcile {k}: {}", o.describe()));
            }
        }
        if let Some(want) = &e.reconciled {
            let got: Vec<&str> = done.iter().map(|(k, _)| k.as_str()).collect();
            if got != want.iter().map(String::as_str).collect::<Vec<_>>() {
                problems.push(format!("reconciled: expected {want:?}, got {got:?}"));
            }
        }
    }
    if let Some(want) = &e.enqueued {
        let got: Vec<String> = seen.enqueued.iter().map(describe_enqueued).collect();
        let want_s: Vec<String> = want
            .iter()
            .map(|w| match w.after {
                Some(d) => format!("{} after {d:?}", w.key),
                None => w.key.clone(),
            })
            .collect();
        if got != want_s {
            problems.push(format!("enqueued: expected {want_s:?}, got {got:?}"));
        }
    }
    if let Some(want) = &e.writes {
        check_writes(want, &seen.writes, problems);
    }
    if let Some(want) = &e.events {
        check_events(want, &seen.events, problems);
    }
    if let Some(want) = &e.logs {
        check_logs(want, &seen.logs, problems);
    }
    if let Some(want) = &e.ready {
        let got = h.ready_keys();
        if &got != want {
            problems.push(format!("ready: expected {want:?}, got {got:?}"));
        }
    }
    if let Some(want) = &e.waiting {
        let got = h.waiting_keys();
        if &got != want {
            let fmt = |l: &[(String, std::time::Duration)]| {
                l.iter()
                    .map(|(k, d)| format!("{k} in {d:?}"))
                    .collect::<Vec<_>>()
            };
            problems.push(format!(
                "waiting: expected {:?}, got {:?}",
                fmt(want),
                fmt(&got)
            ));
        }
    }
    for o in &e.objects {
        let av = o["apiVersion"].as_str().unwrap_or("");
        let kind = o["kind"].as_str().unwrap_or("");
        let name = o["metadata"]["name"].as_str().unwrap_or("");
        let ns = o["metadata"]["namespace"].as_str();
        match h.get(av, kind, ns, name) {
            None => problems.push(format!("objects: {kind} {} not found", key(ns, name))),
            Some(actual) => {
                if let Some(d) = contained(o, &actual) {
                    problems.push(format!("objects: {kind} {}: {d}", key(ns, name)));
                }
            }
        }
    }
    for r in &e.kept {
        if let Some(problem) = h.cluster().deleted_since_start(r) {
            problems.push(format!("kept: {problem}"));
        }
    }
    for r in &e.absent {
        if h.get(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name)
            .is_some()
        {
            problems.push(format!(
                "absent: {} {} still exists",
                r.kind,
                key(r.namespace.as_deref(), &r.name)
            ));
        }
    }
}

fn key(ns: Option<&str>, name: &str) -> String {
    kwh_client::object::object_key(ns, name)
}

fn describe_enqueued(e: &Enqueued) -> String {
    match e.delay {
        Some(d) => format!("{} after {d:?}", e.key),
        None => e.key.clone(),
    }
}

fn describe_outcome(o: &OutcomeExpect) -> String {
    match o {
        OutcomeExpect::Done => "done".into(),
        OutcomeExpect::RequeueAfter(d) => format!("requeue-after {d:?}"),
        OutcomeExpect::Error(None) => "an error".into(),
        OutcomeExpect::Error(Some(s)) => format!("an error containing {s:?}"),
        OutcomeExpect::Trap(None) => "a trap".into(),
        OutcomeExpect::Trap(Some(s)) => format!("a trap containing {s:?}"),
    }
}

fn outcome_matches(want: &OutcomeExpect, got: &ReconcileOutcome) -> bool {
    match (want, got) {
        (OutcomeExpect::Done, ReconcileOutcome::Done) => true,
        (OutcomeExpect::RequeueAfter(a), ReconcileOutcome::RequeueAfter(b)) => a == b,
        (OutcomeExpect::Error(sub), ReconcileOutcome::Error(msg)) => {
            sub.as_deref().is_none_or(|s| msg.contains(s))
        }
        (OutcomeExpect::Trap(sub), ReconcileOutcome::Trap(e)) => {
            sub.as_deref().is_none_or(|s| e.to_string().contains(s))
        }
        _ => false,
    }
}

fn describe_write(w: &RecordedWrite) -> String {
    let res = match &w.result {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("{} {}", e.code, e.reason),
    };
    format!("{} {} {} → {res}", w.verb.as_str(), w.request.kind, w.key())
}

fn check_writes(want: &[super::WriteExpect], got: &[RecordedWrite], problems: &mut Vec<String>) {
    if want.len() != got.len() {
        let list: Vec<String> = got.iter().map(describe_write).collect();
        problems.push(format!(
            "writes: expected {}, got {} {list:?}",
            want.len(),
            got.len()
        ));
        return;
    }
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let mut diff = Vec::new();
        let field = |name: &str, want: &Option<String>, got: &str, diff: &mut Vec<String>| {
            if let Some(w) = want {
                if w != got {
                    diff.push(format!("{name}: expected {w:?}, got {got:?}"));
                }
            }
        };
        if let Some(v) = &w.verb {
            if !g.verb.matches(v) {
                diff.push(format!("verb: expected {v}, got {}", g.verb.as_str()));
            }
        }
        field(
            "apiVersion",
            &w.api_version,
            &g.request.api_version,
            &mut diff,
        );
        field("kind", &w.kind, &g.request.kind, &mut diff);
        field(
            "namespace",
            &w.namespace,
            g.request.namespace.as_deref().unwrap_or(""),
            &mut diff,
        );
        field("name", &w.name, &g.name, &mut diff);
        if let Some(b) = &w.body {
            if let Some(d) = contained(b, &g.body) {
                diff.push(format!("body {d}"));
            }
        }
        match (&w.result, &g.result) {
            (Some(ResultExpect::Ok), Err(e)) => diff.push(format!("result: expected ok, got {e}")),
            (Some(ResultExpect::Code(c)), r) if r.as_ref().err().map(|e| e.code) != Some(*c) => {
                diff.push(format!("result: expected {c}, got {}", result_text(r)))
            }
            (Some(ResultExpect::Reason(s)), r)
                if r.as_ref().err().map(|e| e.reason.as_str()) != Some(s.as_str()) =>
            {
                diff.push(format!("result: expected {s}, got {}", result_text(r)))
            }
            _ => {}
        }
        if let Some(o) = &w.object {
            match &g.result {
                Ok(Some(stored)) => {
                    if let Some(d) = contained(o, stored) {
                        diff.push(format!("object {d}"));
                    }
                }
                other => diff.push(format!("object: none returned ({})", result_text(other))),
            }
        }
        if !diff.is_empty() {
            problems.push(format!(
                "writes[{i}] ({}): {}",
                describe_write(g),
                diff.join(", ")
            ));
        }
    }
}

fn result_text(r: &Result<Option<serde_json::Value>, kwh_plugin::ApiError>) -> String {
    match r {
        Ok(Some(v)) => format!("ok {}", short(v)),
        Ok(None) => "ok (Status)".into(),
        Err(e) => e.to_string(),
    }
}

fn describe_event(e: &RecordedEvent) -> String {
    let r = &e.event.regarding;
    format!(
        "{} {} {} {} {}",
        e.type_name(),
        e.event.reason,
        e.event.action,
        r.kind,
        e.key()
    )
}

fn check_events(want: &[super::EventExpect], got: &[RecordedEvent], problems: &mut Vec<String>) {
    if want.len() != got.len() {
        let list: Vec<String> = got.iter().map(describe_event).collect();
        problems.push(format!(
            "events: expected {}, got {} {list:?}",
            want.len(),
            got.len()
        ));
        return;
    }
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let mut diff = Vec::new();
        let field = |name: &str, want: &Option<String>, got: &str, diff: &mut Vec<String>| {
            if let Some(w) = want {
                if w != got {
                    diff.push(format!("{name}: expected {w:?}, got {got:?}"));
                }
            }
        };
        if let Some(t) = w.event_type {
            if t != g.event.event_type {
                diff.push(format!("type: expected {t}, got {}", g.type_name()));
            }
        }
        field("reason", &w.reason, &g.event.reason, &mut diff);
        field("action", &w.action, &g.event.action, &mut diff);
        if let Some(n) = &w.note {
            match &g.event.note {
                Some(note) if note.contains(n.as_str()) => {}
                Some(note) => diff.push(format!("note: expected {n:?} in {note:?}")),
                None => diff.push(format!("note: expected {n:?}, got none")),
            }
        }
        let (wr, gr) = (&w.regarding, &g.event.regarding);
        field(
            "regarding.apiVersion",
            &wr.api_version,
            &gr.api_version,
            &mut diff,
        );
        field("regarding.kind", &wr.kind, &gr.kind, &mut diff);
        field(
            "regarding.namespace",
            &wr.namespace,
            gr.namespace.as_deref().unwrap_or(""),
            &mut diff,
        );
        field("regarding.name", &wr.name, &gr.name, &mut diff);
        if !diff.is_empty() {
            problems.push(format!(
                "events[{i}] ({}): {}",
                describe_event(g),
                diff.join(", ")
            ));
        }
    }
}

fn check_logs(want: &[super::LogExpect], got: &[LogLine], problems: &mut Vec<String>) {
    if want.is_empty() {
        if let Some(l) = got.first() {
            problems.push(format!(
                "logs: expected none, got {} line(s), first {:?}",
                got.len(),
                l.message
            ));
        }
        return;
    }
    let mut lines = got.iter();
    for (i, w) in want.iter().enumerate() {
        let found = lines.by_ref().any(|l| {
            l.message.contains(&w.contains)
                && w.level.is_none_or(|lv| lv == l.level)
                && w.source.is_none_or(|s| s == l.source)
        });
        if !found {
            let all: Vec<String> = got
                .iter()
                .map(|l| format!("[{}] {}", l.level.as_str(), l.message))
                .collect();
            problems.push(format!(
                "logs[{i}]: no line containing {:?}{} (in order) among {all:?}",
                w.contains,
                w.level
                    .map(|l| format!(" at {}", l.as_str()))
                    .unwrap_or_default()
            ));
            return;
        }
    }
}
