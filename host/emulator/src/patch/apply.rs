//! Server-side apply (`application/apply-patch+yaml`).
//!
//! The applied configuration (YAML or JSON) is merged onto the current object — maps by key,
//! keyed lists of built-in kinds item by item, `finalizers` as a set, every other list and
//! every custom-resource list replaced — and the applier's `managedFields` entry (operation
//! Apply) becomes exactly the field set of what it applied (see `fields` for what a field set
//! holds; an applier owns leaves and list items, not the maps and lists around them, so
//! dropping the last label leaves `labels: {}`). Then, as in the real server:
//! - a leaf the configuration sets to a value different from the object's, and which another
//!   entry owns (another manager, or the same manager's Update entry), is a conflict: 409
//!   unless `force`, which moves the field to the applier;
//! - an existing object without managedFields gets a `before-first-apply` Update entry
//!   owning all its fields first, so its first apply conflicts where it changes them;
//! - setting a field to the value it already has shares its ownership, without conflict;
//! - fields the applier owned before but omits now are removed from the object unless another
//!   entry owns them (or something under them);
//! - `metadata.managedFields` in the configuration is refused (400), and a
//!   `metadata.resourceVersion` in it is a precondition (409 when stale).
//!
//! Gaps: ownership follows the schema table, so a custom resource's lists are owned as whole
//! values and its objects as maps; a conflict is only reported for a leaf (replacing a
//! granular list or map wholesale through an atomic value does not conflict with owners of its
//! children); the name and kind of the configuration are not checked against the URL here (the
//! caller does); defaulting does not run between merge and ownership.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::schema::{self, ListKind};
use super::{Conflict, PatchError};
use crate::fields::{self, ManagedEntry};

/// The manager that owns the fields of an object without managedFields at its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Applies `body` for `field_manager` to the main resource. `current` is `None` when the object
/// does not exist yet (apply creates it). `now` is the RFC 3339 time recorded in the entry.
pub fn server_side_apply(
    current: Option<&Value>,
    body: &[u8],
    field_manager: &str,
    force: bool,
    builtin: Option<(&str, &str)>,
    now: &str,
) -> Result<Value, PatchError> {
    server_side_apply_with(&ApplyRequest {
        current,
        body,
        field_manager,
        force,
        builtin,
        now,
        subresource: None,
        ignore_status: false,
    })
}

/// [`server_side_apply`] to a subresource: for `Some("status")` only the configuration's
/// `status` is merged and owned.
pub fn server_side_apply_subresource(
    current: Option<&Value>,
    body: &[u8],
    field_manager: &str,
    force: bool,
    builtin: Option<(&str, &str)>,
    now: &str,
    subresource: Option<&str>,
) -> Result<Value, PatchError> {
    server_side_apply_with(&ApplyRequest {
        current,
        body,
        field_manager,
        force,
        builtin,
        now,
        subresource,
        ignore_status: false,
    })
}

/// Everything one apply needs.
#[derive(Debug, Clone, Copy)]
pub struct ApplyRequest<'a> {
    /// The stored object, `None` when apply creates it.
    pub current: Option<&'a Value>,
    /// The applied configuration, YAML or JSON.
    pub body: &'a [u8],
    /// The `fieldManager` query parameter.
    pub field_manager: &'a str,
    /// The `force` query parameter.
    pub force: bool,
    /// `Some((group, kind))` for built-in kinds, `None` for custom resources.
    pub builtin: Option<(&'a str, &'a str)>,
    /// RFC 3339 time for the entry.
    pub now: &'a str,
    /// `Some("status")` for the status subresource.
    pub subresource: Option<&'a str>,
    /// The kind has a status subresource, so an apply to the main resource neither changes
    /// nor owns `status` (the server resets it, spec 6.12).
    pub ignore_status: bool,
}

/// Server-side apply with every option; see the module docs.
pub fn server_side_apply_with(req: &ApplyRequest<'_>) -> Result<Value, PatchError> {
    let &ApplyRequest {
        current,
        field_manager,
        force,
        builtin,
        now,
        subresource,
        ..
    } = req;
    let _span = tracing::debug_span!("server_side_apply", field_manager, force).entered();
    super::validate_patch_options(super::PatchType::Apply, Some(field_manager), force)?;
    let (applied, api_version) = configuration(req)?;
    let is_builtin = builtin.is_some();
    let empty = Value::Object(Map::new());
    let base = current.unwrap_or(&empty);
    let mut entries = managed_entries(current, base, now, is_builtin);
    let is_self = |e: &ManagedEntry| e.is_for(field_manager, "Apply", subresource, &api_version);
    let previous: fields::FieldSet = entries
        .iter()
        .find(|e| is_self(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();

    let applied_fields = fields::object_fields(&applied, is_builtin);
    // An applier owns what it wrote: leaves and list items. Unlike an updater it does not own
    // the maps and lists holding them (`f:data: {f:k: {}}`, no `"."`), except the
    // undeclared objects of a custom resource, which are map entries in their own right.
    let mut applied_set: fields::FieldSet = applied_fields
        .iter()
        .filter(|(path, value)| {
            value.is_some()
                || path.last().is_some_and(|e| e.starts_with("k:"))
                || (!is_builtin && path.first().is_some_and(|e| e != "f:metadata"))
        })
        .map(|(path, _)| path.clone())
        .collect();
    fields::restrict_to_subresource(&mut applied_set, subresource);

    let conflicts = conflicts(&applied_fields, base, &entries, &is_self, is_builtin);
    if !conflicts.is_empty() {
        if !force {
            return Err(PatchError::Conflicts(
                conflicts
                    .iter()
                    .map(|(i, p)| Conflict {
                        manager: entries[*i].describe(),
                        field: fields::render_path(p),
                    })
                    .collect(),
            ));
        }
        for (i, p) in &conflicts {
            entries[*i].fields.remove(p);
        }
    }

    let mut merged = base.clone();
    merge_top(&mut merged, &applied, is_builtin);
    drop_unapplied(&mut merged, &previous, &applied_set, &entries, &is_self);

    // Ownership only of what exists now.
    let present: BTreeSet<fields::Path> = fields::object_fields(&merged, is_builtin)
        .into_keys()
        .collect();
    // An apply that changes nothing keeps its entry's time, so re-applying the same
    // configuration leaves the object byte-identical (and its resourceVersion unchanged).
    let previous_time = entries
        .iter()
        .find(|e| is_self(e))
        .and_then(|e| e.time.clone());
    let time = match (current, previous_time) {
        (Some(cur), Some(t)) if same_content(cur, &merged) => t,
        _ => now.to_owned(),
    };
    entries.retain(|e| !is_self(e));
    for e in &mut entries {
        e.fields.retain(|p| present.contains(p));
    }
    entries.push(ManagedEntry {
        manager: field_manager.to_owned(),
        operation: "Apply".into(),
        api_version,
        time: Some(time),
        subresource: subresource.map(str::to_owned),
        fields: applied_set.intersection(&present).cloned().collect(),
    });
    fields::write_managed(&mut merged, entries);
    Ok(merged)
}

/// The configuration as this apply may use it, and its apiVersion: parsed and checked, its
/// resourceVersion (if any) the current one, server-set metadata dropped, and only status on
/// the status subresource, everything but status on the main resource of a kind with a
/// status subresource.
fn configuration(req: &ApplyRequest<'_>) -> Result<(Value, String), PatchError> {
    let mut applied = parse_configuration(req.body)?;
    check_list_keys(&applied, req.builtin.is_some())?;
    if let (Some(cur), Some(rv)) = (
        req.current,
        applied
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str),
    ) {
        if cur
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            != Some(rv)
        {
            return Err(PatchError::StaleResourceVersion);
        }
    }
    // Server-set metadata in a configuration (`creationTimestamp: null` from a generated
    // manifest, a copied uid) is not the applier's to change.
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| !fields::SERVER_SET_METADATA.contains(&k.as_str()));
    }
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let applied = match req.subresource {
        Some("status") => {
            let mut m = Map::new();
            if let Some(s) = applied.get("status") {
                m.insert("status".into(), s.clone());
            }
            Value::Object(m)
        }
        _ if req.ignore_status => {
            if let Some(m) = applied.as_object_mut() {
                m.remove("status");
            }
            applied
        }
        _ => applied,
    };
    Ok((applied, api_version))
}

/// The object's managedFields entries. An existing object nobody is recorded for (seeded, or
/// written before tracking): like the real server, its fields belong to
/// `before-first-apply`, so the first apply cannot silently overwrite them.
fn managed_entries(
    current: Option<&Value>,
    base: &Value,
    now: &str,
    is_builtin: bool,
) -> Vec<ManagedEntry> {
    match fields::read_managed(base) {
        Ok(Some(e)) => e,
        Ok(None) => match current {
            Some(cur) => vec![ManagedEntry {
                manager: BEFORE_FIRST_APPLY.into(),
                operation: "Update".into(),
                api_version: cur
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                time: Some(now.to_owned()),
                subresource: None,
                fields: fields::object_fields(cur, is_builtin).into_keys().collect(),
            }],
            None => Vec::new(),
        },
        Err(e) => {
            tracing::debug!(error = %e, "resetting unreadable managedFields");
            Vec::new()
        }
    }
}

/// The leaves the configuration changes that another manager owns: (its entry, the path).
fn conflicts(
    applied_fields: &fields::FieldValues<'_>,
    base: &Value,
    entries: &[ManagedEntry],
    is_self: &impl Fn(&ManagedEntry) -> bool,
    is_builtin: bool,
) -> Vec<(usize, fields::Path)> {
    let current_fields = fields::object_fields(base, is_builtin);
    let mut out = Vec::new();
    for (path, value) in applied_fields {
        let Some(value) = value else { continue };
        if current_fields.get(path) == Some(&Some(*value)) {
            continue;
        }
        for (i, e) in entries.iter().enumerate() {
            if !is_self(e) && e.fields.contains(path) {
                out.push((i, path.clone()));
            }
        }
    }
    out
}

/// Removes the fields this manager applied before and no longer does, unless someone else
/// still owns them (or something under them). Ancestors come first in path order, so a
/// removed list item or map takes its children with it; the key fields of a surviving list
/// item stay, or the item could no longer be addressed.
fn drop_unapplied(
    merged: &mut Value,
    previous: &fields::FieldSet,
    applied_set: &fields::FieldSet,
    entries: &[ManagedEntry],
    is_self: &impl Fn(&ManagedEntry) -> bool,
) {
    let mut removed: Vec<&fields::Path> = Vec::new();
    for path in previous.difference(applied_set) {
        if removed.iter().any(|r| path.starts_with(r)) || is_item_key_field(path) {
            continue;
        }
        let owned_elsewhere = entries.iter().any(|e| {
            !is_self(e)
                && e.fields
                    .range(path.clone()..)
                    .next()
                    .is_some_and(|p| p.starts_with(path))
        });
        if !owned_elsewhere && fields::remove_path(merged, path) {
            removed.push(path);
        }
    }
}

/// Whether two versions of an object differ only in their managedFields, if at all.
fn same_content(a: &Value, b: &Value) -> bool {
    let (Value::Object(am), Value::Object(bm)) = (a, b) else {
        return a == b;
    };
    am.len() == bm.len()
        && am.iter().all(|(k, av)| {
            let Some(bv) = bm.get(k) else { return false };
            match (k.as_str(), av, bv) {
                ("metadata", Value::Object(ma), Value::Object(mb)) => {
                    let strip = |m: &Map<String, Value>| {
                        m.iter()
                            .filter(|(k, _)| *k != "managedFields")
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect::<Map<String, Value>>()
                    };
                    strip(ma) == strip(mb)
                }
                _ => av == bv,
            }
        })
}

/// Whether `path` ends in one of the key fields of the list item it sits in.
fn is_item_key_field(path: &[String]) -> bool {
    let [.., item, field] = path else {
        return false;
    };
    let (Some(key), Some(name)) = (item.strip_prefix("k:"), field.strip_prefix("f:")) else {
        return false;
    };
    serde_json::from_str::<Map<String, Value>>(key).is_ok_and(|k| k.contains_key(name))
}

/// Parses an applied configuration: YAML (JSON is YAML) holding one object with apiVersion and
/// kind and without managedFields.
fn parse_configuration(body: &[u8]) -> Result<Value, PatchError> {
    // kubectl sends JSON; parse that directly (faster, and free of YAML's limits such as
    // 1024-character implicit keys), and read everything else as YAML.
    let as_json = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .filter(|b| **b == b'{')
        .and_then(|_| serde_json::from_slice::<Value>(body).ok());
    let v: Value = match as_json {
        Some(v) => v,
        None => yaml_serde::from_slice(body).map_err(|e| {
            PatchError::BadRequest(format!(
                "error decoding YAML of the applied configuration: {e}"
            ))
        })?,
    };
    let Value::Object(m) = &v else {
        return Err(PatchError::BadRequest(
            "the applied configuration must be an object".into(),
        ));
    };
    for (field, label) in [("kind", "Kind"), ("apiVersion", "apiVersion")] {
        if m.get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(PatchError::BadRequest(format!(
                "Object '{label}' is missing in the applied configuration"
            )));
        }
    }
    match m.get("metadata") {
        None => {}
        Some(Value::Object(meta)) if meta.get("managedFields").is_some_and(|f| !f.is_null()) => {
            return Err(PatchError::BadRequest(
                "metadata.managedFields must be nil".into(),
            ));
        }
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(PatchError::BadRequest(
                "metadata of the applied configuration must be an object".into(),
            ))
        }
    }
    Ok(v)
}

/// Refuses a configuration whose keyed-list items lack a key (or repeat one): ownership of such
/// an item cannot be recorded. The real server reports this as a 500 naming the object.
fn check_list_keys(applied: &Value, builtin: bool) -> Result<(), PatchError> {
    fn walk(
        v: &Value,
        path: &mut String,
        field: Option<&str>,
        builtin: bool,
        errs: &mut Vec<String>,
    ) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    let len = path.len();
                    path.push('.');
                    path.push_str(k);
                    let builtin = builtin || (len == 0 && k == "metadata");
                    walk(c, path, Some(k), builtin, errs);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                let ListKind::Keyed(keys) = schema::list_kind(builtin, field, items) else {
                    return;
                };
                let mut seen = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let Some(id) = schema::item_key(keys, item) else {
                        let missing = keys
                            .iter()
                            .find(|k| {
                                k.default.is_none() && item.get(k.name).is_none_or(Value::is_null)
                            })
                            .map_or("", |k| k.name);
                        errs.push(format!(
                            "{path}: element {i}: associative list with keys has an element that omits key field {missing:?} (and doesn't have default value)"
                        ));
                        continue;
                    };
                    let rendered: Vec<String> =
                        id.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let rendered = format!("[{}]", rendered.join(","));
                    if seen.contains(&id) {
                        errs.push(format!("{path}: duplicate entries for key {rendered}"));
                        continue;
                    }
                    seen.push(id);
                    let len = path.len();
                    path.push_str(&rendered);
                    if let Value::Object(m) = item {
                        for (k, c) in m {
                            let inner = path.len();
                            path.push('.');
                            path.push_str(k);
                            walk(c, path, Some(k), builtin, errs);
                            path.truncate(inner);
                        }
                    }
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
    let mut errs = Vec::new();
    walk(applied, &mut String::new(), None, builtin, &mut errs);
    if errs.is_empty() {
        return Ok(());
    }
    let s = |p: &str| applied.pointer(p).and_then(Value::as_str).unwrap_or("");
    let api_version = s("/apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Err(PatchError::Internal(format!(
        "failed to create typed patch object ({}/{}; {group}/{version}, Kind={}): {}",
        s("/metadata/namespace"),
        s("/metadata/name"),
        s("/kind"),
        errs.join("\n")
    )))
}

fn merge_top(base: &mut Value, applied: &Value, builtin: bool) {
    let (Value::Object(bm), Value::Object(am)) = (&mut *base, applied) else {
        *base = applied.clone();
        return;
    };
    for (k, v) in am {
        let builtin = builtin || k == "metadata";
        merge_field(bm, k, v, builtin);
    }
}

fn merge_field(base: &mut Map<String, Value>, key: &str, v: &Value, builtin: bool) {
    if v.is_null() {
        base.remove(key);
        return;
    }
    match base.get_mut(key) {
        Some(existing) => merge_value(existing, v, Some(key), builtin),
        None => {
            base.insert(key.to_owned(), copy_applied(v));
        }
    }
}

fn merge_value(base: &mut Value, applied: &Value, field: Option<&str>, builtin: bool) {
    match (&mut *base, applied) {
        (Value::Object(bm), Value::Object(am)) => {
            if builtin && schema::is_atomic_struct(field, am) {
                *base = copy_applied(applied);
                return;
            }
            for (k, v) in am {
                merge_field(bm, k, v, builtin);
            }
        }
        (Value::Array(bl), Value::Array(al)) => {
            match schema::list_kind(builtin, field, bl.iter().chain(al)) {
                ListKind::Atomic => *base = copy_applied(applied),
                ListKind::Set => {
                    for v in al.iter().map(copy_applied) {
                        if !bl.contains(&v) {
                            bl.push(v);
                        }
                    }
                }
                ListKind::Keyed(keys) => {
                    if al.iter().any(|i| schema::item_key(keys, i).is_none()) {
                        *base = copy_applied(applied);
                        return;
                    }
                    for item in al {
                        let Some(id) = schema::item_key(keys, item) else {
                            continue;
                        };
                        match bl.iter_mut().find(|b| schema::item_matches(keys, b, &id)) {
                            Some(b) => merge_value(b, item, field, builtin),
                            None => bl.push(copy_applied(item)),
                        }
                    }
                }
            }
        }
        _ => *base = copy_applied(applied),
    }
}

/// A part of the configuration as it is stored: without its `null` members. A `null` in a
/// configuration removes the field (see `merge_field`), so it is never stored either, whether
/// the field existed or its parent comes new. Found by the fuzz target `apply`: a new map's
/// `k: null` was stored on create and removed by the next identical apply.
fn copy_applied(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), copy_applied(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(copy_applied).collect()),
        other => other.clone(),
    }
}
