//! An object body as writes read it: parsed and checked as an object of the resource, its
//! metadata reached, the fields the server fills per kind, and compared with its previous
//! version.

use serde_json::{json, Map, Value};

use crate::registry::{Registry, ResourceDef};
use crate::response::{self, FieldError};
use kwh_client::Status;

pub(super) const NAMESPACES: &str = "/namespaces";
pub(super) const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

pub(super) fn parse_body(body: &[u8]) -> Result<Value, Status> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        response::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    if !v.is_object() {
        return Err(response::bad_request(
            "couldn't get version/kind; json parse error: the body is not a JSON object",
        ));
    }
    Ok(v)
}

/// `metadata` as a map, created when missing. Callers have checked that `v` is an object
/// ([`object_body`]); a non-object is replaced rather than indexed (which would panic).
pub(super) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    match v.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// Reject anything but a JSON object as an object body.
pub(super) fn object_body(v: &Value) -> Result<(), Status> {
    if v.is_object() {
        Ok(())
    } else {
        Err(response::bad_request(
            "the body of the request must be a JSON object",
        ))
    }
}

pub(super) fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?.get(field)?.as_str()
}

/// Fill or check `kind`/`apiVersion` against the resource.
pub(super) fn check_type(def: &ResourceDef, v: &mut Value) -> Result<(), Status> {
    let av = def.api_version();
    match v.get("kind").and_then(Value::as_str) {
        Some(k) if k != def.kind => {
            return Err(response::bad_request(format!(
            "the object provided is unrecognized: kind {k:?} does not match the {} being written",
            def.kind
        )))
        }
        Some(_) => {}
        None => v["kind"] = def.kind.clone().into(),
    }
    match v.get("apiVersion").and_then(Value::as_str) {
        Some(a) if a != av => {
            return Err(response::bad_request(format!(
                "the API version in the data ({a}) does not match the expected API version ({av})"
            )))
        }
        Some(_) => {}
        None => v["apiVersion"] = av.into(),
    }
    Ok(())
}

/// Server-populated fields of particular kinds.
pub(super) fn kind_defaults(
    def: &ResourceDef,
    v: &mut Value,
    name: &str,
    now: &str,
) -> Result<(), Status> {
    match &*def.store_key {
        // The API server's SetDefaults_Secret: a Secret without a type is Opaque (what
        // `kubectl create secret generic` relies on: its protobuf body carries an empty type).
        "/secrets"
            if v.get("type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty) =>
        {
            v["type"] = "Opaque".into();
        }
        NAMESPACES => {
            let m = meta_mut(v);
            if !m.get("labels").is_some_and(Value::is_object) {
                m.insert("labels".into(), json!({}));
            }
            m["labels"]["kubernetes.io/metadata.name"] = name.into();
            v["spec"] = json!({"finalizers": ["kubernetes"]});
            v["status"] = json!({"phase": "Active"});
        }
        CRDS => {
            Registry::crd_defs(v).map_err(|e| {
                response::invalid(
                    &def.kind,
                    &def.group,
                    name,
                    &[FieldError {
                        reason: "FieldValueInvalid",
                        field: e.field.into(),
                        detail: e.message,
                    }],
                )
            })?;
            let stored: Vec<Value> = v
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter(|x| x.get("storage").and_then(Value::as_bool) == Some(true))
                        .filter_map(|x| x.get("name").cloned())
                        .collect()
                })
                .unwrap_or_default();
            let now = now.to_owned();
            let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
            v["status"] = json!({
                "conditions": [
                    cond("NamesAccepted", "NoConflicts", "no conflicts found"),
                    cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                ],
                "acceptedNames": v.pointer("/spec/names").cloned().unwrap_or(json!({})),
                "storedVersions": stored,
            });
        }
        _ => {}
    }
    Ok(())
}

/// Whether two JSON objects hold the same members, leaving out those `skip` names (compared in
/// place: a write compares the old and new object twice, and copies of a 4 KB Pod to compare
/// were most of the emulator's time per patch).
pub(super) fn same_except(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether a write changes nothing but what the server sets on every write
/// (`metadata.resourceVersion`, `metadata.managedFields`).
pub(super) fn unchanged(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old == new;
    };
    let server_set = |k: &str| k == "resourceVersion" || k == "managedFields";
    let same_meta = match (o.get("metadata"), n.get("metadata")) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => same_except(a, b, server_set),
        (a, b) => a == b,
    };
    same_meta && same_except(o, n, |k| k == "metadata")
}

pub(crate) fn spec_changed(old: &Value, new: &Value) -> bool {
    match (old.as_object(), new.as_object()) {
        (Some(o), Some(n)) => !same_except(o, n, |k| k == "metadata" || k == "status"),
        _ => old != new,
    }
}
