//! Exploring a scenario: the same events replayed under perturbations a real informer and API
//! server can produce, each run's end state compared with the unperturbed run's. What a test
//! nobody wrote would have caught: a controller that needs to see every intermediate version,
//! that treats a tombstone differently from a delete, that depends on the order of events of
//! different objects, that misbehaves when a key is reconciled twice, or on requeues earlier or
//! later than it asked for.
//!
//! Perturbations work on the scenario's steps (as `host record` writes them, or by hand):
//! - *coalesced*: an update followed by another of the same object (or its delete) is left out
//!   (the informer delivered v1 then v3);
//! - *tombstone*: a delete seen only as a tombstone after a relist (`deleteMissed`);
//! - *duplicate*: a key reconciled once more right after its event;
//! - *restart*: every cached object notified again as added (a restarted informer's initial
//!   list), and *resync*: `on-update` with old = new for every cached object;
//! - *timing*: an `advance` halved or doubled (requeues and resyncs earlier or later).
//!
//! Not yet: notifications of different objects delivered in another order (the harness
//! applies a step's change and notifies it together, so swapping steps would change the
//! cluster's history, not only what the controller saw), stale caches, and crashes between two
//! writes of a reconcile.
//!
//! Each perturbation is tried alone first (so a violation's cause is the smallest one), then
//! pairs chosen by a seeded generator until the budget is spent: a seed reproduces the run.
//! Expectations of the scenario are not checked in perturbed runs (they describe the
//! unperturbed one); both runs end by letting time pass and the queue drain, so delayed work
//! is done in both before the end states are compared. A violation's reproducer is the
//! perturbed steps expecting the unperturbed run's end state: it fails until the bug is fixed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::compare::{differences, KindOfDifference};
use super::run::run_traced;
use super::{parse, ScenarioError};
use kwh_plugin::PluginEngine;

/// One change to a scenario's steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Perturbation {
    Coalesced(usize),
    Tombstone(usize),
    Duplicate(usize),
    Timing(usize, Speed),
    /// After the step, every cached object notified again as added (a restarted informer's
    /// initial list).
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
    pub differences: Vec<KindOfDifference>,
    /// The perturbed scenario, as YAML: a regression test in one step.
    pub reproducer: String,
}

/// What an exploration did.
#[derive(Debug)]
pub struct ExploreReport {
    pub file: PathBuf,
    pub seed: u64,
    pub runs: usize,
    pub elapsed: Duration,
    /// At most one per class of perturbation: the first found (the smallest, singles first).
    pub violations: Vec<Violation>,
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
    let steps = without_expectations(doc.get("steps"));
    let base = run_steps(file, &doc, &steps, plugin, engine).await?;
    let singles = candidates(&steps);
    let mut report = ExploreReport {
        file: file.to_path_buf(),
        seed: opts.seed,
        runs: 0,
        elapsed: Duration::ZERO,
        violations: Vec::new(),
    };
    let mut rng = SplitMix(opts.seed);
    let mut order: Vec<usize> = (0..singles.len()).collect();
    rng.shuffle(&mut order);
    let plan: Vec<Vec<Perturbation>> = order.iter().map(|&i| vec![singles[i].clone()]).collect();
    let spent = |r: &ExploreReport| started.elapsed() >= opts.budget || r.runs >= opts.max_runs;
    let mut next = 0;
    while !spent(&report) {
        let ps = match plan.get(next) {
            Some(p) => p.clone(),
            None if singles.len() >= 2 => {
                let a = rng.below(singles.len());
                let b = rng.below(singles.len());
                if a == b {
                    continue;
                }
                vec![singles[a].clone(), singles[b].clone()]
            }
            None => break,
        };
        next += 1;
        let Some(perturbed) = apply(&steps, &ps) else {
            continue;
        };
        let trace = run_steps(file, &doc, &perturbed, plugin, engine).await?;
        report.runs += 1;
        let diffs = differences(&base, &trace);
        if diffs.is_empty() {
            continue;
        }
        let class = ps[0].class();
        if report
            .violations
            .iter()
            .any(|v| v.perturbations[0].class() == class)
        {
            continue;
        }
        let mut repro = doc.clone();
        let mut perturbed = perturbed;
        if let Some(last) = perturbed.last_mut() {
            last["expect"] = end_state(&base);
        }
        repro["steps"] = Value::Array(perturbed);
        if let Some(n) = repro.get("name").and_then(Value::as_str).map(str::to_owned) {
            let what: Vec<String> = ps.iter().map(Perturbation::describe).collect();
            repro["name"] = format!("{n} ({})", what.join("; ")).into();
        }
        report.violations.push(Violation {
            perturbations: ps,
            differences: diffs,
            reproducer: yaml_serde::to_string(&repro).unwrap_or_default(),
        });
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// What the unperturbed run ended with, as the reproducer's last expectation: each object the
/// plugin wrote as it was then (its server-set metadata left out), or absent. The reproducer
/// fails while the bug is there and passes once it is fixed.
fn end_state(base: &super::Trace) -> Value {
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

/// The steps with their `expect`s left out, and the drain both runs end with.
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
    for _ in 0..3 {
        out.push(json!({"advance": "1h"}));
        out.push(json!({"runQueue": true}));
    }
    out
}

async fn run_steps(
    file: &Path,
    doc: &Value,
    steps: &[Value],
    plugin: &Path,
    engine: &PluginEngine,
) -> Result<super::Trace, ScenarioError> {
    let mut d = doc.clone();
    d["steps"] = Value::Array(steps.to_vec());
    let text = yaml_serde::to_string(&d).map_err(|e| ScenarioError {
        file: file.to_path_buf(),
        at: String::new(),
        message: e.to_string(),
    })?;
    let scenario = parse(file, &text)?;
    let (_, trace) = run_traced(&scenario, plugin, engine).await;
    Ok(trace)
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

/// Every single perturbation the steps allow.
fn candidates(steps: &[Value]) -> Vec<Perturbation> {
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
        if *a != "delete" && *a != "deleteMissed" && !id.2.is_empty() {
            out.push(Perturbation::Duplicate(*i));
        }
        out.push(Perturbation::Relist(*i));
        out.push(Perturbation::Resync(*i));
    }
    for (i, s) in steps.iter().enumerate() {
        if matches!(action(s), Some(("advance", _))) {
            out.push(Perturbation::Timing(i, Speed::Earlier));
            out.push(Perturbation::Timing(i, Speed::Later));
        }
    }
    out
}

/// The steps with `ps` applied (indices of the original steps); none when two of them clash.
fn apply(steps: &[Value], ps: &[Perturbation]) -> Option<Vec<Value>> {
    let mut out: Vec<Option<Value>> = steps.iter().cloned().map(Some).collect();
    let mut extra: Vec<(usize, Value)> = Vec::new();
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
            Perturbation::Duplicate(i) => {
                let (_, v) = action(out.get(i)?.as_ref()?)?;
                let (_, ns, name) = identity(v);
                let key = if ns.is_empty() {
                    name
                } else {
                    format!("{ns}/{name}")
                };
                extra.push((i, json!({"reconcile": key})));
            }
            Perturbation::Relist(i) => {
                out.get(i)?.as_ref()?;
                extra.push((i, json!({"deliver": "initialList"})));
            }
            Perturbation::Resync(i) => {
                out.get(i)?.as_ref()?;
                extra.push((i, json!({"deliver": "resync"})));
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
    let mut result = Vec::with_capacity(out.len() + extra.len());
    for (i, s) in out.into_iter().enumerate() {
        if let Some(s) = s {
            result.push(s);
        }
        for (_, e) in extra.iter().filter(|(at, _)| *at == i) {
            // After the event and the queue run that follows it.
            result.push(json!({"runQueue": true}));
            result.push(e.clone());
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
        let c = candidates(&steps());
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
        let mut a = SplitMix(7);
        let mut b = SplitMix(7);
        assert_eq!((a.next(), a.next()), (b.next(), b.next()));
    }
}
