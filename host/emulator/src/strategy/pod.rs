//! The defaults of a pod's spec, wherever one appears (a Pod, and the templates of the
//! workload kinds), and a Pod's QoS class.

use serde_json::{json, Map, Value};

use super::{absent, child_map, set};
use crate::response::FieldError;

/// A pod template (`spec.template` of a Deployment, a Job…): its metadata as Go serializes
/// an embedded ObjectMeta, and its spec defaulted.
pub(super) fn template(t: &mut Map<String, Value>) {
    object_meta(child_map(t, "metadata"));
    spec(child_map(t, "spec"));
}

/// An embedded ObjectMeta always carries `creationTimestamp`, null when unset (Go's zero
/// time is not omitted): clients that compare templates see it.
pub(super) fn object_meta(m: &mut Map<String, Value>) {
    m.entry("creationTimestamp").or_insert(Value::Null);
}

/// A Pod's own spec: a template's defaults, and those only a Pod gets.
pub(super) fn pod(s: &mut Map<String, Value>) {
    spec(s);
    set(s, "enableServiceLinks", json!(true));
    for c in containers_mut(s) {
        requests_from_limits(c);
    }
}

/// The defaults of a PodSpec and of each of its containers and volumes.
fn spec(s: &mut Map<String, Value>) {
    set(s, "restartPolicy", json!("Always"));
    set(s, "terminationGracePeriodSeconds", json!(30));
    set(s, "dnsPolicy", json!("ClusterFirst"));
    if absent(s, "securityContext") {
        s.insert("securityContext".into(), json!({}));
    }
    set(s, "schedulerName", json!("default-scheduler"));
    for c in containers_mut(s) {
        container(c);
    }
    if let Some(Value::Array(vols)) = s.get_mut("volumes") {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            volume(v);
        }
    }
}

/// Every container and init container of a spec.
fn containers_mut(s: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    s.iter_mut()
        .filter(|(k, _)| *k == "containers" || *k == "initContainers")
        .filter_map(|(_, v)| v.as_array_mut())
        .flat_map(|a| a.iter_mut())
        .filter_map(Value::as_object_mut)
}

fn container(c: &mut Map<String, Value>) {
    if absent(c, "resources") {
        c.insert("resources".into(), json!({}));
    }
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    if absent(c, "imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if pulls_always(image) {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), policy.into());
    }
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(p)) = c.get_mut(probe) {
            set(p, "timeoutSeconds", json!(1));
            set(p, "periodSeconds", json!(10));
            set(p, "successThreshold", json!(1));
            set(p, "failureThreshold", json!(3));
            if let Some(Value::Object(h)) = p.get_mut("httpGet") {
                set(h, "scheme", json!("HTTP"));
            }
        }
    }
    if let Some(Value::Array(env)) = c.get_mut("env") {
        for e in env.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(Value::Object(f)) =
                e.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef"))
            {
                set(f, "apiVersion", json!("v1"));
            }
        }
    }
}

/// An image pulled on every start: tagged `latest`, or neither tagged nor pinned by digest.
fn pulls_always(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// The file mode of the volume sources that project files.
fn volume(v: &mut Map<String, Value>) {
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(Value::Object(s)) = v.get_mut(source) {
            set(s, "defaultMode", json!(420));
        }
    }
    if let Some(Value::Object(h)) = v.get_mut("hostPath") {
        set(h, "type", json!(""));
    }
}

/// A Pod's container with limits and no requests requests what it limits.
fn requests_from_limits(c: &mut Map<String, Value>) {
    let Some(Value::Object(r)) = c.get_mut("resources") else {
        return;
    };
    let Some(Value::Object(limits)) = r.get("limits").cloned() else {
        return;
    };
    let requests = child_map(r, "requests");
    for (k, q) in limits {
        requests.entry(k).or_insert(q);
    }
}

/// The Pod's QoS class from its containers' requests and limits of cpu and memory.
pub(super) fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.and_then(|s| s.get(*k)).and_then(Value::as_array))
        .flatten()
        .collect();
    let of = |c: &Value, which: &str, r: &str| {
        c.pointer(&format!("/resources/{which}/{r}"))
            .filter(|q| !q.is_null())
            .cloned()
    };
    let resources = ["cpu", "memory"];
    let any = containers.iter().any(|c| {
        resources
            .iter()
            .any(|r| of(c, "requests", r).is_some() || of(c, "limits", r).is_some())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        resources.iter().all(|r| {
            let limit = of(c, "limits", r);
            limit.is_some() && of(c, "requests", r).is_none_or(|q| Some(q) == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A Pod's spec may change after creation only in its containers' images, its
/// activeDeadlineSeconds, added tolerations and terminationGracePeriodSeconds.
pub(super) fn spec_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let (Some(before), Some(after)) = (old.get("spec"), new.get("spec")) else {
        return Vec::new();
    };
    if before == after {
        return Vec::new();
    }
    // The old spec with every change the server allows taken from the new one: anything
    // still different is a change it refuses.
    let mut allowed = before.clone();
    if let (Value::Object(a), Value::Object(n)) = (&mut allowed, after) {
        for key in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
        ] {
            match n.get(key) {
                Some(v) => a.insert(key.to_owned(), v.clone()),
                None => a.remove(key),
            };
        }
        for list in ["containers", "initContainers"] {
            let images: Vec<Option<Value>> = n
                .get(list)
                .and_then(Value::as_array)
                .map(|cs| cs.iter().map(|c| c.get("image").cloned()).collect())
                .unwrap_or_default();
            if let Some(Value::Array(cs)) = a.get_mut(list) {
                for (c, image) in cs.iter_mut().zip(images) {
                    if let (Value::Object(c), Some(image)) = (c, image) {
                        c.insert("image".into(), image);
                    }
                }
            }
        }
    }
    if &allowed == after {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        "spec",
        "pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
    )]
}
