//! The Kubernetes RBAC a set of plugins needs, derived from their manifests.
//!
//! The manifest is the plugin's whole authority inside the host (every lister and client call is
//! checked against it), so the same manifest gives the least-privilege roles for the host's
//! service account: get/list/watch on every watched kind, and exactly the declared write verbs.
//!
//! A plugin whose every watch is of a namespaced kind in one and the same namespace, and whose
//! every written kind is namespaced, is *confined* to that namespace: the host refuses its writes
//! to any other namespace (see [`namespace_scope`]), so a namespaced Role and RoleBinding there
//! are enough. Every other plugin's rules go into the ClusterRole.
//!
//! Beside its plugins, the host itself may use Leases ([`Leases`]): for leader election and for
//! shard membership. Those rules go into a Role in the Leases' namespace, never a ClusterRole.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::manifest::Manifest;
use kwh_client::registry::{CrdError, Registry};

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

/// A kind resolved to its resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The plural resource name, e.g. `configmaps`.
    pub resource: String,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
}

/// Kinds resolved without a cluster (`host rbac` with no kubeconfig): the resources a
/// kube-apiserver serves out of the box, as recorded from one, and the resources of the
/// CustomResourceDefinitions given. Anything else can only be guessed ([`guess`]).
pub struct OfflineKinds {
    registry: Registry,
}

/// A CRD file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CrdFileError {
    /// A document is not YAML.
    #[error("document {index}: {message}")]
    Yaml {
        /// Zero-based document number in the file.
        index: usize,
        /// The parser's message.
        message: String,
    },
    /// A CustomResourceDefinition the API server would refuse.
    #[error("document {index}: invalid CustomResourceDefinition: {source}")]
    Crd {
        /// Zero-based document number in the file.
        index: usize,
        /// The invalid field and why.
        source: CrdError,
    },
}

impl Default for OfflineKinds {
    fn default() -> Self {
        Self::new()
    }
}

impl OfflineKinds {
    /// The built-in resources only.
    pub fn new() -> Self {
        OfflineKinds {
            registry: Registry::new(),
        }
    }

    /// Adds the resources of every CustomResourceDefinition in a multi-document YAML (or JSON)
    /// text; other documents are skipped, so a chart's whole output can be given. Returns how
    /// many CRDs it held.
    pub fn add_crds(&mut self, text: &str) -> Result<usize, CrdFileError> {
        let mut n = 0;
        for (index, doc) in yaml_serde::Deserializer::from_str(text).enumerate() {
            let v: Value =
                serde::Deserialize::deserialize(doc).map_err(|e| CrdFileError::Yaml {
                    index,
                    message: e.to_string(),
                })?;
            if v.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            self.registry
                .register_crd(&v)
                .map_err(|source| CrdFileError::Crd { index, source })?;
            n += 1;
        }
        Ok(n)
    }

    /// The resource serving `kind` in `api_version`, if built in or defined by a given CRD.
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<Resolved> {
        self.registry
            .find_kind(api_version, kind)
            .map(|d| Resolved {
                resource: d.plural.clone(),
                namespaced: d.namespaced,
            })
    }

    /// The resource of `kind` if one of the given CRD files defines it. Asked before the
    /// cluster's discovery: a CRD the user hands over is what the kind will be, whether or
    /// not the cluster serves it yet (RBAC is often applied before the CRD is).
    pub fn resolve_from_crds(&self, api_version: &str, kind: &str) -> Option<Resolved> {
        self.registry
            .find_kind(api_version, kind)
            .filter(|d| !d.builtin)
            .map(|d| Resolved {
                resource: d.plural.clone(),
                namespaced: d.namespaced,
            })
    }
}

/// What kubectl guesses for a kind it cannot look up (client-go `UnsafeGuessKindToResource`):
/// the lower-cased kind made plural by English spelling rules, and namespaced, as almost every
/// custom kind is. Right for most kinds, wrong for some (`NamespaceDefaults` would become
/// `namespacedefaultses`): a last resort, to be reported.
pub fn guess(kind: &str) -> Resolved {
    let lower = kind.to_ascii_lowercase();
    let resource = if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        match lower.strip_suffix('y') {
            Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies"),
            _ => format!("{lower}s"),
        }
    };
    Resolved {
        resource,
        namespaced: true,
    }
}

/// Where the roles are bound.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// Name of the roles and their bindings.
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

/// The one namespace a plugin is confined to, if any: every watch is of a namespaced kind and
/// in the same namespace (its own, or `default_namespace`, the host's `--namespace`, when it
/// names none), and every written kind is namespaced. `namespaced` answers for a kind, none
/// when unknown (which confines nothing).
pub fn namespace_scope(
    m: &Manifest,
    default_namespace: Option<&str>,
    namespaced: impl Fn(&str, &str) -> Option<bool>,
) -> Option<String> {
    let mut scope: Option<&str> = None;
    for w in &m.watches {
        if namespaced(&w.api_version, &w.kind) != Some(true) {
            return None;
        }
        let ns = w.namespace.as_deref().or(default_namespace)?;
        match scope {
            Some(s) if s != ns => return None,
            _ => scope = Some(ns),
        }
    }
    let writes_namespaced = m
        .writes
        .iter()
        .all(|w| namespaced(&w.api_version, &w.kind) == Some(true));
    scope.filter(|_| writes_namespaced).map(str::to_string)
}

/// The API group of Leases.
const COORDINATION: &str = "coordination.k8s.io";

/// The host's own use of `coordination.k8s.io` Leases (`host --leader-elect`, `host --shards`),
/// granted in a Role in their namespace beside the plugins' rules.
///
/// Leader election (client-go's algorithm) reads, creates and renews one Lease by name: `get`,
/// `create` and `update` (no `patch`: it always writes the whole Lease with the resourceVersion
/// it read, so a lost race is a 409, not a silent overwrite), and a standby watches that one
/// Lease (`fieldSelector=metadata.name=…`, which the API server authorizes as that name) so a
/// release wakes it at once. `get`, `update` and `watch` are limited to that Lease by
/// `resourceNames`; `create` cannot be, because the API server
/// authorizes a create before the object has a name (a rule with `resourceNames` never matches
/// one). Sharding keeps one membership Lease per replica, named `<lease name>-<identity>` after
/// the pod, so its names are not known in advance: it needs `get`, `create`, `update` and
/// `delete` (a replica removes its own at a clean shutdown) on any Lease of the namespace, and
/// `list` and `watch` (replicas find each other by the shard-group label). A new leader records
/// an Event on its Lease, as client-go's leader election does: `create` and `patch` (a series)
/// of `events.k8s.io` Events in the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    namespace: String,
    name: String,
    leader_election: bool,
    shards: bool,
}

/// Lease settings that a cluster would refuse, so that the printed rules could never be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeasesError {
    /// The namespace is not a namespace name.
    #[error(
        "lease namespace {0:?}: not a namespace name (a DNS label: at most 63 lower-case \
         letters, digits and '-', beginning and ending with a letter or digit)"
    )]
    Namespace(String),
    /// The name is not a Lease name.
    #[error(
        "lease name {0:?}: not a Lease name (a DNS subdomain: at most 253 lower-case letters, \
         digits, '-' and '.', each part between dots beginning and ending with a letter or digit)"
    )]
    Name(String),
    /// With sharding, the name is also a label value, which is shorter.
    #[error(
        "lease name {0:?}: with sharding it is also the value of the shard-group label, which \
         may have at most 63 characters"
    )]
    ShardGroupLabel(String),
}

impl Leases {
    /// The Leases of leader election (when `leader_election`) and of sharding (when `shards`)
    /// in `namespace`, the leader-election Lease (and shard group) named `name`; none when
    /// neither is asked for.
    pub fn new(
        namespace: &str,
        name: &str,
        leader_election: bool,
        shards: bool,
    ) -> Result<Option<Self>, LeasesError> {
        if !leader_election && !shards {
            return Ok(None);
        }
        if !is_dns_label(namespace) {
            return Err(LeasesError::Namespace(namespace.to_string()));
        }
        if !is_dns_subdomain(name) {
            return Err(LeasesError::Name(name.to_string()));
        }
        if shards && name.len() > 63 {
            return Err(LeasesError::ShardGroupLabel(name.to_string()));
        }
        Ok(Some(Leases {
            namespace: namespace.to_string(),
            name: name.to_string(),
            leader_election,
            shards,
        }))
    }

    /// The namespace of the Leases (and of their Role).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The rules, as a Role holds them. Sharding's rule covers leader election's Leases as well.
    pub fn rules(&self) -> Vec<Value> {
        let mut rules = if self.shards {
            vec![json!({
                "apiGroups": [COORDINATION],
                "resources": ["leases"],
                "verbs": ["create", "delete", "get", "list", "update", "watch"],
            })]
        } else {
            vec![
                json!({"apiGroups": [COORDINATION], "resources": ["leases"], "verbs": ["create"]}),
                json!({
                    "apiGroups": [COORDINATION],
                    "resources": ["leases"],
                    "resourceNames": [self.name],
                    "verbs": ["get", "update", "watch"],
                }),
            ]
        };
        if self.leader_election {
            rules.push(json!({
                "apiGroups": ["events.k8s.io"],
                "resources": ["events"],
                "verbs": ["create", "patch"],
            }));
        }
        rules
    }
}

/// A DNS-1123 label: a namespace name.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_dns_part(s)
}

/// A DNS-1123 subdomain: what most object names, a Lease's among them, must be.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_part)
}

fn is_dns_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

type Rules = BTreeMap<(String, String), BTreeSet<&'static str>>;

fn add_rules(
    m: &Manifest,
    resolve: &impl Fn(&str, &str) -> Option<Resolved>,
    into: &mut Rules,
) -> Result<(), UnresolvedKind> {
    let resource = |api_version: &str, kind: &str| {
        resolve(api_version, kind)
            .map(|r| r.resource)
            .ok_or_else(|| UnresolvedKind {
                plugin: m.name.clone(),
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
    };
    for w in &m.watches {
        let r = resource(&w.api_version, &w.kind)?;
        into.entry((group_of(&w.api_version).to_string(), r))
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
            into.entry((group_of(&w.api_version).to_string(), r))
                .or_default()
                .extend(v.rbac_verbs());
        }
    }
    if m.records_events {
        // The host writes a plugin's Events as client-go's event broadcaster does: a create
        // for the first occurrence, merge patches of `series` for repeats.
        into.entry(("events.k8s.io".to_string(), "events".to_string()))
            .or_default()
            .extend(["create", "patch"]);
    }
    Ok(())
}

fn render(rules: Rules) -> Vec<serde_json::Value> {
    rules
        .into_iter()
        .map(|((group, resource), verbs)| {
            json!({
                "apiGroups": [group],
                "resources": [resource],
                "verbs": verbs.into_iter().collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// Policy rules, one per (group, resource), verbs merged across plugins and sorted, so the output
/// is deterministic and diffs cleanly.
pub fn rules<'a>(
    manifests: impl IntoIterator<Item = &'a Manifest>,
    resolve: impl Fn(&str, &str) -> Option<Resolved>,
) -> Result<Vec<serde_json::Value>, UnresolvedKind> {
    let mut all = Rules::new();
    for m in manifests {
        add_rules(m, &resolve, &mut all)?;
    }
    Ok(render(all))
}

/// Why a `patch` write is granted `create` as well, said at the top of the output (a YAML
/// comment) whenever a plugin declares one.
pub const APPLY_CREATES_NOTE: &str = "# Plugins that declare `patch` are granted `create` too: \
server-side apply of an object that does not exist yet\n# is authorized by the API server as \
`create` as well as `patch` (without it: 403 \"... is forbidden: \").\n";

/// The roles and bindings as a multi-document YAML stream: a ClusterRole and ClusterRoleBinding
/// for the plugins that are not confined to one namespace (if any), then a Role and RoleBinding
/// per namespace that confined plugins use, each named `subject.role_name`. Each manifest comes
/// with the namespace its plugin runs with (`--namespace`, or its own in a plugins file): its
/// watches that name none are confined to it. The host's own `leases` rules, if any, join the
/// Role of their namespace (one Role per namespace, so that a confined plugin's and the Leases'
/// rules in the same namespace do not compete for one name). `host_rules` are cluster-wide
/// rules the host itself needs (its `WasmController` resources): they join the ClusterRole,
/// which is printed whenever there are any.
pub fn rbac_yaml<'a>(
    manifests: impl IntoIterator<Item = (&'a Manifest, Option<&'a str>)>,
    resolve: impl Fn(&str, &str) -> Option<Resolved>,
    subject: &Subject<'_>,
    leases: Option<&Leases>,
    host_rules: &[serde_json::Value],
) -> Result<String, UnresolvedKind> {
    let mut cluster = Rules::new();
    let mut any_cluster = false;
    let mut namespaced: BTreeMap<String, Rules> = BTreeMap::new();
    let mut patches = false;
    for (m, default_namespace) in manifests {
        patches |= m
            .writes
            .iter()
            .any(|w| w.verbs.contains(&super::manifest::Verb::Patch));
        let scope = namespace_scope(m, default_namespace, |a, k| {
            resolve(a, k).map(|r| r.namespaced)
        });
        match scope {
            Some(ns) => add_rules(m, &resolve, namespaced.entry(ns).or_default())?,
            None => {
                any_cluster = true;
                add_rules(m, &resolve, &mut cluster)?;
            }
        }
    }
    let rbac = "rbac.authorization.k8s.io";
    let subjects = json!([{
        "kind": "ServiceAccount",
        "name": subject.service_account,
        "namespace": subject.namespace,
    }]);
    let mut docs = Vec::new();
    let cluster_role = any_cluster || namespaced.is_empty() || !host_rules.is_empty();
    if let Some(l) = leases {
        namespaced.entry(l.namespace.clone()).or_default();
    }
    if cluster_role {
        docs.push(json!({
            "apiVersion": format!("{rbac}/v1"),
            "kind": "ClusterRole",
            "metadata": {"name": subject.role_name},
            "rules": render(cluster).into_iter().chain(host_rules.iter().cloned()).collect::<Vec<_>>(),
        }));
        docs.push(json!({
            "apiVersion": format!("{rbac}/v1"),
            "kind": "ClusterRoleBinding",
            "metadata": {"name": subject.role_name},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": subject.role_name},
            "subjects": subjects,
        }));
    }
    for (ns, rules) in namespaced {
        let mut rules = render(rules);
        if let Some(l) = leases.filter(|l| l.namespace == ns) {
            rules.extend(l.rules());
        }
        docs.push(json!({
            "apiVersion": format!("{rbac}/v1"),
            "kind": "Role",
            "metadata": {"name": subject.role_name, "namespace": ns},
            "rules": rules,
        }));
        docs.push(json!({
            "apiVersion": format!("{rbac}/v1"),
            "kind": "RoleBinding",
            "metadata": {"name": subject.role_name, "namespace": ns},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": subject.role_name},
            "subjects": subjects,
        }));
    }
    // Serialising a `Value` built above cannot fail; fall back to JSON (valid YAML) regardless.
    let doc = |v: &serde_json::Value| yaml_serde::to_string(v).unwrap_or_else(|_| v.to_string());
    let mut out = String::new();
    if patches {
        out.push_str(APPLY_CREATES_NOTE);
    }
    out.push_str(&docs.iter().map(doc).collect::<Vec<_>>().join("---\n"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Verb, WatchSpec};

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
            records_events: false,
        }
    }

    fn resolve(api_version: &str, kind: &str) -> Option<Resolved> {
        let (resource, namespaced) = match (api_version, kind) {
            ("apps/v1", "Deployment") => ("deployments", true),
            ("v1", "ConfigMap") => ("configmaps", true),
            ("v1", "Namespace") => ("namespaces", false),
            _ => return None,
        };
        Some(Resolved {
            resource: resource.into(),
            namespaced,
        })
    }

    #[test]
    fn a_plugin_that_records_events_gets_create_and_patch_on_events_in_its_scope() {
        let mut m = manifest("recorder");
        m.records_events = true;
        let got = rules([&m], resolve).expect("rules");
        assert!(
            got.contains(
                &json!({"apiGroups": ["events.k8s.io"], "resources": ["events"],
                "verbs": ["create", "patch"]})
            ),
            "{got:?}"
        );
        // Without the import, no Events rule.
        let got = rules([&manifest("quiet")], resolve).expect("rules");
        assert!(!got.iter().any(|r| r["apiGroups"][0] == "events.k8s.io"));
        // A confined plugin gets it in its namespace's Role.
        let mut confined = in_ns(manifest("team"), Some("team-a"));
        confined.records_events = true;
        let yaml = rbac_yaml([(&confined, None)], resolve, &SUBJECT, None, &[]).expect("yaml");
        let role = yaml
            .split("---")
            .find(|d| d.contains("kind: Role\n"))
            .expect("a Role");
        assert!(
            role.contains("namespace: team-a") && role.contains("events.k8s.io"),
            "{role}"
        );
    }

    fn with_writes(name: &str, writes: &[(&str, &str, &[Verb])]) -> Manifest {
        let mut m = manifest(name);
        m.writes = writes
            .iter()
            .map(|(a, k, verbs)| crate::manifest::WriteSpec::new(a, k, verbs))
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
                {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch", "update"]},
            ])
        );
    }

    #[test]
    fn status_writes_need_update_and_patch_on_the_status_subresource_only() {
        // replace-status is a PUT of .../status, patch-status and apply-status a PATCH of it; the
        // one manifest verb covering them must grant both there, and nothing on the object.
        let m = with_writes("s", &[("apps/v1", "Deployment", &[Verb::UpdateStatus])]);
        let d = docs(&rbac_yaml([(&m, None)], resolve, &SUBJECT, None, &[]).expect("yaml"));
        assert_eq!(
            d[0]["rules"],
            json!([
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch", "update"]},
            ])
        );
        // Patch on the object does not reach its status, and status writes do not need it.
        let p = with_writes("p", &[("apps/v1", "Deployment", &[Verb::Patch])]);
        let r = rules([&p], resolve).expect("resolves");
        assert!(
            r.iter().all(|r| r["resources"][0] != "deployments/status"),
            "{r:?}"
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
        let yaml = rbac_yaml([(&m, None)], resolve, &subject, None, &[]).expect("yaml");
        let docs: Vec<serde_json::Value> = yaml
            .split("---\n")
            .map(|d| yaml_serde::from_str(d).expect("valid yaml"))
            .collect();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "ClusterRole");
        assert_eq!(docs[0]["rules"][0]["resources"][0], "deployments");
        assert_eq!(docs[1]["kind"], "ClusterRoleBinding");
        assert_eq!(docs[1]["subjects"][0]["namespace"], "ops");
        assert_eq!(docs[1]["roleRef"]["name"], "kube-wasm-host");
    }

    fn docs(yaml: &str) -> Vec<serde_json::Value> {
        yaml.split("---\n")
            .map(|d| yaml_serde::from_str(d).expect("valid yaml"))
            .collect()
    }

    /// Each document's (kind, namespace), in order.
    fn placed(d: &[serde_json::Value]) -> Vec<(&str, &str)> {
        d.iter()
            .map(|v| {
                (
                    v["kind"].as_str().unwrap_or(""),
                    v["metadata"]["namespace"].as_str().unwrap_or(""),
                )
            })
            .collect()
    }

    fn in_ns(mut m: Manifest, ns: Option<&str>) -> Manifest {
        for w in &mut m.watches {
            w.namespace = ns.map(str::to_string);
        }
        m
    }

    const SUBJECT: Subject<'static> = Subject {
        role_name: "r",
        namespace: "ops",
        service_account: "host",
    };

    #[test]
    fn a_plugin_confined_to_one_namespace_gets_a_role_there() {
        let m = in_ns(
            with_writes("a", &[("v1", "ConfigMap", &[Verb::Create])]),
            Some("team"),
        );
        assert_eq!(
            namespace_scope(&m, None, |a, k| resolve(a, k).map(|r| r.namespaced)),
            Some("team".into())
        );
        let d = docs(&rbac_yaml([(&m, None)], resolve, &SUBJECT, None, &[]).expect("yaml"));
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0]["kind"], "Role");
        assert_eq!(d[0]["metadata"]["namespace"], "team");
        assert_eq!(d[0]["rules"][0]["resources"][0], "configmaps");
        assert_eq!(d[0]["rules"][1]["verbs"], json!(["get", "list", "watch"]));
        assert_eq!(d[1]["kind"], "RoleBinding");
        assert_eq!(d[1]["metadata"]["namespace"], "team");
        assert_eq!(d[1]["roleRef"]["kind"], "Role");
        assert_eq!(d[1]["subjects"][0]["namespace"], "ops");
    }

    #[test]
    fn the_host_namespace_confines_watches_that_name_none() {
        let m = manifest("a");
        let d = docs(&rbac_yaml([(&m, Some("team"))], resolve, &SUBJECT, None, &[]).expect("yaml"));
        assert_eq!(d[0]["kind"], "Role");
        assert_eq!(d[0]["metadata"]["namespace"], "team");
    }

    #[test]
    fn each_plugin_is_confined_to_its_own_namespace() {
        let (a, b, c) = (manifest("a"), manifest("b"), manifest("c"));
        let yaml = rbac_yaml(
            [(&a, Some("team")), (&b, Some("ops")), (&c, None)],
            resolve,
            &SUBJECT,
            None,
            &[],
        )
        .expect("yaml");
        let d = docs(&yaml);
        let placed = placed(&d);
        assert_eq!(
            placed,
            [
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", "ops"),
                ("RoleBinding", "ops"),
                ("Role", "team"),
                ("RoleBinding", "team"),
            ]
        );
    }

    #[test]
    fn cluster_wide_watches_two_namespaces_or_cluster_scoped_writes_need_a_cluster_role() {
        let cluster_wide = manifest("a");
        let mut two = in_ns(manifest("b"), Some("x"));
        let mut second = two.watches[0].clone();
        second.namespace = Some("y".into());
        two.watches.push(second);
        let writes_ns = in_ns(
            with_writes("c", &[("v1", "Namespace", &[Verb::Create])]),
            Some("x"),
        );
        let namespaced = |a: &str, k: &str| resolve(a, k).map(|r| r.namespaced);
        for m in [&cluster_wide, &two, &writes_ns] {
            assert_eq!(namespace_scope(m, None, namespaced), None, "{}", m.name);
        }
        // One confined plugin and one cluster-wide: a ClusterRole for the second only.
        let confined = in_ns(
            with_writes("d", &[("v1", "ConfigMap", &[Verb::Patch])]),
            Some("x"),
        );
        let d = docs(
            &rbac_yaml(
                [(&confined, None), (&cluster_wide, None)],
                resolve,
                &SUBJECT,
                None,
                &[],
            )
            .expect("yaml"),
        );
        let kinds: Vec<_> = d.iter().map(|v| v["kind"].as_str().unwrap_or("")).collect();
        assert_eq!(
            kinds,
            ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
        );
        assert_eq!(
            d[0]["rules"],
            json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]}])
        );
        assert_eq!(d[2]["metadata"]["namespace"], "x");
        // An unknown kind confines nothing.
        assert_eq!(namespace_scope(&confined, None, |_, _| None), None);
    }

    #[test]
    fn offline_kinds_know_the_built_in_resources_and_the_crds_given() {
        let mut k = OfflineKinds::new();
        let r = |k: &OfflineKinds, a: &str, kind: &str| k.resolve(a, kind);
        // Irregular plurals and cluster scope come from the recorded built-ins, not a guess.
        assert_eq!(
            r(&k, "v1", "Endpoints"),
            Some(Resolved {
                resource: "endpoints".into(),
                namespaced: true
            })
        );
        for (a, kind) in [
            ("v1", "Namespace"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ] {
            assert_eq!(r(&k, a, kind).map(|x| x.namespaced), Some(false), "{kind}");
        }
        assert_eq!(
            r(&k, "rbac.authorization.k8s.io/v1", "Role").map(|x| x.namespaced),
            Some(true)
        );
        assert_eq!(
            r(&k, "apps/v1", "Deployment").map(|x| x.resource),
            Some("deployments".into())
        );
        assert_eq!(r(&k, "example.com/v1", "Widget"), None);

        let crd = r#"
apiVersion: v1
kind: Namespace
metadata: {name: skipped}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgetries.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: widgetries, kind: Widget}
  versions:
  - {name: v1, served: true, storage: true}
  - {name: v1beta1, served: true, storage: false}
"#;
        assert_eq!(k.add_crds(crd).expect("CRD file"), 1);
        let want = Resolved {
            resource: "widgetries".into(),
            namespaced: false,
        };
        assert_eq!(r(&k, "example.com/v1", "Widget"), Some(want.clone()));
        assert_eq!(r(&k, "example.com/v1beta1", "Widget"), Some(want));
        assert_eq!(r(&k, "example.com/v2", "Widget"), None);

        let bad = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {group: example.com}\n";
        let e = k.add_crds(bad).expect_err("no names");
        assert_eq!(
            e.to_string(),
            "document 0: invalid CustomResourceDefinition: spec.names: Required value"
        );
        let e = k.add_crds("a: [").expect_err("not YAML");
        assert!(e.to_string().starts_with("document 0: "), "{e}");
    }

    fn leases(ns: &str, leader_election: bool, shards: bool) -> Leases {
        Leases::new(ns, "kube-wasm-host", leader_election, shards)
            .expect("valid")
            .expect("asked for")
    }

    /// The rules on `coordination.k8s.io` of every document.
    fn lease_rules(d: &[Value]) -> Vec<(String, Value)> {
        d.iter()
            .flat_map(|doc| {
                let kind = doc["kind"].as_str().unwrap_or("").to_string();
                doc["rules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["apiGroups"][0] == COORDINATION)
                    .map(move |r| (kind.clone(), r.clone()))
            })
            .collect()
    }

    /// The leader's "became leader" Event on its Lease.
    fn leader_events() -> Value {
        json!({"apiGroups": ["events.k8s.io"], "resources": ["events"],
            "verbs": ["create", "patch"]})
    }

    #[test]
    fn leader_election_may_create_leases_and_get_and_update_its_own_only() {
        assert_eq!(
            Value::Array(leases("ops", true, false).rules()),
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["kube-wasm-host"], "verbs": ["get", "update", "watch"]},
                leader_events(),
            ])
        );
    }

    #[test]
    fn sharding_needs_any_lease_of_the_namespace_listed_watched_and_deleted_too() {
        let leases_rule = json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["create", "delete", "get", "list", "update", "watch"]});
        assert_eq!(
            Value::Array(leases("ops", false, true).rules()),
            json!([leases_rule])
        );
        // With leader election as well, the one rule covers both elections' Leases; the leader
        // records its Event.
        assert_eq!(
            Value::Array(leases("ops", true, true).rules()),
            json!([leases_rule, leader_events()])
        );
    }

    #[test]
    fn no_lease_rules_unless_asked_for() {
        assert_eq!(Leases::new("ops", "x", false, false), Ok(None));
        let m = manifest("a");
        let d = docs(&rbac_yaml([(&m, None)], resolve, &SUBJECT, None, &[]).expect("yaml"));
        assert!(lease_rules(&d).is_empty(), "{d:?}");
        let kinds: Vec<_> = d.iter().map(|v| v["kind"].as_str().unwrap_or("")).collect();
        assert_eq!(kinds, ["ClusterRole", "ClusterRoleBinding"]);
    }

    #[test]
    fn lease_rules_go_into_a_role_in_their_namespace_bound_to_the_host() {
        let m = with_writes("a", &[("v1", "ConfigMap", &[Verb::Patch])]);
        let l = leases("ops", true, false);
        let yaml = rbac_yaml([(&m, None)], resolve, &SUBJECT, Some(&l), &[]).expect("yaml");
        let d = docs(&yaml);
        let placed = placed(&d);
        assert_eq!(
            placed,
            [
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", "ops"),
                ("RoleBinding", "ops"),
            ]
        );
        // Only the Role holds them, and only them (with the leader's Event).
        assert_eq!(
            lease_rules(&d),
            l.rules()
                .into_iter()
                .filter(|r| r["apiGroups"][0] == COORDINATION)
                .map(|r| ("Role".to_string(), r))
                .collect::<Vec<_>>()
        );
        assert_eq!(d[2]["rules"], Value::Array(l.rules()));
        assert!(l.rules().contains(&leader_events()));
        assert_eq!(
            d[3]["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role", "name": "r"})
        );
        assert_eq!(d[3]["subjects"][0]["name"], "host");
        // The note on apply still leads the output.
        assert!(yaml.starts_with(APPLY_CREATES_NOTE), "{yaml}");
    }

    #[test]
    fn a_confined_plugin_and_the_leases_in_one_namespace_share_its_role() {
        let m = in_ns(manifest("a"), Some("team"));
        let l = leases("team", false, true);
        let d = docs(&rbac_yaml([(&m, None)], resolve, &SUBJECT, Some(&l), &[]).expect("yaml"));
        let kinds: Vec<_> = d.iter().map(|v| v["kind"].as_str().unwrap_or("")).collect();
        assert_eq!(kinds, ["Role", "RoleBinding"]);
        assert_eq!(
            d[0]["rules"],
            json!([
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["create", "delete", "get", "list", "update", "watch"]},
            ])
        );
        // In another namespace, a Role of its own beside the plugin's.
        let l = leases("ops", true, false);
        let d = docs(&rbac_yaml([(&m, None)], resolve, &SUBJECT, Some(&l), &[]).expect("yaml"));
        let namespaces: Vec<_> = d
            .iter()
            .map(|v| v["metadata"]["namespace"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(namespaces, ["ops", "ops", "team", "team"]);
        assert_eq!(d[0]["rules"], Value::Array(l.rules()));
    }

    #[test]
    fn lease_names_and_namespaces_a_cluster_would_refuse_are_refused() {
        let e = |ns: &str, name: &str, shards: bool| Leases::new(ns, name, true, shards);
        assert!(matches!(
            e("Ops", "x", false),
            Err(LeasesError::Namespace(_))
        ));
        assert!(matches!(
            e("a.b", "x", false),
            Err(LeasesError::Namespace(_))
        ));
        assert!(matches!(
            e(&"n".repeat(64), "x", false),
            Err(LeasesError::Namespace(_))
        ));
        assert!(matches!(e("ops", "", false), Err(LeasesError::Name(_))));
        assert!(matches!(e("ops", "a..b", false), Err(LeasesError::Name(_))));
        assert!(matches!(e("ops", "-a", false), Err(LeasesError::Name(_))));
        assert!(matches!(e("ops", "A", false), Err(LeasesError::Name(_))));
        // A dotted name is a Lease name; 64 characters are too long for the shard-group label.
        let long = "l".repeat(64);
        assert!(e("ops", "hosts.example.com", true).is_ok());
        assert!(e("ops", &long, false).is_ok());
        let err = e("ops", &long, true).expect_err("too long a label value");
        assert_eq!(err, LeasesError::ShardGroupLabel(long.clone()));
        assert!(err.to_string().contains("at most 63 characters"), "{err}");
        let err = e("Ops", "x", false).expect_err("not a label");
        assert!(
            err.to_string()
                .starts_with("lease namespace \"Ops\": not a namespace name"),
            "{err}"
        );
    }

    #[test]
    fn a_guess_follows_english_plurals_and_assumes_a_namespace() {
        let g = |k: &str| guess(k).resource;
        assert_eq!(g("Widget"), "widgets");
        assert_eq!(g("Policy"), "policies");
        assert_eq!(g("Gateway"), "gateways");
        assert_eq!(g("Ingress"), "ingresses");
        assert!(guess("Widget").namespaced);
    }
}
