//! What kube-apiserver does per built-in kind beyond storing the object: the defaulters that
//! run on every decoded body, the registry strategies' create and update preparation (the
//! status a create starts from, when `generation` exists and moves, what the server
//! allocates, what may not change), and the admission plugins every cluster runs.
//!
//! A controller tested against a store without these never meets the hot loop real ones fall
//! into ("my desired object lacks the server's defaults, so I update it forever"), nor a
//! Deployment whose generation moved because someone annotated it.
//!
//! The write path calls, for a create: [`default`] (decoding), the field manager,
//! `admission::admit_create` and [`prepare_create`]; for an update: [`default`], then
//! [`prepare_update`] before the field manager. The order is the real server's, as its
//! managedFields show: defaults are owned by the writer, allocated and admitted fields are not.

pub(crate) mod admission;
pub(crate) mod custom;
mod pod;
mod service;

use serde_json::{json, Map, Value};

use crate::response::{self, FieldError};
use kwh_client::registry::ResourceDef;
use kwh_client::Status;

pub(crate) use custom::Schemas;
pub(crate) use service::Allocator;

/// When `metadata.generation` exists and moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// The kind has none (Pods, Services, ConfigMaps…).
    None,
    /// Set to 1 on create; moves when anything but metadata and status changes.
    Spec,
    /// As `Spec`, and also when the annotations change (Deployments).
    SpecAndAnnotations,
    /// As `Spec`, and also when the labels change (EndpointSlices).
    SpecAndLabels,
    /// Set to 1 on create and never moved (PriorityClasses).
    Fixed,
}

/// The generation rule of `def`'s kind. Custom resources always carry one.
pub fn generation(def: &ResourceDef) -> Generation {
    if !def.builtin {
        return Generation::Spec;
    }
    match &*def.store_key {
        "apps/deployments" => Generation::SpecAndAnnotations,
        "apps/replicasets"
        | "apps/statefulsets"
        | "apps/daemonsets"
        | "batch/jobs"
        | "batch/cronjobs"
        | "networking.k8s.io/ingresses"
        | "policy/poddisruptionbudgets"
        | "/replicationcontrollers"
        | "/podtemplates"
        | "networking.k8s.io/networkpolicies"
        | "admissionregistration.k8s.io/mutatingwebhookconfigurations"
        | "admissionregistration.k8s.io/validatingwebhookconfigurations"
        | "apiextensions.k8s.io/customresourcedefinitions" => Generation::Spec,
        "discovery.k8s.io/endpointslices" => Generation::SpecAndLabels,
        "scheduling.k8s.io/priorityclasses" => Generation::Fixed,
        // HorizontalPodAutoscalers have none before v1.37.
        _ => Generation::None,
    }
}

/// Whether an update from `old` to `new` moves the generation.
pub fn generation_moves(def: &ResourceDef, old: &Value, new: &Value) -> bool {
    match generation(def) {
        Generation::None | Generation::Fixed => false,
        Generation::Spec => crate::write::spec_changed(old, new),
        Generation::SpecAndAnnotations => {
            crate::write::spec_changed(old, new)
                || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
        }
        Generation::SpecAndLabels => {
            crate::write::spec_changed(old, new)
                || old.pointer("/metadata/labels") != new.pointer("/metadata/labels")
        }
    }
}

/// The kind's defaulters, as the server runs them on every body it decodes (create, update,
/// the result of a patch). Fields already set are kept.
pub fn default(def: &ResourceDef, v: &mut Value) {
    if !def.builtin {
        return;
    }
    match &*def.store_key {
        "apps/deployments" => deployment(v),
        "apps/replicasets" => {
            let spec = child(v, "spec");
            set(spec, "replicas", json!(1));
            pod::template(child_map(spec, "template"));
        }
        "/replicationcontrollers" => replication_controller(v),
        "apps/statefulsets" => stateful_set(v),
        "apps/daemonsets" => daemon_set(v),
        "batch/jobs" => job(v),
        "batch/cronjobs" => cron_job(v),
        "/pods" => pod::pod(child(v, "spec")),
        "/podtemplates" => pod::template(child(v, "template")),
        "/services" => service::default(child(v, "spec")),
        "/persistentvolumeclaims" => {
            set(child(v, "spec"), "volumeMode", json!("Filesystem"));
        }
        "/secrets" => secret_string_data(v),
        "/persistentvolumes" => {
            let spec = child(v, "spec");
            set(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set(spec, "volumeMode", json!("Filesystem"));
        }
        "/endpoints" => {
            for subset in items(v.get_mut("subsets")) {
                protocols(subset.get_mut("ports"));
            }
        }
        "discovery.k8s.io/endpointslices" => {
            for p in items(v.get_mut("ports")) {
                set(p, "protocol", json!("TCP"));
                p.entry("name").or_insert(json!(""));
            }
        }
        "networking.k8s.io/networkpolicies" => network_policy(child(v, "spec")),
        "/limitranges" => limit_range(child(v, "spec")),
        "autoscaling/horizontalpodautoscalers" => {
            let spec = child(v, "spec");
            set(spec, "minReplicas", json!(1));
            if spec
                .get("metrics")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                spec.insert(
                    "metrics".into(),
                    json!([{"type": "Resource", "resource": {
                    "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
                );
            }
        }
        "rbac.authorization.k8s.io/rolebindings"
        | "rbac.authorization.k8s.io/clusterrolebindings" => role_binding(v),
        "scheduling.k8s.io/priorityclasses" => {
            if let Some(o) = v.as_object_mut() {
                set(o, "preemptionPolicy", json!("PreemptLowerPriority"));
            }
        }
        "storage.k8s.io/storageclasses" => {
            if let Some(o) = v.as_object_mut() {
                set(o, "reclaimPolicy", json!("Delete"));
                set(o, "volumeBindingMode", json!("Immediate"));
            }
        }
        "admissionregistration.k8s.io/mutatingwebhookconfigurations" => webhooks(v, true),
        "admissionregistration.k8s.io/validatingwebhookconfigurations" => webhooks(v, false),
        _ => {}
    }
}

/// The objects of an array member (none when it is missing or not an array).
fn items(v: Option<&mut Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    v.and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Each port's protocol, TCP when unset.
fn protocols(ports: Option<&mut Value>) {
    for p in items(ports) {
        set(p, "protocol", json!("TCP"));
    }
}

/// A LimitRange's Container limits fill each other in: the default limit from the max, the
/// default request from the default limit, then from the min (each resource not already set).
fn limit_range(spec: &mut Map<String, Value>) {
    for item in items(spec.get_mut("limits")) {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let fill = |item: &mut Map<String, Value>, to: &str, from: &str| {
            let Some(source) = item.get(from).and_then(Value::as_object).cloned() else {
                return;
            };
            let target = child_map(item, to);
            for (resource, quantity) in source {
                target.entry(resource).or_insert(quantity);
            }
        };
        fill(item, "default", "max");
        fill(item, "defaultRequest", "default");
        fill(item, "defaultRequest", "min");
        // Go leaves an empty map out of the JSON.
        for k in ["default", "defaultRequest"] {
            if item
                .get(k)
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                item.remove(k);
            }
        }
    }
}

/// A ReplicationController selects, and is labelled with, its template's labels unless it
/// says otherwise.
fn replication_controller(v: &mut Value) {
    let labels = v.pointer("/spec/template/metadata/labels").cloned();
    let spec = child(v, "spec");
    set(spec, "replicas", json!(1));
    pod::template(child_map(spec, "template"));
    let Some(labels) = labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) else {
        return;
    };
    if spec
        .get("selector")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        spec.insert("selector".into(), labels.clone());
    }
    let meta = child(v, "metadata");
    if meta
        .get("labels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        meta.insert("labels".into(), labels);
    }
}

/// A policy with egress rules is of both types; one without, of Ingress only.
fn network_policy(spec: &mut Map<String, Value>) {
    for rules in ["ingress", "egress"] {
        for rule in items(spec.get_mut(rules)) {
            protocols(rule.get_mut("ports"));
        }
    }
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let egress = spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty());
        let types = if egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
        spec.insert("policyTypes".into(), types);
    }
}

/// A binding's role reference and user or group subjects are in the RBAC group; a
/// ServiceAccount subject in the core group.
fn role_binding(v: &mut Value) {
    if let Some(Value::Object(r)) = v.get_mut("roleRef") {
        set(r, "apiGroup", json!("rbac.authorization.k8s.io"));
    }
    for s in items(v.get_mut("subjects")) {
        let group = match s.get("kind").and_then(Value::as_str) {
            Some("ServiceAccount") => "",
            Some("User" | "Group") => "rbac.authorization.k8s.io",
            _ => continue,
        };
        s.entry("apiGroup").or_insert(json!(group));
    }
}

/// The v1 defaults of each webhook of a configuration.
fn webhooks(v: &mut Value, mutating: bool) {
    for w in items(v.get_mut("webhooks")) {
        set(w, "failurePolicy", json!("Fail"));
        set(w, "matchPolicy", json!("Equivalent"));
        w.entry("namespaceSelector").or_insert(json!({}));
        w.entry("objectSelector").or_insert(json!({}));
        set(w, "timeoutSeconds", json!(10));
        if mutating {
            set(w, "reinvocationPolicy", json!("Never"));
        }
        for r in items(w.get_mut("rules")) {
            set(r, "scope", json!("*"));
        }
        if let Some(Value::Object(svc)) =
            w.get_mut("clientConfig").and_then(|c| c.get_mut("service"))
        {
            set(svc, "port", json!(443));
        }
    }
}

/// What the kind's create preparation sets that the writer is recorded as owning (the
/// server's managedFields show them): a DaemonSet's template generation.
pub fn prepare_create_owned(def: &ResourceDef, v: &mut Value) {
    if def.builtin && &*def.store_key == "apps/daemonsets" {
        annotations(v).insert(TEMPLATE_GENERATION.into(), "1".into());
    }
}

/// The rest of the kind's create preparation, after admission: the status it starts from,
/// allocated fields, a Job's generated selector.
pub fn prepare_create(
    def: &ResourceDef,
    v: &mut Value,
    uid: &str,
    name: &str,
    ips: &Allocator,
) -> Result<(), Status> {
    if def.status {
        if let Some(s) = zero_status(def) {
            v["status"] = s;
        }
    }
    if !def.builtin {
        return Ok(());
    }
    match &*def.store_key {
        "batch/jobs" => job_selector(v, uid, name),
        "/pods" => {
            let qos = pod::qos_class(v.get("spec"));
            v["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        "/services" => ips.allocate(def, name, child(v, "spec"))?,
        _ => {}
    }
    Ok(())
}

/// The kind's update preparation (`old` is the stored object, `new` the decoded and defaulted
/// one with the server-set metadata carried over): allocated fields kept, a DaemonSet's
/// template generation, the fields that may not change.
pub fn prepare_update(def: &ResourceDef, old: &Value, new: &mut Value) -> Result<(), Status> {
    if !def.builtin {
        return Ok(());
    }
    let name = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let refuse = |errors: Vec<FieldError>| -> Result<(), Status> {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(response::invalid(&def.kind, &def.group, &name, &errors))
        }
    };
    match &*def.store_key {
        "apps/daemonsets" => {
            let g = old
                .pointer(&format!(
                    "/metadata/annotations/{}",
                    TEMPLATE_GENERATION_POINTER
                ))
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(1);
            let moved = old.pointer("/spec/template") != new.pointer("/spec/template");
            let g = if moved { g + 1 } else { g };
            annotations(new).insert(TEMPLATE_GENERATION.into(), g.to_string().into());
            refuse(immutable(old, new, &["selector"]))
        }
        "apps/deployments" | "apps/replicasets" => refuse(immutable(old, new, &["selector"])),
        "apps/statefulsets" => refuse(stateful_set_spec(old, new)),
        "batch/jobs" => refuse(immutable(
            old,
            new,
            &["selector", "completions", "completionMode", "template"],
        )),
        "/pods" => refuse(pod::spec_update(old, new)),
        "rbac.authorization.k8s.io/rolebindings"
        | "rbac.authorization.k8s.io/clusterrolebindings" => refuse(role_ref(old, new)),
        "/services" => {
            service::keep_allocated(old, child(new, "spec"));
            refuse(service::immutable(old, new))
        }
        "/persistentvolumeclaims" => refuse(pvc_spec(old, new)),
        _ => Ok(()),
    }
}

const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";
/// The same as a JSON pointer segment (no `/` or `~` in it to escape).
const TEMPLATE_GENERATION_POINTER: &str = TEMPLATE_GENERATION;

/// The status a create starts from: the zero value of the kind's status, as Go serializes
/// it (fields without `omitempty` appear). `None`: no status at all.
fn zero_status(def: &ResourceDef) -> Option<Value> {
    if !def.builtin {
        return None;
    }
    Some(match &*def.store_key {
        "apps/deployments" | "batch/jobs" | "batch/cronjobs" | "/resourcequotas" => json!({}),
        "apps/replicasets" | "/replicationcontrollers" => json!({"replicas": 0}),
        "apps/statefulsets" => json!({"replicas": 0, "availableReplicas": 0}),
        "apps/daemonsets" => json!({
            "currentNumberScheduled": 0,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": 0,
            "numberReady": 0,
        }),
        "/services" | "networking.k8s.io/ingresses" => json!({"loadBalancer": {}}),
        "policy/poddisruptionbudgets" => json!({
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        }),
        "/persistentvolumeclaims" | "/persistentvolumes" => json!({"phase": "Pending"}),
        "autoscaling/horizontalpodautoscalers" => {
            json!({"desiredReplicas": 0, "currentMetrics": null})
        }
        _ => return None,
    })
}

/// A Job's selector, generated unless `manualSelector` is true: the uid's label, also put on
/// the pod template with the Job's name (and on the Job, when it has no labels).
fn job_selector(v: &mut Value, uid: &str, name: &str) {
    let spec = child(v, "spec");
    if spec.get("manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    spec.insert(
        "selector".into(),
        json!({"matchLabels": {"controller-uid": uid}}),
    );
    let meta = child_map(child_map(spec, "template"), "metadata");
    let labels = child_map(meta, "labels");
    labels.insert("controller-uid".into(), uid.into());
    labels.insert("job-name".into(), name.into());
    let labels = Value::Object(labels.clone());
    let m = child(v, "metadata");
    if m.get("labels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        m.insert("labels".into(), labels);
    }
    annotations(v).insert("batch.kubernetes.io/job-tracking".into(), "".into());
}

/// `stringData` merged into `data`, base64-encoded (the Secret's conversion does it, so the
/// stored object never has `stringData`).
fn secret_string_data(v: &mut Value) {
    use base64::Engine as _;
    let Some(Value::Object(strings)) = v.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    let data = child(v, "data");
    for (k, s) in strings {
        let text = s.as_str().unwrap_or("");
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        data.insert(k, encoded.into());
    }
}

/// A PVC's spec may not change after creation, except its storage request when it is bound
/// to a volume that can expand (none here: no volume plugin).
fn pvc_spec(old: &Value, new: &Value) -> Vec<FieldError> {
    if old.get("spec") == new.get("spec") {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        "spec",
        "spec is immutable after creation except resources.requests for bound claims",
    )]
}

/// A StatefulSet's spec may change only in its replicas, template, update strategy, PVC
/// retention policy and minReadySeconds.
fn stateful_set_spec(old: &Value, new: &Value) -> Vec<FieldError> {
    const MUTABLE: [&str; 5] = [
        "replicas",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let rest = |v: &Value| -> Map<String, Value> {
        v.get("spec")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !MUTABLE.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    if rest(old) == rest(new) {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        "spec",
        "updates to statefulset spec for fields other than 'replicas', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
    )]
}

/// A binding's role may not change: delete and create it again.
fn role_ref(old: &Value, new: &Value) -> Vec<FieldError> {
    let (a, b) = (old.get("roleRef"), new.get("roleRef"));
    if a == b {
        return Vec::new();
    }
    vec![FieldError {
        reason: "FieldValueInvalid",
        field: "roleRef".into(),
        detail: format!(
            "Invalid value: {}: cannot change roleRef",
            b.map_or("null".into(), Value::to_string)
        ),
    }]
}

/// `spec.<field>` of each name in `fields` that changed, refused as the server words it.
fn immutable(old: &Value, new: &Value, fields: &[&str]) -> Vec<FieldError> {
    fields
        .iter()
        .filter_map(|f| {
            let (a, b) = (
                old.get("spec")?.get(*f),
                new.get("spec").and_then(|s| s.get(*f)),
            );
            (a != b).then(|| FieldError {
                reason: "FieldValueInvalid",
                field: format!("spec.{f}"),
                detail: format!(
                    "Invalid value: {}: field is immutable",
                    b.map_or("null".into(), Value::to_string)
                ),
            })
        })
        .collect()
}

/// The object's member `key` as an object, made one when it is missing or not one.
fn child<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(o) => child_map(o, key),
        _ => unreachable!("made an object above"),
    }
}

/// The map's member `key` as an object, made one when it is missing or not one.
fn child_map<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = m
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(o) => o,
        _ => unreachable!("made an object above"),
    }
}

fn annotations(v: &mut Value) -> &mut Map<String, Value> {
    child_map(child(v, "metadata"), "annotations")
}

/// Whether `key` is unset as Go sees a pointer or a string: missing, null or "".
fn absent(m: &Map<String, Value>, key: &str) -> bool {
    match m.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

/// Sets `key` to `value` where it is unset.
fn set(m: &mut Map<String, Value>, key: &str, value: Value) {
    if absent(m, key) {
        m.insert(key.to_owned(), value);
    }
}

fn deployment(v: &mut Value) {
    let spec = child(v, "spec");
    set(spec, "replicas", json!(1));
    let strategy = child_map(spec, "strategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let ru = child_map(strategy, "rollingUpdate");
        set(ru, "maxUnavailable", json!("25%"));
        set(ru, "maxSurge", json!("25%"));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
    pod::template(child_map(spec, "template"));
}

fn stateful_set(v: &mut Value) {
    let spec = child(v, "spec");
    set(spec, "replicas", json!(1));
    set(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = child_map(spec, "updateStrategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        set(child_map(strategy, "rollingUpdate"), "partition", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    pod::template(child_map(spec, "template"));
}

fn daemon_set(v: &mut Value) {
    let spec = child(v, "spec");
    let strategy = child_map(spec, "updateStrategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let ru = child_map(strategy, "rollingUpdate");
        set(ru, "maxUnavailable", json!(1));
        set(ru, "maxSurge", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    pod::template(child_map(spec, "template"));
}

fn job(v: &mut Value) {
    let spec = child(v, "spec");
    if absent(spec, "completions") && absent(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    set(spec, "parallelism", json!(1));
    set(spec, "backoffLimit", json!(6));
    set(spec, "completionMode", json!("NonIndexed"));
    set(spec, "suspend", json!(false));
    pod::template(child_map(spec, "template"));
}

fn cron_job(v: &mut Value) {
    let spec = child(v, "spec");
    set(spec, "concurrencyPolicy", json!("Allow"));
    set(spec, "suspend", json!(false));
    set(spec, "successfulJobsHistoryLimit", json!(3));
    set(spec, "failedJobsHistoryLimit", json!(1));
    let job = child_map(spec, "jobTemplate");
    pod::object_meta(child_map(job, "metadata"));
    pod::template(child_map(child_map(job, "spec"), "template"));
}

#[cfg(test)]
mod limit_range_tests {
    #[test]
    fn a_limit_ranges_container_limits_fill_each_other_in() {
        let mut spec = serde_json::json!({"limits": [
            {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"},
             "default": {"memory": "256Mi"}},
            {"type": "Pod", "max": {"cpu": "4"}},
            {"type": "Container"}
        ]});
        super::limit_range(spec.as_object_mut().unwrap());
        assert_eq!(
            spec["limits"][0],
            serde_json::json!({"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"},
                "default": {"cpu": "2", "memory": "256Mi"},
                "defaultRequest": {"cpu": "2", "memory": "256Mi"}})
        );
        assert_eq!(
            spec["limits"][1],
            serde_json::json!({"type": "Pod", "max": {"cpu": "4"}})
        );
        assert_eq!(spec["limits"][2], serde_json::json!({"type": "Container"}));
    }
}
