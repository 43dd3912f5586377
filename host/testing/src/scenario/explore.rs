//! Exploring a scenario: the same events replayed under perturbations a real informer and API
//! server can produce, each run judged by oracles against the unperturbed run. What a test
//! nobody wrote would have caught (the bug classes of Sieve, OSDI '22, and Acto, SOSP '23).
//!
//! Perturbations work on the scenario's steps (as `host record` writes them, or by hand):
//! - *unobserved states*: an update followed by another of the same object (or its delete)
//!   left out (the informer delivered v1 then v3); a delete seen only as a tombstone after a
//!   relist; one change's notifications delivered after the next change's, of another object
//!   (two informers, or one DeltaFIFO queueing an object's later change with its first);
//! - *stale state*: a restart whose cache of one watch is listed 1 or 2 of its changes behind
//!   the cluster (a lagging API server replica), reconciling from it before it catches up;
//! - *crashes*: the process stopped after any one write of the scenario (the rest of that
//!   call's writes never sent), then a fresh start: new instances, caches listed, the queue
//!   rebuilt from `on-add`s;
//! - *timing*: a key reconciled once more; the initial list delivered again; a resync; an
//!   `advance` halved or doubled (requeues and resyncs earlier or later).
//!
//! Oracles, each reported on its own: the end state equals the unperturbed run's (server-set
//! fields aside; an object the unperturbed run keeps must not be deleted on the way); the guest
//! does not end failing (an error loop, a trap, a queue that never empties); no write sets back
//! a change the guest had not seen (a lost update); the scenario's last `objects`/`absent`
//! expectations still hold.
//!
//! Each perturbation is tried alone first (so a violation's cause is the smallest one), then
//! pairs chosen by a seeded generator, each pair once, until the budget is spent or every pair
//! was tried: a seed reproduces the run.
//! Other expectations of the scenario describe the unperturbed run and are not checked; both
//! runs end by letting time pass and the queue drain, so delayed work is done in both before
//! they are compared. A violation's reproducer is the perturbed steps expecting the
//! unperturbed run's end state: it fails until the bug is fixed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::compare::{state_differences, KindOfDifference};
use super::run::run_traced;
use super::{parse, ScenarioError, ScenarioReport, Trace};
use crate::WriteVerb;
use kwh_plugin::PluginEngine;

/// One change to a scenario's steps (indices of the steps, 0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Perturbation {
    /// The update at this step left out.
    Coalesced(usize),
    /// The delete at this step seen as a tombstone.
    Tombstone(usize),
    /// This change's notifications delivered after the next change's (another object's).
    Reordered(usize),
    /// After step `after`, a restart with watch `watch`'s cache `lag` changes behind.
    Stale {
        after: usize,
        watch: usize,
        lag: usize,
    },
    /// The process stopped after write `after_writes` of step `step`, then restarted.
    Crash { step: usize, after_writes: usize },
    /// The step's object reconciled once more after it.
    Duplicate(usize),
    /// This `advance` halved or doubled.
    Timing(usize, Speed),
    /// After the step, every cached object notified again as added (an informer's relist).
    Relist(usize),
    /// After the step, a resync: `on-update` with old = new for every cached object.
    Resync(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speed {
    Earlier,
    Later,
}

impl Perturbation {
    /// Its class, as violations are grouped.
    pub fn class(&self) -> &'static str {
        match self {
            Perturbation::Coalesced(_) => "unobserved state: coalesced updates",
            Perturbation::Tombstone(_) => "unobserved state: a delete seen as a tombstone",
            Perturbation::Reordered(_) => {
                "unobserved state: notifications reordered across objects"
            }
            Perturbation::Stale { .. } => "stale state: a restart reading a lagging cache",
            Perturbation::Crash { .. } => "crash: the process stopped between two writes",
            Perturbation::Duplicate(_) => "duplicate reconcile",
            Perturbation::Timing(..) => "timing: time passing earlier or later",
            Perturbation::Relist(_) => "restart: every object notified again as added",
            Perturbation::Resync(_) => "timing: a resync",
        }
    }

    /// What it does, with the steps it touches (1-based, as reports number them).
    pub fn describe(&self) -> String {
        match self {
            Perturbation::Coalesced(i) => format!("step {} (an update) left out", i + 1),
            Perturbation::Tombstone(i) => format!("step {} (a delete) seen as a tombstone", i + 1),
            Perturbation::Reordered(i) => format!(
                "step {}'s notifications delivered after the next change's",
                i + 1
            ),
            Perturbation::Stale { after, watch, lag } => format!(
                "after step {}, a restart with watch {watch}'s cache {lag} change(s) behind",
                after + 1
            ),
            Perturbation::Crash { step, after_writes } => format!(
                "the process stopped after write {after_writes} of step {}, then restarted",
                step + 1
            ),
            Perturbation::Duplicate(i) => format!("its key reconciled again after step {}", i + 1),
            Perturbation::Relist(i) => {
                format!("the initial list delivered again after step {}", i + 1)
            }
            Perturbation::Resync(i) => format!("a resync after step {}", i + 1),
            Perturbation::Timing(i, s) => format!(
                "step {} (advance) {}",
                i + 1,
                if *s == Speed::Earlier {
                    "halved"
                } else {
                    "doubled"
                }
            ),
        }
    }
}

/// What a violation broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oracle {
    /// The end state differs from the unperturbed run's.
    EndState,
    /// The guest ends failing: an error loop, a trap, a queue that never empties.
    Failing,
    /// A write set back a change the guest had not seen.
    LostUpdate,
    /// The scenario's last `objects`/`absent` expectations fail.
    Expectations,
}

impl Oracle {
    /// How reports name it.
    pub fn describe(self) -> &'static str {
        match self {
            Oracle::EndState => "the end state differs",
            Oracle::Failing => "the guest ends failing",
            Oracle::LostUpdate => "a lost update",
            Oracle::Expectations => "the scenario's expectations fail",
        }
    }
}

/// How long and from which seed to explore.
#[derive(Debug, Clone)]
pub struct ExploreOptions {
    pub budget: Duration,
    pub seed: u64,
    /// Perturbed runs at most (besides the budget).
    pub max_runs: usize,
}

/// One oracle that did not hold, with the smallest perturbation found that breaks it and a
/// scenario that reproduces it.
#[derive(Debug)]
pub struct Violation {
    pub perturbations: Vec<Perturbation>,
    pub oracle: Oracle,
    /// For [`Oracle::EndState`]: what differs.
    pub differences: Vec<KindOfDifference>,
    /// For the other oracles: what failed, a line each.
    pub details: Vec<String>,
    /// The perturbed scenario, as YAML: a regression test in one step.
    pub reproducer: String,
    /// The perturbed run that found it (1-based) and when.
    pub run: usize,
    pub found_after: Duration,
}

/// What an exploration did.
#[derive(Debug)]
pub struct ExploreReport {
    pub file: PathBuf,
    pub seed: u64,
    pub runs: usize,
    /// How many single perturbations the scenario allows (tried first, one run each).
    pub singles: usize,
    /// Every single perturbation and every pair of them was tried before the budget ran out.
    pub exhausted: bool,
    pub elapsed: Duration,
    /// At most one per class of perturbation and oracle: the first found (the smallest,
    /// singles first).
    pub violations: Vec<Violation>,
}

/// The unperturbed run, as perturbed ones are judged against it.
struct Baseline {
    steps: Vec<Value>,
    /// The scenario's last `objects`/`absent` expectations, as a step, when the unperturbed
    /// run meets them.
    check: Option<Value>,
    trace: Trace,
}

/// Explores the scenario in `text` (read from `file`) against the plugin at `plugin`.
pub async fn explore(
    file: &Path,
    text: &str,
    plugin: &Path,
    engine: &PluginEngine,
    opts: &ExploreOptions,
) -> Result<ExploreReport, ScenarioError> {
    let started = Instant::now();
    let doc: Value = yaml_serde::from_str(text).map_err(|e| ScenarioError {
        file: file.to_path_buf(),
        at: String::new(),
        message: e.to_string(),
    })?;
    let base = baseline(file, &doc, plugin, engine).await?;
    let singles = candidates(&base.steps, &base.trace);
    let mut report = ExploreReport {
        file: file.to_path_buf(),
        seed: opts.seed,
        runs: 0,
        singles: singles.len(),
        exhausted: false,
        elapsed: Duration::ZERO,
        violations: Vec::new(),
    };
    let mut rng = SplitMix(opts.seed);
    let mut order: Vec<usize> = (0..singles.len()).collect();
    rng.shuffle(&mut order);
    let plan: Vec<Vec<Perturbation>> = order.iter().map(|&i| vec![singles[i].clone()]).collect();
    let spent = |r: &ExploreReport| started.elapsed() >= opts.budget || r.runs >= opts.max_runs;
    // Single perturbations that broke an oracle alone.
    let mut guilty: Vec<(Perturbation, Oracle)> = Vec::new();
    let all_pairs = singles.len() * singles.len().saturating_sub(1) / 2;
    let mut pairs: std::collections::HashSet<(usize, usize)> = std::collections::HashSet::new();
    let mut next = 0;
    while !spent(&report) {
        let ps = match plan.get(next) {
            Some(p) => p.clone(),
            None if pairs.len() < all_pairs => {
                let a = rng.below(singles.len());
                let b = rng.below(singles.len());
                // Each pair once, in either order: drawn again, it is drawn anew.
                if a == b || !pairs.insert((a.min(b), a.max(b))) {
                    continue;
                }
                vec![singles[a].clone(), singles[b].clone()]
            }
            None => {
                // Every single and every pair tried: nothing left to explore.
                report.exhausted = true;
                break;
            }
        };
        next += 1;
        let Some(mut perturbed) = apply(&base.steps, &ps) else {
            continue;
        };
        perturbed.extend(base.check.clone());
        let (run, trace) = run_steps(file, &doc, &perturbed, plugin, engine).await?;
        report.runs += 1;
        for (oracle, differences, details) in judge(&base, &run, &trace, perturbed.len()) {
            if ps.len() == 1 {
                guilty.push((ps[0].clone(), oracle));
            } else if ps.iter().any(|p| guilty.contains(&(p.clone(), oracle))) {
                // One of the two breaks it alone: already reported, smaller.
                continue;
            }
            let class = class_of(&ps);
            let known = report
                .violations
                .iter()
                .any(|v| class_of(&v.perturbations) == class && v.oracle == oracle);
            if known {
                continue;
            }
            let kept = deleted_kept_refs(&base.trace, &trace);
            report.violations.push(Violation {
                reproducer: reproducer(&doc, &base, perturbed.clone(), &ps, kept),
                perturbations: ps.clone(),
                oracle,
                differences,
                details,
                run: report.runs,
                found_after: started.elapsed(),
            });
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The class a violation is reported under: its perturbation's, or both of a pair's.
pub fn class_of(ps: &[Perturbation]) -> String {
    let mut classes: Vec<&str> = ps.iter().map(Perturbation::class).collect();
    classes.dedup();
    classes.join(" + ")
}

/// Runs the scenario unperturbed. It must pass (its other expectations aside): a scenario
/// that fails as written has nothing to compare against.
async fn baseline(
    file: &Path,
    doc: &Value,
    plugin: &Path,
    engine: &PluginEngine,
) -> Result<Baseline, ScenarioError> {
    let steps = without_expectations(doc.get("steps"));
    let mut check = last_state_expectations(doc.get("steps"));
    let mut all = steps.clone();
    all.extend(check.clone());
    let (run, trace) = run_steps(file, doc, &all, plugin, engine).await?;
    if let Some(f) = run.failure {
        if check.is_none() || f.step != Some(all.len()) {
            return Err(ScenarioError {
                file: file.to_path_buf(),
                at: String::new(),
                message: format!(
                    "fails unperturbed, at {} ({}): {}",
                    f.step.map_or("setup".to_owned(), |s| format!("step {s}")),
                    f.action,
                    f.problems.join("; ")
                ),
            });
        }
        // Met only before the drain: not an oracle the perturbed runs can be held to.
        check = None;
    }
    Ok(Baseline {
        steps,
        check,
        trace,
    })
}

/// The oracles a perturbed run broke, each with what shows it.
fn judge(
    base: &Baseline,
    run: &ScenarioReport,
    trace: &Trace,
    steps: usize,
) -> Vec<(Oracle, Vec<KindOfDifference>, Vec<String>)> {
    let mut out = Vec::new();
    let mut diffs = state_differences(&base.trace, trace);
    diffs.extend(deleted_kept(&base.trace, trace));
    if !diffs.is_empty() {
        out.push((Oracle::EndState, diffs, Vec::new()));
    }
    match &run.failure {
        Some(f) if base.check.is_some() && f.step == Some(steps) => {
            out.push((Oracle::Expectations, Vec::new(), f.problems.clone()))
        }
        Some(f) => {
            let at = f.step.map_or("setup".to_owned(), |s| format!("step {s}"));
            let lines = f
                .problems
                .iter()
                .map(|p| format!("{at} ({}): {p}", f.action))
                .collect();
            out.push((Oracle::Failing, Vec::new(), lines));
        }
        None => {}
    }
    let new_failures: Vec<String> = trace
        .end_failures
        .iter()
        .filter(|f| !base.trace.end_failures.contains(f))
        .map(|f| format!("still failing at the end: {f}"))
        .collect();
    if !new_failures.is_empty() && !out.iter().any(|(o, ..)| *o == Oracle::Failing) {
        out.push((Oracle::Failing, Vec::new(), new_failures));
    }
    let lost: Vec<String> = trace
        .lost_updates
        .iter()
        .filter(|l| !base.trace.lost_updates.contains(l))
        .cloned()
        .collect();
    if !lost.is_empty() {
        out.push((Oracle::LostUpdate, Vec::new(), lost));
    }
    out
}

/// Objects the unperturbed run keeps to the end and never deletes that the perturbed run's
/// guest deleted (and perhaps made again: equal in the end, but a PersistentVolumeClaim or a
/// Secret made again is data lost).
fn deleted_kept(base: &Trace, run: &Trace) -> Option<KindOfDifference> {
    let refs = deleted_kept_refs(base, run);
    let kind = refs.first()?["kind"].as_str().unwrap_or("").to_owned();
    let objects = refs
        .iter()
        .map(|r| {
            let ns = r["namespace"].as_str();
            kwh_client::object::object_key(ns, r["name"].as_str().unwrap_or(""))
        })
        .collect();
    Some(KindOfDifference {
        kind: format!("{kind} deleted, which the unperturbed run keeps"),
        objects,
        example: json!({"verb": "delete"}),
    })
}

/// [`deleted_kept`]'s objects, as the references a `kept:` expectation takes.
fn deleted_kept_refs(base: &Trace, run: &Trace) -> Vec<Value> {
    let deleted = |t: &Trace| -> BTreeSet<(String, String, Option<String>, String)> {
        t.writes
            .iter()
            .filter(|w| w.verb == WriteVerb::Delete && w.result.is_ok())
            .map(|w| {
                let r = &w.request;
                (
                    r.api_version.clone(),
                    r.kind.clone(),
                    r.namespace.clone(),
                    w.name.clone(),
                )
            })
            .collect()
    };
    let before = deleted(base);
    deleted(run)
        .difference(&before)
        .filter(|key| matches!(base.finals.get(*key), Some(Some(_))))
        .map(|(api_version, kind, ns, name)| {
            let mut r = json!({"apiVersion": api_version, "kind": kind, "name": name});
            if let Some(ns) = ns {
                r["namespace"] = ns.clone().into();
            }
            r
        })
        .collect()
}

/// The perturbed steps, expecting what the unperturbed run did: its end state (the objects it
/// keeps throughout `kept`), and the last queue run reconciling what it reconciled (no key
/// still failing).
fn reproducer(
    doc: &Value,
    base: &Baseline,
    mut steps: Vec<Value>,
    ps: &[Perturbation],
    kept: Vec<Value>,
) -> String {
    if let Some(last) = steps.iter_mut().rev().find(|s| s.get("runQueue").is_some()) {
        last["expect"] = json!({"reconciled": base.trace.end_reconciled});
    }
    let mut end = end_state(&base.trace);
    if !kept.is_empty() {
        end["kept"] = kept.into();
    }
    steps.push(json!({"expect": end}));
    let mut repro = doc.clone();
    repro["steps"] = Value::Array(steps);
    if let Some(n) = repro.get("name").and_then(Value::as_str).map(str::to_owned) {
        let what: Vec<String> = ps.iter().map(Perturbation::describe).collect();
        repro["name"] = format!("{n} ({})", what.join("; ")).into();
    }
    yaml_serde::to_string(&repro).unwrap_or_default()
}

/// What the unperturbed run ended with, as the reproducer's last expectation: each object the
/// plugin wrote as it was then (its server-set metadata left out), or absent. The reproducer
/// fails while the bug is there and passes once it is fixed.
fn end_state(base: &Trace) -> Value {
    let mut objects = Vec::new();
    let mut absent = Vec::new();
    for ((api_version, kind, ns, name), last) in &base.finals {
        match last {
            Some(v) => {
                let mut v = v.clone();
                if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.retain(|k, _| {
                        matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations")
                    });
                }
                objects.push(v);
            }
            None => {
                let mut a = json!({"apiVersion": api_version, "kind": kind, "name": name});
                if let Some(ns) = ns {
                    a["namespace"] = ns.clone().into();
                }
                absent.push(a);
            }
        }
    }
    json!({"objects": objects, "absent": absent})
}

/// The steps with their `expect`s left out, and the drain both runs end with: held
/// notifications and lagging caches delivered, time passing, the queue run.
fn without_expectations(steps: Option<&Value>) -> Vec<Value> {
    let mut out: Vec<Value> = steps
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| {
            let mut s = s.clone();
            if let Some(o) = s.as_object_mut() {
                o.remove("expect");
            }
            s
        })
        .filter(|s| {
            s.as_object()
                .is_some_and(|o| !o.is_empty() && !o.keys().all(|k| k == "note"))
        })
        .collect();
    out.push(json!({"deliver": "pending"}));
    for _ in 0..3 {
        out.push(json!({"advance": "1h"}));
        out.push(json!({"runQueue": true}));
    }
    out
}

/// The last `objects`/`absent` expectations of the scenario, as a check step.
fn last_state_expectations(steps: Option<&Value>) -> Option<Value> {
    let e = steps?.as_array()?.iter().rev().find_map(|s| {
        let e = s.get("expect")?;
        (e.get("objects").is_some() || e.get("absent").is_some()).then_some(e)
    })?;
    let mut check = serde_json::Map::new();
    for k in ["objects", "absent"] {
        if let Some(v) = e.get(k) {
            check.insert(k.into(), v.clone());
        }
    }
    Some(json!({"expect": check}))
}

async fn run_steps(
    file: &Path,
    doc: &Value,
    steps: &[Value],
    plugin: &Path,
    engine: &PluginEngine,
) -> Result<(ScenarioReport, Trace), ScenarioError> {
    let mut d = doc.clone();
    d["steps"] = Value::Array(steps.to_vec());
    let text = yaml_serde::to_string(&d).map_err(|e| ScenarioError {
        file: file.to_path_buf(),
        at: String::new(),
        message: e.to_string(),
    })?;
    let scenario = parse(file, &text)?;
    Ok(run_traced(&scenario, plugin, engine).await)
}

/// The action of a step and the object it is about.
fn action(step: &Value) -> Option<(&str, &Value)> {
    let o = step.as_object()?;
    o.iter()
        .find(|(k, _)| k.as_str() != "note" && k.as_str() != "expect")
        .map(|(k, v)| (k.as_str(), v))
}

fn identity(v: &Value) -> (String, String, String) {
    let s = |a: &str, b: &str| {
        v.pointer(a)
            .or_else(|| v.pointer(b))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (
        s("/kind", "/kind"),
        s("/metadata/namespace", "/namespace"),
        s("/metadata/name", "/name"),
    )
}

const EVENTS: [&str; 5] = ["add", "update", "updateStatus", "delete", "deleteMissed"];

/// Lags a restart's cache can have, in changes of its watch.
const LAGS: [usize; 2] = [1, 2];

/// Every single perturbation the steps allow, given what the unperturbed run did.
fn candidates(steps: &[Value], base: &Trace) -> Vec<Perturbation> {
    let mut out = Vec::new();
    let events: Vec<(usize, &str, (String, String, String))> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let (a, v) = action(s)?;
            EVENTS.contains(&a).then(|| (i, a, identity(v)))
        })
        .collect();
    for (n, (i, a, id)) in events.iter().enumerate() {
        let later = &events[n + 1..];
        if *a == "update" && later.iter().any(|(_, b, other)| other == id && *b != "add") {
            out.push(Perturbation::Coalesced(*i));
        }
        if *a == "delete" {
            out.push(Perturbation::Tombstone(*i));
        }
        if later.first().is_some_and(|(_, _, other)| other != id) {
            out.push(Perturbation::Reordered(*i));
        }
        if *a != "delete" && *a != "deleteMissed" && !id.2.is_empty() {
            out.push(Perturbation::Duplicate(*i));
        }
        out.push(Perturbation::Relist(*i));
        out.push(Perturbation::Resync(*i));
        for watch in 0..base.watches {
            for lag in LAGS {
                out.push(Perturbation::Stale {
                    after: *i,
                    watch,
                    lag,
                });
            }
        }
    }
    for (i, s) in steps.iter().enumerate() {
        if matches!(action(s), Some(("advance", _))) {
            out.push(Perturbation::Timing(i, Speed::Earlier));
            out.push(Perturbation::Timing(i, Speed::Later));
        }
    }
    for (step, &writes) in base.step_writes.iter().enumerate().take(steps.len()) {
        for after_writes in 1..=writes {
            out.push(Perturbation::Crash { step, after_writes });
        }
    }
    out
}

/// The steps with `ps` applied (indices of the original steps); none when two of them clash.
fn apply(steps: &[Value], ps: &[Perturbation]) -> Option<Vec<Value>> {
    let mut out: Vec<Option<Value>> = steps.iter().cloned().map(Some).collect();
    let mut before: Vec<(usize, Value)> = Vec::new();
    let mut after: Vec<(usize, Vec<Value>)> = Vec::new();
    for p in ps {
        match *p {
            Perturbation::Coalesced(i) => {
                out.get_mut(i)?.take()?;
            }
            Perturbation::Tombstone(i) => {
                let (_, target) = action(out.get(i)?.as_ref()?)?;
                let target = target.clone();
                out[i] = Some(json!({"deleteMissed": target}));
            }
            Perturbation::Reordered(i) => {
                out.get(i)?.as_ref()?;
                before.push((i, json!({"hold": true})));
            }
            Perturbation::Stale {
                after: i,
                watch,
                lag,
            } => {
                out.get(i)?.as_ref()?;
                after.push((
                    i,
                    vec![
                        json!({"restart": {"watch": watch, "lag": lag}}),
                        json!({"runQueue": true}),
                        json!({"deliver": "pending"}),
                    ],
                ));
            }
            Perturbation::Crash { step, after_writes } => {
                out.get(step)?.as_ref()?;
                before.push((step, json!({"crash": {"afterWrites": after_writes}})));
            }
            Perturbation::Duplicate(i) => {
                let (_, v) = action(out.get(i)?.as_ref()?)?;
                let (_, ns, name) = identity(v);
                let key = if ns.is_empty() {
                    name
                } else {
                    format!("{ns}/{name}")
                };
                after.push((i, vec![json!({"reconcile": key})]));
            }
            Perturbation::Relist(i) => {
                out.get(i)?.as_ref()?;
                after.push((i, vec![json!({"deliver": "initialList"})]));
            }
            Perturbation::Resync(i) => {
                out.get(i)?.as_ref()?;
                after.push((i, vec![json!({"deliver": "resync"})]));
            }
            Perturbation::Timing(i, speed) => {
                let (_, d) = action(out.get(i)?.as_ref()?)?;
                let ms = super::parse_duration(d.as_str()?).ok()?.as_millis() as u64;
                let ms = if speed == Speed::Earlier {
                    ms / 2
                } else {
                    ms * 2
                };
                out[i] = Some(json!({"advance": format!("{ms}ms")}));
            }
        }
    }
    let mut result = Vec::with_capacity(out.len() + before.len() + 4 * after.len());
    for (i, s) in out.into_iter().enumerate() {
        for (_, b) in before.iter().filter(|(at, _)| *at == i) {
            result.push(b.clone());
        }
        if let Some(s) = s {
            result.push(s);
        }
        for (_, e) in after.iter().filter(|(at, _)| *at == i) {
            // After the event and the queue run that follows it.
            result.push(json!({"runQueue": true}));
            result.extend(e.iter().cloned());
        }
    }
    Some(result)
}

/// A small deterministic generator (SplitMix64): the same seed, the same exploration.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The file a violation's reproducer is written to: beside nothing, in `dir`, named after the
/// scenario and the class.
pub fn reproducer_path(dir: &Path, scenario: &Path, n: usize) -> PathBuf {
    let stem = scenario
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("scenario");
    dir.join(format!("{stem}.explore-{n}.yaml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps() -> Vec<Value> {
        let cm = |n: &str, v: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "namespace": "d"}, "data": {"v": v}})
        };
        vec![
            json!({"add": cm("a", "1")}),
            json!({"runQueue": true}),
            json!({"advance": "200ms"}),
            json!({"update": cm("a", "2")}),
            json!({"update": cm("a", "3")}),
            json!({"add": cm("b", "1")}),
            json!({"delete": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "d", "name": "a"}}),
        ]
    }

    #[test]
    fn candidates_are_what_an_informer_and_server_can_produce() {
        let base = Trace {
            watches: 2,
            step_writes: vec![1, 2, 0, 0, 0, 0, 0],
            ..Trace::default()
        };
        let c = candidates(&steps(), &base);
        assert!(c.contains(&Perturbation::Coalesced(3)), "{c:?}");
        // An update followed by the delete may be coalesced too (v2, then gone).
        assert!(c.contains(&Perturbation::Coalesced(4)), "{c:?}");
        assert!(
            !c.contains(&Perturbation::Coalesced(0)),
            "an add is never left out"
        );
        assert!(c.contains(&Perturbation::Tombstone(6)));
        assert!(c.contains(&Perturbation::Duplicate(0)));
        assert!(c.contains(&Perturbation::Timing(2, Speed::Later)));
        assert!(c.contains(&Perturbation::Relist(0)) && c.contains(&Perturbation::Resync(6)));
        // a/3 then b/1: another object's change comes next; a/2 then a/3 is one object's order.
        assert!(c.contains(&Perturbation::Reordered(4)));
        assert!(!c.contains(&Perturbation::Reordered(3)));
        let stale = Perturbation::Stale {
            after: 3,
            watch: 1,
            lag: 2,
        };
        assert!(c.contains(&stale), "{c:?}");
        // A crash after each write the unperturbed run made, and nowhere else.
        let crashes: Vec<_> = c
            .iter()
            .filter(|p| matches!(p, Perturbation::Crash { .. }))
            .collect();
        assert_eq!(crashes.len(), 3, "{crashes:?}");
    }

    fn report(failure: Option<(usize, &str)>) -> ScenarioReport {
        ScenarioReport {
            file: PathBuf::from("s.yaml"),
            name: "s".into(),
            steps: 10,
            passed_steps: 0,
            failure: failure.map(|(step, problem)| super::super::StepFailure {
                step: Some(step),
                action: "runQueue".into(),
                problems: vec![problem.into()],
                logs: Vec::new(),
            }),
        }
    }

    #[test]
    fn each_oracle_is_judged_against_the_unperturbed_run() {
        let key = |n: &str| {
            (
                "v1".to_owned(),
                "ConfigMap".to_owned(),
                Some("d".to_owned()),
                n.to_owned(),
            )
        };
        let mut base = Trace::default();
        base.finals
            .insert(key("a"), Some(json!({"data": {"v": "1"}})));
        base.end_failures.push("d/old: error: always".into());
        let base = Baseline {
            steps: Vec::new(),
            check: Some(json!({"expect": {}})),
            trace: base,
        };
        let oracles = |run: &ScenarioReport, t: &Trace| -> Vec<Oracle> {
            judge(&base, run, t, 10)
                .into_iter()
                .map(|(o, ..)| o)
                .collect()
        };
        let same = || {
            let mut t = Trace::default();
            t.finals.insert(key("a"), Some(json!({"data": {"v": "1"}})));
            t.end_failures.push("d/old: error: always".into());
            t
        };
        assert!(
            oracles(&report(None), &same()).is_empty(),
            "a failure the base has too is no violation"
        );
        let mut t = same();
        t.end_failures.push("d/a: error: conflict".into());
        assert_eq!(oracles(&report(None), &t), [Oracle::Failing]);
        let mut t = same();
        t.lost_updates
            .push("replace ConfigMap d/a: data.v set back".into());
        assert_eq!(oracles(&report(None), &t), [Oracle::LostUpdate]);
        let mut t = same();
        t.finals.insert(key("a"), Some(json!({"data": {"v": "2"}})));
        assert_eq!(oracles(&report(None), &t), [Oracle::EndState]);
        // The last step is the scenario's own expectations; any other failing step is a failure.
        assert_eq!(
            oracles(&report(Some((10, "objects: …"))), &same()),
            [Oracle::Expectations]
        );
        assert_eq!(
            oracles(&report(Some((4, "reconcile d/a: trap"))), &same()),
            [Oracle::Failing]
        );
    }

    #[test]
    fn pairs_are_classed_by_both_perturbations() {
        assert_eq!(
            class_of(&[Perturbation::Coalesced(1)]),
            "unobserved state: coalesced updates"
        );
        assert_eq!(
            class_of(&[Perturbation::Coalesced(1), Perturbation::Resync(2)]),
            "unobserved state: coalesced updates + timing: a resync"
        );
    }

    #[test]
    fn perturbations_change_only_the_steps_they_name() {
        let s = steps();
        let out = apply(
            &s,
            &[Perturbation::Coalesced(3), Perturbation::Tombstone(6)],
        )
        .unwrap();
        assert_eq!(out.len(), s.len() - 1);
        assert!(out[5].get("deleteMissed").is_some());
        let out = apply(&s, &[Perturbation::Timing(2, Speed::Earlier)]).unwrap();
        assert_eq!(out[2], json!({"advance": "100ms"}));
        let out = apply(&s, &[Perturbation::Duplicate(0)]).unwrap();
        assert_eq!(out[2], json!({"reconcile": "d/a"}));
        let out = apply(&s, &[Perturbation::Resync(3)]).unwrap();
        assert_eq!(out[5], json!({"deliver": "resync"}));
        let out = apply(&s, &[Perturbation::Reordered(4)]).unwrap();
        assert_eq!(out[4], json!({"hold": true}));
        assert_eq!(out[5], s[4]);
        let crash = Perturbation::Crash {
            step: 1,
            after_writes: 2,
        };
        let out = apply(&s, &[crash]).unwrap();
        assert_eq!(out[1], json!({"crash": {"afterWrites": 2}}));
        let stale = Perturbation::Stale {
            after: 0,
            watch: 1,
            lag: 2,
        };
        let out = apply(&s, &[stale]).unwrap();
        assert_eq!(out[2], json!({"restart": {"watch": 1, "lag": 2}}));
        assert_eq!(out[4], json!({"deliver": "pending"}));
        let mut a = SplitMix(7);
        let mut b = SplitMix(7);
        assert_eq!((a.next(), a.next()), (b.next(), b.next()));
    }
}
