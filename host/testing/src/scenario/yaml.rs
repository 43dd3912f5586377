//! Small readers for scenario YAML: each checks one value's shape and reports the path of the
//! field when it is wrong, so every error names where in the file to look.

use std::time::Duration;

use serde_json::{Map, Value};

use kwh_client::duration::parse_duration;

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
