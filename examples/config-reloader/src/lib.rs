//! Config reloader: rolls a Deployment when a ConfigMap or Secret its pod template uses changes.
//!
//! A Deployment opts in with the annotation `config-reloader/enabled: "true"`. The controller
//! hashes the data of every ConfigMap and Secret the pod template references (volumes, projected
//! volume sources, `env[].valueFrom` and `envFrom`, in containers and init containers) and keeps
//! the hash in the pod template's `config-reloader/config-hash` annotation: when the hash
//! changes, the template changes, and the Deployment controller rolls the pods.
//!
//! The first time it sees a Deployment it only records the hash (in the Deployment's own
//! `config-reloader/observed-hash` annotation, which does not roll anything): pods that were
//! just created already run the current configuration.
//!
//! Each roll is also a Kubernetes Event on the Deployment (`Normal ConfigChanged`, action
//! `Roll`), naming the ConfigMaps and Secrets that changed, so `kubectl describe deployment`
//! says why its pods were replaced. To name them, the Deployment also keeps a short digest per
//! referenced object (`config-reloader/observed-refs`).
//!
//! Finding the Deployments that use a ConfigMap is a cache query, not a scan: the manifest
//! declares two custom indexes on Deployments (`configmaps`, `secrets`) whose values are the
//! keys of the objects each Deployment references; the host keeps them current natively.
//!
//! The annotations' prefix (`config-reloader`) is a setting ([`Settings`]), read from the
//! `config:` of the plugin's entry in the host's plugins file.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use kube_guest::events::{Event, EventType, Recorder};
use kube_guest::{
    debug, info, Action, Api, Controller, Index, Manifest, Object, Patch, Result, Verb, Watch,
    Write,
};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The prefix of the reloader's annotations when none is configured.
pub const DEFAULT_PREFIX: &str = "config-reloader";

/// What the operator may set (the `config:` of the plugin's entry in a plugins file).
///
/// ```yaml
/// - module: config_reloader.wasm
///   config: {prefix: reload.example.com}   # default: config-reloader
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// The prefix of every annotation the reloader reads or writes: `<prefix>/enabled` (the
    /// opt-in), `<prefix>/config-hash` (pod template), `<prefix>/observed-hash` and
    /// `<prefix>/observed-refs` (Deployment). A DNS subdomain of at most 253 characters, as the
    /// prefix of an annotation key must be. Default `config-reloader`.
    pub prefix: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            prefix: DEFAULT_PREFIX.to_string(),
        }
    }
}

impl Settings {
    /// Checks what parsing does not: the prefix is one the API server accepts in a key.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let p = &self.prefix;
        let why = if p.is_empty() {
            "must not be empty".to_string()
        } else if p.len() > 253 {
            format!("must be at most 253 characters, not {}", p.len())
        } else if !p.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        }) {
            "must be a DNS subdomain: lowercase letters, digits, '-' and '.', starting and ending \
             each part with a letter or digit"
                .to_string()
        } else {
            return Ok(());
        };
        Err(format!("prefix {p:?}: {why}"))
    }
}

/// The annotation names a prefix makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// A Deployment opts in with this annotation set to `"true"`.
    pub enabled: String,
    /// Pod-template annotation holding the hash of the referenced configuration.
    pub config_hash: String,
    /// Deployment annotation holding the last hash seen (the baseline; changing it rolls
    /// nothing).
    pub observed_hash: String,
    /// Deployment annotation holding a short digest per referenced object, as of
    /// `observed_hash`: what tells which of them changed.
    pub observed_refs: String,
}

impl Names {
    /// The names under `settings.prefix`.
    pub fn new(settings: &Settings) -> Self {
        let p = &settings.prefix;
        Names {
            enabled: format!("{p}/enabled"),
            config_hash: format!("{p}/config-hash"),
            observed_hash: format!("{p}/observed-hash"),
            observed_refs: format!("{p}/observed-refs"),
        }
    }
}

impl Default for Names {
    fn default() -> Self {
        Names::new(&Settings::default())
    }
}

/// The names this instance's configuration makes, worked out once.
fn names() -> &'static Names {
    static NAMES: OnceLock<Names> = OnceLock::new();
    NAMES.get_or_init(|| Names::new(ConfigReloader::config()))
}

/// Custom index of Deployments by the keys of the ConfigMaps they reference.
pub const CONFIGMAP_INDEX: &str = "configmaps";
/// Custom index of Deployments by the keys of the Secrets they reference.
pub const SECRET_INDEX: &str = "secrets";

/// Watch positions in the manifest.
const DEPLOYMENTS: u32 = 0;
const CONFIGMAPS: u32 = 1;

/// Where a pod template names ConfigMaps.
pub const CONFIGMAP_PATHS: &[&str] = &[
    "spec.template.spec.volumes[*].configMap.name",
    "spec.template.spec.volumes[*].projected.sources[*].configMap.name",
    "spec.template.spec.containers[*].env[*].valueFrom.configMapKeyRef.name",
    "spec.template.spec.containers[*].envFrom[*].configMapRef.name",
    "spec.template.spec.initContainers[*].env[*].valueFrom.configMapKeyRef.name",
    "spec.template.spec.initContainers[*].envFrom[*].configMapRef.name",
];

/// Where a pod template names Secrets.
pub const SECRET_PATHS: &[&str] = &[
    "spec.template.spec.volumes[*].secret.secretName",
    "spec.template.spec.volumes[*].projected.sources[*].secret.name",
    "spec.template.spec.containers[*].env[*].valueFrom.secretKeyRef.name",
    "spec.template.spec.containers[*].envFrom[*].secretRef.name",
    "spec.template.spec.initContainers[*].env[*].valueFrom.secretKeyRef.name",
    "spec.template.spec.initContainers[*].envFrom[*].secretRef.name",
];

/// The strings at `path` (the index path syntax: `.` between fields, `[*]` over arrays).
/// The same semantics as the host's indexes, so what is hashed is exactly what is indexed.
fn strings_at<'a>(v: &'a Value, path: &str, out: &mut BTreeSet<&'a str>) {
    fn walk<'a>(v: &'a Value, segs: &[&str], out: &mut BTreeSet<&'a str>) {
        let Some((seg, rest)) = segs.split_first() else {
            if let Some(s) = v.as_str() {
                out.insert(s);
            }
            return;
        };
        let (field, each) = match seg.strip_suffix("[*]") {
            Some(f) => (f, true),
            None => (*seg, false),
        };
        let Some(child) = v.get(field) else { return };
        if each {
            for el in child.as_array().into_iter().flatten() {
                walk(el, rest, out);
            }
        } else {
            walk(child, rest, out);
        }
    }
    let segs: Vec<&str> = path.split('.').collect();
    walk(v, &segs, out);
}

/// The names of the ConfigMaps and Secrets a Deployment's pod template references.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct References<'a> {
    /// ConfigMap names, sorted.
    pub configmaps: BTreeSet<&'a str>,
    /// Secret names, sorted.
    pub secrets: BTreeSet<&'a str>,
}

impl References<'_> {
    /// Whether the template references nothing.
    pub fn is_empty(&self) -> bool {
        self.configmaps.is_empty() && self.secrets.is_empty()
    }
}

/// What `deploy`'s pod template references.
pub fn references(deploy: &Object) -> References<'_> {
    let mut r = References::default();
    for p in CONFIGMAP_PATHS {
        strings_at(deploy.value(), p, &mut r.configmaps);
    }
    for p in SECRET_PATHS {
        strings_at(deploy.value(), p, &mut r.secrets);
    }
    r
}

/// The parts of a ConfigMap or Secret that pods see.
fn payload(obj: &Object) -> Value {
    json!({"data": obj["data"], "binaryData": obj["binaryData"]})
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the hash covers of one referenced object: its kind, name and payload (or `absent`).
fn hash_item(h: &mut Sha256, kind: &str, name: &str, obj: Option<&Object>) {
    h.update(kind.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    h.update([0]);
    match obj {
        Some(o) => h.update(payload(o).to_string().as_bytes()),
        None => h.update(b"absent"),
    }
    h.update([b'\n']);
}

/// SHA-256 (hex) over each referenced object's kind, name and data, in name order. A missing
/// object counts as `absent`, so deleting or recreating one is a change too. JSON maps are
/// serialised with sorted keys, so the hash depends on content only.
pub fn config_hash<'a>(
    configmaps: impl IntoIterator<Item = (&'a str, Option<&'a Object>)>,
    secrets: impl IntoIterator<Item = (&'a str, Option<&'a Object>)>,
) -> String {
    Fingerprint::of(configmaps, secrets).hash
}

/// The digest recorded for a referenced object that does not exist.
pub const ABSENT: &str = "-";

/// A Deployment's configuration as of now: the hash over every referenced object (what the pod
/// template carries) and a short digest per object (what tells which one changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// [`config_hash`].
    pub hash: String,
    /// `Kind/name` → the first 12 hex digits of SHA-256 over that object's part of the hash,
    /// or [`ABSENT`].
    pub refs: BTreeMap<String, String>,
}

impl Fingerprint {
    /// The fingerprint of the named ConfigMaps and Secrets (each with the object, if it exists).
    pub fn of<'a>(
        configmaps: impl IntoIterator<Item = (&'a str, Option<&'a Object>)>,
        secrets: impl IntoIterator<Item = (&'a str, Option<&'a Object>)>,
    ) -> Self {
        let mut h = Sha256::new();
        let mut refs = BTreeMap::new();
        for (kind, items) in [
            ("ConfigMap", configmaps.into_iter().collect::<Vec<_>>()),
            ("Secret", secrets.into_iter().collect()),
        ] {
            let mut items = items;
            items.sort_by_key(|(name, _)| *name);
            for (name, obj) in items {
                hash_item(&mut h, kind, name, obj);
                let digest = match obj {
                    Some(_) => {
                        let mut one = Sha256::new();
                        hash_item(&mut one, kind, name, obj);
                        hex(&one.finalize()[..6])
                    }
                    None => ABSENT.to_string(),
                };
                refs.insert(format!("{kind}/{name}"), digest);
            }
        }
        Fingerprint {
            hash: hex(&h.finalize()),
            refs,
        }
    }

    /// The `observed-refs` annotation's value: `Kind/name=digest` pairs, comma-separated, in
    /// order (names cannot hold `,` or `=`).
    pub fn refs_value(&self) -> String {
        self.refs
            .iter()
            .map(|(r, d)| format!("{r}={d}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The pairs of an `observed-refs` value (malformed pairs are skipped).
pub fn parse_refs(value: &str) -> BTreeMap<&str, &str> {
    value
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(r, d)| r.contains('/') && !d.is_empty())
        .collect()
}

/// `ConfigMap/app-config` as a note says it: `ConfigMap app-config`.
fn spoken(r: &str) -> String {
    r.replacen('/', " ", 1)
}

/// What changed between the digests `before` (the `observed-refs` value recorded with the last
/// hash, if any) and `now`, for humans: `ConfigMap app-config changed, Secret app-secret
/// deleted`. Without a record (Deployments first seen by an older reloader) every reference
/// is named.
pub fn describe_changes(before: Option<&str>, now: &Fingerprint) -> String {
    let Some(before) = before.map(parse_refs) else {
        let all: Vec<String> = now.refs.keys().map(|r| spoken(r)).collect();
        return if all.is_empty() {
            "referenced configuration changed".to_string()
        } else {
            format!("referenced configuration changed ({})", all.join(", "))
        };
    };
    let mut changes = Vec::new();
    for (r, digest) in &now.refs {
        let what = match before.get(r.as_str()) {
            None => "newly referenced",
            Some(old) if *old == digest.as_str() => continue,
            Some(&ABSENT) => "created",
            Some(_) if digest == ABSENT => "deleted",
            Some(_) => "changed",
        };
        changes.push(format!("{} {what}", spoken(r)));
    }
    for r in before.keys().filter(|r| !now.refs.contains_key(**r)) {
        changes.push(format!("{} no longer referenced", spoken(r)));
    }
    if changes.is_empty() {
        // Same digests, different hash: only a digest collision could do this.
        "referenced configuration changed".to_string()
    } else {
        changes.join(", ")
    }
}

/// Whether `deploy` opted in.
pub fn enabled(deploy: &Object, names: &Names) -> bool {
    deploy.annotation(&names.enabled) == Some("true")
}

/// The hash `deploy`'s pods run with, or else the baseline recorded for it.
fn recorded_hash<'a>(deploy: &'a Object, names: &Names) -> Option<&'a str> {
    let template_hash =
        deploy["spec"]["template"]["metadata"]["annotations"][names.config_hash.as_str()].as_str();
    template_hash.or(deploy.annotation(&names.observed_hash))
}

/// How soon a reconcile whose first-sight baseline met a newer version looks again: a watch
/// event takes milliseconds to reach the cache.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The patch that brings `deploy` to configuration `now`, or none if it is there:
/// - first sight (no hash recorded): record it (`observed-hash`, `observed-refs`) only, rolling
///   nothing, on the condition that `deploy` is still the version the cache holds (its
///   `resourceVersion` in the patch: a 409 `Conflict` otherwise);
/// - a different hash: set the pod template's `config-hash` too, which rolls.
///
/// Why the condition on first sight only: a reconcile can read a cache that has not yet seen
/// this controller's own baseline of a moment ago. Taking the Deployment for unseen then would
/// record the configuration of now as its baseline over the one recorded, and a change between
/// the two would never roll. A roll needs no condition: it sets the hash of now, which a
/// second roll from a stale read sets again, changing nothing.
pub fn plan(deploy: &Object, now: &Fingerprint, names: &Names) -> Option<Patch> {
    let hash = now.hash.as_str();
    let recorded = json!({
        names.observed_hash.as_str(): hash,
        names.observed_refs.as_str(): now.refs_value(),
    });
    match recorded_hash(deploy, names) {
        Some(h) if h == hash => None,
        None => Some(Patch::Merge(json!({"metadata": {
            "annotations": recorded,
            "resourceVersion": deploy.resource_version().unwrap_or_default(),
        }}))),
        Some(_) => Some(Patch::Merge(json!({
            "metadata": {"annotations": recorded},
            "spec": {"template": {"metadata": {"annotations": {names.config_hash.as_str(): hash}}}}
        }))),
    }
}

/// The controller.
pub struct ConfigReloader;

impl ConfigReloader {
    fn deployments() -> Api {
        Api::all("apps/v1", "Deployment")
    }

    /// Enqueues every Deployment whose template references `obj` (a ConfigMap or a Secret).
    fn enqueue_users(watch: u32, obj: &Object) {
        let index = if watch == CONFIGMAPS {
            CONFIGMAP_INDEX
        } else {
            SECRET_INDEX
        };
        match Self::deployments().keys_by_index(index, &obj.key()) {
            Ok(keys) => {
                for k in keys {
                    debug!("{} {} changed: checking {k}", obj.kind(), obj.key());
                    kube_guest::enqueue(&k);
                }
            }
            Err(e) => kube_guest::error!("looking up users of {}: {e}", obj.key()),
        }
    }
}

impl Controller for ConfigReloader {
    type Config = Settings;

    fn validate_config(settings: &Settings) -> std::result::Result<(), String> {
        settings.validate()
    }

    fn manifest() -> Manifest {
        Manifest::new("config-reloader")
            .watch(
                Watch::new("apps/v1", "Deployment")
                    .with_index(Index::new(CONFIGMAP_INDEX, CONFIGMAP_PATHS).namespaced())
                    .with_index(Index::new(SECRET_INDEX, SECRET_PATHS).namespaced()),
            )
            .watch(Watch::new("v1", "ConfigMap"))
            .watch(Watch::new("v1", "Secret"))
            .write(Write::new("apps/v1", "Deployment", &[Verb::Patch]))
            .workers(2)
    }

    fn on_add(watch: u32, obj: Object) {
        if watch == DEPLOYMENTS {
            if enabled(&obj, names()) {
                kube_guest::enqueue(&obj.key());
            }
        } else {
            // A ConfigMap created after the Deployment that references it (or recreated).
            Self::enqueue_users(watch, &obj);
        }
    }

    fn on_update(watch: u32, old: Object, new: Object) {
        if watch == DEPLOYMENTS {
            // Status-only updates (rollout progress) cannot change what the template uses;
            // resyncs (old == new) and spec or opt-in changes can. The spec itself is compared,
            // not the generation: a Deployment's generation also moves when its annotations
            // change, this controller's own baseline and hash annotations among them.
            let names = names();
            let spec_or_opt_in = old.value().get("spec") != new.value().get("spec")
                || old.annotation(&names.enabled) != new.annotation(&names.enabled)
                || old == new;
            if enabled(&new, names) && spec_or_opt_in {
                kube_guest::enqueue(&new.key());
            }
        } else if payload(&old) != payload(&new) || old == new {
            Self::enqueue_users(watch, &new);
        }
    }

    fn on_delete(watch: u32, obj: Object, _tombstone: bool) {
        if watch != DEPLOYMENTS {
            Self::enqueue_users(watch, &obj);
        }
    }

    fn reconcile(key: &str) -> Result<Action> {
        let deployments = Self::deployments();
        let Some(deploy) = deployments.get_by_key(key)? else {
            return Ok(Action::Done);
        };
        let names = names();
        if !enabled(&deploy, names) || deploy.is_deleting() {
            return Ok(Action::Done);
        }
        let refs = references(&deploy);
        let ns = deploy.namespace();
        let fetch = |kind: &str, names: &BTreeSet<&str>| -> Result<Vec<(String, Option<Object>)>> {
            let api = Api::all("v1", kind).within(ns);
            names
                .iter()
                .map(|n| Ok((n.to_string(), api.get(n)?)))
                .collect()
        };
        let cms = fetch("ConfigMap", &refs.configmaps)?;
        let secrets = fetch("Secret", &refs.secrets)?;
        let now = Fingerprint::of(
            cms.iter().map(|(n, o)| (n.as_str(), o.as_ref())),
            secrets.iter().map(|(n, o)| (n.as_str(), o.as_ref())),
        );
        let Some(patch) = plan(&deploy, &now, names) else {
            return Ok(Action::Done);
        };
        let rolls = patch.body().get("spec").is_some();
        // Read before the patch: what the last roll (or the baseline) recorded.
        let changes =
            rolls.then(|| describe_changes(deploy.annotation(&names.observed_refs), &now));
        match deployments.patch_object(&deploy, &patch) {
            Ok(_) => {}
            // First sight from a cache behind the server (see `plan`): its own baseline
            // may be on its way; its arrival is a metadata-only update, which does not enqueue
            // the Deployment (`on_update`), so look again shortly.
            Err(e) if !rolls && e.is_conflict() => {
                debug!("{key}: changed since the cache read it; looking again in {RECHECK:?}");
                return Ok(Action::RequeueAfter(RECHECK));
            }
            Err(e) => return Err(e),
        }
        let short = &now.hash[..12];
        match changes {
            Some(changes) => {
                info!("{key}: {changes}: rolling (hash {short})");
                let event = Event {
                    type_: EventType::Normal,
                    reason: "ConfigChanged".into(),
                    note: Some(format!("{changes}: rolling to config hash {short}")),
                    action: "Roll".into(),
                };
                Recorder::new().publish(&event, &deploy.object_ref());
            }
            None => debug!("{key}: recorded configuration hash {short}"),
        }
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(ConfigReloader);

#[cfg(test)]
mod tests {
    use super::*;

    const ENABLED: &str = "config-reloader/enabled";
    const CONFIG_HASH: &str = "config-reloader/config-hash";
    const OBSERVED_HASH: &str = "config-reloader/observed-hash";
    const OBSERVED_REFS: &str = "config-reloader/observed-refs";

    /// A fingerprint with hash `hash` and no references.
    fn fp(hash: &str) -> Fingerprint {
        Fingerprint {
            hash: hash.into(),
            refs: BTreeMap::new(),
        }
    }

    fn deploy(template_spec: Value, annotations: Value) -> Object {
        Object::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod", "resourceVersion": "7",
                "annotations": annotations},
            "spec": {"template": {"spec": template_spec}}
        }))
        .unwrap()
    }

    fn cm(name: &str, data: Value) -> Object {
        Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "prod", "resourceVersion": "1"}, "data": data}))
        .unwrap()
    }

    #[test]
    fn references_cover_volumes_projections_env_and_init_containers() {
        let d = deploy(
            json!({
                "volumes": [
                    {"name": "a", "configMap": {"name": "vol-cm"}},
                    {"name": "b", "secret": {"secretName": "vol-secret"}},
                    {"name": "c", "projected": {"sources": [
                        {"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}},
                        {"downwardAPI": {"items": []}}]}},
                    {"name": "d", "emptyDir": {}}
                ],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "x"}}},
                    {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "y"}}},
                    {"name": "Z", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "L", "value": "literal"}
                ], "envFrom": [{"configMapRef": {"name": "from-cm"}}, {"configMapRef": {"name": "env-cm"}}]}]
            }),
            json!({}),
        );
        let r = references(&d);
        assert_eq!(
            r.configmaps.into_iter().collect::<Vec<_>>(),
            vec!["env-cm", "from-cm", "proj-cm", "vol-cm"]
        );
        assert_eq!(
            r.secrets.into_iter().collect::<Vec<_>>(),
            vec!["env-secret", "init-secret", "proj-secret", "vol-secret"]
        );
        assert!(references(&deploy(json!({"containers": [{"name": "c"}]}), json!({}))).is_empty());
    }

    #[test]
    fn hash_depends_on_content_and_presence_not_order_or_metadata() {
        let a1 = cm("a", json!({"k": "1", "j": "2"}));
        let mut a1_other_meta = cm("a", json!({"j": "2", "k": "1"}));
        a1_other_meta["metadata"]["resourceVersion"] = "9".into();
        let a2 = cm("a", json!({"k": "2", "j": "2"}));
        let b = cm("b", json!({}));
        let h = |items: &[(&'static str, Option<&Object>)]| {
            config_hash(items.iter().copied(), std::iter::empty())
        };
        let base = h(&[("a", Some(&a1)), ("b", Some(&b))]);
        assert_eq!(base.len(), 64);
        assert_eq!(base, h(&[("b", Some(&b)), ("a", Some(&a1_other_meta))]));
        assert_ne!(base, h(&[("a", Some(&a2)), ("b", Some(&b))]));
        assert_ne!(base, h(&[("a", Some(&a1)), ("b", None)]));
        assert_ne!(base, h(&[("a", Some(&a1))]));
        // The same name as a Secret is a different reference.
        assert_ne!(
            config_hash([("a", Some(&a1))], std::iter::empty()),
            config_hash(std::iter::empty(), [("a", Some(&a1))])
        );
    }

    #[test]
    fn plan_records_first_then_rolls_on_change_only() {
        let n = Names::default();
        let d = deploy(json!({}), json!({ENABLED: "true"}));
        let mut h1 = fp("h1");
        h1.refs.insert("ConfigMap/a".into(), "0123456789ab".into());
        let Some(Patch::Merge(first)) = plan(&d, &h1, &n) else {
            panic!("records")
        };
        assert_eq!(
            first,
            json!({"metadata": {"annotations": {
                OBSERVED_HASH: "h1", OBSERVED_REFS: "ConfigMap/a=0123456789ab"},
                "resourceVersion": "7"}})
        );

        let seen = deploy(json!({}), json!({ENABLED: "true", OBSERVED_HASH: "h1"}));
        assert_eq!(plan(&seen, &fp("h1"), &n), None);
        let Some(Patch::Merge(roll)) = plan(&seen, &fp("h2"), &n) else {
            panic!("rolls")
        };
        assert_eq!(
            roll["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH],
            "h2"
        );
        assert_eq!(roll["metadata"]["annotations"][OBSERVED_HASH], "h2");
        assert_eq!(roll["metadata"]["annotations"][OBSERVED_REFS], "");

        // The template's hash wins over the baseline (it is what the pods run with).
        let mut rolled = seen.clone();
        rolled["spec"]["template"]["metadata"] = json!({"annotations": {CONFIG_HASH: "h2"}});
        assert_eq!(plan(&rolled, &fp("h2"), &n), None);
        assert!(plan(&rolled, &fp("h1"), &n).is_some());
    }

    #[test]
    fn a_configured_prefix_renames_every_annotation() {
        let n = Names::new(&Settings {
            prefix: "reload.example.com".into(),
        });
        assert_eq!(n.enabled, "reload.example.com/enabled");
        assert_eq!(n.config_hash, "reload.example.com/config-hash");
        assert_eq!(n.observed_hash, "reload.example.com/observed-hash");
        assert_eq!(n.observed_refs, "reload.example.com/observed-refs");
        assert!(!enabled(&deploy(json!({}), json!({ENABLED: "true"})), &n));
        let d = deploy(json!({}), json!({"reload.example.com/enabled": "true"}));
        assert!(enabled(&d, &n));
        let Some(Patch::Merge(first)) = plan(&d, &fp("h1"), &n) else {
            panic!("records")
        };
        assert_eq!(
            first["metadata"]["annotations"]["reload.example.com/observed-hash"],
            "h1"
        );
        // A baseline under the default names is not this prefix's: first sight again.
        let old = deploy(
            json!({}),
            json!({"reload.example.com/enabled": "true", OBSERVED_HASH: "h1"}),
        );
        let Some(p) = plan(&old, &fp("h2"), &n) else {
            panic!("records")
        };
        assert!(p.body().get("spec").is_none());
    }

    #[test]
    fn settings_parse_camel_case_refuse_unknown_keys_and_check_the_prefix() {
        use kube_guest::config::parse;
        assert_eq!(parse::<Settings>(b"null").unwrap(), Settings::default());
        assert_eq!(Settings::default().prefix, "config-reloader");
        assert_eq!(Names::default().enabled, ENABLED);
        let s: Settings = parse(br#"{"prefix": "reload.example.com"}"#).unwrap();
        assert_eq!(s.validate(), Ok(()));
        let e = parse::<Settings>(br#"{"annotation": "x"}"#).unwrap_err();
        assert!(e.contains("unknown field `annotation`"), "{e}");
        for bad in ["", "Reload", "a/b", "-a", "a..b", &"a".repeat(254)] {
            let e = Settings {
                prefix: bad.to_string(),
            }
            .validate()
            .unwrap_err();
            assert!(e.starts_with(&format!("prefix {bad:?}: ")), "{e}");
        }
    }

    #[test]
    fn fingerprints_keep_one_digest_per_reference_and_the_same_hash() {
        let a1 = cm("a", json!({"k": "1"}));
        let a2 = cm("a", json!({"k": "2"}));
        let b = cm("b", json!({}));
        let f = Fingerprint::of([("b", Some(&b)), ("a", Some(&a1))], [("s", None)]);
        assert_eq!(
            f.hash,
            config_hash([("a", Some(&a1)), ("b", Some(&b))], [("s", None)])
        );
        assert_eq!(
            f.refs.keys().collect::<Vec<_>>(),
            ["ConfigMap/a", "ConfigMap/b", "Secret/s"]
        );
        assert_eq!(f.refs["Secret/s"], ABSENT);
        assert!(f.refs["ConfigMap/a"].len() == 12);
        let value = f.refs_value();
        assert!(value.starts_with("ConfigMap/a="), "{value}");
        assert!(value.ends_with(",Secret/s=-"), "{value}");
        let parsed = parse_refs(&value);
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed["ConfigMap/b"], f.refs["ConfigMap/b"]);
        // Only the changed object's digest moves.
        let g = Fingerprint::of([("a", Some(&a2)), ("b", Some(&b))], [("s", None)]);
        assert_ne!(g.hash, f.hash);
        assert_ne!(g.refs["ConfigMap/a"], f.refs["ConfigMap/a"]);
        assert_eq!(g.refs["ConfigMap/b"], f.refs["ConfigMap/b"]);
        assert_eq!(
            parse_refs("garbage,x=,ConfigMap/a=1"),
            [("ConfigMap/a", "1")].into()
        );
    }

    #[test]
    fn changes_name_what_changed_appeared_or_went() {
        let a1 = cm("a", json!({"k": "1"}));
        let a2 = cm("a", json!({"k": "2"}));
        let b = cm("b", json!({}));
        let before = Fingerprint::of([("a", Some(&a1)), ("b", Some(&b))], [("s", None)]);
        let value = before.refs_value();
        let now = Fingerprint::of([("a", Some(&a2)), ("b", Some(&b))], [("s", None)]);
        assert_eq!(describe_changes(Some(&value), &now), "ConfigMap a changed");
        let s = cm("s", json!({"p": "x"}));
        let now = Fingerprint::of([("a", Some(&a1)), ("b", None)], [("s", Some(&s))]);
        assert_eq!(
            describe_changes(Some(&value), &now),
            "ConfigMap b deleted, Secret s created"
        );
        let now = Fingerprint::of([("a", Some(&a1)), ("c", None)], [("s", None)]);
        assert_eq!(
            describe_changes(Some(&value), &now),
            "ConfigMap c newly referenced, ConfigMap b no longer referenced"
        );
        // Recorded by a reloader that kept no digests: every reference is named.
        assert_eq!(
            describe_changes(None, &now),
            "referenced configuration changed (ConfigMap a, ConfigMap c, Secret s)"
        );
    }

    #[test]
    fn opt_in_is_the_exact_annotation() {
        let n = Names::default();
        assert!(enabled(&deploy(json!({}), json!({ENABLED: "true"})), &n));
        for v in [
            json!({ENABLED: "false"}),
            json!({ENABLED: "yes"}),
            json!({}),
        ] {
            assert!(!enabled(&deploy(json!({}), v), &n));
        }
    }

    #[test]
    fn manifest_declares_indexes_matching_the_hashed_paths() {
        let m = ConfigReloader::manifest();
        let ix = &m.watches[DEPLOYMENTS as usize].indexes;
        assert_eq!(ix[0].paths, CONFIGMAP_PATHS);
        assert_eq!(ix[1].paths, SECRET_PATHS);
        assert!(ix.iter().all(|i| i.namespaced));
        assert_eq!(m.watches[CONFIGMAPS as usize].kind, "ConfigMap");
        assert_eq!(m.writes.len(), 1);
        assert_eq!(m.writes[0].verbs, vec![Verb::Patch]);
    }
}
