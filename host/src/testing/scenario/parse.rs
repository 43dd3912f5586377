//! Reading a scenario file: YAML into the typed [`Scenario`], every field checked, errors naming
//! the file and the path of the offending field (`steps[2].expect.writes[0].verb`).

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::duration::parse_duration;
use super::{
    Action, EnqueueExpect, Expect, LogExpect, ObjectRef, OutcomeExpect, ResultExpect, Scenario,
    Step, WriteExpect,
};
use crate::testing::{LogLevel, LogSource};

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

type R<T> = Result<T, (String, String)>;

fn fail<T>(at: &str, message: impl Into<String>) -> R<T> {
    Err((at.to_string(), message.into()))
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
];

/// Parses scenario `text` read from `file`.
pub fn parse(file: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    let err = |(at, message): (String, String)| ScenarioError {
        file: file.to_path_buf(),
        at,
        message,
    };
    let doc: Value = serde_yaml::from_str(text)
        .map_err(|e| err((String::new(), format!("not valid YAML: {e}"))))?;
    scenario(file, &doc).map_err(err)
}

fn map<'a>(v: &'a Value, at: &str) -> R<&'a Map<String, Value>> {
    match v.as_object() {
        Some(m) => Ok(m),
        None => fail(at, format!("expected a mapping, found {}", kind_of(v))),
    }
}

fn list<'a>(v: &'a Value, at: &str) -> R<&'a Vec<Value>> {
    match v.as_array() {
        Some(l) => Ok(l),
        None => fail(at, format!("expected a list, found {}", kind_of(v))),
    }
}

fn string(v: &Value, at: &str) -> R<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => fail(at, format!("expected a string, found {}", kind_of(other))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn only(m: &Map<String, Value>, at: &str, allowed: &[&str]) -> R<()> {
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            return fail(
                at,
                format!(
                    "unknown field `{k}` (expected one of: {})",
                    allowed.join(", ")
                ),
            );
        }
    }
    Ok(())
}

fn duration(v: &Value, at: &str) -> R<Duration> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_millis)
            .ok_or_else(|| (at.to_string(), format!("invalid duration {n}"))),
        Value::String(s) => parse_duration(s).map_err(|e| (at.to_string(), e)),
        other => fail(at, format!("expected a duration, found {}", kind_of(other))),
    }
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_string()
    } else {
        format!("{at}.{field}")
    }
}

fn scenario(file: &Path, doc: &Value) -> R<Scenario> {
    let m = map(doc, "")?;
    only(m, "", &["name", "start", "limits", "given", "steps"])?;
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
            let secs = crate::emulator::util::parse_rfc3339(&s).ok_or_else(|| {
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
    let given = match m.get("given") {
        Some(v) => objects_text(v, "given")?,
        None => Vec::new(),
    };
    let steps_v = m
        .get("steps")
        .ok_or_else(|| (String::new(), "missing `steps`".to_string()))?;
    let steps = list(steps_v, "steps")?
        .iter()
        .enumerate()
        .map(|(i, s)| step(s, &format!("steps[{i}]")))
        .collect::<R<Vec<_>>>()?;
    if steps.is_empty() {
        return fail("steps", "no steps");
    }
    Ok(Scenario {
        file: file.to_path_buf(),
        name,
        start,
        handler_deadline,
        reconcile_deadline,
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

/// A Kubernetes object: a mapping with apiVersion, kind and metadata.name.
fn object(v: &Value, at: &str) -> R<Value> {
    map(v, at)?;
    for (ptr, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ] {
        if !v.pointer(ptr).is_some_and(Value::is_string) {
            return fail(at, format!("an object needs `{field}`"));
        }
    }
    Ok(v.clone())
}

fn object_ref(v: &Value, at: &str) -> R<ObjectRef> {
    let m = map(v, at)?;
    only(m, at, &["apiVersion", "kind", "namespace", "name"])?;
    let get = |f: &str| -> R<String> {
        match m.get(f) {
            Some(v) => string(v, &join(at, f)),
            None => fail(at, format!("missing `{f}`")),
        }
    };
    Ok(ObjectRef {
        api_version: get("apiVersion")?,
        kind: get("kind")?,
        namespace: match m.get("namespace") {
            Some(v) => Some(string(v, &join(at, "namespace"))?),
            None => None,
        },
        name: get("name")?,
    })
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

fn expect(v: &Value, at: &str, action: &Action) -> R<Expect> {
    let m = map(v, at)?;
    only(
        m,
        at,
        &[
            "outcome",
            "reconciled",
            "enqueued",
            "writes",
            "logs",
            "ready",
            "waiting",
            "objects",
            "absent",
            "handlerFailure",
        ],
    )?;
    let mut e = Expect::default();
    if let Some(o) = m.get("outcome") {
        let here = join(at, "outcome");
        if !matches!(action, Action::Reconcile(_)) {
            return fail(
                &here,
                "only a `reconcile` step has an outcome (use `reconciled` for runQueue)",
            );
        }
        e.outcome = Some(outcome(o, &here)?);
    }
    if let Some(r) = m.get("reconciled") {
        let here = join(at, "reconciled");
        if !matches!(action, Action::RunQueue) {
            return fail(&here, "only a `runQueue` step reconciles several keys");
        }
        e.reconciled = Some(strings(r, &here)?);
    }
    if let Some(q) = m.get("enqueued") {
        let here = join(at, "enqueued");
        e.enqueued = Some(
            list(q, &here)?
                .iter()
                .enumerate()
                .map(|(i, x)| enqueue(x, &format!("{here}[{i}]")))
                .collect::<R<_>>()?,
        );
    }
    if let Some(w) = m.get("writes") {
        let here = join(at, "writes");
        e.writes = Some(
            list(w, &here)?
                .iter()
                .enumerate()
                .map(|(i, x)| write(x, &format!("{here}[{i}]")))
                .collect::<R<_>>()?,
        );
    }
    if let Some(l) = m.get("logs") {
        let here = join(at, "logs");
        e.logs = Some(
            list(l, &here)?
                .iter()
                .enumerate()
                .map(|(i, x)| log(x, &format!("{here}[{i}]")))
                .collect::<R<_>>()?,
        );
    }
    if let Some(r) = m.get("ready") {
        e.ready = Some(strings(r, &join(at, "ready"))?);
    }
    if let Some(w) = m.get("waiting") {
        let here = join(at, "waiting");
        e.waiting = Some(
            list(w, &here)?
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let a = format!("{here}[{i}]");
                    let wm = map(x, &a)?;
                    only(wm, &a, &["key", "in"])?;
                    let key = string(wm.get("key").unwrap_or(&Value::Null), &join(&a, "key"))?;
                    let d = duration(wm.get("in").unwrap_or(&Value::Null), &join(&a, "in"))?;
                    Ok((key, d))
                })
                .collect::<R<_>>()?,
        );
    }
    if let Some(o) = m.get("objects") {
        let here = join(at, "objects");
        e.objects = list(o, &here)?
            .iter()
            .enumerate()
            .map(|(i, x)| object(x, &format!("{here}[{i}]")))
            .collect::<R<_>>()?;
    }
    if let Some(a) = m.get("absent") {
        let here = join(at, "absent");
        e.absent = list(a, &here)?
            .iter()
            .enumerate()
            .map(|(i, x)| object_ref(x, &format!("{here}[{i}]")))
            .collect::<R<_>>()?;
    }
    if let Some(h) = m.get("handlerFailure") {
        let here = join(at, "handlerFailure");
        e.handler_failure = Some(match h {
            Value::Bool(true) => None,
            Value::String(s) => Some(s.clone()),
            _ => return fail(&here, "expected `true` or a substring of the failure"),
        });
    }
    Ok(e)
}

fn strings(v: &Value, at: &str) -> R<Vec<String>> {
    list(v, at)?
        .iter()
        .enumerate()
        .map(|(i, x)| string(x, &format!("{at}[{i}]")))
        .collect()
}

fn outcome(v: &Value, at: &str) -> R<OutcomeExpect> {
    let bad = || {
        (
            at.to_string(),
            "expected done, error, trap, `requeueAfter: 30s`, `error: text` or `trap: text`"
                .to_string(),
        )
    };
    match v {
        Value::String(s) => {
            let s = s.trim();
            match s {
                "done" => Ok(OutcomeExpect::Done),
                "error" => Ok(OutcomeExpect::Error(None)),
                "trap" => Ok(OutcomeExpect::Trap(None)),
                _ => {
                    let d = s
                        .strip_prefix("requeue-after")
                        .or_else(|| s.strip_prefix("requeueAfter"))
                        .ok_or_else(bad)?;
                    Ok(OutcomeExpect::RequeueAfter(
                        parse_duration(d).map_err(|e| (at.to_string(), e))?,
                    ))
                }
            }
        }
        Value::Object(m) if m.len() == 1 => {
            let (k, val) = m.iter().next().ok_or_else(bad)?;
            let here = join(at, k);
            match k.as_str() {
                "requeueAfter" => Ok(OutcomeExpect::RequeueAfter(duration(val, &here)?)),
                "error" => Ok(OutcomeExpect::Error(Some(string(val, &here)?))),
                "trap" => Ok(OutcomeExpect::Trap(Some(string(val, &here)?))),
                _ => Err(bad()),
            }
        }
        _ => Err(bad()),
    }
}

fn enqueue(v: &Value, at: &str) -> R<EnqueueExpect> {
    match v {
        Value::String(s) => Ok(EnqueueExpect {
            key: s.clone(),
            after: None,
        }),
        Value::Object(m) => {
            only(m, at, &["key", "after"])?;
            Ok(EnqueueExpect {
                key: string(m.get("key").unwrap_or(&Value::Null), &join(at, "key"))?,
                after: match m.get("after") {
                    Some(d) => Some(duration(d, &join(at, "after"))?),
                    None => None,
                },
            })
        }
        other => fail(
            at,
            format!("expected a key or {{key, after}}, found {}", kind_of(other)),
        ),
    }
}

const VERBS: &[&str] = &[
    "create",
    "replace",
    "patch",
    "json-patch",
    "merge-patch",
    "strategic-merge-patch",
    "apply",
    "delete",
    "replace-status",
];

fn write(v: &Value, at: &str) -> R<WriteExpect> {
    let m = map(v, at)?;
    only(
        m,
        at,
        &[
            "verb",
            "apiVersion",
            "kind",
            "namespace",
            "name",
            "body",
            "result",
            "object",
        ],
    )?;
    let s =
        |f: &str| -> R<Option<String>> { m.get(f).map(|x| string(x, &join(at, f))).transpose() };
    let verb = s("verb")?;
    if let Some(vb) = &verb {
        if !VERBS.contains(&vb.as_str()) {
            return fail(
                &join(at, "verb"),
                format!(
                    "unknown verb {vb:?} (expected one of: {})",
                    VERBS.join(", ")
                ),
            );
        }
    }
    let result = match m.get("result") {
        None => None,
        Some(Value::String(r)) if r == "ok" => Some(ResultExpect::Ok),
        Some(Value::Number(n)) => Some(ResultExpect::Code(
            n.as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .ok_or_else(|| (join(at, "result"), format!("invalid status code {n}")))?,
        )),
        Some(Value::String(r)) => Some(ResultExpect::Reason(r.clone())),
        Some(other) => {
            return fail(
                &join(at, "result"),
                format!(
                    "expected ok, a status code or a reason, found {}",
                    kind_of(other)
                ),
            )
        }
    };
    Ok(WriteExpect {
        verb,
        api_version: s("apiVersion")?,
        kind: s("kind")?,
        namespace: s("namespace")?,
        name: s("name")?,
        body: m.get("body").cloned(),
        result,
        object: m.get("object").cloned(),
    })
}

fn log(v: &Value, at: &str) -> R<LogExpect> {
    match v {
        Value::String(s) => Ok(LogExpect {
            contains: s.clone(),
            ..LogExpect::default()
        }),
        Value::Object(m) => {
            only(m, at, &["contains", "level", "source"])?;
            let level = match m.get("level") {
                Some(l) => {
                    let s = string(l, &join(at, "level"))?;
                    Some(LogLevel::parse(&s).ok_or_else(|| {
                        (
                            join(at, "level"),
                            format!("unknown level {s:?} (trace, debug, info, warn, error)"),
                        )
                    })?)
                }
                None => None,
            };
            let source = match m.get("source") {
                Some(l) => {
                    let s = string(l, &join(at, "source"))?;
                    Some(match s.as_str() {
                        "log" => LogSource::Log,
                        "stdout" => LogSource::Stdout,
                        "stderr" => LogSource::Stderr,
                        "host" => LogSource::Host,
                        _ => {
                            return fail(
                                &join(at, "source"),
                                format!("unknown source {s:?} (log, stdout, stderr, host)"),
                            )
                        }
                    })
                }
                None => None,
            };
            Ok(LogExpect {
                contains: match m.get("contains") {
                    Some(c) => string(c, &join(at, "contains"))?,
                    None => String::new(),
                },
                level,
                source,
            })
        }
        other => fail(
            at,
            format!(
                "expected text or {{contains, level, source}}, found {}",
                kind_of(other)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
