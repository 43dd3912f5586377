//! `metadata.managedFields`: which field manager owns which fields, kept like kube-apiserver.
//!
//! Why: clients read managedFields (kubectl shows them, server-side apply depends on them), and
//! an apply conflict is only as right as the ownership record behind it.
//!
//! # What is recorded
//! Paths use the FieldsV1 element encoding directly (`f:name`, `k:{"name":"x"}`, `v:"x"`,
//! `i:3`), so a field set is a set of encoded paths and (de)serialising FieldsV1 is a tree walk.
//! A field set holds:
//! - every scalar, `null`, empty object, atomic list and atomic struct (a workload's label
//!   selector) as a leaf;
//! - every free-form map (labels, annotations, data, … on built-in kinds; every object of a
//!   custom resource except `metadata`) and every non-atomic list as a member in its own right,
//!   shown as `".": {}` next to its children;
//! - struct nodes only through their children (`f:metadata` never has a `"."`), except the
//!   optional structs of the schema table (an Event's `series`), members like maps;
//! - for an update of a built-in kind, every struct and list the write adds is its member (its
//!   `"."`: a Deployment's `rollingUpdate`, an Ingress's `defaultBackend`); a create is compared
//!   with the kind's Go zero value, whose non-pointer structs and required lists (`spec`,
//!   `template`, `strategy`, `containers`) no create adds; `null` values are owned by no one;
//! - items of keyed lists by their key (`k:{"containerPort":80,"protocol":"TCP"}`), items of
//!   set lists by value (`v:"example.com/f"`).
//!
//! That is the set an updater takes when it creates those nodes (the sample's
//! `"f:data": {".": {}, "f:k": {}}`); an applier owns only the leaves and list items of its
//! configuration (`"f:data": {"f:k": {}}`), see `patch::apply`.
//!
//! Which lists are keyed comes from the table in `patch::schema`; custom-resource lists are
//! atomic (a CRD's `x-kubernetes-list-type` is not read). `apiVersion`, `kind` and the
//! server-set metadata (name, namespace, uid, resourceVersion, generation, creationTimestamp,
//! managedFields, selfLink, deletionTimestamp, deletionGracePeriodSeconds) are never owned.
//!
//! # Update semantics (non-apply writes)
//! The writer takes every field it added or changed (a leaf with a new value, a member that was
//! absent) away from all other managers; fields that disappeared leave every set. One entry is
//! kept per (manager, operation, subresource, apiVersion for Update); its `time` moves when the
//! write changed fields. Entries with empty sets are dropped. A request that carries a
//! non-empty `managedFields` replaces the record (`[{}]` clears it), one that omits it or sends
//! `[]` keeps the stored one, and an unreadable record is reset rather than failing the
//! write — all as the real server does. Entries are sorted like the server's: Apply before
//! Update, then by time, manager, apiVersion and subresource.
//!
//! [`record_update`] tells built-in kinds from custom resources by the apiVersion's group (core
//! and the `*.k8s.io`, `apps`, `batch`, `policy`, `autoscaling` groups are built in), so a
//! custom group under `k8s.io` would be treated with the built-in table.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::patch::schema::{self, ListKind};

/// One path through an object, each element FieldsV1-encoded (`f:spec`, `k:{"name":"a"}`).
pub type Path = Vec<String>;

/// A set of owned paths.
pub type FieldSet = BTreeSet<Path>;

/// Every member path of an object with, for leaves, the value there (non-leaf members map to
/// `None`). Comparing two of these finds added, changed and removed fields in one pass.
pub(crate) type FieldValues<'a> = BTreeMap<Path, Option<&'a Value>>;

/// Metadata fields the server sets; a client's value for them is not applied.
pub(crate) const SERVER_SET_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Metadata fields nobody owns: the object's identity and what the server sets.
fn is_unowned_metadata(field: &str) -> bool {
    field == "name" || field == "namespace" || SERVER_SET_METADATA.contains(&field)
}

/// Whether an `apiVersion` belongs to a built-in kind (core or a Kubernetes API group), whose
/// lists and maps follow the built-in schema table.
pub fn is_builtin_api_version(api_version: &str) -> bool {
    match api_version.split_once('/') {
        None => true,
        Some((group, _)) => {
            matches!(
                group,
                "apps" | "batch" | "policy" | "autoscaling" | "extensions"
            ) || group.ends_with(".k8s.io")
        }
    }
}

/// The manager a write is recorded under: the `fieldManager` parameter, else the User-Agent
/// up to its first `/` (`kubectl/v1.26.1 (linux/amd64)` → `kubectl`), as the server does.
pub fn manager_or_user_agent(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    match field_manager {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => user_agent
            .unwrap_or("")
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

pub(crate) fn field_elem(name: &str) -> String {
    format!("f:{name}")
}

pub(crate) fn value_elem(v: &Value) -> String {
    format!("v:{}", compact(v))
}

/// `k:{...}` with the key fields sorted by name, compact, as the server writes them.
pub(crate) fn key_elem(key: &[(&'static str, Value)]) -> String {
    let mut sorted: Vec<&(&str, Value)> = key.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut s = String::from("k:{");
    for (i, (name, v)) in sorted.into_iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&compact(&Value::String((*name).to_owned())));
        s.push(':');
        s.push_str(&compact(v));
    }
    s.push('}');
    s
}

fn compact(v: &Value) -> String {
    // Serialising a Value cannot fail (its map keys are strings).
    serde_json::to_string(v).unwrap_or_default()
}

/// The member paths of `obj` (see the module docs for what counts), with leaf values.
pub(crate) fn object_fields(obj: &Value, builtin: bool) -> FieldValues<'_> {
    let mut out = BTreeMap::new();
    let mut path = Vec::new();
    if let Value::Object(top) = obj {
        for (k, v) in top {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            path.push(field_elem(k));
            match (k.as_str(), v) {
                ("metadata", Value::Object(meta)) => {
                    for (mk, mv) in meta {
                        if is_unowned_metadata(mk) {
                            continue;
                        }
                        path.push(field_elem(mk));
                        walk(mv, &mut path, Some(mk), true, &mut out);
                        path.pop();
                    }
                }
                _ => walk(v, &mut path, Some(k), builtin, &mut out),
            }
            path.pop();
        }
    }
    out
}

fn walk<'a>(
    v: &'a Value,
    path: &mut Path,
    field: Option<&str>,
    builtin: bool,
    out: &mut FieldValues<'a>,
) {
    match v {
        Value::Object(m) => {
            if m.is_empty() || (builtin && schema::is_atomic_struct(field, m)) {
                out.insert(path.clone(), Some(v));
                return;
            }
            if !builtin || schema::is_free_form_map(field, m) || schema::is_optional_struct(field) {
                out.insert(path.clone(), None);
            }
            for (k, c) in m {
                path.push(field_elem(k));
                walk(c, path, Some(k), builtin, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => {
            match schema::list_kind(builtin, field, items) {
                ListKind::Atomic => {
                    out.insert(path.clone(), Some(v));
                }
                ListKind::Set => {
                    out.insert(path.clone(), None);
                    for item in items {
                        path.push(value_elem(item));
                        out.insert(path.clone(), Some(item));
                        path.pop();
                    }
                }
                ListKind::Keyed(keys) => {
                    let item_keys: Option<Vec<_>> =
                        items.iter().map(|i| schema::item_key(keys, i)).collect();
                    // An item without its key cannot be addressed: own the list as one value.
                    let Some(item_keys) = item_keys else {
                        out.insert(path.clone(), Some(v));
                        return;
                    };
                    out.insert(path.clone(), None);
                    for (item, k) in items.iter().zip(item_keys) {
                        path.push(key_elem(&k));
                        out.insert(path.clone(), None);
                        if let Value::Object(im) = item {
                            for (f, c) in im {
                                path.push(field_elem(f));
                                walk(c, path, Some(f), builtin, out);
                                path.pop();
                            }
                        }
                        path.pop();
                    }
                }
            }
        }
        _ => {
            out.insert(path.clone(), Some(v));
        }
    }
}

/// Every struct of a built-in object as a member in its own right (as the server's typed
/// field sets have them), so that one a write adds is its `"."`: a Deployment's
/// `rollingUpdate`, an Ingress's `defaultBackend`. Structs that the kind's zero value already
/// has (its `spec`, a workload's `template`) are not added by any write.
fn with_nodes(mut f: FieldValues<'_>, builtin: bool) -> FieldValues<'_> {
    if !builtin {
        return f;
    }
    // Only the prefixes not there yet are copied (most are: maps and lists are members
    // already). `metadata` always exists: it is never a member a write adds.
    let missing: Vec<Path> = f
        .keys()
        .flat_map(|p| (1..p.len()).map(move |n| &p[..n]))
        .filter(|p| !(f.contains_key(*p) || (p.len() == 1 && p[0] == "f:metadata")))
        .map(<[String]>::to_vec)
        .collect();
    for p in missing {
        f.entry(p).or_insert(None);
    }
    f
}

/// What a create is compared with: the kind's Go zero value as the server serializes it
/// (non-pointer structs present, required lists `null`), so that only what the writer added
/// beyond it is the writer's own member.
fn zero_object(new: &Value) -> Value {
    use serde_json::json;
    let template =
        || json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}});
    let api_version = new.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = new.get("kind").and_then(Value::as_str).unwrap_or("");
    let spec = match (api_version, kind) {
        ("apps/v1", "Deployment") => {
            json!({"selector": null, "template": template(), "strategy": {}})
        }
        ("apps/v1", "ReplicaSet") => json!({"selector": null, "template": template()}),
        ("apps/v1", "StatefulSet") => json!({"selector": null, "template": template(),
            "serviceName": "", "updateStrategy": {}}),
        ("apps/v1", "DaemonSet") => {
            json!({"selector": null, "template": template(), "updateStrategy": {}})
        }
        ("batch/v1", "Job") => json!({"template": template()}),
        ("batch/v1", "CronJob") => json!({"schedule": "", "jobTemplate": {
            "metadata": {"creationTimestamp": null}, "spec": {"template": template()}}}),
        ("v1", "Pod") => json!({"containers": null}),
        ("v1", "PersistentVolumeClaim") => json!({"resources": {}}),
        _ => json!({}),
    };
    let mut zero = json!({"metadata": {"creationTimestamp": null}, "spec": spec, "status": {}});
    if kind == "Role" || kind == "ClusterRole" {
        zero["rules"] = Value::Null;
    }
    zero
}

/// Keeps the paths a write to `subresource` can own: the status subresource owns only
/// `status`.
pub(crate) fn restrict_to_subresource(set: &mut FieldSet, subresource: Option<&str>) {
    if subresource == Some("status") {
        set.retain(|p| p.first().is_some_and(|e| e == "f:status"));
    }
}

/// Encodes a field set as a FieldsV1 object.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn encode(node: &Node) -> Value {
        let mut m = Map::new();
        if node.member && !node.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &node.children {
            m.insert(k.clone(), encode(c));
        }
        Value::Object(m)
    }
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for e in path {
            node = node.children.entry(e.clone()).or_default();
        }
        node.member = true;
    }
    encode(&root)
}

/// Decodes a FieldsV1 object into a field set.
pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
    fn decode(v: &Value, path: &mut Path, out: &mut FieldSet) -> Result<(), String> {
        let m = v
            .as_object()
            .ok_or_else(|| format!("FieldsV1 node at {path:?} is not an object"))?;
        if m.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, c) in m {
            if k == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                continue;
            }
            if !(k.starts_with("f:")
                || k.starts_with("k:")
                || k.starts_with("v:")
                || k.starts_with("i:"))
            {
                return Err(format!("invalid FieldsV1 path element {k:?}"));
            }
            path.push(k.clone());
            decode(c, path, out)?;
            path.pop();
        }
        Ok(())
    }
    let mut out = BTreeSet::new();
    decode(v, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// Renders a path the way apply conflicts name fields: `.spec.containers[name="a"].image`.
pub fn render_path(path: &[String]) -> String {
    let mut s = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            s.push('[');
            match serde_json::from_str::<Map<String, Value>>(k) {
                Ok(m) => {
                    let parts: Vec<String> = m
                        .iter()
                        .map(|(n, v)| format!("{n}={}", compact(v)))
                        .collect();
                    s.push_str(&parts.join(","));
                }
                Err(_) => s.push_str(k),
            }
            s.push(']');
        } else if let Some(v) = e.strip_prefix("v:") {
            s.push_str("[=");
            s.push_str(v);
            s.push(']');
        } else if let Some(i) = e.strip_prefix("i:") {
            s.push('[');
            s.push_str(i);
            s.push(']');
        }
    }
    s
}

/// Finds the list item a `k:`/`v:`/`i:` element addresses.
fn find_item(items: &[Value], elem: &str) -> Option<usize> {
    if let Some(k) = elem.strip_prefix("k:") {
        let want: Map<String, Value> = serde_json::from_str(k).ok()?;
        items.iter().position(|item| {
            item.as_object().is_some_and(|m| {
                want.iter().all(|(name, v)| match m.get(name) {
                    Some(have) if !have.is_null() => have == v,
                    _ => schema::key_default(name).is_some_and(|d| *v == d),
                })
            })
        })
    } else if let Some(v) = elem.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        items.iter().position(|item| *item == want)
    } else if let Some(i) = elem.strip_prefix("i:") {
        i.parse::<usize>().ok().filter(|i| *i < items.len())
    } else {
        None
    }
}

/// The value at `path`, if present.
pub fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for e in path {
        cur = match cur {
            Value::Object(m) => m.get(e.strip_prefix("f:")?)?,
            Value::Array(items) => &items[find_item(items, e)?],
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the value at `path`; true when something was removed.
pub fn remove_path(v: &mut Value, path: &[String]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    let mut cur = v;
    for e in parent {
        cur = match cur {
            Value::Object(m) => match e.strip_prefix("f:").and_then(|f| m.get_mut(f)) {
                Some(c) => c,
                None => return false,
            },
            Value::Array(items) => match find_item(items, e) {
                Some(i) => &mut items[i],
                None => return false,
            },
            _ => return false,
        };
    }
    match cur {
        Value::Object(m) => last
            .strip_prefix("f:")
            .is_some_and(|f| m.remove(f).is_some()),
        Value::Array(items) => match find_item(items, last) {
            Some(i) => {
                items.remove(i);
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl ManagedEntry {
    /// Whether this entry is the one a write by (manager, operation, subresource, apiVersion)
    /// records into. Appliers keep one entry across apiVersions; updaters one per apiVersion.
    pub fn is_for(
        &self,
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        api_version: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == "Apply" || self.api_version == api_version)
    }

    /// How apply conflicts name this manager: `"m"`, `"m" using v1`,
    /// `"m" with subresource "status" using v1`.
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn to_value(&self) -> Value {
        let mut m = Map::new();
        // `omitempty`, as the server writes it: a write with neither a fieldManager nor a
        // User-Agent has an entry without a manager.
        if !self.manager.is_empty() {
            m.insert("manager".into(), Value::String(self.manager.clone()));
        }
        m.insert("operation".into(), Value::String(self.operation.clone()));
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), to_fields_v1(&self.fields));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), Value::String(s.clone()));
        }
        Value::Object(m)
    }

    fn from_value(v: &Value) -> Result<Self, String> {
        let m = v
            .as_object()
            .ok_or("managedFields entry is not an object")?;
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        let manager = s("manager").unwrap_or_default();
        if let Some(ft) = m.get("fieldsType") {
            if ft.as_str() != Some("FieldsV1") {
                return Err(format!("unsupported fieldsType {ft}"));
            }
        }
        let fields = match m.get("fieldsV1") {
            Some(f) => from_fields_v1(f)?,
            None => BTreeSet::new(),
        };
        Ok(ManagedEntry {
            manager,
            operation: s("operation").unwrap_or_else(|| "Update".into()),
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            fields,
        })
    }
}

/// Reads `metadata.managedFields`. `Ok(None)` when absent or `[]`; an error when unreadable.
pub fn read_managed(obj: &Value) -> Result<Option<Vec<ManagedEntry>>, String> {
    match obj.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) if a.is_empty() => Ok(None),
        Some(Value::Array(a)) => {
            // `[{}]` is the documented way to clear the record.
            if a.len() == 1 && a[0].as_object().is_some_and(Map::is_empty) {
                return Ok(Some(Vec::new()));
            }
            a.iter()
                .map(ManagedEntry::from_value)
                .collect::<Result<_, _>>()
                .map(Some)
        }
        Some(_) => Err("metadata.managedFields is not a list".into()),
    }
}

/// Writes entries (dropping empty ones, in the server's order) into `metadata.managedFields`;
/// removes the key when nothing is left.
pub fn write_managed(obj: &mut Value, mut entries: Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let Some(obj) = obj.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(ManagedEntry::to_value).collect()),
        );
    }
}

/// The stored record to start a write from: the request's own managedFields when it sends a
/// non-empty list, else the old object's; unreadable records start empty.
pub(crate) fn base_entries(old: Option<&Value>, new: &Value) -> Vec<ManagedEntry> {
    let from_new = read_managed(new);
    match from_new {
        Ok(Some(entries)) => entries,
        Err(e) => {
            tracing::debug!(error = %e, "ignoring unreadable managedFields in request");
            Vec::new()
        }
        Ok(None) => old
            .map(read_managed)
            .and_then(|r| r.ok().flatten())
            .unwrap_or_default(),
    }
}

/// Updates `new`'s managedFields for a non-apply write (create, update, patch) by `manager`:
/// the writer takes the fields it added or changed relative to `old` (from every other
/// manager), and removed fields leave every entry. See the module docs.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let mut entries = base_entries(old, new);
    let api_version = new
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let builtin = is_builtin_api_version(&api_version);

    // A custom resource's zero value is an empty object: what a create writes is all new.
    // (A kind without a `spec`, a ConfigMap, has nothing in its zero value a write could add.)
    let zero = (old.is_none() && builtin && new.get("spec").is_some()).then(|| zero_object(new));
    let (mut changed, removed) = {
        let new_fields = with_nodes(object_fields(new, builtin), builtin);
        let old_fields = old
            .or(zero.as_ref())
            .map(|o| with_nodes(object_fields(o, builtin), builtin))
            .unwrap_or_default();
        let changed: FieldSet = new_fields
            .iter()
            .filter(|(p, v)| match v {
                // A map or list is the writer's (its `"."`) when it did not exist before,
                // not even as `null` or `{}`.
                None => !old_fields.contains_key(*p),
                // `null` is not a value a writer owns (the server's typed objects drop it).
                Some(Value::Null) => false,
                Some(_) => old_fields.get(*p) != Some(v),
            })
            .map(|(p, _)| p.clone())
            .collect();
        let removed: FieldSet = old_fields
            .keys()
            .filter(|p| !new_fields.contains_key(*p))
            .cloned()
            .collect();
        (changed, removed)
    };
    restrict_to_subresource(&mut changed, subresource);

    for e in &mut entries {
        e.fields.retain(|p| !removed.contains(p));
        if !e.is_for(manager, operation, subresource, &api_version) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.is_for(manager, operation, subresource, &api_version))
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = Some(now.to_owned());
                e.api_version = api_version;
            }
            None => entries.push(ManagedEntry {
                manager: manager.to_owned(),
                operation: operation.to_owned(),
                api_version,
                time: Some(now.to_owned()),
                subresource: subresource.map(str::to_owned),
                fields: changed,
            }),
        }
    }
    write_managed(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WATCH_SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/apiserver-samples/watch-stream.jsonl"
    );

    /// The ADDED and the first MODIFIED event of one object in the real watch sample.
    fn sample_pair() -> (Value, Value) {
        let text = std::fs::read_to_string(WATCH_SAMPLE).expect("sample file");
        let events: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("sample line"))
            .collect();
        let name = |e: &Value| e.pointer("/object/metadata/name").cloned();
        let modified = events
            .iter()
            .find(|e| e["type"] == "MODIFIED")
            .expect("a MODIFIED event");
        let added = events
            .iter()
            .find(|e| e["type"] == "ADDED" && name(e) == name(modified))
            .expect("its ADDED event");
        (added["object"].clone(), modified["object"].clone())
    }

    fn without_managed(obj: &Value) -> Value {
        let mut o = obj.clone();
        o["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("managedFields");
        o
    }

    #[test]
    fn create_records_the_same_managed_fields_as_the_real_server() {
        let (added, _) = sample_pair();
        let mut created = without_managed(&added);
        let time = added["metadata"]["managedFields"][0]["time"]
            .as_str()
            .expect("time")
            .to_owned();
        record_update(None, &mut created, "curl", "Update", None, &time);
        assert_eq!(
            created["metadata"]["managedFields"],
            added["metadata"]["managedFields"]
        );
    }

    #[test]
    fn update_by_the_same_manager_moves_the_time_like_the_real_server() {
        let (added, modified) = sample_pair();
        // The request carries the stored managedFields back unchanged, as curl's PUT did.
        let mut new = without_managed(&modified);
        new["metadata"]["managedFields"] = added["metadata"]["managedFields"].clone();
        let time = modified["metadata"]["managedFields"][0]["time"]
            .as_str()
            .expect("time")
            .to_owned();
        record_update(Some(&added), &mut new, "curl", "Update", None, &time);
        assert_eq!(
            new["metadata"]["managedFields"],
            modified["metadata"]["managedFields"]
        );
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "n", "resourceVersion": "5"},
               "data": data})
    }

    fn entries(obj: &Value) -> Vec<ManagedEntry> {
        read_managed(obj).expect("readable").unwrap_or_default()
    }

    fn owned(obj: &Value, manager: &str) -> Vec<String> {
        entries(obj)
            .into_iter()
            .filter(|e| e.manager == manager)
            .flat_map(|e| e.fields.into_iter().map(|p| render_path(&p)))
            .collect()
    }

    #[test]
    fn another_writer_takes_the_fields_it_changes_and_removed_fields_leave() {
        let mut v1 = cm(json!({"a": "1", "b": "2"}));
        record_update(None, &mut v1, "alice", "Update", None, "t1");
        let mut v2 = cm(json!({"a": "changed", "b": "2"}));
        record_update(Some(&v1), &mut v2, "bob", "Update", None, "t2");
        assert_eq!(owned(&v2, "alice"), vec![".data", ".data.b"]);
        assert_eq!(owned(&v2, "bob"), vec![".data.a"]);

        // Removing b and changing a again: alice's last field goes, so her entry goes.
        let mut v3 = cm(json!({"a": "again"}));
        record_update(Some(&v2), &mut v3, "bob", "Update", None, "t3");
        assert_eq!(owned(&v3, "alice"), vec![".data"]);
        let mut v4 = without_managed(&v3);
        v4["data"] = json!(null);
        v4.as_object_mut().expect("object").remove("data");
        v4["metadata"]["managedFields"] = v3["metadata"]["managedFields"].clone();
        record_update(Some(&v3), &mut v4, "bob", "Update", None, "t4");
        assert!(v4["metadata"].get("managedFields").is_none(), "{v4}");
    }

    #[test]
    fn a_write_that_changes_nothing_keeps_the_entry_time() {
        let mut v1 = cm(json!({"a": "1"}));
        record_update(None, &mut v1, "alice", "Update", None, "t1");
        let mut v2 = v1.clone();
        record_update(Some(&v1), &mut v2, "alice", "Update", None, "t2");
        assert_eq!(entries(&v2)[0].time.as_deref(), Some("t1"));
        // Another manager that changes nothing gets no entry.
        let mut v3 = v1.clone();
        record_update(Some(&v1), &mut v3, "bob", "Update", None, "t3");
        assert_eq!(entries(&v3).len(), 1);
    }

    #[test]
    fn request_managed_fields_replace_keep_or_clear_the_record() {
        let mut v1 = cm(json!({"a": "1"}));
        record_update(None, &mut v1, "alice", "Update", None, "t1");
        // `[]` keeps the stored record.
        let mut keep = v1.clone();
        keep["metadata"]["managedFields"] = json!([]);
        record_update(Some(&v1), &mut keep, "bob", "Update", None, "t2");
        assert_eq!(owned(&keep, "alice"), vec![".data", ".data.a"]);
        // `[{}]` clears it.
        let mut clear = v1.clone();
        clear["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&v1), &mut clear, "bob", "Update", None, "t2");
        assert!(clear["metadata"].get("managedFields").is_none());
        // An unreadable record is reset, not an error.
        let mut broken = cm(json!({"a": "2"}));
        broken["metadata"]["managedFields"] = json!([{"manager": "x", "fieldsV1": {"bogus": {}}}]);
        record_update(Some(&v1), &mut broken, "bob", "Update", None, "t2");
        assert_eq!(owned(&broken, "bob"), vec![".data.a"]);
        assert_eq!(entries(&broken).len(), 1);
    }

    /// A required list (`containers`) exists in the kind's zero value, so a create does not
    /// own it as a member (no `"."`), while its items and an optional list (`ports`) are, as
    /// the recorded Deployment create of `apiserver-samples/strategies/` shows.
    #[test]
    fn deployment_field_set_uses_list_keys_and_struct_rules() {
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x"}, "finalizers": ["example.com/f"]},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {
                        "containers": [{"name": "web", "image": "nginx",
                                        "ports": [{"containerPort": 80}],
                                        "args": ["-v"]}],
                        "tolerations": [{"key": "k", "operator": "Exists"}]
                    }
                }
            }
        });
        record_update(None, &mut d, "kubectl", "Update", None, "t");
        let expected = json!({
            "f:metadata": {
                "f:finalizers": {".": {}, "v:\"example.com/f\"": {}},
                "f:labels": {".": {}, "f:app": {}}
            },
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:containers": {
                            "k:{\"name\":\"web\"}": {
                                ".": {},
                                "f:args": {},
                                "f:image": {},
                                "f:name": {},
                                "f:ports": {
                                    ".": {},
                                    "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                        ".": {},
                                        "f:containerPort": {}
                                    }
                                }
                            }
                        },
                        "f:tolerations": {}
                    }
                }
            }
        });
        assert_eq!(d["metadata"]["managedFields"][0]["fieldsV1"], expected);
        assert_eq!(d["metadata"]["managedFields"][0]["apiVersion"], "apps/v1");
        assert_eq!(d["metadata"]["managedFields"][0]["fieldsType"], "FieldsV1");
    }

    #[test]
    fn event_references_are_atomic_and_an_added_series_is_a_member() {
        // As the recorded events.k8s.io/v1 create and series patch show.
        let mut e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"}, "reason": "R",
            "regarding": {"kind": "ConfigMap", "name": "c", "namespace": "ns"}});
        record_update(None, &mut e, "curl", "Update", None, "t");
        assert_eq!(
            e["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:reason": {}, "f:regarding": {}})
        );
        let old = e.clone();
        e["series"] = json!({"count": 2, "lastObservedTime": "t"});
        record_update(Some(&old), &mut e, "curl", "Update", None, "t2");
        assert_eq!(
            e["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:reason": {}, "f:regarding": {},
                "f:series": {".": {}, "f:count": {}, "f:lastObservedTime": {}}})
        );
    }

    #[test]
    fn custom_resource_objects_are_maps_and_lists_atomic() {
        let mut o = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                           "metadata": {"name": "w", "labels": {"a": "b"}},
                           "spec": {"size": 1, "items": [{"name": "x"}]}});
        record_update(None, &mut o, "m", "Update", None, "t");
        assert_eq!(
            o["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                   "f:spec": {".": {}, "f:items": {}, "f:size": {}}})
        );
    }

    #[test]
    fn status_subresource_writes_own_only_status() {
        let old = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
                         "spec": {"a": 1}});
        let mut new = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
                             "spec": {"a": 2}, "status": {"ready": true}});
        record_update(Some(&old), &mut new, "ctl", "Update", Some("status"), "t");
        let e = entries(&new);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].subresource.as_deref(), Some("status"));
        assert_eq!(
            owned(&new, "ctl"),
            vec![".status", ".status.ready"],
            "spec changes are not the status writer's"
        );
        assert_eq!(new["metadata"]["managedFields"][0]["subresource"], "status");
    }

    #[test]
    fn fields_v1_round_trips_and_rejects_unknown_elements() {
        let v = json!({"f:data": {".": {}, "f:k": {}},
                       "f:spec": {"f:c": {"k:{\"name\":\"a\"}": {".": {}, "f:x": {}}},
                                  "f:l": {"v:\"q\"": {}}}});
        let set = from_fields_v1(&v).expect("valid");
        assert_eq!(set.len(), 5);
        assert_eq!(to_fields_v1(&set), v);
        assert!(from_fields_v1(&json!({"x:bad": {}})).is_err());
        assert!(from_fields_v1(&json!({"f:a": 3})).is_err());
    }

    #[test]
    fn paths_render_and_navigate_like_apply_conflicts_name_them() {
        let p: Path = vec![
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"web\"}".into(),
            "f:image".into(),
        ];
        assert_eq!(render_path(&p), ".spec.containers[name=\"web\"].image");
        assert_eq!(
            render_path(&["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]),
            ".metadata.finalizers[=\"x\"]"
        );
        let mut obj = json!({"spec": {"containers": [{"name": "web", "image": "i"},
                                                      {"name": "side", "image": "j",
                                                       "ports": [{"containerPort": 8}]}]}});
        assert_eq!(get_path(&obj, &p), Some(&json!("i")));
        let port: Path = vec![
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"side\"}".into(),
            "f:ports".into(),
            "k:{\"containerPort\":8,\"protocol\":\"TCP\"}".into(),
        ];
        assert_eq!(get_path(&obj, &port), Some(&json!({"containerPort": 8})));
        assert!(remove_path(&mut obj, &p[..3]));
        assert_eq!(obj["spec"]["containers"].as_array().map(Vec::len), Some(1));
        assert!(!remove_path(&mut obj, &p[..3]));
    }

    #[test]
    fn entries_sort_apply_first_then_by_time() {
        let mut obj = cm(json!({"a": "1", "b": "2", "c": "3"}));
        let entry = |m: &str, op: &str, t: &str, f: &str| ManagedEntry {
            manager: m.into(),
            operation: op.into(),
            api_version: "v1".into(),
            time: Some(t.into()),
            subresource: None,
            fields: [vec!["f:data".to_owned(), format!("f:{f}")]]
                .into_iter()
                .collect(),
        };
        write_managed(
            &mut obj,
            vec![
                entry("z", "Update", "2020-01-01T00:00:02Z", "a"),
                entry("y", "Update", "2020-01-01T00:00:01Z", "b"),
                entry("x", "Apply", "2020-01-01T00:00:09Z", "c"),
            ],
        );
        let managers: Vec<String> = entries(&obj).into_iter().map(|e| e.manager).collect();
        assert_eq!(managers, vec!["x", "y", "z"]);
    }

    #[test]
    fn manager_defaults_to_the_user_agent_prefix() {
        assert_eq!(
            manager_or_user_agent(Some("mine"), Some("kubectl/v1")),
            "mine"
        );
        assert_eq!(
            manager_or_user_agent(
                None,
                Some("kubectl/v1.26.1 (linux/amd64) kubernetes/8f94681")
            ),
            "kubectl"
        );
        assert_eq!(manager_or_user_agent(Some(""), Some("curl/8.5.0")), "curl");
        assert_eq!(manager_or_user_agent(None, None), "");
    }

    #[test]
    fn builtin_api_versions() {
        assert!(is_builtin_api_version("v1"));
        assert!(is_builtin_api_version("apps/v1"));
        assert!(is_builtin_api_version("rbac.authorization.k8s.io/v1"));
        assert!(!is_builtin_api_version("example.com/v1"));
    }
}
