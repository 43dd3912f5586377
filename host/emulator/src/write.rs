//! Writes: create, update (PUT), patch, delete (with preconditions, finalizers and
//! propagation), deletecollection, the status subresource, and owner-reference garbage
//! collection.
//!
//! Why every decision runs inside [`Store::mutate`](super::store::Store::mutate): the stale-RV check, the AlreadyExists check
//! and the commit must be one atomic step, or two concurrent writers could both win. Nothing
//! inside those closures touches the store again (that would deadlock), so checks that read other
//! objects (the namespace exists) happen before.
//!
//! Simplifications, all documented behaviour of this emulator rather than of kube-apiserver:
//! graceful deletion (`gracePeriodSeconds`) is immediate because no kubelet runs here; garbage
//! collection runs synchronously at the end of the DELETE that removed the owner (background:
//! owner first, then dependents; foreground: dependents first); deleting a namespace removes its
//! contents at once instead of going through `Terminating`, unless finalizers hold some of
//! them: then the namespace is `Terminating` (refusing new objects with 403) until the last is
//! gone, as with the namespace controller. The propagation policy of a delete
//! held by finalizers is not remembered (no `orphan` finalizer): when the last finalizer goes,
//! dependents are collected in the background.

use std::sync::Arc;

use http::{Response, StatusCode};
use serde_json::{json, Map, Value};

use super::list::{list_body, Selectors};
use super::registry::{Registry, ResourceDef};
use super::request::{Query, ResourceRequest};
use super::response::{self, Body, FieldError};
use super::store::{key_of, Mutation, Outcome, StoreError};
use super::strategy::{self, Generation};
use super::util::{name_suffix, new_uid, validate_dns_subdomain, validate_path_segment_name};
use super::{events, fields, object_meta, patch, Shared};
use kwh_client::object::Object;
use kwh_client::Status;

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Self {
        response::internal(&e.to_string())
    }
}

mod body;
mod delete_options;
mod namespace;

pub(crate) use body::spec_changed;
use body::{
    check_type, kind_defaults, meta_mut, meta_str, object_body, parse_body, unchanged, CRDS,
    NAMESPACES,
};
use delete_options::delete_options;
pub(crate) use delete_options::dry_run;
pub use delete_options::{default_propagation, DeleteOptions, Propagation};
use namespace::{finish_namespace, terminate_namespace};

/// Per-request options of create, update and patch.
#[derive(Debug, Clone, Copy)]
pub struct WriteOpts<'a> {
    /// The field manager (`fieldManager`, else the user agent's program name).
    pub manager: &'a str,
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// The write is a server-side apply (managedFields record an `Apply` operation).
    pub apply: bool,
}

impl<'a> WriteOpts<'a> {
    /// A real write by `manager`.
    pub fn by(manager: &'a str) -> Self {
        WriteOpts {
            manager,
            dry_run: false,
            apply: false,
        }
    }
}

/// The definition serving `apiVersion`/`kind` (404 when nothing serves it).
pub fn def_for(shared: &Shared, api_version: &str, kind: &str) -> Result<Arc<ResourceDef>, Status> {
    shared.registry.find_kind(api_version, kind).ok_or_else(|| {
        let mut s = Status::failure(
            404,
            "NotFound",
            format!("no matches for kind \"{kind}\" in version \"{api_version}\""),
        );
        s.details = Some(Default::default());
        s
    })
}

fn def_by_store_key(registry: &Registry, key: &str) -> Option<Arc<ResourceDef>> {
    registry.all().into_iter().find(|d| &*d.store_key == key)
}

fn ns_of<'a>(def: &ResourceDef, ns: Option<&'a str>) -> Option<&'a str> {
    if def.namespaced {
        ns
    } else {
        None
    }
}

/// GET one object, as `def` serves it.
pub fn get(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
) -> Result<Object, Status> {
    shared
        .store
        .get(&def.store_key, &key_of(ns_of(def, ns), name))
        .map(|o| events::serve(def, o))
        .ok_or_else(|| response::not_found(&def.plural, name))
}

/// Everything a create needs that is decided outside the store lock: name, namespace,
/// server-set metadata. Returns the object key.
fn prepare_create(
    shared: &Shared,
    def: &ResourceDef,
    url_ns: Option<&str>,
    v: &mut Value,
    manager: &str,
    apply: bool,
    now: &str,
) -> Result<String, Status> {
    check_type(def, v)?;
    let name = meta_str(v, "name").unwrap_or("").to_owned();
    let generate = meta_str(v, "generateName").unwrap_or("").to_owned();
    let name = if name.is_empty() && !generate.is_empty() {
        let n = format!("{generate}{}", name_suffix());
        meta_mut(v).insert("name".into(), n.clone().into());
        n
    } else {
        name
    };
    if name.is_empty() {
        return Err(response::invalid(
            &def.kind,
            &def.group,
            "",
            &[FieldError::required(
                "metadata.name",
                "name or generateName is required",
            )],
        ));
    }
    // RBAC objects may be named like `system:discovery`, and core Events anything usable in a
    // path (their strategy checks no more); everything else is a DNS subdomain.
    let path_segment = def.group == "rbac.authorization.k8s.io"
        || events::view_of(def) == Some(events::View::Core);
    let valid = if path_segment {
        validate_path_segment_name(&name)
    } else {
        validate_dns_subdomain(&name)
    };
    if let Err(why) = valid {
        return Err(response::invalid(
            &def.kind,
            &def.group,
            &name,
            &[FieldError::invalid("metadata.name", &name, &why)],
        ));
    }
    let body_ns = meta_str(v, "namespace")
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let ns = if def.namespaced {
        let ns = match (url_ns, body_ns.as_deref()) {
            (Some(u), Some(b)) if u != b => {
                return Err(response::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            (Some(u), _) => u.to_owned(),
            (None, Some(b)) => b.to_owned(),
            (None, None) => {
                return Err(response::invalid(
                    &def.kind,
                    &def.group,
                    &name,
                    &[FieldError::required("metadata.namespace", "")],
                ))
            }
        };
        match shared.store.get(NAMESPACES, &ns) {
            None => return Err(response::not_found("namespaces", &ns)),
            Some(n) if n.meta().deletion_timestamp.is_some() => {
                return Err(response::namespace_terminating(&def.plural, &name, &ns))
            }
            Some(_) => {}
        }
        meta_mut(v).insert("namespace".into(), ns.clone().into());
        Some(ns)
    } else {
        meta_mut(v).remove("namespace");
        None
    };
    let tracks = strategy::generation(def) != Generation::None;
    let uid = new_uid();
    let m = meta_mut(v);
    m.insert("uid".into(), uid.clone().into());
    m.insert("creationTimestamp".into(), now.into());
    m.remove("resourceVersion");
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    if tracks {
        m.insert("generation".into(), 1.into());
    } else {
        m.remove("generation");
    }
    // The status a create starts from is the kind's (set after the field manager's record).
    if def.status {
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
    }
    kind_defaults(def, v, &name, now)?;
    strategy::default(def, v);
    if let Some(schema) = shared.crd_schemas.of(shared, def) {
        strategy::custom::apply(&schema, v);
    }
    strategy::prepare_create_owned(def, v);
    // An apply's managedFields come from the apply itself.
    if !apply {
        fields::record_update(None, v, manager, "Update", None, now);
    }
    strategy::admission::admit_create(shared, def, v, ns.as_deref(), &name)?;
    strategy::prepare_create(def, v, &uid, &name, &shared.allocator)?;
    Ok(key_of(ns.as_deref(), &name))
}

/// POST to a collection.
pub fn create(
    shared: &Shared,
    r: &ResourceRequest,
    body: &[u8],
    w: WriteOpts,
) -> Result<Object, Status> {
    let v = parse_body(body)?;
    create_in(shared, &r.def, r.namespace.as_deref(), v, w)
}

/// Create from a whole object (handle and seeding): the resource comes from apiVersion/kind,
/// the namespace from metadata (`default` when a namespaced object has none).
pub(crate) fn create_value(shared: &Shared, v: Value, manager: &str) -> Result<Object, Status> {
    let av = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let def = def_for(shared, av, kind)?;
    let ns = meta_str(&v, "namespace")
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned();
    create_in(shared, &def, Some(&ns), v, WriteOpts::by(manager))
}

fn create_in(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    v: Value,
    w: WriteOpts,
) -> Result<Object, Status> {
    object_body(&v)?;
    // An Event's writer owns only what it set (see `events`).
    let mut v = events::as_written(def, v);
    let now = shared.now_rfc3339();
    let generated = meta_str(&v, "name").unwrap_or("").is_empty();
    // Only a generated name can collide and be retried; keep the input for that case only.
    let original = generated.then(|| v.clone());
    let mut attempts = 0;
    loop {
        let key = prepare_create(shared, def, ns, &mut v, w.manager, w.apply, &now)?;
        let name = meta_str(&v, "name").unwrap_or("").to_owned();
        let body = events::to_stored(def, std::mem::take(&mut v));
        events::validate_create(def, &body)?;
        valid_meta(def, &name, &body)?;
        let out = shared
            .store
            .mutate_with(&def.store_key, &key, w.dry_run, |cur| {
                if cur.is_some() {
                    return Err(response::already_exists(&def.plural, &name));
                }
                Ok(Mutation::Put(body))
            });
        match out {
            Ok(Outcome::Created(o)) => {
                if !w.dry_run {
                    after_write(shared, def, &o)?;
                    if &*def.store_key == NAMESPACES && shared.namespace_controller {
                        strategy::admission::namespace_created(shared, o.name());
                    }
                }
                return Ok(events::serve(def, o));
            }
            Ok(_) => return Err(response::internal("create did not create")),
            Err(s) if s.code == 409 && attempts < 8 && original.is_some() => {
                attempts += 1;
                v = original.clone().unwrap_or_default();
            }
            Err(s) => return Err(s),
        }
    }
}

/// Side effects of a stored object on the server itself (a CRD registers its resource) and
/// of the controllers every cluster runs (the garbage collector).
fn after_write(shared: &Shared, def: &ResourceDef, o: &Object) -> Result<(), Status> {
    if &*def.store_key == CRDS && o.meta().deletion_timestamp.is_none() {
        let v = o
            .to_value()
            .map_err(|e| response::internal(&e.to_string()))?;
        if let Err(e) = shared.registry.register_crd(&v) {
            tracing::warn!(error = %e, "stored CRD could not be registered");
        }
    }
    collect_if_orphaned(shared, def, o);
    Ok(())
}

/// The garbage collector's answer to an object whose every owner is gone (deleted, or
/// recreated with another uid): it deletes it, in the background. On a cluster this follows
/// the write by moments: a controller acting on a stale cache recreates a child of an owner
/// already deleted, and the collector removes it. Owners of kinds the server does not serve
/// are left alone, as the collector cannot look them up.
fn collect_if_orphaned(shared: &Shared, def: &ResourceDef, o: &Object) {
    let meta = o.meta();
    if meta.owner_references.is_empty() || meta.deletion_timestamp.is_some() {
        return;
    }
    let all_gone = meta
        .owner_references
        .iter()
        .all(|r| owner_exists(shared, &r, o.namespace()) == Some(false));
    if all_gone {
        let opts = DeleteOptions {
            propagation: Some(Propagation::Background),
            ..Default::default()
        };
        if let Err(e) = delete(shared, def, o.namespace(), o.name(), &opts) {
            tracing::debug!(error = %e.message, "garbage collection skipped an orphan");
        }
    }
}

/// Whether the owner `r` names (of a dependent in `namespace`) exists with that uid; none when
/// its kind is not served, so the collector cannot look it up.
fn owner_exists(
    shared: &Shared,
    r: &kwh_client::object::OwnerRef<'_>,
    namespace: Option<&str>,
) -> Option<bool> {
    let od = shared.registry.find_kind(r.api_version, r.kind)?;
    let k = key_of(ns_of(&od, namespace), r.name);
    Some(shared.store.has_uid(&od.store_key, &k, r.uid))
}

/// PUT to an object or its `/status`.
pub fn update(
    shared: &Shared,
    r: &ResourceRequest,
    body: &[u8],
    w: WriteOpts,
) -> Result<Object, Status> {
    let v = parse_body(body)?;
    let name = r.name.as_deref().unwrap_or("");
    update_in(
        shared,
        &r.def,
        r.namespace.as_deref(),
        name,
        r.subresource.as_deref(),
        v,
        w,
    )
}

/// Replace the object `name` by `v` (a subresource's write through its object, as `/scale`).
pub(crate) fn update_object(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    v: Value,
    w: WriteOpts,
) -> Result<Object, Status> {
    update_in(shared, def, ns, name, None, v, w)
}

/// Replace from a whole object (handle).
pub fn update_value(shared: &Shared, v: Value, manager: &str) -> Result<Object, Status> {
    let av = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let def = def_for(shared, av, kind)?;
    let ns = meta_str(&v, "namespace").map(str::to_owned);
    let name = meta_str(&v, "name").unwrap_or("").to_owned();
    update_in(
        shared,
        &def,
        ns.as_deref(),
        &name,
        None,
        v,
        WriteOpts::by(manager),
    )
}

fn update_in(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    mut v: Value,
    w: WriteOpts,
) -> Result<Object, Status> {
    object_body(&v)?;
    check_type(def, &mut v)?;
    let ns = ns_of(def, ns);
    match meta_str(&v, "name") {
        Some(n) if n != name => {
            return Err(response::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {}
    }
    if let (Some(b), Some(u)) = (meta_str(&v, "namespace").filter(|s| !s.is_empty()), ns) {
        if b != u {
            return Err(response::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let now = shared.now_rfc3339();
    let key = key_of(ns, name);
    // A custom resource's schema prunes and defaults the body (read outside the store lock).
    let mut v = v;
    if let Some(schema) = shared.crd_schemas.of(shared, def) {
        strategy::custom::apply(&schema, &mut v);
    }
    let out = shared
        .store
        .mutate_with(&def.store_key, &key, w.dry_run, |cur| {
            let cur = cur.ok_or_else(|| response::not_found(&def.plural, name))?;
            let cur_v = served_value(def, cur)?;
            let next = next_state(
                def,
                cur,
                &cur_v,
                events::encoded(def, v),
                sub,
                w.manager,
                "Update",
                &now,
            )?;
            to_storage(def, cur, next)
        })?;
    finish(shared, def, out, name, w.dry_run)
}

/// The stored object as `def` serves it, as a value to decide a write on: writes through a
/// view are computed (compared, patched, their managedFields recorded) in the view's terms.
fn served_value(def: &ResourceDef, cur: &Object) -> Result<Value, Status> {
    let v = cur.to_value().map_err(StoreError::from)?;
    Ok(events::to_served(def, v))
}

/// A decision made in `def`'s terms ([`served_value`]) in the stored form, checked by the
/// kind's update rules (Events': see `events`).
fn to_storage(def: &ResourceDef, cur: &Object, next: Mutation) -> Result<Mutation, Status> {
    match next {
        Mutation::Put(v) if events::view_of(def).is_some() => {
            let stored = events::to_stored(def, v);
            let old = cur.to_value().map_err(StoreError::from)?;
            events::validate_update(def, &old, &stored)?;
            valid_meta(def, cur.name(), &stored)?;
            Ok(Mutation::Put(stored))
        }
        Mutation::Put(v) => {
            valid_meta(def, cur.name(), &v)?;
            Ok(Mutation::Put(v))
        }
        next => Ok(next),
    }
}

/// The metadata checks of every kind ([`object_meta`]): a 422 naming each broken field.
fn valid_meta(def: &ResourceDef, name: &str, stored: &Value) -> Result<(), Status> {
    let errs = object_meta::meta_errors(stored);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(response::invalid(&def.kind, &def.group, name, &errs))
    }
}

fn finish(
    shared: &Shared,
    def: &ResourceDef,
    out: Outcome,
    name: &str,
    dry_run: bool,
) -> Result<Object, Status> {
    let o = match out {
        Outcome::Created(o) | Outcome::Updated(o) | Outcome::Deleted(o) if dry_run => o,
        Outcome::Created(o) | Outcome::Updated(o) => {
            after_write(shared, def, &o)?;
            o
        }
        Outcome::Deleted(o) => {
            after_delete(shared, def, &o, Propagation::Background);
            o
        }
        Outcome::Unchanged(Some(o)) => o,
        Outcome::Unchanged(None) => return Err(response::not_found(&def.plural, name)),
    };
    Ok(events::serve(def, o))
}

/// The state an update leads to, decided under the store lock.
#[allow(clippy::too_many_arguments)]
fn next_state(
    def: &ResourceDef,
    cur: &Object,
    cur_v: &Value,
    mut new: Value,
    sub: Option<&str>,
    manager: &str,
    operation: &str,
    now: &str,
) -> Result<Mutation, Status> {
    object_body(&new)?;
    strategy::default(def, &mut new);
    if let Some(rv) = meta_str(&new, "resourceVersion").filter(|s| !s.is_empty()) {
        if rv != cur.resource_version() {
            return Err(response::conflict(&def.plural, cur.name(), response::STALE));
        }
    }
    if sub == Some("status") {
        let status = new.get("status").cloned();
        // An apply has already worked out its ownership of the status fields on `new` (the
        // other writes record theirs below): that is the one part of its metadata that stays.
        let applied = (operation == "Apply")
            .then(|| new.pointer("/metadata/managedFields").cloned())
            .flatten();
        new = cur_v.clone();
        if let Some(o) = new.as_object_mut() {
            match status {
                Some(s) => o.insert("status".into(), s),
                None => o.remove("status"),
            };
        }
        if let Some(fields) = applied {
            meta_mut(&mut new).insert("managedFields".into(), fields);
        }
    } else if def.status {
        let status = cur_v.get("status").cloned();
        if let Some(o) = new.as_object_mut() {
            match status {
                Some(s) => o.insert("status".into(), s),
                None => o.remove("status"),
            };
        }
    }
    let no_meta = Map::new();
    let cm = cur_v
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&no_meta);
    {
        let m = meta_mut(&mut new);
        for f in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
        ] {
            match cm.get(f) {
                Some(x) => m.insert(f.into(), x.clone()),
                None => m.remove(f),
            };
        }
        m.insert("resourceVersion".into(), cur.resource_version().into());
    }
    if sub != Some("status") {
        strategy::prepare_update(def, cur_v, &mut new)?;
    }
    if strategy::generation_moves(def, cur_v, &new) {
        let g = cm.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
        meta_mut(&mut new).insert("generation".into(), g.into());
    }
    if unchanged(cur_v, &new) {
        return Ok(Mutation::Unchanged);
    }
    // An object created with no fields to own (an empty ServiceAccount) has no managedFields,
    // and the server's updates do not start tracking it: only an apply does.
    let tracked = cm
        .get("managedFields")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    if operation != "Apply" && tracked {
        fields::record_update(Some(cur_v), &mut new, manager, operation, sub, now);
    }
    let deleting = cm.contains_key("deletionTimestamp");
    if deleting {
        no_new_finalizers(def, cur, &new)?;
    }
    let no_finalizers = new
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if deleting && no_finalizers {
        return Ok(Mutation::Delete);
    }
    Ok(Mutation::Put(new))
}

/// An object being deleted may lose finalizers but never gain one (kube-apiserver's metadata
/// validation): otherwise a controller racing the deletion could keep it forever.
fn no_new_finalizers(def: &ResourceDef, cur: &Object, new: &Value) -> Result<(), Status> {
    let meta = cur.meta();
    let mut added: Vec<&str> = new
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|f| !meta.finalizers.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    added.sort_unstable();
    added.dedup();
    // Go's `%#v` of the sorted set, as the server words it.
    let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
    Err(response::invalid(
        &def.kind,
        &def.group,
        cur.name(),
        &[FieldError {
            reason: "FieldValueForbidden",
            field: "metadata.finalizers".into(),
            detail: format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                quoted.join(", ")
            ),
        }],
    ))
}

/// PATCH an object or its `/status` (spec 6.11); server-side apply may create.
pub fn patch(
    shared: &Shared,
    r: &ResourceRequest,
    content_type: &str,
    body: &[u8],
    w: WriteOpts,
    opts: PatchQuery,
) -> Result<(StatusCode, Object), Status> {
    let manager = w.manager;
    let force = opts.force;
    let def = &r.def;
    let ty = patch::PatchType::from_content_type(content_type).ok_or_else(|| {
        Status::failure(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                patch::accepted_patch_types(def.builtin)
            ),
        )
    })?;
    patch::validate_patch_options(ty, opts.field_manager, opts.force_given)
        .map_err(|e| e.to_status(&def.plural, r.name.as_deref().unwrap_or("")))?;
    let ns = ns_of(def, r.namespace.as_deref());
    let name = r.name.as_deref().unwrap_or("");
    let sub = r.subresource.as_deref();
    let key = key_of(ns, name);
    let now = shared.now_rfc3339();
    let builtin = def.builtin_gk();
    let apply = matches!(ty, patch::PatchType::Apply);
    let op = if apply { "Apply" } else { "Update" };
    let schema = shared.crd_schemas.of(shared, def);
    let apply_base = patch::ApplyRequest {
        current: None,
        body,
        field_manager: manager,
        force,
        builtin,
        now: &now,
        subresource: sub,
        ignore_status: def.status && sub.is_none(),
    };
    if apply && sub.is_none() && shared.store.get(&def.store_key, &key).is_none() {
        let mut v = patch::server_side_apply_with(&apply_base)
            .map_err(|e| e.to_status(&def.plural, name))?;
        object_body(&v)?;
        let m = meta_mut(&mut v);
        if m.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            m.insert("name".into(), name.into());
        }
        let obj = create_in(
            shared,
            def,
            r.namespace.as_deref(),
            v,
            WriteOpts { apply: true, ..w },
        )?;
        return Ok((StatusCode::CREATED, obj));
    }
    let out = shared
        .store
        .mutate_with(&def.store_key, &key, w.dry_run, |cur| {
            let cur = cur.ok_or_else(|| response::not_found(&def.plural, name))?;
            let cur_v = served_value(def, cur)?;
            let new = if apply {
                patch::server_side_apply_with(&patch::ApplyRequest {
                    current: Some(&cur_v),
                    ..apply_base
                })
            } else {
                patch::apply_patch(&cur_v, ty, body, builtin)
            }
            .map_err(|e| e.to_status(&def.plural, name))?;
            let mut new = events::encoded(def, new);
            if let Some(schema) = &schema {
                strategy::custom::apply(schema, &mut new);
            }
            let next = next_state(def, cur, &cur_v, new, sub, manager, op, &now)?;
            to_storage(def, cur, next)
        })?;
    Ok((StatusCode::OK, finish(shared, def, out, name, w.dry_run)?))
}

/// The PATCH query options, as sent (validation needs to know what was given).
#[derive(Debug, Clone, Copy, Default)]
pub struct PatchQuery<'a> {
    /// The `fieldManager` parameter.
    pub field_manager: Option<&'a str>,
    /// `force=true`.
    pub force: bool,
    /// Whether `force` was given at all.
    pub force_given: bool,
}

/// DELETE of one object, options from the body and the query. Like kube-apiserver, an object
/// removed at once is answered with a Success Status for built-in kinds (the deleted object for
/// pods and custom resources); one kept for its finalizers is answered with its new state.
pub(crate) fn delete_request(
    shared: &Shared,
    r: &ResourceRequest,
    q: &Query,
    body: &[u8],
) -> Result<Response<Body>, Status> {
    let opts = delete_options(q, body)?;
    let name = r.name.as_deref().unwrap_or("");
    let (o, gone) = delete_inner(shared, &r.def, r.namespace.as_deref(), name, &opts)?;
    if gone && r.def.builtin && r.def.plural != "pods" {
        let mut details = json!({"name": name, "kind": r.def.plural, "uid": o.uid()});
        if !r.def.group.is_empty() {
            details["group"] = r.def.group.clone().into();
        }
        return Ok(response::value(
            StatusCode::OK,
            &json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details
            }),
        ));
    }
    Ok(response::json(StatusCode::OK, o.raw_bytes()))
}

/// Delete one object: preconditions, finalizers (deletionTimestamp set, removal deferred until
/// they are emptied), then garbage collection of dependents.
pub(crate) fn delete(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Object, Status> {
    delete_inner(shared, def, ns, name, opts).map(|(o, _)| o)
}

/// `delete`, also telling whether the object is gone (rather than waiting on finalizers).
pub fn delete_inner(
    shared: &Shared,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<(Object, bool), Status> {
    let ns = ns_of(def, ns);
    let key = key_of(ns, name);
    let propagation = opts.propagation.unwrap_or_else(|| default_propagation(def));
    if &*def.store_key == NAMESPACES && !opts.dry_run {
        if let Some(held) = terminate_namespace(shared, name)? {
            return Ok((held, false));
        }
    }
    if propagation == Propagation::Foreground && !opts.dry_run {
        if let Some(o) = shared.store.get(&def.store_key, &key) {
            collect_dependents(shared, o.uid(), Propagation::Foreground);
        }
    }
    let now = shared.now_rfc3339();
    let out = shared.store.mutate_with(&def.store_key, &key, opts.dry_run, |cur| {
        let cur = cur.ok_or_else(|| response::not_found(&def.plural, name))?;
        if let Some(uid) = opts.precondition_uid.as_deref() {
            if uid != cur.uid() {
                return Err(response::conflict(
                    &def.plural,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        cur.uid()
                    ),
                ));
            }
        }
        if let Some(rv) = opts.precondition_rv.as_deref() {
            if rv != cur.resource_version() {
                return Err(response::conflict(
                    &def.plural,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        cur.resource_version()
                    ),
                ));
            }
        }
        if cur.meta().finalizers.is_empty() {
            return Ok(Mutation::Delete);
        }
        if cur.meta().deletion_timestamp.is_some() {
            return Ok(Mutation::Unchanged);
        }
        let mut v = cur.to_value().map_err(StoreError::from)?;
        let m = meta_mut(&mut v);
        m.insert("deletionTimestamp".into(), now.clone().into());
        m.insert("deletionGracePeriodSeconds".into(), 0.into());
        // As the apiserver does when it marks an object for deletion: a bumped generation tells
        // controllers that compare generations that something happened.
        if let Some(g) = m.get("generation").and_then(Value::as_i64).filter(|g| *g > 0) {
            m.insert("generation".into(), (g + 1).into());
        }
        Ok(Mutation::Put(v))
    })?;
    match out {
        Outcome::Deleted(o) => {
            if !opts.dry_run {
                after_delete(shared, def, &o, propagation);
            }
            Ok((events::serve(def, o), true))
        }
        Outcome::Updated(o) | Outcome::Created(o) | Outcome::Unchanged(Some(o)) => {
            Ok((events::serve(def, o), false))
        }
        Outcome::Unchanged(None) => Err(response::not_found(&def.plural, name)),
    }
}

/// What removing an object implies: its dependents, a CRD's resource, a namespace's contents.
fn after_delete(shared: &Shared, def: &ResourceDef, o: &Object, propagation: Propagation) {
    if def.namespaced {
        if let Some(ns) = o.namespace() {
            finish_namespace(shared, ns);
        }
    }
    match &*def.store_key {
        CRDS => {
            if let Ok(v) = o.to_value() {
                if let Some(key) = shared.registry.unregister_crd(&v) {
                    purge(shared, &key, "");
                }
            }
        }
        NAMESPACES => {
            let mut seen = std::collections::HashSet::new();
            for d in shared.registry.all().iter().filter(|d| d.namespaced) {
                if seen.insert(d.store_key.clone()) {
                    purge(shared, &d.store_key, &format!("{}/", o.name()));
                }
            }
        }
        _ => {}
    }
    collect_dependents(shared, o.uid(), propagation);
}

/// Remove every object under `prefix` at once (finalizers are not honoured here).
fn purge(shared: &Shared, store_key: &Arc<str>, prefix: &str) {
    for k in shared.store.keys(store_key, prefix) {
        let _ = shared
            .store
            .mutate::<Status>(store_key, &k, |_| Ok(Mutation::Delete));
    }
}

/// Garbage-collect the dependents of `uid`: a dependent whose other owners are all gone is
/// deleted; one with a live owner left just loses the reference; Orphan strips the reference.
fn collect_dependents(shared: &Shared, uid: &str, propagation: Propagation) {
    for (store_key, key) in shared.store.dependents(uid) {
        let Some(dep) = shared.store.get(&store_key, &key) else {
            continue;
        };
        let Some(def) = def_by_store_key(&shared.registry, &store_key) else {
            continue;
        };
        let live_owner = dep
            .meta()
            .owner_references
            .iter()
            .any(|r| r.uid != uid && owner_exists(shared, &r, dep.namespace()) == Some(true));
        if propagation == Propagation::Orphan || live_owner {
            let _ = shared.store.mutate::<Status>(&store_key, &key, |cur| {
                let Some(cur) = cur else {
                    return Ok(Mutation::Unchanged);
                };
                let mut v = cur.to_value().map_err(StoreError::from)?;
                if let Some(refs) = v
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                }
                Ok(Mutation::Put(v))
            });
        } else {
            // The collector names its policy explicitly, so a dependent Job takes its Pods along.
            let opts = DeleteOptions {
                propagation: Some(propagation),
                ..Default::default()
            };
            if let Err(e) = delete(shared, &def, dep.namespace(), dep.name(), &opts) {
                tracing::debug!(error = %e.message, "garbage collection skipped a dependent");
            }
        }
    }
}

/// DELETE on a collection: every object matching the selectors; answers the list of what was
/// deleted (or marked for deletion).
pub(crate) fn delete_collection(
    shared: &Shared,
    r: &ResourceRequest,
    q: &Query,
    body: &[u8],
) -> Result<Response<Body>, Status> {
    if &*r.def.store_key == NAMESPACES {
        return Err(response::method_not_allowed());
    }
    let sel = Selectors::from_query(&r.def, q)?;
    let mut opts = delete_options(q, body)?;
    opts.precondition_rv = None;
    opts.precondition_uid = None;
    let mut out = Vec::new();
    for key in shared.store.keys(&r.def.store_key, &r.prefix()) {
        let Some(o) = shared.store.get(&r.def.store_key, &key) else {
            continue;
        };
        if !sel.matches(&o) {
            continue;
        }
        if let Ok(d) = delete(shared, &r.def, o.namespace(), o.name(), &opts) {
            out.push(d);
        }
    }
    Ok(list_body(
        &r.def,
        &out,
        shared.store.current_rv(),
        None,
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_unchanged_when_only_server_set_metadata_differs() {
        let old = json!({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "1",
            "managedFields": [{"manager": "a"}], "labels": {"x": "1"}}, "spec": {"a": 1}});
        let same = json!({"spec": {"a": 1}, "metadata": {"labels": {"x": "1"}, "name": "p",
            "resourceVersion": "2"}, "kind": "Pod"});
        assert!(unchanged(&old, &same));
        for changed in [
            json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"x": "2"}}, "spec": {"a": 1}}),
            json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"x": "1"}}, "spec": {"a": 2}}),
            json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"x": "1"}}}),
            json!({"kind": "Pod", "metadata": {"name": "p", "labels": {"x": "1"}, "uid": "u"},
                "spec": {"a": 1}}),
        ] {
            assert!(!unchanged(&old, &changed), "{changed}");
        }
    }

    #[test]
    fn the_spec_changes_when_anything_but_metadata_and_status_does() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"a": 1}, "status": {"s": 1}});
        let meta_and_status =
            json!({"status": {"s": 2}, "spec": {"a": 1}, "metadata": {"name": "p", "labels": {}}});
        assert!(!spec_changed(&old, &meta_and_status));
        assert!(spec_changed(
            &old,
            &json!({"metadata": {}, "spec": {"a": 2}})
        ));
        assert!(spec_changed(
            &old,
            &json!({"metadata": {}, "spec": {"a": 1}, "data": {}})
        ));
        assert!(spec_changed(&old, &json!({"metadata": {}})));
    }
}
