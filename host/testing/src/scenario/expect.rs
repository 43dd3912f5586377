//! Reading a step's `expect:` block.

use std::time::Duration;

use serde_json::Value;

use super::yaml::{
    duration, fail, join, kind_of, list_of, map, object, object_ref, only, string, strings, R,
};
use super::{
    Action, EnqueueExpect, EventExpect, Expect, LogExpect, OutcomeExpect, RegardingExpect,
    ResultExpect, WriteExpect,
};
use crate::{LogLevel, LogSource};
use kwh_client::duration::parse_duration;
use kwh_plugin::events::EventType;

/// A key expected in the queue's waiting set: `{key, in}`.
fn waiting(v: &Value, at: &str) -> R<(String, Duration)> {
    let m = map(v, at)?;
    only(m, at, &["key", "in"])?;
    let key = string(m.get("key").unwrap_or(&Value::Null), &join(at, "key"))?;
    let d = duration(m.get("in").unwrap_or(&Value::Null), &join(at, "in"))?;
    Ok((key, d))
}

pub(super) fn expect(v: &Value, at: &str, action: &Action) -> R<Expect> {
    let m = map(v, at)?;
    only(
        m,
        at,
        &[
            "outcome",
            "reconciled",
            "enqueued",
            "writes",
            "events",
            "logs",
            "ready",
            "waiting",
            "objects",
            "absent",
            "kept",
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
        e.enqueued = Some(list_of(q, &here, enqueue)?);
    }
    if let Some(w) = m.get("writes") {
        let here = join(at, "writes");
        e.writes = Some(list_of(w, &here, write)?);
    }
    if let Some(v) = m.get("events") {
        let here = join(at, "events");
        e.events = Some(list_of(v, &here, event)?);
    }
    if let Some(l) = m.get("logs") {
        let here = join(at, "logs");
        e.logs = Some(list_of(l, &here, log)?);
    }
    if let Some(r) = m.get("ready") {
        e.ready = Some(strings(r, &join(at, "ready"))?);
    }
    if let Some(w) = m.get("waiting") {
        e.waiting = Some(list_of(w, &join(at, "waiting"), waiting)?);
    }
    if let Some(o) = m.get("objects") {
        let here = join(at, "objects");
        e.objects = list_of(o, &here, object)?;
    }
    if let Some(a) = m.get("absent") {
        let here = join(at, "absent");
        e.absent = list_of(a, &here, object_ref)?;
    }
    if let Some(k) = m.get("kept") {
        let here = join(at, "kept");
        e.kept = list_of(k, &here, object_ref)?;
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
    "patch-status",
    "json-patch-status",
    "merge-patch-status",
    "strategic-merge-patch-status",
    "apply-status",
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

fn event(v: &Value, at: &str) -> R<EventExpect> {
    let m = map(v, at)?;
    only(m, at, &["type", "reason", "action", "note", "regarding"])?;
    let s =
        |f: &str| -> R<Option<String>> { m.get(f).map(|x| string(x, &join(at, f))).transpose() };
    let event_type = match s("type")?.as_deref() {
        None => None,
        Some("Normal") => Some(EventType::Normal),
        Some("Warning") => Some(EventType::Warning),
        Some(t) => {
            return fail(
                &join(at, "type"),
                format!("unknown type {t:?} (Normal, Warning)"),
            )
        }
    };
    let regarding = match m.get("regarding") {
        Some(r) => {
            let here = join(at, "regarding");
            let rm = map(r, &here)?;
            only(rm, &here, &["apiVersion", "kind", "namespace", "name"])?;
            let s = |f: &str| -> R<Option<String>> {
                rm.get(f).map(|x| string(x, &join(&here, f))).transpose()
            };
            RegardingExpect {
                api_version: s("apiVersion")?,
                kind: s("kind")?,
                namespace: s("namespace")?,
                name: s("name")?,
            }
        }
        None => RegardingExpect::default(),
    };
    Ok(EventExpect {
        event_type,
        reason: s("reason")?,
        action: s("action")?,
        note: s("note")?,
        regarding,
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
