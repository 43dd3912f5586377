//! A custom resource's structural schema at work on every body the server decodes: fields the
//! schema does not declare are pruned (unless it preserves unknown fields there), then the
//! schema's `default`s fill what is missing, as kube-apiserver's apiextensions server does.
//!
//! A controller that writes a field its CRD forgot to declare sees it vanish on a real cluster;
//! one that relies on a defaulted field sees it set before its first reconcile. Without these
//! here, both pass their tests and break on the cluster.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::Shared;
use kwh_client::registry::ResourceDef;

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// A version's schema as read at a revision of its CRD (none: the version has no schema).
type Read = (String, Option<Arc<Value>>);

/// Parsed schemas by (CRD name, version), with the CRD's resourceVersion they were read at.
#[derive(Debug, Default)]
pub struct Schemas {
    cache: Mutex<HashMap<(String, String), Read>>,
}

impl Schemas {
    /// The `openAPIV3Schema` of `def`'s version, read once per revision of its CRD.
    pub(crate) fn of(&self, shared: &Shared, def: &ResourceDef) -> Option<Arc<Value>> {
        if def.builtin {
            return None;
        }
        let crd_name = format!("{}.{}", def.plural, def.group);
        let crd = shared.store.get(CRDS, &crd_name)?;
        let key = (crd_name, def.version.clone());
        let rv = crd.resource_version().to_owned();
        if let Some((at, s)) = self.cache.lock().get(&key) {
            if *at == rv {
                return s.clone();
            }
        }
        let schema = crd.to_value().ok().and_then(|v| {
            v.pointer("/spec/versions")?
                .as_array()?
                .iter()
                .find(|x| x.get("name").and_then(Value::as_str) == Some(&def.version))?
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .map(Arc::new)
        });
        self.cache.lock().insert(key, (rv, schema.clone()));
        schema
    }
}

/// Prunes `v` to what `schema` declares, then fills in its defaults.
pub fn apply(schema: &Value, v: &mut Value) {
    prune(schema, v, true);
    default(schema, v);
}

/// Drops the members no property declares, at every level the schema describes; `apiVersion`,
/// `kind` and `metadata` of the object itself (and of embedded resources) are always kept.
fn prune(schema: &Value, v: &mut Value, resource: bool) {
    match v {
        Value::Object(m) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = resource || flag(schema, "x-kubernetes-embedded-resource");
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            let keep = |k: &str| {
                preserve
                    || extra.is_some()
                    || props.is_some_and(|p| p.contains_key(k))
                    || (embedded && matches!(k, "apiVersion" | "kind" | "metadata"))
            };
            m.retain(|k, _| keep(k));
            for (k, child) in m.iter_mut() {
                let sub = props.and_then(|p| p.get(k)).or(extra);
                if let Some(sub) = sub {
                    prune(sub, child, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for x in items {
                    prune(item, x, false);
                }
            }
        }
        _ => {}
    }
}

/// Sets each missing property that has a `default`, then descends.
fn default(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                fill(props, m);
                for (k, sub) in props {
                    if let Some(child) = m.get_mut(k) {
                        default(sub, child);
                    }
                }
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in m.values_mut() {
                    default(extra, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for x in items {
                    default(item, x);
                }
            }
        }
        _ => {}
    }
}

fn fill(props: &Map<String, Value>, m: &mut Map<String, Value>) {
    for (k, sub) in props {
        if m.get(k).is_none_or(Value::is_null) {
            if let Some(d) = sub.get("default") {
                m.insert(k.clone(), d.clone());
            }
        }
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_pruned_and_defaults_filled_at_every_level() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer", "default": 3},
                "mode": {"type": "string", "default": "fast"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "port": {"type": "integer"},
                    "protocol": {"type": "string", "default": "TCP"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        }});
        let mut v = json!({"apiVersion": "x.example/v1", "kind": "Thing",
            "metadata": {"name": "a"},
            "spec": {"mode": "slow", "typo": 1, "ports": [{"port": 80, "extra": true}],
                     "free": {"anything": {"goes": 1}}},
            "bogus": true});
        apply(&schema, &mut v);
        assert_eq!(
            v,
            json!({"apiVersion": "x.example/v1", "kind": "Thing",
            "metadata": {"name": "a"},
            "spec": {"mode": "slow", "size": 3, "ports": [{"port": 80, "protocol": "TCP"}],
                     "free": {"anything": {"goes": 1}}}})
        );
    }
}
