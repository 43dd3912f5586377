//! Reading a scenario file: YAML into the typed [`Scenario`], every field checked, errors naming
//! the file and the path of the offending field (`steps[2].expect.writes[0].verb`).

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use super::expect::expect;
use super::yaml::{
    duration, fail, join, kind_of, list, list_of, map, object, object_ref, only, string, R,
};
use super::{Action, Expect, Scenario, Step};

/// A scenario file that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{message}", file.display(), if at.is_empty() { String::new() } else { format!("{at}: ") })]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// Where in it (`steps[2].expect`), empty for the whole file.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

const ACTIONS: &[&str] = &[
    "seed",
    "add",
    "update",
    "updateStatus",
    "delete",
    "deleteMissed",
    "deliver",
    "reconcile",
    "runQueue",
    "advance",
    "hold",
    "restart",
    "crash",
];

/// Parses scenario `text` read from `file`.
pub fn parse(file: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    let err = |(at, message): (String, String)| ScenarioError {
        file: file.to_path_buf(),
        at,
        message,
    };
    let doc: Value = yaml_serde::from_str(text)
        .map_err(|e| err((String::new(), format!("not valid YAML: {e}"))))?;
    scenario(file, &doc).map_err(err)
}

fn scenario(file: &Path, doc: &Value) -> R<Scenario> {
    let m = map(doc, "")?;
    only(
        m,
        "",
        &[
            "name",
            "start",
            "limits",
            "config",
            "given",
            "givenFiles",
            "steps",
        ],
    )?;
    let name = match m.get("name") {
        Some(v) => string(v, "name")?,
        None => file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let start = match m.get("start") {
        Some(v) => {
            let s = string(v, "start")?;
            let secs = kwh_emulator::util::parse_rfc3339(&s).ok_or_else(|| {
                (
                    "start".to_string(),
                    format!("invalid time {s:?}: use e.g. 2025-01-01T00:00:00Z"),
                )
            })?;
            Some(UNIX_EPOCH + Duration::from_secs(secs))
        }
        None => None,
    };
    let (mut handler_deadline, mut reconcile_deadline) = (None, None);
    if let Some(l) = m.get("limits") {
        let lm = map(l, "limits")?;
        only(lm, "limits", &["handlerDeadline", "reconcileDeadline"])?;
        if let Some(v) = lm.get("handlerDeadline") {
            handler_deadline = Some(duration(v, "limits.handlerDeadline")?);
        }
        if let Some(v) = lm.get("reconcileDeadline") {
            reconcile_deadline = Some(duration(v, "limits.reconcileDeadline")?);
        }
    }
    // Any value: what the plugin makes of it is its own `validate-config`'s business.
    let config = m.get("config").cloned().unwrap_or(Value::Null);
    let mut given = Vec::new();
    if let Some(files) = m.get("givenFiles") {
        // Relative to the scenario file, so a suite can share fixtures wherever it is run from.
        let dir = file.parent().unwrap_or(Path::new(""));
        for (i, f) in list(files, "givenFiles")?.iter().enumerate() {
            let at = format!("givenFiles[{i}]");
            let rel = string(f, &at)?;
            let path = dir.join(&rel);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| (at, format!("cannot read {}: {e}", path.display())))?;
            given.push(text);
        }
    }
    if let Some(v) = m.get("given") {
        given.extend(objects_text(v, "given")?);
    }
    let steps_v = m
        .get("steps")
        .ok_or_else(|| (String::new(), "missing `steps`".to_string()))?;
    let steps = list_of(steps_v, "steps", step)?;
    if steps.is_empty() {
        return fail("steps", "no steps");
    }
    Ok(Scenario {
        file: file.to_path_buf(),
        name,
        start,
        handler_deadline,
        reconcile_deadline,
        config,
        given,
        steps,
    })
}

/// Objects as seed texts: a list of objects, one object, or a YAML/JSON string.
fn objects_text(v: &Value, at: &str) -> R<Vec<String>> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, o)| object(o, &format!("{at}[{i}]")).map(|o| o.to_string()))
            .collect(),
        Value::Object(_) => Ok(vec![object(v, at)?.to_string()]),
        other => fail(at, format!("expected objects, found {}", kind_of(other))),
    }
}

fn step(v: &Value, at: &str) -> R<Step> {
    let m = map(v, at)?;
    let mut allowed: Vec<&str> = ACTIONS.to_vec();
    allowed.extend(["expect", "note"]);
    only(m, at, &allowed)?;
    let present: Vec<&str> = ACTIONS
        .iter()
        .copied()
        .filter(|a| m.contains_key(*a))
        .collect();
    if present.len() > 1 {
        return fail(
            at,
            format!("one action per step, found {}", present.join(" and ")),
        );
    }
    let action = match present.first().copied() {
        None if m.contains_key("expect") => Action::Check,
        None => {
            return fail(
                at,
                format!(
                    "a step needs an action ({}) or `expect`",
                    ACTIONS.join(", ")
                ),
            )
        }
        Some(a) => {
            let val = &m[a];
            let here = join(at, a);
            match a {
                "seed" => Action::Seed(objects_text(val, &here)?.join("\n---\n")),
                "add" => Action::Add(object(val, &here)?),
                "update" => Action::Update(object(val, &here)?),
                "updateStatus" => Action::UpdateStatus(object(val, &here)?),
                "delete" => Action::Delete(object_ref(val, &here)?),
                "deleteMissed" => Action::DeleteMissed(object_ref(val, &here)?),
                "deliver" => match val.as_str() {
                    Some("pending") => Action::Deliver,
                    Some("initialList") => Action::InitialList,
                    Some("resync") => Action::Resync,
                    _ => return fail(&here, "expected `pending`, `initialList` or `resync`"),
                },
                "reconcile" => Action::Reconcile(string(val, &here)?),
                "runQueue" => match val {
                    Value::Bool(true) => Action::RunQueue,
                    _ => return fail(&here, "expected `true`"),
                },
                "hold" => match val {
                    Value::Bool(true) => Action::Hold,
                    _ => return fail(&here, "expected `true`"),
                },
                "restart" => restart(val, &here)?,
                "crash" => {
                    let m = map(val, &here)?;
                    only(m, &here, &["afterWrites"])?;
                    Action::Crash(count(m.get("afterWrites"), &join(&here, "afterWrites"))?.max(1))
                }
                _ => Action::Advance(duration(val, &here)?),
            }
        }
    };
    let expect = match m.get("expect") {
        Some(e) => expect(e, &join(at, "expect"), &action)?,
        None => Expect::default(),
    };
    Ok(Step { action, expect })
}

/// `restart: true` or `restart: {watch: N, lag: N}`.
fn restart(v: &Value, at: &str) -> R<Action> {
    if v == &Value::Bool(true) {
        return Ok(Action::Restart { watch: 0, lag: 0 });
    }
    let m = map(v, at)?;
    only(m, at, &["watch", "lag"])?;
    Ok(Action::Restart {
        watch: count(m.get("watch"), &join(at, "watch"))?,
        lag: count(m.get("lag"), &join(at, "lag"))?,
    })
}

/// A count: a non-negative integer, 0 when not given.
fn count(v: Option<&Value>, at: &str) -> R<usize> {
    match v {
        None => Ok(0),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(n as usize),
            None => fail(at, format!("expected a count, found {}", kind_of(v))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{
        EnqueueExpect, EventExpect, OutcomeExpect, RegardingExpect, ResultExpect,
    };
    use crate::LogLevel;
    use kwh_plugin::events::EventType;

    fn p(text: &str) -> Result<Scenario, ScenarioError> {
        parse(Path::new("s.yaml"), text)
    }

    fn err(text: &str) -> String {
        p(text).expect_err("must be refused").to_string()
    }

    #[test]
    fn a_full_scenario_parses_into_typed_steps() {
        let s = p(r#"
name: n
start: 2024-02-03T04:05:06Z
limits: {handlerDeadline: 500ms, reconcileDeadline: 2s}
given:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: x}}
steps:
  - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: x}}
    expect:
      enqueued: [x/b, {key: x/c, after: 1m}]
      logs: ["hello", {contains: bad, level: error, source: host}]
      handlerFailure: true
  - reconcile: x/b
    expect:
      outcome: requeue-after 1m30s
      writes: [{verb: patch, result: 409, object: {data: {}}}, {result: NotFound}, {result: ok}]
  - runQueue: true
    expect: {reconciled: [x/b]}
  - advance: 90
  - delete: {apiVersion: v1, kind: ConfigMap, namespace: x, name: b}
  - expect:
      waiting: [{key: x/b, in: 2s}]
      absent: [{apiVersion: v1, kind: ConfigMap, name: c}]
"#)
        .expect("parses");
        assert_eq!(s.name, "n");
        assert_eq!(
            s.start,
            Some(UNIX_EPOCH + Duration::from_secs(1_706_933_106))
        );
        assert_eq!(s.handler_deadline, Some(Duration::from_millis(500)));
        assert_eq!(s.given.len(), 1);
        assert_eq!(s.steps.len(), 6);
        let e = &s.steps[0].expect;
        assert_eq!(
            e.enqueued.as_ref().expect("enqueued")[1],
            EnqueueExpect {
                key: "x/c".into(),
                after: Some(Duration::from_secs(60))
            }
        );
        assert_eq!(
            e.logs.as_ref().expect("logs")[1].level,
            Some(LogLevel::Error)
        );
        assert_eq!(e.handler_failure, Some(None));
        let r = &s.steps[1].expect;
        assert_eq!(
            r.outcome,
            Some(OutcomeExpect::RequeueAfter(Duration::from_secs(90)))
        );
        let w = r.writes.as_ref().expect("writes");
        assert_eq!(w[0].result, Some(ResultExpect::Code(409)));
        assert_eq!(w[1].result, Some(ResultExpect::Reason("NotFound".into())));
        assert_eq!(w[2].result, Some(ResultExpect::Ok));
        assert!(matches!(s.steps[3].action, Action::Advance(d) if d == Duration::from_millis(90)));
        assert!(matches!(s.steps[5].action, Action::Check));
    }

    #[test]
    fn config_is_any_value_and_events_parse_field_by_field() {
        let s = p(r#"
config: {repeat: 2, reason: Hello, nested: [1, {a: b}]}
steps:
  - reconcile: x/a
    expect:
      events:
        - type: Normal
          reason: Hello
          action: Observe
          note: heralded
          regarding: {apiVersion: v1, kind: ConfigMap, namespace: x, name: a}
        - {type: Warning}
        - {}
  - reconcile: x/b
    expect: {events: []}
"#)
        .expect("parses");
        assert_eq!(
            s.config,
            serde_json::json!({"repeat": 2, "reason": "Hello", "nested": [1, {"a": "b"}]})
        );
        let ev = s.steps[0].expect.events.as_ref().expect("events");
        assert_eq!(
            ev[0],
            EventExpect {
                event_type: Some(EventType::Normal),
                reason: Some("Hello".into()),
                action: Some("Observe".into()),
                note: Some("heralded".into()),
                regarding: RegardingExpect {
                    api_version: Some("v1".into()),
                    kind: Some("ConfigMap".into()),
                    namespace: Some("x".into()),
                    name: Some("a".into()),
                },
            }
        );
        assert_eq!(ev[1].event_type, Some(EventType::Warning));
        assert_eq!(ev[2], EventExpect::default());
        assert_eq!(s.steps[1].expect.events, Some(Vec::new()));
        assert_eq!(s.steps[0].expect.writes, None);
        // Unset, `events` is not checked; `config` is null, as a plugins file without one.
        let s = p("config: 7\nsteps: [{reconcile: a}]\n").expect("parses");
        assert_eq!(s.config, serde_json::json!(7));
        let s = p("steps: [{reconcile: a}]\n").expect("parses");
        assert_eq!(s.config, Value::Null);
        assert_eq!(s.steps[0].expect.events, None);
    }

    #[test]
    fn bad_event_expectations_name_the_field() {
        let ev = |item: &str| {
            err(&format!(
                "steps:\n  - reconcile: a\n    expect: {{events: [{item}]}}\n"
            ))
        };
        assert_eq!(
            ev("{type: Normal, reasn: X}"),
            "s.yaml: steps[0].expect.events[0]: unknown field `reasn` (expected one of: type, reason, action, note, regarding)"
        );
        assert_eq!(
            ev("{type: Info}"),
            "s.yaml: steps[0].expect.events[0].type: unknown type \"Info\" (Normal, Warning)"
        );
        assert_eq!(
            ev("{regarding: {kind: ConfigMap, uid: u}}"),
            "s.yaml: steps[0].expect.events[0].regarding: unknown field `uid` (expected one of: apiVersion, kind, namespace, name)"
        );
        assert_eq!(
            ev("{regarding: ConfigMap}"),
            "s.yaml: steps[0].expect.events[0].regarding: expected a mapping, found a string"
        );
        assert_eq!(
            ev("{regarding: {name: [a]}}"),
            "s.yaml: steps[0].expect.events[0].regarding.name: expected a string, found a list"
        );
        assert_eq!(
            ev("{note: {contains: x}}"),
            "s.yaml: steps[0].expect.events[0].note: expected a string, found a mapping"
        );
        assert_eq!(
            ev("Hello"),
            "s.yaml: steps[0].expect.events[0]: expected a mapping, found a string"
        );
        assert_eq!(
            err("steps:\n  - reconcile: a\n    expect: {events: {reason: X}}\n"),
            "s.yaml: steps[0].expect.events: expected a list, found a mapping"
        );
        assert!(
            err("steps:\n  - reconcile: a\n    expect: {event: []}\n").starts_with(
                "s.yaml: steps[0].expect: unknown field `event` (expected one of: outcome, reconciled, enqueued, writes, events, logs,"
            )
        );
        assert!(err("configs: {}\nsteps: [{reconcile: a}]\n").starts_with(
            "s.yaml: unknown field `configs` (expected one of: name, start, limits, config, given,"
        ));
    }

    #[test]
    fn hold_restart_and_crash_steps_parse() {
        let s = p("steps:\n  - hold: true\n  - restart: true\n  - restart: {watch: 1, lag: 2}\n  - crash: {afterWrites: 3}\n")
            .expect("parses");
        assert!(matches!(s.steps[0].action, Action::Hold));
        assert!(matches!(
            s.steps[1].action,
            Action::Restart { watch: 0, lag: 0 }
        ));
        assert!(matches!(
            s.steps[2].action,
            Action::Restart { watch: 1, lag: 2 }
        ));
        assert!(matches!(s.steps[3].action, Action::Crash(3)));
        assert_eq!(
            err("steps:\n  - restart: {lag: -1}\n"),
            "s.yaml: steps[0].restart.lag: expected a count, found a number"
        );
        assert_eq!(
            err("steps:\n  - crash: {after: 1}\n"),
            "s.yaml: steps[0].crash: unknown field `after` (expected one of: afterWrites)"
        );
        assert_eq!(
            err("steps:\n  - hold: 1\n"),
            "s.yaml: steps[0].hold: expected `true`"
        );
        let s = p(
            "steps:\n  - expect: {kept: [{apiVersion: v1, kind: Secret, namespace: d, name: s}]}\n",
        )
        .expect("parses");
        assert_eq!(s.steps[0].expect.kept[0].name, "s");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        assert_eq!(err("name: x\n"), "s.yaml: missing `steps`");
        assert_eq!(err("steps: []\n"), "s.yaml: steps: no steps");
        assert_eq!(
            err("steps:\n  - reconcile: a\n    advance: 1s\n"),
            "s.yaml: steps[0]: one action per step, found reconcile and advance"
        );
        assert_eq!(
            err("steps:\n  - add: {kind: ConfigMap}\n"),
            "s.yaml: steps[0].add: an object needs `apiVersion`"
        );
        assert_eq!(
            err("steps:\n  - advance: 1s\n    expect: {outcome: done}\n"),
            "s.yaml: steps[0].expect.outcome: only a `reconcile` step has an outcome (use `reconciled` for runQueue)"
        );
        assert_eq!(
            err("steps:\n  - reconcile: a\n    expect: {logs: [{level: loud}]}\n"),
            "s.yaml: steps[0].expect.logs[0].level: unknown level \"loud\" (trace, debug, info, warn, error)"
        );
        assert_eq!(
            err("steps:\n  - reconcile: a\n    expect: {waiting: [{key: a}]}\n"),
            "s.yaml: steps[0].expect.waiting[0].in: expected a duration, found nothing"
        );
        assert!(err("start: yesterday\nsteps: [{runQueue: true}]\n")
            .starts_with("s.yaml: start: invalid time \"yesterday\""));
        assert!(err(": :\n").starts_with("s.yaml: not valid YAML"));
    }
}
