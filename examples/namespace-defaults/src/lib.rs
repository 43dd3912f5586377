//! The namespace-defaults controller: for each cluster-scoped `NamespaceDefaults`
//! (`defaults.kube-wasm.dev/v1alpha1`, defined in `crd.yaml`), keeps a ConfigMap and a
//! ResourceQuota in every namespace its `namespaceSelector` matches.
//!
//! Managed objects are written by server-side apply, carry the owner as their controller
//! reference and the `app.kubernetes.io/managed-by=namespace-defaults` label, and are pruned
//! when a namespace stops matching or the spec drops them. The owner's status lists what it
//! manages, with a `Ready` condition. A finalizer makes deletion explicit: the managed objects
//! are deleted by the controller before the owner goes, rather than left to the garbage
//! collector's schedule.
//!
//! See the README for the manifest's rights and how to run and test it.

use kube_guest::conditions::{self, Condition};
use kube_guest::{
    info, warn, Action, Api, Controller, DeleteOptions, Index, Manifest, Object, OwnerReference,
    Result, Verb, Watch, Write,
};
use serde_json::{json, Value};

pub mod spec;

use spec::{Managed, Spec, API_VERSION, FINALIZER, KIND, MANAGED_BY, MANAGER};

/// The controller; see the crate documentation.
pub struct NamespaceDefaults;

/// Watch positions in the manifest.
const W_OWNER: u32 = 0;
const W_NAMESPACE: u32 = 1;
/// Index on the managed kinds' caches: owner UID → the objects it owns.
const BY_OWNER: &str = "owner";
/// The kinds managed in each namespace.
const MANAGED_KINDS: [&str; 2] = ["ConfigMap", "ResourceQuota"];

fn owners() -> Api {
    Api::all(API_VERSION, KIND)
}

/// Every NamespaceDefaults may select a namespace that changed.
fn enqueue_all_owners() {
    match owners().list_keys(None) {
        Ok(keys) => keys.iter().for_each(|k| kube_guest::enqueue(k)),
        Err(e) => warn!("cannot list {KIND}: {e}"),
    }
}

/// A managed object changed or went: its owner puts it back.
fn enqueue_owner(obj: &Object) {
    if let Some(r) = obj.controller_ref().filter(|r| r.kind == KIND) {
        kube_guest::enqueue(&r.name);
    }
}

fn label_set(o: &Object) -> Vec<(&str, &str)> {
    let mut l: Vec<_> = o.labels().collect();
    l.sort_unstable();
    l
}

impl Controller for NamespaceDefaults {
    type Config = ();

    fn manifest() -> Manifest {
        let managed = |kind: &str| {
            Watch::new("v1", kind)
                .with_labels(&format!("{MANAGED_BY}={MANAGER}"))
                .with_index(Index::new(BY_OWNER, &["metadata.ownerReferences[*].uid"]))
        };
        Manifest::new("namespace-defaults")
            .watch(Watch::new(API_VERSION, KIND))
            .watch(Watch::new("v1", "Namespace"))
            .watch(managed("ConfigMap"))
            .watch(managed("ResourceQuota"))
            // Patch: the finalizer. UpdateStatus: every status write, the status apply included.
            .write(Write::new(
                API_VERSION,
                KIND,
                &[Verb::Patch, Verb::UpdateStatus],
            ))
            .write(Write::new("v1", "ConfigMap", &[Verb::Patch, Verb::Delete]))
            .write(Write::new(
                "v1",
                "ResourceQuota",
                &[Verb::Patch, Verb::Delete],
            ))
    }

    fn on_add(watch: u32, obj: Object) {
        match watch {
            W_OWNER => kube_guest::enqueue(&obj.key()),
            W_NAMESPACE => enqueue_all_owners(),
            // Our own applies come back as adds; nothing to do for them.
            _ => {}
        }
    }

    fn on_update(watch: u32, old: Object, new: Object) {
        match watch {
            W_OWNER => kube_guest::enqueue(&new.key()),
            // Only what selection depends on: labels, and whether the namespace is going away.
            W_NAMESPACE => {
                if label_set(&old) != label_set(&new) || old.is_deleting() != new.is_deleting() {
                    enqueue_all_owners();
                }
            }
            _ => {
                if old.resource_version() != new.resource_version() {
                    enqueue_owner(&new);
                }
            }
        }
    }

    fn on_delete(watch: u32, obj: Object, _tombstone: bool) {
        match watch {
            W_OWNER => {}
            W_NAMESPACE => enqueue_all_owners(),
            _ => enqueue_owner(&obj),
        }
    }

    fn reconcile(key: &str) -> Result<Action> {
        let Some(owner) = owners().get_by_key(key)? else {
            // Gone: its finalizer already cleaned up (and the garbage collector backs that up).
            return Ok(Action::Done);
        };
        if owner.is_deleting() {
            return finalize(&owner);
        }
        let owner = owners().add_finalizer(&owner, FINALIZER)?;
        let oref = owner
            .controller_owner_ref()
            .ok_or("the NamespaceDefaults has no uid")?;
        let spec = match Spec::of(&owner) {
            Ok(s) => s,
            Err(why) => {
                // A bad spec is the user's to fix; report it and wait for the next change.
                warn!("{key}: {why}");
                write_status(
                    &owner,
                    None,
                    Condition::new("Ready", "False", "InvalidSpec", &why),
                )?;
                return Ok(Action::Done);
            }
        };
        let (managed, failures) = sync(&owner, &spec, &oref)?;
        let ready = if failures.is_empty() {
            let n = managed.len();
            Condition::new(
                "Ready",
                "True",
                "Applied",
                &format!("{n} objects up to date"),
            )
        } else {
            Condition::new("Ready", "False", "ApplyFailed", &failures.join("; "))
        };
        write_status(&owner, Some(&managed), ready)?;
        if failures.is_empty() {
            Ok(Action::Done)
        } else {
            Err(failures.join("; ").into())
        }
    }
}

/// Applies the desired objects in every selected namespace and deletes managed objects that are
/// no longer wanted. Returns what is managed now and the failures (one per object), so that one
/// broken namespace does not stop the others.
fn sync(owner: &Object, spec: &Spec, oref: &OwnerReference) -> Result<(Vec<Managed>, Vec<String>)> {
    let selector = spec
        .namespace_selector
        .to_query()
        .map_err(kube_guest::Error::msg)?;
    let namespaces = Api::all("v1", "Namespace").list_metadata(selector.as_deref())?;
    let uid = oref.uid.as_str();
    let mut managed = Vec::new();
    let mut failures = Vec::new();
    for ns in namespaces.iter().filter(|n| !n.deleting) {
        for want in spec::desired(owner, spec, &ns.name, oref) {
            let kind = if want.kind() == "ConfigMap" {
                "ConfigMap"
            } else {
                "ResourceQuota"
            };
            let api = Api::namespaced("v1", kind, &ns.name);
            let current = api.get(want.name())?;
            let fresh = current
                .as_ref()
                .is_some_and(|c| spec::up_to_date(c, &want, oref));
            if !fresh {
                if let Err(e) = api.apply(&want, true) {
                    failures.push(format!("{kind} {}/{}: {e}", ns.name, want.name()));
                    continue;
                }
                info!(
                    "applied {kind} {}/{} for {}",
                    ns.name,
                    want.name(),
                    owner.name()
                );
            }
            managed.push(Managed {
                kind,
                namespace: ns.name.clone(),
                name: want.name().to_string(),
            });
        }
    }
    managed.sort();
    for kind in MANAGED_KINDS {
        for o in Api::all("v1", kind).by_index(BY_OWNER, uid)? {
            let ns = o.namespace().unwrap_or_default();
            let wanted = managed
                .iter()
                .any(|m| m.kind == kind && m.namespace == ns && m.name == o.name());
            if !wanted && o.controller_ref().is_some_and(|r| r.uid == uid) {
                if let Err(e) = delete(kind, &o) {
                    failures.push(format!("{kind} {}: {e}", o.key()));
                } else {
                    info!("pruned {kind} {} of {}", o.key(), owner.name());
                }
            }
        }
    }
    Ok((managed, failures))
}

/// Deletes one managed object, only if it is still the one seen (same UID); gone is fine.
fn delete(kind: &str, o: &Object) -> Result<()> {
    let mut opts = DeleteOptions::default();
    if let Some(uid) = o.uid() {
        opts = opts.precondition_uid(uid);
    }
    match Api::all("v1", kind)
        .within(o.namespace())
        .delete_with(o.name(), &opts)
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

/// The owner is being deleted: delete everything it manages, then let it go.
fn finalize(owner: &Object) -> Result<Action> {
    if !owner.has_finalizer(FINALIZER) {
        return Ok(Action::Done);
    }
    let uid = owner.uid().unwrap_or_default();
    let mut deleted = 0;
    for kind in MANAGED_KINDS {
        for o in Api::all("v1", kind).by_index(BY_OWNER, uid)? {
            if o.controller_ref().is_some_and(|r| r.uid == uid) {
                delete(kind, &o)?;
                deleted += 1;
            }
        }
    }
    info!(
        "{} is being deleted: removed {deleted} managed objects",
        owner.name()
    );
    owners().remove_finalizer(owner, FINALIZER)?;
    Ok(Action::Done)
}

/// The status fields this controller states (and, by applying them, owns).
const STATUS_FIELDS: [&str; 3] = ["observedGeneration", "managed", "conditions"];

/// Applies `status` (managed list, observed generation, `Ready`) to the status subresource when
/// it differs from the stored one.
///
/// Why server-side apply rather than a replace: the controller states every status field it
/// owns, so the write needs no resourceVersion, and an edit of the spec (or any other write to
/// the object) landing between the cache read and this write no longer fails it with 409. That
/// edit enqueues the owner again, and `observedGeneration` says which spec the status describes.
fn write_status(owner: &Object, managed: Option<&[Managed]>, ready: Condition) -> Result<()> {
    let stored = owner.get("status").filter(|s| s.is_object());
    let mut status = stored.cloned().unwrap_or_else(|| json!({}));
    status["observedGeneration"] = owner.generation().into();
    if let Some(m) = managed {
        status["managed"] = Value::Array(m.iter().map(Managed::to_json).collect());
    }
    conditions::set(
        &mut status,
        ready.observed_generation(owner.generation()),
        &kube_guest::time::now(),
    );
    if stored == Some(&status) {
        return Ok(());
    }
    let mut apply = Object::new(API_VERSION, KIND, None, owner.name());
    apply["status"] = STATUS_FIELDS
        .iter()
        .filter_map(|f| Some((f.to_string(), status.get(f)?.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into();
    owners().apply_status(&apply, true)?;
    Ok(())
}

kube_guest::export_controller!(NamespaceDefaults);
