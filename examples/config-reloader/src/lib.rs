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
//! Finding the Deployments that use a ConfigMap is a cache query, not a scan: the manifest
//! declares two custom indexes on Deployments (`configmaps`, `secrets`) whose values are the
//! keys of the objects each Deployment references; the host keeps them current natively.

use std::collections::BTreeSet;

use kube_guest::{
    debug, info, Action, Api, Controller, Index, Manifest, Object, Patch, Result, Verb, Watch,
    Write,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A Deployment opts in with this annotation set to `"true"`.
pub const ENABLED: &str = "config-reloader/enabled";
/// Pod-template annotation holding the hash of the referenced configuration.
pub const CONFIG_HASH: &str = "config-reloader/config-hash";
/// Deployment annotation holding the last hash seen (the baseline; changing it rolls nothing).
pub const OBSERVED_HASH: &str = "config-reloader/observed-hash";

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

/// SHA-256 (hex) over each referenced object's kind, name and data, in name order. A missing
/// object counts as `absent`, so deleting or recreating one is a change too. JSON maps are
/// serialised with sorted keys, so the hash depends on content only.
pub fn config_hash<'a>(
    configmaps: impl IntoIterator<Item = (&'a str, Option<&'a Object>)>,
    secrets: impl IntoIterator<Item = (&'a str, Option<&'a Object>)>,
) -> String {
    let mut h = Sha256::new();
    for (kind, items) in [
        ("ConfigMap", configmaps.into_iter().collect::<Vec<_>>()),
        ("Secret", secrets.into_iter().collect()),
    ] {
        let mut items = items;
        items.sort_by_key(|(name, _)| *name);
        for (name, obj) in items {
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
    }
    let digest = h.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `deploy` opted in.
pub fn enabled(deploy: &Object) -> bool {
    deploy.annotation(ENABLED) == Some("true")
}

/// The patch that brings `deploy` to configuration hash `hash`, or none if it is there:
/// - first sight (no hash recorded): record it in `observed-hash` only, rolling nothing;
/// - a different hash: set both annotations, which changes the pod template and rolls.
pub fn plan(deploy: &Object, hash: &str) -> Option<Patch> {
    let template_hash = deploy["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH].as_str();
    let recorded = template_hash.or(deploy.annotation(OBSERVED_HASH));
    match recorded {
        Some(h) if h == hash => None,
        None => Some(Patch::Merge(
            json!({"metadata": {"annotations": {OBSERVED_HASH: hash}}}),
        )),
        Some(_) => Some(Patch::Merge(json!({
            "metadata": {"annotations": {OBSERVED_HASH: hash}},
            "spec": {"template": {"metadata": {"annotations": {CONFIG_HASH: hash}}}}
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
    type Config = ();

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
            if enabled(&obj) {
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
            // resyncs (old == new) and spec or opt-in changes can.
            let spec_or_opt_in = old.generation() != new.generation()
                || old.annotation(ENABLED) != new.annotation(ENABLED)
                || old == new;
            if enabled(&new) && spec_or_opt_in {
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
        if !enabled(&deploy) || deploy.is_deleting() {
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
        let hash = config_hash(
            cms.iter().map(|(n, o)| (n.as_str(), o.as_ref())),
            secrets.iter().map(|(n, o)| (n.as_str(), o.as_ref())),
        );
        let Some(patch) = plan(&deploy, &hash) else {
            return Ok(Action::Done);
        };
        let rolls = patch.body().get("spec").is_some();
        deployments.patch_object(&deploy, &patch)?;
        if rolls {
            info!(
                "{key}: referenced configuration changed, rolling (hash {})",
                &hash[..12]
            );
        } else {
            debug!("{key}: recorded configuration hash {}", &hash[..12]);
        }
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(ConfigReloader);

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy(template_spec: Value, annotations: Value) -> Object {
        Object::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod", "annotations": annotations},
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
        let d = deploy(json!({}), json!({ENABLED: "true"}));
        let Some(Patch::Merge(first)) = plan(&d, "h1") else {
            panic!("records")
        };
        assert_eq!(
            first,
            json!({"metadata": {"annotations": {OBSERVED_HASH: "h1"}}})
        );

        let seen = deploy(json!({}), json!({ENABLED: "true", OBSERVED_HASH: "h1"}));
        assert_eq!(plan(&seen, "h1"), None);
        let Some(Patch::Merge(roll)) = plan(&seen, "h2") else {
            panic!("rolls")
        };
        assert_eq!(
            roll["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH],
            "h2"
        );
        assert_eq!(roll["metadata"]["annotations"][OBSERVED_HASH], "h2");

        // The template's hash wins over the baseline (it is what the pods run with).
        let mut rolled = seen.clone();
        rolled["spec"]["template"]["metadata"] = json!({"annotations": {CONFIG_HASH: "h2"}});
        assert_eq!(plan(&rolled, "h2"), None);
        assert!(plan(&rolled, "h1").is_some());
    }

    #[test]
    fn opt_in_is_the_exact_annotation() {
        assert!(enabled(&deploy(json!({}), json!({ENABLED: "true"}))));
        for v in [
            json!({ENABLED: "false"}),
            json!({ENABLED: "yes"}),
            json!({}),
        ] {
            assert!(!enabled(&deploy(json!({}), v)));
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
