//! The `/scale` subresource of the kinds that have one (Deployments, ReplicaSets,
//! StatefulSets, ReplicationControllers): an `autoscaling/v1` Scale that reads and writes the
//! object's `spec.replicas`. `kubectl scale` and HorizontalPodAutoscalers write through it,
//! never through the object itself.

use serde_json::{json, Map, Value};

use crate::patch::{self, PatchType};
use crate::request::ResourceRequest;
use crate::response::{self, FieldError};
use crate::write::{self, WriteOpts};
use crate::Shared;
use kwh_client::registry::ResourceDef;
use kwh_client::Status;

/// Whether `def`'s kind serves `/scale`.
pub fn has_scale(def: &ResourceDef) -> bool {
    def.builtin
        && matches!(
            &*def.store_key,
            "apps/deployments"
                | "apps/replicasets"
                | "apps/statefulsets"
                | "/replicationcontrollers"
        )
}

/// GET: the Scale of the object.
pub fn get(shared: &Shared, r: &ResourceRequest) -> Result<Value, Status> {
    Ok(scale_of(&current(shared, r)?))
}

/// PUT (`patch` none) or PATCH (`patch`: content type and body) of the Scale: the object's
/// `spec.replicas` set to the result's, through the object's own update (its generation moves,
/// its watchers see it). A `resourceVersion` in the Scale is the object's precondition.
pub fn write(
    shared: &Shared,
    r: &ResourceRequest,
    patch: Option<&str>,
    body: &[u8],
    w: WriteOpts,
) -> Result<Value, Status> {
    let object = current(shared, r)?;
    let before = scale_of(&object);
    let name = r.name.as_deref().unwrap_or("");
    let after: Value = match patch {
        None => serde_json::from_slice(body)
            .map_err(|e| response::bad_request(format!("cannot decode the Scale: {e}")))?,
        Some(ct) => {
            let ty = PatchType::from_content_type(ct)
                .filter(|t| *t != PatchType::Apply)
                .ok_or_else(|| {
                    Status::failure(
                        415,
                        "UnsupportedMediaType",
                        format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"),
                    )
                })?;
            patch::apply_patch(&before, ty, body, Some(("autoscaling", "Scale")))
                .map_err(|e| e.to_status(&r.def.plural, name))?
        }
    };
    let replicas = after
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if !(0..=i64::from(i32::MAX)).contains(&replicas) {
        return Err(response::invalid(
            "Scale",
            "autoscaling",
            name,
            &[FieldError::invalid(
                "spec.replicas",
                &replicas.to_string(),
                "must be greater than or equal to 0",
            )],
        ));
    }
    let mut updated = object;
    if let Some(rv) = after
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        updated["metadata"]["resourceVersion"] = rv.into();
    }
    match updated.get_mut("spec") {
        Some(Value::Object(spec)) => {
            spec.insert("replicas".into(), replicas.into());
        }
        _ => updated["spec"] = json!({"replicas": replicas}),
    }
    let o = write::update_object(shared, &r.def, r.namespace.as_deref(), name, updated, w)?;
    let v = o
        .to_value()
        .map_err(|e| response::internal(&e.to_string()))?;
    Ok(scale_of(&v))
}

fn current(shared: &Shared, r: &ResourceRequest) -> Result<Value, Status> {
    let name = r.name.as_deref().unwrap_or("");
    write::get(shared, &r.def, r.namespace.as_deref(), name)?
        .to_value()
        .map_err(|e| response::internal(&e.to_string()))
}

/// The Scale of an object: its identity, desired and observed replicas, and its selector as a
/// label-selector string.
fn scale_of(o: &Value) -> Value {
    let mut meta = Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(x) = o.pointer(&format!("/metadata/{f}")) {
            meta.insert(f.into(), x.clone());
        }
    }
    let replicas = o.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
    let observed = o.pointer("/status/replicas").cloned().unwrap_or(json!(0));
    let mut status = json!({"replicas": observed});
    let selector = o.pointer("/spec/selector").map(selector_string);
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = s.into();
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": {"replicas": replicas},
        "status": status,
    })
}

/// A selector as `kubectl get -l` writes one: `a=b,c in (d,e),!f`; a ReplicationController's
/// plain map as its labels.
fn selector_string(sel: &Value) -> String {
    let labels = sel.get("matchLabels").unwrap_or(sel);
    let mut parts: Vec<String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != "matchExpressions")
        .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
        .collect();
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let part = match e.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_owned(),
            Some("DoesNotExist") => format!("!{key}"),
            _ => continue,
        };
        parts.push(part);
    }
    parts.sort();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_as_kubectl_writes_them() {
        let s = json!({"matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]},
                                 {"key": "g", "operator": "DoesNotExist"}]});
        assert_eq!(selector_string(&s), "!g,a=1,b=2,t in (x,y)");
        assert_eq!(selector_string(&json!({"app": "web"})), "app=web");
    }
}
