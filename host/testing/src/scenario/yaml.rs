//! Small readers for scenario YAML: each checks one value's shape and reports the path of the
//! field when it is wrong, so every error names where in the file to look.

use std::time::Duration;

use serde_json::{Map, Value};

use kwh_client::duration::parse_duration;

use super::ObjectRef;

/// A result whose error is (path of the field, message).
pub(super) type R<T> = Result<T, (String, String)>;

pub(super) fn fail<T>(at: &str, message: impl Into<String>) -> R<T> {
    Err((at.to_string(), message.into()))
}

pub(super) fn map<'a>(v: &'a Value, at: &str) -> R<&'a Map<String, Value>> {
    match v.as_object() {
        Some(m) => Ok(m),
        None => fail(at, format!("expected a mapping, found {}", kind_of(v))),
    }
}

pub(super) fn list<'a>(v: &'a Value, at: &str) -> R<&'a Vec<Value>> {
    match v.as_array() {
        Some(l) => Ok(l),
        None => fail(at, format!("expected a list, found {}", kind_of(v))),
    }
}

/// A list whose every element `read` takes, each reported at its index.
pub(super) fn list_of<T>(v: &Value, at: &str, read: impl Fn(&Value, &str) -> R<T>) -> R<Vec<T>> {
    list(v, at)?
        .iter()
        .enumerate()
        .map(|(i, x)| read(x, &format!("{at}[{i}]")))
        .collect()
}

pub(super) fn string(v: &Value, at: &str) -> R<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => fail(at, format!("expected a string, found {}", kind_of(other))),
    }
}

pub(super) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

pub(super) fn only(m: &Map<String, Value>, at: &str, allowed: &[&str]) -> R<()> {
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

pub(super) fn duration(v: &Value, at: &str) -> R<Duration> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_millis)
            .ok_or_else(|| (at.to_string(), format!("invalid duration {n}"))),
        Value::String(s) => parse_duration(s).map_err(|e| (at.to_string(), e)),
        other => fail(at, format!("expected a duration, found {}", kind_of(other))),
    }
}

pub(super) fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_string()
    } else {
        format!("{at}.{field}")
    }
}

pub(super) fn strings(v: &Value, at: &str) -> R<Vec<String>> {
    list(v, at)?
        .iter()
        .enumerate()
        .map(|(i, x)| string(x, &format!("{at}[{i}]")))
        .collect()
}

/// A Kubernetes object: a mapping with apiVersion, kind and metadata.name.
pub(super) fn object(v: &Value, at: &str) -> R<Value> {
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

/// A reference to one object: apiVersion, kind, name and optionally namespace.
pub(super) fn object_ref(v: &Value, at: &str) -> R<ObjectRef> {
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
