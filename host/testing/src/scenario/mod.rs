//! Scenario files: a guest test written as YAML, run by `host test --plugin x.wasm FILE…`.
//!
//! A scenario gives the plugin's configuration and the cluster's starting objects, then steps —
//! events, reconciles, clock advances — each optionally followed by expectations on what that
//! step did (writes, queue adds, recorded Events, logs, the state left behind). The format is
//! documented in `docs/testing.md`; [`parse`] checks a file completely before anything runs, so
//! a typo is one error naming the file, the step and the field, not a confusing failure later.

pub mod compare;
mod expect;
pub mod explore;
mod matcher;
mod parse;
mod report;
mod run;
mod yaml;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use kwh_plugin::events::EventType;
use serde_json::Value;

pub use compare::{differences, render as render_differences, state_differences, KindOfDifference};
pub use kwh_client::duration::parse_duration;
pub use parse::{parse, ScenarioError};
pub use report::{render_failure_logs, render_table, ScenarioReport, StepFailure};
pub use run::{run, run_traced, Trace};

/// A parsed scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file it came from (names it in reports and errors).
    pub file: PathBuf,
    /// `name:`, else the file name.
    pub name: String,
    /// `start:`: the virtual clock's starting time.
    pub start: Option<SystemTime>,
    /// `limits:`: sandbox deadlines for this scenario.
    pub handler_deadline: Option<Duration>,
    /// `limits.reconcileDeadline`.
    pub reconcile_deadline: Option<Duration>,
    /// `config:`: the plugin's configuration (`null` when not given), checked by its
    /// `validate-config` at load and read through the `config` import.
    pub config: Value,
    /// `givenFiles:` then `given:`: objects (as YAML/JSON text) that exist before the plugin
    /// starts.
    pub given: Vec<String>,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// Reads and parses `path`.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.to_path_buf(),
            at: String::new(),
            message: format!("cannot read the file: {e}"),
        })?;
        parse(path, &text)
    }
}

/// One step: an action and what to expect of it.
#[derive(Debug, Clone)]
pub struct Step {
    /// The action.
    pub action: Action,
    /// The expectations (empty: the step only has to succeed).
    pub expect: Expect,
}

/// Target of a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `namespace` (none for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// `name`.
    pub name: String,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum Action {
    /// `seed:` objects created without notifying the plugin.
    Seed(String),
    /// `add:` create the object, deliver `on-add`.
    Add(Value),
    /// `update:` replace the object, deliver `on-update`.
    Update(Value),
    /// `updateStatus:` replace the status subresource, deliver `on-update`.
    UpdateStatus(Value),
    /// `delete:` delete, deliver `on-delete` (or `on-update` when finalizers hold it).
    Delete(ObjectRef),
    /// `deleteMissed:` delete so that the informer misses it: `on-delete` with a tombstone.
    DeleteMissed(ObjectRef),
    /// `deliver: pending`: deliver the notifications the guest's own writes caused.
    Deliver,
    /// `deliver: initialList`: `on-add` for every cached object, as at plugin start.
    InitialList,
    /// `deliver: resync`: `on-update` (old = new) for every cached object.
    Resync,
    /// `reconcile: KEY`.
    Reconcile(String),
    /// `runQueue: true`: reconcile ready keys until none is ready.
    RunQueue,
    /// `advance: 90s`: move the virtual clock.
    Advance(Duration),
    /// `hold: true`: the next change's notifications come after those of the change that
    /// follows it (notifications of different objects out of order).
    Hold,
    /// `restart: true`, or `restart: {watch: 1, lag: 2}`: the plugin's process restarts (new
    /// instances, empty queue, caches listed again, `on-add` for each object); with `lag`, the
    /// cache of watch `watch` is listed that many changes behind the cluster until the next
    /// change or `deliver: pending`.
    Restart {
        /// The lagging watch.
        watch: usize,
        /// How many of its changes it lags (0: none).
        lag: usize,
    },
    /// `crash: {afterWrites: 2}`: the process stops after the guest's next 2 writes (later
    /// ones reach nothing) and the step that made them ends with a restart.
    Crash(usize),
    /// `check: …` (or a step with only `expect`): assertions on the current state.
    Check,
}

impl Action {
    /// A short description for reports, e.g. `reconcile apps/web`.
    pub fn describe(&self) -> String {
        let obj = |v: &Value| {
            let m = &v["metadata"];
            let name = m["name"].as_str().unwrap_or("?");
            let kind = v["kind"].as_str().unwrap_or("?");
            match m["namespace"].as_str() {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            }
        };
        let r = |o: &ObjectRef| match &o.namespace {
            Some(ns) => format!("{} {ns}/{}", o.kind, o.name),
            None => format!("{} {}", o.kind, o.name),
        };
        match self {
            Action::Seed(_) => "seed".into(),
            Action::Add(v) => format!("add {}", obj(v)),
            Action::Update(v) => format!("update {}", obj(v)),
            Action::UpdateStatus(v) => format!("updateStatus {}", obj(v)),
            Action::Delete(o) => format!("delete {}", r(o)),
            Action::DeleteMissed(o) => format!("deleteMissed {}", r(o)),
            Action::Deliver => "deliver pending".into(),
            Action::InitialList => "deliver initialList".into(),
            Action::Resync => "deliver resync".into(),
            Action::Reconcile(k) => format!("reconcile {k}"),
            Action::RunQueue => "runQueue".into(),
            Action::Advance(d) => format!("advance {d:?}"),
            Action::Hold => "hold".into(),
            Action::Restart { lag: 0, .. } => "restart".into(),
            Action::Restart { watch, lag } => {
                format!("restart, watch {watch} lagging {lag} change(s)")
            }
            Action::Crash(n) => format!("crash after {n} write(s)"),
            Action::Check => "check".into(),
        }
    }
}

/// The expected outcome of a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeExpect {
    /// `done`.
    Done,
    /// `requeueAfter: 30s` (or `requeue-after 30s`).
    RequeueAfter(Duration),
    /// `error` / `error: substring`.
    Error(Option<String>),
    /// `trap` / `trap: substring` (deadline and memory exhaustion included).
    Trap(Option<String>),
}

/// An expected queue add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueExpect {
    /// The key.
    pub key: String,
    /// `after:` for add-after; none for a plain add.
    pub after: Option<Duration>,
}

/// An expected write; unset fields match anything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteExpect {
    /// `verb:` (`patch` matches every patch type).
    pub verb: Option<String>,
    /// `apiVersion:`.
    pub api_version: Option<String>,
    /// `kind:`.
    pub kind: Option<String>,
    /// `namespace:`.
    pub namespace: Option<String>,
    /// `name:`.
    pub name: Option<String>,
    /// `body:`: must be contained in the request body (maps by subset, lists element-wise).
    pub body: Option<Value>,
    /// `result:` `ok`, or an error code / reason (`404`, `Conflict`).
    pub result: Option<ResultExpect>,
    /// `object:`: must be contained in the returned object.
    pub object: Option<Value>,
}

/// An expected write result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultExpect {
    /// Succeeded.
    Ok,
    /// Failed with this HTTP code.
    Code(u16),
    /// Failed with this reason.
    Reason(String),
}

/// An expected log line (lines are matched as an in-order subsequence).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogExpect {
    /// Substring of the message.
    pub contains: String,
    /// `level:`; none accepts any.
    pub level: Option<super::LogLevel>,
    /// `source:` `log`, `stdout`, `stderr`, `host`; none accepts any.
    pub source: Option<super::LogSource>,
}

/// An expected Event (`events.record`); unset fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventExpect {
    /// `type:` `Normal` or `Warning`.
    pub event_type: Option<EventType>,
    /// `reason:`.
    pub reason: Option<String>,
    /// `action:`.
    pub action: Option<String>,
    /// `note:`: a substring of the note.
    pub note: Option<String>,
    /// `regarding:` the object the Event is about.
    pub regarding: RegardingExpect,
}

/// An expected Event's `regarding:` object; unset fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegardingExpect {
    /// `apiVersion:`.
    pub api_version: Option<String>,
    /// `kind:`.
    pub kind: Option<String>,
    /// `namespace:`.
    pub namespace: Option<String>,
    /// `name:`.
    pub name: Option<String>,
}

/// What a step must have done (and left behind). Unset fields are not checked.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// `outcome:` of a `reconcile` step.
    pub outcome: Option<OutcomeExpect>,
    /// `reconciled:` keys a `runQueue` or `advance` step reconciled, in order.
    pub reconciled: Option<Vec<String>>,
    /// `enqueued:` every queue add the guest made in the step, in order (the worker's
    /// requeues and backoffs show in `outcome` and `waiting` instead).
    pub enqueued: Option<Vec<EnqueueExpect>>,
    /// `writes:` every write of the step, in order.
    pub writes: Option<Vec<WriteExpect>>,
    /// `events:` every Event the guest recorded in the step, in order (unaggregated).
    pub events: Option<Vec<EventExpect>>,
    /// `logs:` lines the step logged, in order (others may come between); `[]` means none.
    pub logs: Option<Vec<LogExpect>>,
    /// `ready:` the keys ready after the step, in order.
    pub ready: Option<Vec<String>>,
    /// `waiting:` the delayed keys after the step, with the time left, soonest first.
    pub waiting: Option<Vec<(String, Duration)>>,
    /// `objects:` objects the cluster must hold (each contained in the stored one).
    pub objects: Vec<Value>,
    /// `absent:` objects the cluster must not hold.
    pub absent: Vec<ObjectRef>,
    /// `kept:` objects the cluster must hold and never have deleted since the scenario began
    /// (so never made again: a recreated PersistentVolumeClaim or Secret is data lost).
    pub kept: Vec<ObjectRef>,
    /// `handlerFailure:` a handler call of the step must fail (with this substring, if any);
    /// without it a handler failure fails the step.
    pub handler_failure: Option<Option<String>>,
}
