//! The `NamespaceDefaults` resource: its spec, and what it implies for one namespace. Pure
//! functions, unit-tested on the host target.

use std::collections::BTreeMap;

use kube_guest::{Object, OwnerReference};
use serde::Deserialize;
use serde_json::{json, Value};

/// The custom resource's `apiVersion` and kind (see `crd.yaml`).
pub const API_VERSION: &str = "defaults.kube-wasm.dev/v1alpha1";
pub const KIND: &str = "NamespaceDefaults";
/// Held on every NamespaceDefaults until the objects it manages are deleted.
pub const FINALIZER: &str = "defaults.kube-wasm.dev/cleanup";
/// Label on every managed object: the controller's watches select on it, so its caches hold
/// only what it manages rather than every ConfigMap in the cluster.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "namespace-defaults";

/// `spec` of a NamespaceDefaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// Which namespaces get the defaults; `{}` selects every namespace.
    pub namespace_selector: LabelSelector,
    /// The ConfigMap to keep in each selected namespace, if any.
    #[serde(default)]
    pub config_map: Option<ConfigMapSpec>,
    /// The ResourceQuota to keep in each selected namespace, if any.
    #[serde(default)]
    pub resource_quota: Option<QuotaSpec>,
}

/// A metav1.LabelSelector.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ConfigMapSpec {
    /// Defaults to the NamespaceDefaults' name.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct QuotaSpec {
    /// Defaults to the NamespaceDefaults' name.
    #[serde(default)]
    pub name: Option<String>,
    /// Resource name → quantity, e.g. `pods: "10"`, `requests.memory: 4Gi`. Numbers are
    /// accepted as written in YAML and sent as quantity strings.
    #[serde(default)]
    pub hard: BTreeMap<String, Value>,
}

impl Spec {
    /// Reads the spec of `owner`; an error names what is wrong, for the status condition.
    pub fn of(owner: &Object) -> Result<Spec, String> {
        let spec = owner
            .get("spec")
            .ok_or_else(|| "spec is missing".to_string())?;
        let s = Spec::deserialize(spec).map_err(|e| format!("spec: {e}"))?;
        s.namespace_selector.to_query()?;
        if let Some(q) = &s.resource_quota {
            for (k, v) in &q.hard {
                quantity(v)
                    .ok_or_else(|| format!("spec.resourceQuota.hard.{k}: {v} is not a quantity"))?;
            }
        }
        Ok(s)
    }
}

impl LabelSelector {
    /// The selector in the API's string syntax, which the host's lister matches natively;
    /// none when it selects everything.
    pub fn to_query(&self) -> Result<Option<String>, String> {
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            let values = || {
                if r.values.is_empty() {
                    Err(format!(
                        "{} {}: values must be non-empty",
                        r.key, r.operator
                    ))
                } else {
                    Ok(r.values.join(","))
                }
            };
            let no_values = || {
                if r.values.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} {}: values must be empty", r.key, r.operator))
                }
            };
            parts.push(match r.operator.as_str() {
                "In" => format!("{} in ({})", r.key, values()?),
                "NotIn" => format!("{} notin ({})", r.key, values()?),
                "Exists" => no_values().map(|()| r.key.clone())?,
                "DoesNotExist" => no_values().map(|()| format!("!{}", r.key))?,
                op => return Err(format!("{}: unknown operator {op:?}", r.key)),
            });
        }
        Ok((!parts.is_empty()).then(|| parts.join(",")))
    }
}

/// A quantity as the API takes it: a string, or a number written without quotes in YAML.
fn quantity(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// What one managed object is: kind, namespace, name. Also the entries of `status.managed`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Managed {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl Managed {
    pub fn to_json(&self) -> Value {
        json!({"kind": self.kind, "namespace": self.namespace, "name": self.name})
    }
}

/// The objects `owner` wants in `namespace`, as server-side-apply bodies: exactly the fields
/// this controller owns, so fields it stops stating are removed by the API server.
pub fn desired(owner: &Object, spec: &Spec, namespace: &str, oref: &OwnerReference) -> Vec<Object> {
    let mut out = Vec::new();
    let base = |kind: &str, name: &Option<String>| {
        let name = name
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(owner.name());
        let mut o = Object::new("v1", kind, Some(namespace), name);
        o.set_label(MANAGED_BY, MANAGER);
        o.set_owner_reference(oref.clone());
        o
    };
    if let Some(c) = &spec.config_map {
        let mut o = base("ConfigMap", &c.name);
        o["data"] = json!(c.data);
        out.push(o);
    }
    if let Some(q) = &spec.resource_quota {
        let mut o = base("ResourceQuota", &q.name);
        let hard: BTreeMap<&str, String> = q
            .hard
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), quantity(v)?)))
            .collect();
        o["spec"] = json!({ "hard": hard });
        out.push(o);
    }
    out
}

/// Whether the cached `current` already has everything `want` states, so the apply can be
/// skipped. Quantities are compared as written; a server that normalises them (`1024Mi` →
/// `1Gi`) only costs a no-op apply.
pub fn up_to_date(current: &Object, want: &Object, oref: &OwnerReference) -> bool {
    let owned = current.controller_ref().is_some_and(|r| r.uid == oref.uid);
    let field = if want.kind() == "ConfigMap" {
        "/data"
    } else {
        "/spec/hard"
    };
    owned
        && current.label(MANAGED_BY) == Some(MANAGER)
        && current.pointer(field) == want.pointer(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(spec: Value) -> Object {
        Object::from_value(json!({"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "team-defaults", "uid": "u-1", "generation": 2},
            "spec": spec}))
        .unwrap()
    }

    #[test]
    fn selectors_become_the_api_string_syntax() {
        let s = |v: Value| -> Result<Option<String>, String> {
            serde_json::from_value::<LabelSelector>(v)
                .unwrap()
                .to_query()
        };
        assert_eq!(s(json!({})), Ok(None));
        assert_eq!(
            s(json!({"matchLabels": {"team": "a", "env": "prod"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["web", "db"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                    {"key": "owner", "operator": "Exists"},
                    {"key": "zone", "operator": "NotIn", "values": ["x"]}]})),
            Ok(Some(
                "env=prod,team=a,tier in (web,db),!legacy,owner,zone notin (x)".into()
            ))
        );
        assert!(s(json!({"matchExpressions": [{"key": "k", "operator": "In"}]})).is_err());
        assert!(s(
            json!({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]})
        )
        .is_err());
        assert!(s(json!({"matchExpressions": [{"key": "k", "operator": "Gt"}]})).is_err());
    }

    #[test]
    fn spec_errors_are_named() {
        assert!(Spec::of(&owner(json!({"namespaceSelector": {}}))).is_ok());
        assert!(Spec::of(&owner(json!(null))).is_err());
        let e = Spec::of(&owner(json!({"namespaceSelector": {},
            "resourceQuota": {"hard": {"pods": true}}})))
        .unwrap_err();
        assert!(e.contains("spec.resourceQuota.hard.pods"), "{e}");
        assert!(Spec::of(&owner(json!({"namespaceSelector": 3}))).is_err());
    }

    #[test]
    fn desired_objects_are_labelled_owned_and_named() {
        let o = owner(json!({"namespaceSelector": {},
            "configMap": {"data": {"LOG_LEVEL": "info"}},
            "resourceQuota": {"name": "quota", "hard": {"pods": 10, "requests.memory": "4Gi"}}}));
        let spec = Spec::of(&o).unwrap();
        let oref = o.controller_owner_ref().unwrap();
        let d = desired(&o, &spec, "team-a", &oref);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].kind(), d[0].namespace(), d[0].name()),
            ("ConfigMap", Some("team-a"), "team-defaults")
        );
        assert_eq!(d[0]["data"], json!({"LOG_LEVEL": "info"}));
        assert_eq!(d[0].label(MANAGED_BY), Some(MANAGER));
        assert!(d[0].is_controlled_by(&o));
        assert_eq!(d[1].name(), "quota");
        assert_eq!(
            d[1]["spec"]["hard"],
            json!({"pods": "10", "requests.memory": "4Gi"})
        );

        // The cached object with the same content is up to date; any drift is not.
        let mut cached = d[0].clone();
        assert!(up_to_date(&cached, &d[0], &oref));
        cached["data"]["LOG_LEVEL"] = "debug".into();
        assert!(!up_to_date(&cached, &d[0], &oref));
        let mut foreign = d[1].clone();
        foreign["metadata"]["ownerReferences"] = json!([]);
        assert!(!up_to_date(&foreign, &d[1], &oref));
        assert!(up_to_date(&d[1], &d[1], &oref));

        let only_cm = owner(json!({"namespaceSelector": {}, "configMap": {"name": "x"}}));
        let spec = Spec::of(&only_cm).unwrap();
        assert_eq!(desired(&only_cm, &spec, "n", &oref).len(), 1);
    }
}
