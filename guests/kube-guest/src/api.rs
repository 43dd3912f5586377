//! [`Api`]: one kind's cache reads and API writes, with objects as [`Object`] and errors as
//! [`Error`](crate::Error). A thin layer over the `lister` and `client` imports; every call is
//! still checked by the host against the manifest (an undeclared call fails with 403
//! `Forbidden`).

use serde_json::{json, Value};

use crate::bindings::kube::controller::{client, lister};
use crate::conditions::{self, Condition};
use crate::error::Result;
use crate::object::{object_key, split_key, Object};
use crate::short_str::ShortStr;
use crate::{DeleteOptions, ObjectMeta, PatchType, Preconditions, PropagationPolicy};

/// A patch body and how the API server is to read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// RFC 7386 JSON merge patch: fields replace, `null` deletes, lists are replaced whole.
    Merge(Value),
    /// RFC 6902 JSON patch: a list of operations.
    Json(Value),
    /// Kubernetes strategic merge patch (built-in kinds only): lists merge by their keys.
    Strategic(Value),
}

impl Patch {
    fn parts(&self) -> (PatchType, &Value) {
        match self {
            Patch::Merge(v) => (PatchType::Merge, v),
            Patch::Json(v) => (PatchType::Json, v),
            Patch::Strategic(v) => (PatchType::StrategicMerge, v),
        }
    }

    /// The patch body.
    pub fn body(&self) -> &Value {
        self.parts().1
    }
}

#[allow(clippy::derivable_impls)]
impl Default for DeleteOptions {
    fn default() -> Self {
        DeleteOptions {
            preconditions: None,
            propagation_policy: None,
            grace_period_seconds: None,
        }
    }
}

impl DeleteOptions {
    /// Delete only if the object still has this UID (it was not deleted and recreated).
    pub fn precondition_uid(mut self, uid: &str) -> Self {
        let p = self.preconditions.get_or_insert(Preconditions {
            uid: None,
            resource_version: None,
        });
        p.uid = Some(uid.to_string());
        self
    }

    /// Delete only if the object is still at this resourceVersion.
    pub fn precondition_resource_version(mut self, rv: &str) -> Self {
        let p = self.preconditions.get_or_insert(Preconditions {
            uid: None,
            resource_version: None,
        });
        p.resource_version = Some(rv.to_string());
        self
    }

    /// How dependents are treated.
    pub fn propagation(mut self, policy: PropagationPolicy) -> Self {
        self.propagation_policy = Some(policy);
        self
    }

    /// The grace period in seconds.
    pub fn grace_period_seconds(mut self, seconds: i64) -> Self {
        self.grace_period_seconds = Some(seconds);
        self
    }
}

/// `lister.get-by-key`: one object of watch number `watch`'s cache.
fn get_by_key(watch: u32, key: &str) -> Result<Option<Object>> {
    let found = lister::get_by_key(watch, key)?;
    Ok(found.map(Object::from_host_json))
}

/// One kind, optionally limited to one namespace: cache reads and API writes.
///
/// Reads come from the host's informer cache of a watched kind (never from the API server);
/// writes go to the API server and return the object as stored.
///
/// ```no_run
/// use kube_guest::{Api, Patch};
/// use serde_json::json;
/// # fn f() -> kube_guest::Result<()> {
/// let deployments = Api::namespaced("apps/v1", "Deployment", "prod");
/// if let Some(d) = deployments.get("web")? {
///     let patch = json!({"spec": {"replicas": 3}});
///     deployments.patch(d.name(), &Patch::Merge(patch))?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    api_version: ShortStr,
    kind: ShortStr,
    namespace: Option<ShortStr>,
}

impl Api {
    /// Every namespace (for reads), or a cluster-scoped kind.
    pub fn all(api_version: &str, kind: &str) -> Self {
        Api {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: None,
        }
    }

    /// One namespace.
    pub fn namespaced(api_version: &str, kind: &str, namespace: &str) -> Self {
        Api::all(api_version, kind).within(Some(namespace))
    }

    /// The same kind in `namespace` (none: all namespaces, or cluster-scoped).
    pub fn within(&self, namespace: Option<&str>) -> Self {
        Api {
            namespace: namespace.filter(|n| !n.is_empty()).map(ShortStr::from),
            ..self.clone()
        }
    }

    /// `group/version`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// The kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The namespace, if limited to one.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    fn ns(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// One object by name, in this `Api`'s namespace; none if the cache does not have it. For
    /// a kind the manifest watches once it is a read by key, as [`Api::get_by_key`] describes.
    pub fn get(&self, name: &str) -> Result<Option<Object>> {
        if let Some(watch) = crate::watches::only_watch_of(&self.api_version, &self.kind) {
            return get_by_key(watch, &object_key(self.ns(), name));
        }
        self.get_in(self.ns(), name)
    }

    /// One object by key (`namespace/name`, or `name`), whatever this `Api`'s namespace.
    ///
    /// In a [`Controller`](crate::Controller) whose manifest watches this kind once, the read
    /// names the watch and passes the key as it is (`lister.get-by-key`): the cheapest read
    /// there is, and what a reconcile usually does first. Otherwise (several watches of the
    /// kind, or the raw bindings) it is `get` with the key split.
    pub fn get_by_key(&self, key: &str) -> Result<Option<Object>> {
        if let Some(watch) = crate::watches::only_watch_of(&self.api_version, &self.kind) {
            return get_by_key(watch, key);
        }
        let (ns, name) = split_key(key);
        self.get_in(ns, name)
    }

    fn get_in(&self, namespace: Option<&str>, name: &str) -> Result<Option<Object>> {
        let found = lister::get(&self.api_version, &self.kind, namespace, name)?;
        Ok(found.map(Object::from_host_json))
    }

    /// Objects matching `label_selector` (all when none), in this `Api`'s namespace or all.
    pub fn list(&self, label_selector: Option<&str>) -> Result<Vec<Object>> {
        let found = lister::list(&self.api_version, &self.kind, self.ns(), label_selector)?;
        Ok(found.into_iter().map(Object::from_host_json).collect())
    }

    /// Like [`Api::list`] but only keys: nothing is copied but the keys.
    pub fn list_keys(&self, label_selector: Option<&str>) -> Result<Vec<String>> {
        Ok(lister::list_keys(
            &self.api_version,
            &self.kind,
            self.ns(),
            label_selector,
        )?)
    }

    /// Like [`Api::list`] but only metadata, which the host holds parsed already.
    pub fn list_metadata(&self, label_selector: Option<&str>) -> Result<Vec<ObjectMeta>> {
        Ok(lister::list_metadata(
            &self.api_version,
            &self.kind,
            self.ns(),
            label_selector,
        )?)
    }

    /// Objects whose index `index` yields `value`: the built-in `namespace` index or one the
    /// manifest declares on a watch of this kind (see [`crate::Index`]). Indexes span every
    /// namespace the cache holds; this `Api`'s namespace does not filter them.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Object>> {
        let found = lister::by_index(&self.api_version, &self.kind, index, value)?;
        Ok(found.into_iter().map(Object::from_host_json).collect())
    }

    /// Like [`Api::by_index`] but only the keys, sorted.
    pub fn keys_by_index(&self, index: &str, value: &str) -> Result<Vec<String>> {
        Ok(lister::keys_by_index(
            &self.api_version,
            &self.kind,
            index,
            value,
        )?)
    }

    /// The namespace of a write about `obj`: the object's own, else this `Api`'s.
    fn ns_of<'a>(&'a self, obj: &'a Object) -> Option<&'a str> {
        obj.namespace().or(self.ns())
    }

    /// Creates `obj` (apiVersion and kind are filled in when missing).
    pub fn create(&self, obj: &Object) -> Result<Object> {
        let obj = self.typed(obj);
        let out = client::create(
            &self.api_version,
            &self.kind,
            self.ns_of(&obj),
            &obj.to_vec(),
        )?;
        Object::from_slice(&out)
    }

    /// Replaces `obj` (PUT): fails with 409 `Conflict` if its resourceVersion is stale.
    pub fn replace(&self, obj: &Object) -> Result<Object> {
        let obj = self.typed(obj);
        let out = client::replace(
            &self.api_version,
            &self.kind,
            self.ns_of(&obj),
            obj.name(),
            &obj.to_vec(),
        )?;
        Object::from_slice(&out)
    }

    /// Replaces the `status` subresource with `obj`'s status (optimistic concurrency on its
    /// resourceVersion, so a 409 means: re-read and recompute).
    pub fn replace_status(&self, obj: &Object) -> Result<Object> {
        let obj = self.typed(obj);
        let out = client::replace_status(
            &self.api_version,
            &self.kind,
            self.ns_of(&obj),
            obj.name(),
            &obj.to_vec(),
        )?;
        Object::from_slice(&out)
    }

    /// Sets `obj`'s status to `status` and writes it through the `status` subresource: the
    /// read-modify-write of controller-runtime's `Status().Update()`. `obj` should be the cached
    /// object the status was computed from; on 409 `Conflict`, reconcile again.
    ///
    /// Skips the write (returning `obj`) when the status is already `status`, so a reconcile
    /// that changes nothing does not bump the resourceVersion and wake every watcher. To write
    /// status without failing on a concurrent change of the object, see [`Api::apply_status`]
    /// and [`Api::patch_status`].
    pub fn update_status(&self, obj: &Object, status: Value) -> Result<Object> {
        if obj.get("status") == Some(&status) {
            return Ok(obj.clone());
        }
        let mut next = obj.clone();
        if let Some(m) = next.as_object_mut() {
            m.insert("status".into(), status);
        }
        self.replace_status(&next)
    }

    /// Patches the `status` subresource of the named object in this `Api`'s namespace: only the
    /// patched `status` is stored (the API server drops changes to anything else).
    ///
    /// Why rather than [`Api::replace_status`]: a patch sends only what it changes and no
    /// resourceVersion, so a concurrent write elsewhere in the object (a spec edit, a label, a
    /// finalizer) does not fail it with 409 `Conflict`. A patch that replaces a list (a merge
    /// patch of `conditions`) can drop another writer's entries; state `metadata.resourceVersion`
    /// in it to be refused instead (as [`Api::set_condition`] does), or use [`Api::apply_status`].
    /// Needs [`Verb::UpdateStatus`](crate::Verb::UpdateStatus) in the manifest.
    ///
    /// ```no_run
    /// use kube_guest::{Api, Patch};
    /// use serde_json::json;
    /// # fn f() -> kube_guest::Result<()> {
    /// let widgets = Api::namespaced("example.com/v1", "Widget", "prod");
    /// let patch = json!({"status": {"phase": "Ready", "observedGeneration": 4}});
    /// let stored = widgets.patch_status("w1", &Patch::Merge(patch))?;
    /// assert_eq!(stored["status"]["phase"], "Ready");
    /// # Ok(()) }
    /// ```
    pub fn patch_status(&self, name: &str, patch: &Patch) -> Result<Object> {
        self.patch_status_in(self.ns(), name, patch)
    }

    fn patch_status_in(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Object> {
        let (ty, body) = patch.parts();
        let body = serde_json::to_vec(body)?;
        let out = client::patch_status(&self.api_version, &self.kind, namespace, name, ty, &body)?;
        Object::from_slice(&out)
    }

    /// Server-side apply of `obj`'s status through the `status` subresource, with the plugin's
    /// name as field manager: the controller owns exactly the status fields `obj` states, and
    /// those it stops stating are removed; other managers' status fields are kept. `force` takes
    /// over fields another manager holds instead of failing with 409 `Conflict`. Anything but
    /// `status` in `obj` (beyond apiVersion, kind, name and namespace) is ignored, and the
    /// object must exist: a status apply never creates (404 `NotFound`).
    ///
    /// Why: no read-modify-write and no resourceVersion, so neither a concurrent spec change
    /// nor another controller's status fields can make it fail or be overwritten.
    /// apiVersion and kind are filled in when missing. Needs
    /// [`Verb::UpdateStatus`](crate::Verb::UpdateStatus) in the manifest.
    ///
    /// ```no_run
    /// use kube_guest::{Api, Object};
    /// use serde_json::json;
    /// # fn f(w: &Object) -> kube_guest::Result<()> {
    /// let widgets = Api::all("example.com/v1", "Widget");
    /// let mut status = Object::new("example.com/v1", "Widget", w.namespace(), w.name());
    /// status["status"] = json!({"observedGeneration": w.generation(), "replicas": 3});
    /// widgets.apply_status(&status, true)?;
    /// # Ok(()) }
    /// ```
    pub fn apply_status(&self, obj: &Object, force: bool) -> Result<Object> {
        let obj = self.typed(obj);
        let out = client::apply_status(
            &self.api_version,
            &self.kind,
            self.ns_of(&obj),
            obj.name(),
            &obj.to_vec(),
            force,
        )?;
        Object::from_slice(&out)
    }

    /// Sets the condition `cond` in `obj`'s `status.conditions` with a merge patch of the
    /// `status` subresource (see [`conditions::merge_patch`]): `lastTransitionTime` moves only
    /// when the condition's status changes, nothing is written when nothing changes (returning
    /// `obj`), and other status fields are left alone. `obj` should be the cached object; a 409
    /// `Conflict` means its status changed meanwhile: reconcile again.
    ///
    /// ```no_run
    /// use kube_guest::conditions::Condition;
    /// use kube_guest::{Api, Object};
    /// # fn f(w: &Object) -> kube_guest::Result<()> {
    /// let widgets = Api::all("example.com/v1", "Widget");
    /// let ready = Condition::new("Ready", "True", "Available", "all replicas up")
    ///     .observed_generation(w.generation());
    /// widgets.set_condition(w, ready)?;
    /// # Ok(()) }
    /// ```
    pub fn set_condition(&self, obj: &Object, cond: Condition) -> Result<Object> {
        match conditions::merge_patch(obj, cond, &crate::time::now()) {
            Some(p) => self.patch_status_in(self.ns_of(obj), obj.name(), &p),
            None => Ok(obj.clone()),
        }
    }

    /// Patches the named object in this `Api`'s namespace.
    pub fn patch(&self, name: &str, patch: &Patch) -> Result<Object> {
        self.patch_in(self.ns(), name, patch)
    }

    /// Patches `obj` (named by its metadata).
    pub fn patch_object(&self, obj: &Object, patch: &Patch) -> Result<Object> {
        self.patch_in(self.ns_of(obj), obj.name(), patch)
    }

    fn patch_in(&self, namespace: Option<&str>, name: &str, patch: &Patch) -> Result<Object> {
        let (ty, body) = patch.parts();
        let body = serde_json::to_vec(body)?;
        let out = client::patch(&self.api_version, &self.kind, namespace, name, ty, &body)?;
        Object::from_slice(&out)
    }

    /// Server-side apply of the partial object `obj` with the plugin's name as field manager:
    /// `obj` states every field this controller owns; fields it stops stating are removed.
    /// `force` takes over fields other managers hold instead of failing with 409 `Conflict`
    /// (controllers usually force: they are the authority for what they apply).
    ///
    /// apiVersion and kind are filled in when missing.
    pub fn apply(&self, obj: &Object, force: bool) -> Result<Object> {
        let obj = self.typed(obj);
        let out = client::apply(
            &self.api_version,
            &self.kind,
            self.ns_of(&obj),
            obj.name(),
            &obj.to_vec(),
            force,
        )?;
        Object::from_slice(&out)
    }

    /// Deletes the named object in this `Api`'s namespace with default options. Returns the
    /// object when deletion is deferred (finalizers), none when it is gone.
    pub fn delete(&self, name: &str) -> Result<Option<Object>> {
        self.delete_with(name, &DeleteOptions::default())
    }

    /// Deletes with options (preconditions, propagation, grace period).
    pub fn delete_with(&self, name: &str, opts: &DeleteOptions) -> Result<Option<Object>> {
        let out = client::delete(&self.api_version, &self.kind, self.ns(), name, opts)?;
        out.map(|b| Object::from_slice(&b)).transpose()
    }

    /// Adds `finalizer` to `obj` unless present (see [`crate::finalizer::add`]); returns the
    /// object as stored. A 409 `Conflict` means `obj` was stale.
    pub fn add_finalizer(&self, obj: &Object, finalizer: &str) -> Result<Object> {
        match crate::finalizer::add(obj, finalizer) {
            Some(p) => self.patch_object(obj, &p),
            None => Ok(obj.clone()),
        }
    }

    /// Removes `finalizer` from `obj` if present (see [`crate::finalizer::remove`]). A 404 is
    /// success: the object is gone, which is what removing the last finalizer leads to.
    pub fn remove_finalizer(&self, obj: &Object, finalizer: &str) -> Result<Option<Object>> {
        match crate::finalizer::remove(obj, finalizer) {
            Some(p) => match self.patch_object(obj, &p) {
                Ok(o) => Ok(Some(o)),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            },
            None => Ok(Some(obj.clone())),
        }
    }

    /// `obj` with this `Api`'s apiVersion and kind where it has none.
    fn typed(&self, obj: &Object) -> Object {
        let mut o = obj.clone();
        if let Some(m) = o.as_object_mut() {
            for (k, v) in [("apiVersion", &self.api_version), ("kind", &self.kind)] {
                if !m.get(k).is_some_and(Value::is_string) {
                    m.insert(k.into(), json!(&**v));
                }
            }
        }
        o
    }
}
