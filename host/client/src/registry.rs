//! The resources a server of this Kubernetes version serves: the built-in table plus those
//! CustomResourceDefinitions register at run time. The emulator serves from it; offline tools
//! (`host rbac` without a cluster) resolve kinds against it.
//!
//! Why a registry rather than fixed routes: discovery documents, routing, the store's resource
//! keys and per-kind behaviour (status subresource, generation) all derive from one definition,
//! so creating a CRD makes its resource appear everywhere at once.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

/// One served resource at one group/version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// "" for the core group.
    pub group: String,
    pub version: String,
    /// Plural resource name, e.g. `configmaps`.
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `/status` subresource: main-resource writes keep the stored status and `/status`
    /// writes change only status.
    pub status: bool,
    /// False for resources defined by a CustomResourceDefinition.
    pub builtin: bool,
    /// Store key shared by every version of the resource: `group/plural`, except for
    /// `events.k8s.io` events, which share the core `/events` (kube-apiserver stores Events of
    /// both groups as one resource, the core one; the emulator serves them as two views of it).
    pub store_key: Arc<str>,
}

impl ResourceDef {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `metadata.generation` is kept for kinds with a spec (CRDs and kinds with status).
    pub fn tracks_generation(&self) -> bool {
        self.status || !self.builtin
    }

    /// The (group, kind) the patch module needs for strategic merge; `None` for custom resources.
    pub fn builtin_gk(&self) -> Option<(&str, &str)> {
        self.builtin
            .then_some((self.group.as_str(), self.kind.as_str()))
    }
}

type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    &'static [&'static str],
);

// (group, version, plural, kind, namespaced, short names, status subresource, categories)
#[rustfmt::skip]
const BUILTIN: &[Row] = &[
    ("", "v1", "configmaps", "ConfigMap", true, &["cm"], false, &[]),
    ("", "v1", "endpoints", "Endpoints", true, &["ep"], false, &[]),
    ("", "v1", "events", "Event", true, &["ev"], false, &[]),
    ("", "v1", "limitranges", "LimitRange", true, &["limits"], false, &[]),
    ("", "v1", "namespaces", "Namespace", false, &["ns"], true, &[]),
    ("", "v1", "nodes", "Node", false, &["no"], true, &[]),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true, &["pvc"], true, &[]),
    ("", "v1", "persistentvolumes", "PersistentVolume", false, &["pv"], true, &[]),
    ("", "v1", "pods", "Pod", true, &["po"], true, &["all"]),
    ("", "v1", "podtemplates", "PodTemplate", true, &[], false, &[]),
    ("", "v1", "replicationcontrollers", "ReplicationController", true, &["rc"], true, &["all"]),
    ("", "v1", "resourcequotas", "ResourceQuota", true, &["quota"], true, &[]),
    ("", "v1", "secrets", "Secret", true, &[], false, &[]),
    ("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"], false, &[]),
    ("", "v1", "services", "Service", true, &["svc"], true, &["all"]),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", true, &[], false, &[]),
    ("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true, &["all"]),
    ("apps", "v1", "deployments", "Deployment", true, &["deploy"], true, &["all"]),
    ("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"], true, &["all"]),
    ("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"], true, &["all"]),
    ("events.k8s.io", "v1", "events", "Event", true, &["ev"], false, &[]),
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true, &["hpa"], true, &["all"]),
    ("batch", "v1", "cronjobs", "CronJob", true, &["cj"], true, &["all"]),
    ("batch", "v1", "jobs", "Job", true, &[], true, &["all"]),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", true, &["ing"], true, &[]),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", true, &["netpol"], false, &[]),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true, &["pdb"], true, &[]),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", false, &[], false, &[]),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false, &[], false, &[]),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true, &[], false, &[]),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", true, &[], false, &[]),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", false, &["sc"], false, &[]),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false, &[], false, &["api-extensions"]),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false, &[], false, &["api-extensions"]),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", false, &["crd", "crds"], true, &["api-extensions"]),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false, &["pc"], false, &[]),
    ("coordination.k8s.io", "v1", "leases", "Lease", true, &[], false, &[]),
    ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true, &[], false, &[]),
];

/// The store key of a built-in resource: `group/plural`; `events.k8s.io` events are stored as
/// the core ones are.
fn builtin_store_key(group: &str, plural: &str) -> String {
    match (group, plural) {
        ("events.k8s.io", "events") => "/events".into(),
        _ => format!("{group}/{plural}"),
    }
}

/// The set of served resources, shared by router, discovery and writes.
#[derive(Debug)]
pub struct Registry {
    defs: RwLock<Vec<Arc<ResourceDef>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a CRD could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CrdError {
    pub field: &'static str,
    pub message: String,
}

impl Registry {
    /// The built-in resources.
    pub fn new() -> Self {
        let defs = BUILTIN
            .iter()
            .map(|&(g, v, plural, kind, namespaced, short, status, cats)| {
                Arc::new(ResourceDef {
                    group: g.into(),
                    version: v.into(),
                    plural: plural.into(),
                    singular: String::new(),
                    kind: kind.into(),
                    namespaced,
                    short_names: short.iter().map(|s| (*s).into()).collect(),
                    categories: cats.iter().map(|s| (*s).into()).collect(),
                    status,
                    builtin: true,
                    store_key: builtin_store_key(g, plural).into(),
                })
            })
            .collect();
        Registry {
            defs: RwLock::new(defs),
        }
    }

    /// The definition serving `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .read()
            .iter()
            .find(|d| d.plural == plural && d.group == group && d.version == version)
            .cloned()
    }

    /// The first definition for a kind in a group/version (used by seeding and GC).
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.defs
            .read()
            .iter()
            .find(|d| d.kind == kind && d.group == group && d.version == version)
            .cloned()
    }

    /// Every definition, in registration order.
    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.defs.read().clone()
    }

    /// Groups and their versions in registration order (core group excluded).
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for d in self.defs.read().iter().filter(|d| !d.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    if !vs.contains(&d.version) {
                        vs.push(d.version.clone());
                    }
                }
                None => out.push((d.group.clone(), vec![d.version.clone()])),
            }
        }
        out
    }

    /// Validate a CustomResourceDefinition and return the definitions it would serve.
    pub fn crd_defs(crd: &Value) -> Result<Vec<ResourceDef>, CrdError> {
        let err = |field, message: &str| CrdError {
            field,
            message: message.into(),
        };
        let spec = crd
            .get("spec")
            .ok_or_else(|| err("spec", "Required value"))?;
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let group = s(spec, "group").ok_or_else(|| err("spec.group", "Required value"))?;
        let names = spec
            .get("names")
            .ok_or_else(|| err("spec.names", "Required value"))?;
        let plural =
            s(names, "plural").ok_or_else(|| err("spec.names.plural", "Required value"))?;
        let kind = s(names, "kind").ok_or_else(|| err("spec.names.kind", "Required value"))?;
        let singular = s(names, "singular").unwrap_or_else(|| kind.to_lowercase());
        let strs = |k: &str| -> Vec<String> {
            names
                .get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let namespaced = match s(spec, "scope").as_deref() {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            _ => {
                return Err(err(
                    "spec.scope",
                    "Unsupported value: must be \"Cluster\" or \"Namespaced\"",
                ))
            }
        };
        let expected_name = format!("{plural}.{group}");
        if crd.pointer("/metadata/name").and_then(Value::as_str) != Some(expected_name.as_str()) {
            return Err(CrdError {
                field: "metadata.name",
                message: format!(
                    "Invalid value: must be spec.names.plural+\".\"+spec.group ({expected_name:?})"
                ),
            });
        }
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| err("spec.versions", "Required value"))?;
        let mut out = Vec::new();
        for v in versions {
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let name = s(v, "name").ok_or_else(|| err("spec.versions.name", "Required value"))?;
            let status = v.pointer("/subresources/status").is_some();
            out.push(ResourceDef {
                group: group.clone(),
                version: name,
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                short_names: strs("shortNames"),
                categories: strs("categories"),
                status,
                builtin: false,
                store_key: format!("{group}/{plural}").into(),
            });
        }
        Ok(out)
    }

    /// Serve the resources of a CRD (replacing an earlier registration of the same CRD).
    pub fn register_crd(&self, crd: &Value) -> Result<(), CrdError> {
        let defs = Self::crd_defs(crd)?;
        let mut all = self.defs.write();
        if let Some(first) = defs.first() {
            let key = first.store_key.clone();
            all.retain(|d| d.builtin || d.store_key != key);
        }
        all.extend(defs.into_iter().map(Arc::new));
        Ok(())
    }

    /// Stop serving a custom resource; returns its store key when it was registered.
    pub fn unregister_crd(&self, crd: &Value) -> Option<Arc<str>> {
        let group = crd.pointer("/spec/group")?.as_str()?;
        let plural = crd.pointer("/spec/names/plural")?.as_str()?;
        let key: Arc<str> = format!("{group}/{plural}").into();
        let mut all = self.defs.write();
        let before = all.len();
        all.retain(|d| d.builtin || d.store_key != key);
        (all.len() != before).then_some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}}}]}
        })
    }

    #[test]
    fn crd_registers_and_unregisters() {
        let r = Registry::new();
        assert!(r.find("example.com", "v1", "widgets").is_none());
        r.register_crd(&crd()).unwrap();
        let d = r.find("example.com", "v1", "widgets").unwrap();
        assert!(d.status && d.namespaced && !d.builtin);
        assert_eq!(d.singular, "widget");
        assert!(r.groups().iter().any(|(g, _)| g == "example.com"));
        assert_eq!(
            r.unregister_crd(&crd()).as_deref(),
            Some("example.com/widgets")
        );
        assert!(r.find("example.com", "v1", "widgets").is_none());
    }

    #[test]
    fn both_event_groups_share_one_store_key() {
        let r = Registry::new();
        let core = r.find("", "v1", "events").unwrap();
        let events = r.find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(core.store_key, events.store_key);
        assert_eq!(&*core.store_key, "/events");
        assert_eq!(
            &*r.find("", "v1", "configmaps").unwrap().store_key,
            "/configmaps"
        );
    }

    #[test]
    fn crd_with_wrong_name_is_rejected() {
        let mut c = crd();
        c["metadata"]["name"] = "nope".into();
        assert!(Registry::crd_defs(&c).is_err());
    }
}
