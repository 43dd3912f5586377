//! The admission plugins every cluster runs that change or refuse what a controller creates,
//! and what kube-controller-manager puts in every new namespace.
//!
//! - ServiceAccount: a Pod runs as its namespace's `default` ServiceAccount unless it names
//!   one; a Pod whose ServiceAccount does not exist is refused (403); the API token is mounted
//!   as the projected `kube-api-access-*` volume unless automounting is off.
//! - DefaultTolerationSeconds: Pods tolerate `not-ready` and `unreachable` nodes for 300 s.
//! - Priority: Pods without a priority class get priority 0 and the default preemption policy.
//! - StorageObjectInUseProtection: claims and volumes carry their protection finalizer.
//! - NamespaceLifecycle is in the write path itself (no create in a missing or terminating
//!   namespace).
//!
//! The controller-manager's part, done here at once when a namespace is created (a real one
//! does it within a second), when the emulator is asked to
//! ([`EmulatorBuilder::namespace_controller`](crate::EmulatorBuilder::namespace_controller)):
//! the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap with the CA that signs
//! the API server's certificate. Without it a Pod's ServiceAccount is not looked up.

use serde_json::{json, Map, Value};

use super::child;
use crate::store::key_of;
use crate::util::name_suffix;
use crate::Shared;
use kwh_client::error::StatusDetails;
use kwh_client::registry::ResourceDef;
use kwh_client::Status;

const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Admission of a create of `v` named `name` in namespace `ns`: the mutations above, or the
/// refusal the plugin answers.
pub(crate) fn admit_create(
    shared: &Shared,
    def: &ResourceDef,
    v: &mut Value,
    ns: Option<&str>,
    name: &str,
) -> Result<(), Status> {
    if !def.builtin {
        return Ok(());
    }
    match (&*def.store_key, ns) {
        ("/pods", Some(ns)) => pod(shared, v, ns, name),
        ("/persistentvolumeclaims", _) => {
            finalizer(v, "kubernetes.io/pvc-protection");
            Ok(())
        }
        ("/persistentvolumes", _) => {
            finalizer(v, "kubernetes.io/pv-protection");
            Ok(())
        }
        _ => Ok(()),
    }
}

fn pod(shared: &Shared, v: &mut Value, ns: &str, name: &str) -> Result<(), Status> {
    let spec = child(v, "spec");
    let account = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned();
    let sa = shared
        .store
        .get("/serviceaccounts", &key_of(Some(ns), &account));
    if sa.is_none() && shared.namespace_controller {
        return Err(forbidden(
            name,
            &format!(
                "error looking up service account {ns}/{account}: serviceaccount \"{account}\" not found"
            ),
        ));
    }
    spec.insert("serviceAccountName".into(), account.clone().into());
    spec.insert("serviceAccount".into(), account.into());
    let sa_mounts = sa.and_then(|sa| sa.to_value().ok()).and_then(|s| {
        s.get("automountServiceAccountToken")
            .and_then(Value::as_bool)
    });
    let mount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or(sa_mounts)
        .unwrap_or(true);
    if mount {
        token_volume(spec);
    }
    tolerations(spec);
    if spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        spec.entry("priority").or_insert(json!(0));
    }
    spec.entry("preemptionPolicy")
        .or_insert(json!("PreemptLowerPriority"));
    Ok(())
}

/// The projected token volume, mounted read-only in every container that has nothing at its
/// path already.
fn token_volume(spec: &mut Map<String, Value>) {
    let name = format!("kube-api-access-{}", name_suffix());
    let mounted_at = |c: &Value| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|ms| {
                ms.iter()
                    .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_PATH))
            })
    };
    let mut used = false;
    for key in ["initContainers", "containers"] {
        let Some(Value::Array(cs)) = spec.get_mut(key) else {
            continue;
        };
        for c in cs.iter_mut() {
            if mounted_at(c) {
                continue;
            }
            let Some(c) = c.as_object_mut() else {
                continue;
            };
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            if let Value::Array(ms) = mounts {
                ms.push(json!({"name": name, "readOnly": true, "mountPath": TOKEN_PATH}));
                used = true;
            }
        }
    }
    if !used {
        return;
    }
    let volume = json!({"name": name, "projected": {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
        "defaultMode": 420,
    }});
    match spec.entry("volumes").or_insert_with(|| json!([])) {
        Value::Array(vs) => vs.push(volume),
        other => *other = json!([volume]),
    }
}

/// DefaultTolerationSeconds: 300 s on not-ready and unreachable nodes, unless the Pod
/// tolerates either already.
fn tolerations(spec: &mut Map<String, Value>) {
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Value::Array(ts) = list else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = ts.iter().any(|t| {
            t.get("key").and_then(Value::as_str) == Some(key)
                && t.get("effect")
                    .and_then(Value::as_str)
                    .is_none_or(|e| e.is_empty() || e == "NoExecute")
        });
        if !tolerated {
            ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

fn finalizer(v: &mut Value, f: &str) {
    let m = child(v, "metadata");
    match m.entry("finalizers").or_insert_with(|| json!([])) {
        Value::Array(fs) => {
            if !fs.iter().any(|x| x == f) {
                fs.push(f.into());
            }
        }
        other => *other = json!([f]),
    }
}

fn forbidden(name: &str, why: &str) -> Status {
    let mut s = Status::failure(
        403,
        "Forbidden",
        format!("pods \"{name}\" is forbidden: {why}"),
    );
    s.details = Some(StatusDetails {
        name: name.into(),
        kind: "pods".into(),
        ..Default::default()
    });
    s
}

/// What the controller-manager creates in a new namespace: its `default` ServiceAccount and
/// the `kube-root-ca.crt` ConfigMap (the serving certificate's PEM; empty over plain HTTP).
pub(crate) fn namespace_created(shared: &Shared, ns: &str) {
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "default", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                            "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
               "data": {"ca.crt": shared.root_ca.clone()}}),
    ];
    for o in objects {
        let manager = "kube-controller-manager";
        if let Err(e) = crate::write::create_value(shared, o, manager) {
            if e.code != 409 {
                tracing::warn!(namespace = ns, error = %e.message, "namespace's default objects not created");
            }
        }
    }
}

const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
