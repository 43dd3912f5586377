//! The Kubernetes RBAC a set of plugins needs, derived from their manifests.
//!
//! The manifest is the plugin's whole authority inside the host (every lister and client call is
//! checked against it), so the same manifest gives the least-privilege ClusterRole for the host's
//! service account: get/list/watch on every watched kind, and exactly the declared write verbs.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::manifest::Manifest;

/// A kind that the resolver (discovery, at run time) could not map to a resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin:?}: cannot resolve kind {kind} ({api_version}) to a resource")]
pub struct UnresolvedKind {
    /// The plugin whose manifest names it.
    pub plugin: String,
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
}

/// Where the ClusterRole is bound.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// Name of the ClusterRole and its binding.
    pub role_name: &'a str,
    /// Namespace of the host's service account.
    pub namespace: &'a str,
    /// Name of the host's service account.
    pub service_account: &'a str,
}

/// The API group of an apiVersion: `""` for the core group (`v1`).
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// Policy rules, one per (group, resource), verbs merged across plugins and sorted, so the output
/// is deterministic and diffs cleanly.
pub fn rules<'a>(
    manifests: impl IntoIterator<Item = &'a Manifest>,
    resolve: impl Fn(&str, &str) -> Option<String>,
) -> Result<Vec<serde_json::Value>, UnresolvedKind> {
    let mut by_resource: BTreeMap<(String, String), BTreeSet<&'static str>> = BTreeMap::new();
    for m in manifests {
        let resource = |api_version: &str, kind: &str| {
            resolve(api_version, kind).ok_or_else(|| UnresolvedKind {
                plugin: m.name.clone(),
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
        };
        for w in &m.watches {
            let r = resource(&w.api_version, &w.kind)?;
            by_resource
                .entry((group_of(&w.api_version).to_string(), r))
                .or_default()
                .extend(["get", "list", "watch"]);
        }
        for w in &m.writes {
            let r = resource(&w.api_version, &w.kind)?;
            for v in &w.verbs {
                let r = match v.subresource() {
                    Some(sub) => format!("{r}/{sub}"),
                    None => r.clone(),
                };
                by_resource
                    .entry((group_of(&w.api_version).to_string(), r))
                    .or_default()
                    .insert(v.rbac());
            }
        }
    }
    Ok(by_resource
        .into_iter()
        .map(|((group, resource), verbs)| {
            json!({
                "apiGroups": [group],
                "resources": [resource],
                "verbs": verbs.into_iter().collect::<Vec<_>>(),
            })
        })
        .collect())
}

/// The ClusterRole and ClusterRoleBinding as a multi-document YAML stream.
pub fn cluster_role_yaml<'a>(
    manifests: impl IntoIterator<Item = &'a Manifest>,
    resolve: impl Fn(&str, &str) -> Option<String>,
    subject: &Subject<'_>,
) -> Result<String, UnresolvedKind> {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": subject.role_name},
        "rules": rules(manifests, resolve)?,
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": subject.role_name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": subject.role_name,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": subject.service_account,
            "namespace": subject.namespace,
        }],
    });
    // Serialising a `Value` built above cannot fail; fall back to JSON (valid YAML) regardless.
    let doc = |v: &serde_json::Value| serde_yaml::to_string(v).unwrap_or_else(|_| v.to_string());
    Ok(format!("{}---\n{}", doc(&role), doc(&binding)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::manifest::{Verb, WatchSpec};

    fn manifest(name: &str) -> Manifest {
        Manifest {
            name: name.into(),
            watches: vec![WatchSpec {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                indexes: Vec::new(),
            }],
            writes: Vec::new(),
            resync_period: None,
            workers: 1,
        }
    }

    fn resolve(api_version: &str, kind: &str) -> Option<String> {
        match (api_version, kind) {
            ("apps/v1", "Deployment") => Some("deployments".into()),
            ("v1", "ConfigMap") => Some("configmaps".into()),
            _ => None,
        }
    }

    fn with_writes(name: &str, writes: &[(&str, &str, &[Verb])]) -> Manifest {
        let mut m = manifest(name);
        m.writes = writes
            .iter()
            .map(|(a, k, verbs)| crate::plugin::manifest::WriteSpec::new(a, k, verbs))
            .collect();
        m
    }

    #[test]
    fn reads_and_declared_writes_merge_per_resource() {
        let a = with_writes("a", &[("v1", "ConfigMap", &[Verb::Create, Verb::Patch])]);
        let b = with_writes(
            "b",
            &[("apps/v1", "Deployment", &[Verb::UpdateStatus, Verb::Delete])],
        );
        let rules = rules([&a, &b], resolve).expect("resolves");
        assert_eq!(
            serde_json::Value::Array(rules),
            json!([
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "patch"]},
                {"apiGroups": ["apps"], "resources": ["deployments"],
                 "verbs": ["delete", "get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["update"]},
            ])
        );
    }

    #[test]
    fn unresolvable_kind_names_plugin_and_kind() {
        let m = with_writes("c", &[("v1", "Secret", &[Verb::Create])]);
        let e = rules([&m], resolve).unwrap_err();
        assert_eq!(
            e.to_string(),
            "plugin \"c\": cannot resolve kind Secret (v1) to a resource"
        );
    }

    #[test]
    fn yaml_has_role_and_binding() {
        let m = manifest("a");
        let subject = Subject {
            role_name: "kube-wasm-host",
            namespace: "ops",
            service_account: "host",
        };
        let yaml = cluster_role_yaml([&m], resolve, &subject).expect("yaml");
        let docs: Vec<serde_json::Value> = yaml
            .split("---\n")
            .map(|d| serde_yaml::from_str(d).expect("valid yaml"))
            .collect();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "ClusterRole");
        assert_eq!(docs[0]["rules"][0]["resources"][0], "deployments");
        assert_eq!(docs[1]["kind"], "ClusterRoleBinding");
        assert_eq!(docs[1]["subjects"][0]["namespace"], "ops");
        assert_eq!(docs[1]["roleRef"]["name"], "kube-wasm-host");
    }
}
