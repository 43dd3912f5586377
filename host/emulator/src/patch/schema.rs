//! How lists and maps of built-in kinds merge, keyed by field name.
//!
//! The real server reads this from the Go struct tags (`patchStrategy`, `patchMergeKey`,
//! `listType`, `listMapKey`, `structType`) of every built-in type. The emulator has no typed
//! schema, so it keeps a small table of the fields that matter for the kinds it serves (Pods,
//! workload templates, Services, ConfigMaps, Events, object metadata). A field name means the
//! same thing wherever it occurs in those kinds, except `ports` (container ports vs. Service
//! ports) and `selector` (a label map on Services, an atomic LabelSelector on workloads), which
//! are told apart by the items' own keys. Custom resources have no table: their lists are atomic
//! and their objects are free-form maps, as for a schema-less CRD.

use serde_json::Value;

/// One key field of an associative list. `default` fills an absent key (the server defaults
/// `protocol` to TCP before it computes ownership), so `{containerPort: 80}` and
/// `{containerPort: 80, protocol: TCP}` name the same item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyField {
    pub name: &'static str,
    pub default: Option<&'static str>,
}

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced as a whole (no merge key; `tolerations`, `args`, `command`, custom resources).
    Atomic,
    /// A set of scalars merged as a union (`finalizers`).
    Set,
    /// Items identified by key fields. The first key is the strategic-merge `patchMergeKey`;
    /// all keys together identify the item for server-side apply and `managedFields`.
    Keyed(&'static [KeyField]),
}

const fn key(name: &'static str) -> KeyField {
    KeyField {
        name,
        default: None,
    }
}

const NAME: &[KeyField] = &[key("name")];
const MOUNT_PATH: &[KeyField] = &[key("mountPath")];
const DEVICE_PATH: &[KeyField] = &[key("devicePath")];
const UID: &[KeyField] = &[key("uid")];
const IP: &[KeyField] = &[key("ip")];
const TYPE: &[KeyField] = &[key("type")];
const CONDITION_TYPE: &[KeyField] = &[key("conditionType")];
const TOPOLOGY: &[KeyField] = &[key("topologyKey"), key("whenUnsatisfiable")];
const CONTAINER_PORT: &[KeyField] = &[
    key("containerPort"),
    KeyField {
        name: "protocol",
        default: Some("TCP"),
    },
];
const SERVICE_PORT: &[KeyField] = &[
    key("port"),
    KeyField {
        name: "protocol",
        default: Some("TCP"),
    },
];

/// The merge behaviour of the list stored under `field`, given some of its items (from the
/// object and/or the patch) to tell same-named fields apart.
pub(crate) fn list_kind<'a>(
    builtin: bool,
    field: Option<&str>,
    items: impl IntoIterator<Item = &'a Value>,
) -> ListKind {
    if !builtin {
        return ListKind::Atomic;
    }
    match field.unwrap_or("") {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "secrets"
        | "schedulingGates"
        | "resourceClaims" => ListKind::Keyed(NAME),
        "volumeMounts" => ListKind::Keyed(MOUNT_PATH),
        "volumeDevices" => ListKind::Keyed(DEVICE_PATH),
        "ownerReferences" => ListKind::Keyed(UID),
        "hostAliases" => ListKind::Keyed(IP),
        "conditions" | "addresses" => ListKind::Keyed(TYPE),
        "readinessGates" => ListKind::Keyed(CONDITION_TYPE),
        "topologySpreadConstraints" => ListKind::Keyed(TOPOLOGY),
        "finalizers" => ListKind::Set,
        "ports" => {
            let service = items.into_iter().any(|item| {
                item.as_object()
                    .is_some_and(|m| m.contains_key("port") && !m.contains_key("containerPort"))
            });
            if service {
                ListKind::Keyed(SERVICE_PORT)
            } else {
                ListKind::Keyed(CONTAINER_PORT)
            }
        }
        _ => ListKind::Atomic,
    }
}

/// Whether the object stored under `field` of a built-in kind is a free-form string map
/// (`map[string]string` and friends) rather than a struct. Map nodes are members of a field
/// set in their own right (the `"."` entry of FieldsV1); struct nodes are not.
pub(crate) fn is_free_form_map(
    field: Option<&str>,
    value: &serde_json::Map<String, Value>,
) -> bool {
    match field.unwrap_or("") {
        "labels" | "annotations" | "data" | "binaryData" | "stringData" | "matchLabels"
        | "nodeSelector" | "limits" | "requests" | "capacity" | "allocatable" | "parameters"
        | "overhead" => true,
        // A Service's selector is a label map; a workload's is a LabelSelector struct.
        "selector" => !is_label_selector(value),
        _ => false,
    }
}

/// Whether the object under `field` is an atomic struct: owned and replaced as one value
/// (`structType=atomic`: a workload's LabelSelector, an Event's `ObjectReference`s; a
/// Service's selector map).
pub(crate) fn is_atomic_struct(
    field: Option<&str>,
    value: &serde_json::Map<String, Value>,
) -> bool {
    match field.unwrap_or("") {
        // A workload's LabelSelector, and a Service's or ReplicationController's plain map
        // (`mapType=atomic` both).
        "selector" => is_label_selector(value) || value.values().all(Value::is_string),
        "involvedObject" | "regarding" | "related" => true,
        _ => false,
    }
}

/// Whether the object under `field` is an optional struct (a Go pointer: an Event's
/// `*EventSeries`) that a write adding it owns as a member in its own right, with its fields:
/// the `"."` entry the server records (`"f:series": {".": {}, "f:count": {}, …}`).
pub(crate) fn is_optional_struct(field: Option<&str>) -> bool {
    field == Some("series")
}

fn is_label_selector(value: &serde_json::Map<String, Value>) -> bool {
    value.contains_key("matchLabels") || value.contains_key("matchExpressions")
}

/// The identity of a keyed-list item: each key field's value (or its default). `None` when a
/// key without default is missing, which makes the item unaddressable.
pub(crate) fn item_key(keys: &[KeyField], item: &Value) -> Option<Vec<(&'static str, Value)>> {
    let map = item.as_object()?;
    keys.iter()
        .map(|k| match (map.get(k.name), k.default) {
            (Some(v), _) if !v.is_null() => Some((k.name, v.clone())),
            (_, Some(d)) => Some((k.name, Value::String(d.to_owned()))),
            _ => None,
        })
        .collect()
}

/// Whether `item` has the given identity.
pub(crate) fn item_matches(
    keys: &[KeyField],
    item: &Value,
    want: &[(&'static str, Value)],
) -> bool {
    item_key(keys, item).is_some_and(|k| k == want)
}

/// The default of a key field by name, for matching `k:` path elements read back from
/// FieldsV1 against items that omit it.
pub(crate) fn key_default(name: &str) -> Option<Value> {
    (name == "protocol").then(|| Value::String("TCP".into()))
}
