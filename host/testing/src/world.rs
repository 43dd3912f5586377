//! What a harnessed plugin's backends share: the fake cluster, the informer caches of its
//! watches (real `informer::store::Store`s with the manifest's indexes), the notifications
//! changes produce, and the record of the guest's writes.
//!
//! Caches follow the cluster's history event by event, as a watch would, so a selector
//! transition (an object updated out of a label selector) becomes a delete, and every
//! intermediate state of an object is delivered, not just the latest.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use super::cluster::{prefix_of, FakeCluster};
use super::lost_update;
use kwh_client::object::{object_key, Object};
use kwh_client::selector::{FieldSelector, LabelSelector};
use kwh_emulator::events;
use kwh_emulator::list::Selectors;
use kwh_emulator::registry::ResourceDef;
use kwh_emulator::store::{Event, EventType};
use kwh_informer::store::Store;
use kwh_plugin::backend::{informer::InformerLister, kube::refuse_outside_scope};
use kwh_plugin::backend::{
    ApiError, BoxFuture, ClientBackend, DeleteParams, PatchKind, Propagation, WriteOp, WriteRequest,
};
use kwh_plugin::index::register as register_indexes;
use kwh_plugin::manifest::Manifest;
use kwh_plugin::rbac::namespace_scope;

/// A change the informer of watch `watch` delivers to the plugin's handlers.
#[derive(Debug, Clone)]
pub enum Notification {
    /// `on-add`.
    Add {
        /// Watch index in the manifest.
        watch: u32,
        /// The new object.
        obj: Object,
    },
    /// `on-update`.
    Update {
        /// Watch index in the manifest.
        watch: u32,
        /// The cached state before.
        old: Object,
        /// The new state.
        new: Object,
    },
    /// `on-delete`.
    Delete {
        /// Watch index in the manifest.
        watch: u32,
        /// The last state.
        obj: Object,
        /// The deletion was missed (a relist no longer had the object).
        tombstone: bool,
    },
}

impl Notification {
    /// The watch index.
    pub fn watch(&self) -> u32 {
        match self {
            Notification::Add { watch, .. }
            | Notification::Update { watch, .. }
            | Notification::Delete { watch, .. } => *watch,
        }
    }

    /// `namespace/name` of the object.
    pub fn key(&self) -> String {
        let o = match self {
            Notification::Add { obj, .. } | Notification::Delete { obj, .. } => obj,
            Notification::Update { new, .. } => new,
        };
        object_key(o.namespace(), o.name())
    }

    /// `on-add`, `on-update` or `on-delete`.
    pub fn call(&self) -> &'static str {
        match self {
            Notification::Add { .. } => "on-add",
            Notification::Update { .. } => "on-update",
            Notification::Delete { .. } => "on-delete",
        }
    }
}

/// The verb of a recorded write, as the contract's `client` functions name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteVerb {
    /// `client.create`.
    Create,
    /// `client.replace`.
    Replace,
    /// `client.patch` with a JSON patch.
    JsonPatch,
    /// `client.patch` with a merge patch.
    MergePatch,
    /// `client.patch` with a strategic merge patch.
    StrategicMergePatch,
    /// `client.apply`.
    Apply,
    /// `client.delete`.
    Delete,
    /// `client.replace-status`.
    ReplaceStatus,
    /// `client.patch-status` with a JSON patch.
    JsonPatchStatus,
    /// `client.patch-status` with a merge patch.
    MergePatchStatus,
    /// `client.patch-status` with a strategic merge patch.
    StrategicMergePatchStatus,
    /// `client.apply-status`.
    ApplyStatus,
}

impl WriteVerb {
    /// The name used in scenario files and reports: `create`, `replace`, `patch` (or
    /// `json-patch`, `merge-patch`, `strategic-merge-patch`), `apply`, `delete`,
    /// `replace-status`, `patch-status` (or `json-patch-status`, `merge-patch-status`,
    /// `strategic-merge-patch-status`), `apply-status`.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteVerb::Create => "create",
            WriteVerb::Replace => "replace",
            WriteVerb::JsonPatch => "json-patch",
            WriteVerb::MergePatch => "merge-patch",
            WriteVerb::StrategicMergePatch => "strategic-merge-patch",
            WriteVerb::Apply => "apply",
            WriteVerb::Delete => "delete",
            WriteVerb::ReplaceStatus => "replace-status",
            WriteVerb::JsonPatchStatus => "json-patch-status",
            WriteVerb::MergePatchStatus => "merge-patch-status",
            WriteVerb::StrategicMergePatchStatus => "strategic-merge-patch-status",
            WriteVerb::ApplyStatus => "apply-status",
        }
    }

    /// Whether a scenario's verb name matches (`patch` matches every patch type of the object,
    /// `patch-status` every patch type of its status).
    pub fn matches(self, name: &str) -> bool {
        name == self.as_str()
            || name == "patch"
                && matches!(
                    self,
                    WriteVerb::JsonPatch | WriteVerb::MergePatch | WriteVerb::StrategicMergePatch
                )
            || name == "patch-status"
                && matches!(
                    self,
                    WriteVerb::JsonPatchStatus
                        | WriteVerb::MergePatchStatus
                        | WriteVerb::StrategicMergePatchStatus
                )
    }

    fn of(op: &WriteOp) -> WriteVerb {
        match op {
            WriteOp::Create => WriteVerb::Create,
            WriteOp::Replace => WriteVerb::Replace,
            WriteOp::Patch(PatchKind::Json) => WriteVerb::JsonPatch,
            WriteOp::Patch(PatchKind::Merge) => WriteVerb::MergePatch,
            WriteOp::Patch(PatchKind::StrategicMerge) => WriteVerb::StrategicMergePatch,
            WriteOp::Apply { .. } => WriteVerb::Apply,
            WriteOp::Delete(_) => WriteVerb::Delete,
            WriteOp::ReplaceStatus => WriteVerb::ReplaceStatus,
            WriteOp::PatchStatus(PatchKind::Json) => WriteVerb::JsonPatchStatus,
            WriteOp::PatchStatus(PatchKind::Merge) => WriteVerb::MergePatchStatus,
            WriteOp::PatchStatus(PatchKind::StrategicMerge) => WriteVerb::StrategicMergePatchStatus,
            WriteOp::ApplyStatus { .. } => WriteVerb::ApplyStatus,
        }
    }
}

/// One write the guest made (after its manifest allowed it) and what the cluster answered.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedWrite {
    /// The verb.
    pub verb: WriteVerb,
    /// The full request (operation with delete options / apply force, target, raw body).
    pub request: WriteRequest,
    /// The request body as JSON (YAML for an apply that sent YAML); for a delete, the
    /// `DeleteOptions` the client sends (preconditions, propagationPolicy, gracePeriodSeconds).
    pub body: Value,
    /// The object's name: the request's, or for a create the stored object's.
    pub name: String,
    /// The answer: the stored object (none when the server answered a delete with a Status),
    /// or the API error the guest saw.
    pub result: Result<Option<Value>, ApiError>,
}

impl RecordedWrite {
    /// `namespace/name` (or `name`) of the target.
    pub fn key(&self) -> String {
        object_key(self.request.namespace.as_deref(), &self.name)
    }
}

/// One watch's cache and how it follows the cluster.
struct WatchCache {
    def: Arc<ResourceDef>,
    prefix: String,
    selectors: Selectors,
    store: Arc<Store>,
    /// Everything up to this RV has been applied.
    rv: u64,
    /// Wound back and not following the cluster until [`World::catch_up`] (a restart against
    /// a lagging API server replica).
    lagging: bool,
}

/// A crash the test asked for: after this many more writes the plugin's process is gone.
#[derive(Default)]
struct Crash {
    after_writes: Option<usize>,
    dead: bool,
}

/// The shared state of one harnessed plugin.
pub(crate) struct World {
    pub(crate) cluster: FakeCluster,
    pub(crate) lister: Arc<InformerLister>,
    caches: Mutex<Vec<WatchCache>>,
    pending: Mutex<Vec<Notification>>,
    writes: Mutex<Vec<RecordedWrite>>,
    crash: Mutex<Crash>,
    lost_updates: Mutex<Vec<String>>,
    manager: String,
    /// The one namespace the plugin may write in, as the host would confine it (no host
    /// `--namespace` here: watches that name no namespace confine nothing).
    confined_to: Option<String>,
}

/// A watch the fake cluster cannot serve (the plugin would fail to load in production).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {index}: kind {kind} ({api_version}) is not served by the fake cluster")]
pub struct UnservedKind {
    /// `watch` or `write`.
    pub what: &'static str,
    /// Position in its list.
    pub index: usize,
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
}

impl World {
    /// Caches for every watch of `manifest`, filled from the cluster's current state without
    /// notifications (the test's "given" state).
    pub(crate) fn new(cluster: FakeCluster, manifest: &Manifest) -> Result<Self, UnservedKind> {
        let lister = Arc::new(InformerLister::new());
        let mut caches = Vec::new();
        for (index, w) in manifest.watches.iter().enumerate() {
            let def = cluster
                .def(&w.api_version, &w.kind)
                .map_err(|_| UnservedKind {
                    what: "watch",
                    index,
                    api_version: w.api_version.clone(),
                    kind: w.kind.clone(),
                })?;
            // The manifest validated both selectors' syntax at load.
            let selectors = Selectors {
                labels: LabelSelector::parse(w.label_selector.as_deref().unwrap_or(""))
                    .unwrap_or_default(),
                fields: FieldSelector::parse(w.field_selector.as_deref().unwrap_or(""))
                    .unwrap_or_default(),
            };
            // What production registers on the shared informer store: the `namespace` index
            // and the watch's declared indexes, resolved through the plugin's own names.
            let store = Arc::new(Store::with_namespace_index());
            let indexes = register_indexes(&store, &w.indexes);
            let namespace = w.namespace.as_deref().filter(|_| def.namespaced);
            lister.add_indexed_store(&w.api_version, &w.kind, namespace, store.clone(), indexes);
            caches.push(WatchCache {
                prefix: prefix_of(&def, namespace),
                def,
                selectors,
                store,
                rv: 0,
                lagging: false,
            });
        }
        for (index, w) in manifest.writes.iter().enumerate() {
            if cluster.def(&w.api_version, &w.kind).is_err() {
                return Err(UnservedKind {
                    what: "write",
                    index,
                    api_version: w.api_version.clone(),
                    kind: w.kind.clone(),
                });
            }
        }
        for c in &mut caches {
            relist(&cluster, c);
        }
        let confined_to = namespace_scope(manifest, None, |a, k| {
            cluster.def(a, k).ok().map(|d| d.namespaced)
        });
        Ok(World {
            cluster,
            lister,
            caches: Mutex::new(caches),
            pending: Mutex::new(Vec::new()),
            writes: Mutex::new(Vec::new()),
            crash: Mutex::new(Crash::default()),
            lost_updates: Mutex::new(Vec::new()),
            manager: manifest.name.clone(),
            confined_to,
        })
    }

    /// Applies every cluster change since the last sync to the caches; returns the
    /// notifications, in the cluster's order.
    pub(crate) fn sync(&self) -> Vec<Notification> {
        let mut out: Vec<(u64, Notification)> = Vec::new();
        let mut caches = self.caches.lock();
        for (i, c) in caches.iter_mut().enumerate() {
            if c.lagging {
                continue;
            }
            let mut events = Vec::new();
            let store = &self.cluster.shared().store;
            match store.events_after(&c.def.store_key, c.rv, usize::MAX, &mut events) {
                Ok(rv) => {
                    for e in &events {
                        if let Some(n) = apply_event(c, i as u32, e) {
                            out.push((e.rv, n));
                        }
                    }
                    c.rv = rv;
                }
                Err(_) => {
                    // History outgrew the window (10,000 events per resource): relist, as the
                    // reflector does after a 410, and deliver what a Replace delivers.
                    let before: std::collections::HashMap<String, Object> = c
                        .store
                        .list()
                        .into_iter()
                        .map(|o| (object_key(o.namespace(), o.name()), o))
                        .collect();
                    relist(&self.cluster, c);
                    let watch = i as u32;
                    for new in c.store.list() {
                        let key = object_key(new.namespace(), new.name());
                        match before.get(&key) {
                            None => out.push((c.rv, Notification::Add { watch, obj: new })),
                            Some(old) if old.resource_version() != new.resource_version() => {
                                let old = old.clone();
                                out.push((c.rv, Notification::Update { watch, old, new }));
                            }
                            Some(_) => {}
                        }
                    }
                    for (key, obj) in before {
                        if !c.store.contains_key(&key) {
                            let tombstone = true;
                            out.push((
                                c.rv,
                                Notification::Delete {
                                    watch,
                                    obj,
                                    tombstone,
                                },
                            ));
                        }
                    }
                }
            }
        }
        out.sort_by_key(|(rv, _)| *rv);
        out.into_iter().map(|(_, n)| n).collect()
    }

    /// Syncs and keeps the notifications for a later delivery.
    pub(crate) fn sync_pending(&self) {
        let n = self.sync();
        self.pending.lock().extend(n);
    }

    /// Takes the notifications waiting for delivery.
    pub(crate) fn take_pending(&self) -> Vec<Notification> {
        std::mem::take(&mut *self.pending.lock())
    }

    /// How many notifications wait for delivery.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.lock().len()
    }

    pub(crate) fn writes(&self) -> Vec<RecordedWrite> {
        self.writes.lock().clone()
    }

    pub(crate) fn take_writes(&self) -> Vec<RecordedWrite> {
        std::mem::take(&mut *self.writes.lock())
    }

    /// Every cached object, per watch, in key order.
    pub(crate) fn cached_all(&self) -> Vec<(u32, Vec<Object>)> {
        self.caches
            .lock()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut objs = c.store.list();
                objs.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
                (i as u32, objs)
            })
            .collect()
    }

    /// A cached object of watch `watch`, by key.
    pub(crate) fn cached(&self, watch: usize, key: &str) -> Option<Object> {
        self.caches.lock().get(watch)?.store.get_by_key(key)
    }

    fn perform(&self, req: WriteRequest) -> Result<Option<Bytes>, ApiError> {
        if self.crash.lock().dead {
            // The process is gone: nothing it still tries reaches the cluster.
            return Err(ApiError::new(
                503,
                "ServiceUnavailable",
                "the plugin's process has stopped (a crash the test asked for)",
            ));
        }
        // Refused before it is sent, as in production: the write is not recorded.
        if self.confined_to.is_some() {
            let def = self.cluster.def(&req.api_version, &req.kind)?;
            refuse_outside_scope(
                self.confined_to.as_deref(),
                &self.manager,
                &def.kind,
                def.namespaced,
                req.namespace.as_deref(),
            )?;
        }
        let seen = self.seen_and_current(&req);
        let result = self.cluster.write(&req, &self.manager);
        let stored = match &result {
            Ok(Some(b)) => serde_json::from_slice::<Value>(b).ok(),
            _ => None,
        };
        if let (Some((seen, current)), Some(after)) = (seen, &stored) {
            let status = matches!(
                req.op,
                WriteOp::ReplaceStatus | WriteOp::PatchStatus(_) | WriteOp::ApplyStatus { .. }
            );
            let what = format!(
                "{} {} {}",
                WriteVerb::of(&req.op).as_str(),
                req.kind,
                object_key(req.namespace.as_deref(), req.name.as_deref().unwrap_or(""))
            );
            self.lost_updates.lock().extend(
                lost_update::undone(&seen, &current, after, status)
                    .into_iter()
                    .map(|u| format!("{what}: {u}")),
            );
        }
        let name = match (&req.name, &stored) {
            (Some(n), _) => n.clone(),
            (None, Some(v)) => v["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            (None, None) => body_value(&req.body)["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        };
        let body = match &req.op {
            WriteOp::Delete(d) => delete_body(d),
            _ => body_value(&req.body),
        };
        self.writes.lock().push(RecordedWrite {
            verb: WriteVerb::of(&req.op),
            body,
            name,
            result: result.clone().map(|_| stored),
            request: req,
        });
        {
            let mut c = self.crash.lock();
            match c.after_writes {
                Some(n) if n <= 1 => {
                    c.after_writes = None;
                    c.dead = true;
                }
                Some(n) => c.after_writes = Some(n - 1),
                None => {}
            }
        }
        self.sync_pending();
        result
    }

    /// For a write that replaces or patches an object the plugin's cache holds in a state
    /// older than the cluster's: the cached state (what the plugin saw) and the current one.
    /// Nothing otherwise, which is nearly always: no cost on the common path.
    fn seen_and_current(&self, req: &WriteRequest) -> Option<(Value, Value)> {
        if !matches!(
            req.op,
            WriteOp::Replace
                | WriteOp::Patch(_)
                | WriteOp::Apply { .. }
                | WriteOp::ReplaceStatus
                | WriteOp::PatchStatus(_)
                | WriteOp::ApplyStatus { .. }
        ) {
            return None;
        }
        let name = req.name.as_deref()?;
        let def = self.cluster.def(&req.api_version, &req.kind).ok()?;
        let key = object_key(req.namespace.as_deref(), name);
        let seen = self
            .caches
            .lock()
            .iter()
            .filter(|c| c.def.store_key == def.store_key)
            .find_map(|c| c.store.get_by_key(&key))?;
        let current =
            self.cluster
                .get(&req.api_version, &req.kind, req.namespace.as_deref(), name)?;
        if seen.resource_version() == current.resource_version() {
            return None;
        }
        Some((seen.to_value().ok()?, current.to_value().ok()?))
    }

    /// Writes that set back a change the plugin had not seen (see [`lost_update`]), described.
    pub(crate) fn lost_updates(&self) -> Vec<String> {
        self.lost_updates.lock().clone()
    }

    /// After `writes` more writes, the plugin's process stops: later writes fail and reach
    /// nothing, until [`World::restart`].
    pub(crate) fn crash_after(&self, writes: usize) {
        let mut c = self.crash.lock();
        c.after_writes = Some(writes.max(1));
        c.dead = false;
    }

    /// Whether an armed crash has happened.
    pub(crate) fn is_dead(&self) -> bool {
        self.crash.lock().dead
    }

    /// A new process: writes reach the cluster again, pending notifications are gone (the new
    /// process lists), and every cache is current again.
    pub(crate) fn restart(&self) {
        *self.crash.lock() = Crash::default();
        self.catch_up();
        drop(self.sync());
        self.pending.lock().clear();
    }

    /// Winds watch `watch`'s cache back by its last `events` changes, and keeps it there until
    /// [`World::catch_up`]: what an informer lists from an API server replica that lags. Then
    /// it catches up through the same events, as its watch would. The cluster's own history
    /// holds each change's previous state (the window of the last 10,000 per resource).
    /// Returns how many changes were wound back (fewer when the cache has not had that many).
    pub(crate) fn rewind(&self, watch: usize, events: usize) -> usize {
        let mut caches = self.caches.lock();
        let Some(c) = caches.get_mut(watch) else {
            return 0;
        };
        // Only as far back as the history window reaches.
        let (history, _) = self.cluster.history(&c.def);
        // The changes this cache took, newest first: its object in scope before or after.
        let took = |e: &Event| {
            matches(c, &e.key, &e.obj) || e.prev.as_ref().is_some_and(|p| matches(c, &e.key, p))
        };
        let undone: Vec<&Arc<Event>> = history
            .iter()
            .rev()
            .filter(|e| e.rv <= c.rv && took(e))
            .take(events)
            .collect();
        for e in &undone {
            match e.prev.as_ref().filter(|p| matches(c, &e.key, p)) {
                Some(p) => {
                    c.store.upsert(events::serve(&c.def, p.clone()));
                }
                None => c.store.delete_key(&e.key),
            }
        }
        if let Some(e) = undone.last() {
            c.rv = e.rv.saturating_sub(1);
            c.lagging = true;
        }
        undone.len()
    }

    /// Lagging caches follow the cluster again (their next sync delivers what they missed).
    pub(crate) fn catch_up(&self) {
        for c in self.caches.lock().iter_mut() {
            c.lagging = false;
        }
    }
}

/// A body as JSON, else YAML (apply accepts both), else the text itself.
fn body_value(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .or_else(|_| yaml_serde::from_slice(body))
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// The `DeleteOptions` body the production client sends for `d`.
fn delete_body(d: &DeleteParams) -> Value {
    let mut v = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
    if let Some(p) = d.propagation {
        v["propagationPolicy"] = match p {
            Propagation::Orphan => "Orphan",
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
        }
        .into();
    }
    if let Some(g) = d.grace_period_seconds {
        v["gracePeriodSeconds"] = g.into();
    }
    if d.precondition_uid.is_some() || d.precondition_resource_version.is_some() {
        let mut pre = serde_json::Map::new();
        if let Some(u) = &d.precondition_uid {
            pre.insert("uid".into(), u.clone().into());
        }
        if let Some(r) = &d.precondition_resource_version {
            pre.insert("resourceVersion".into(), r.clone().into());
        }
        v["preconditions"] = pre.into();
    }
    v
}

fn matches(c: &WatchCache, key: &str, o: &Object) -> bool {
    key.starts_with(&c.prefix) && c.selectors.matches(o)
}

/// What a watch with this cache's scope and selectors delivers for one cluster event. The
/// selectors read the stored object; the watch gets it as its resource serves it (an
/// `events.k8s.io/v1` Event is stored as a core one).
fn apply_event(c: &WatchCache, watch: u32, e: &Event) -> Option<Notification> {
    let key = &*e.key;
    let cached = c.store.get_by_key(key);
    let served = || events::serve(&c.def, e.obj.clone());
    match e.ty {
        EventType::Added | EventType::Modified if matches(c, key, &e.obj) => {
            let new = served();
            c.store.upsert(new.clone());
            Some(match cached {
                Some(old) => Notification::Update { watch, old, new },
                None => Notification::Add { watch, obj: new },
            })
        }
        // Out of scope now (or deleted): the watch says DELETED with the latest state.
        _ => {
            cached?;
            c.store.delete_key(key);
            Some(Notification::Delete {
                watch,
                obj: served(),
                tombstone: false,
            })
        }
    }
}

fn relist(cluster: &FakeCluster, c: &mut WatchCache) {
    let (rv, items) = cluster.shared().store.snapshot(&c.def.store_key, &c.prefix);
    let items: Vec<Object> = items
        .into_iter()
        .filter(|o| c.selectors.matches(o))
        .map(|o| events::serve(&c.def, o))
        .collect();
    c.store.replace(items);
    c.rv = rv;
}

/// The `client` backend of a harnessed plugin: writes go to the fake cluster and are recorded.
pub(crate) struct FakeClient(pub(crate) Arc<World>);

impl ClientBackend for FakeClient {
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>> {
        let r = self.0.perform(req);
        Box::pin(async move { r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VirtualClock;
    use kwh_plugin::manifest::{Manifest, WatchSpec};
    use serde_json::json;

    fn watch(namespace: Option<&str>, labels: Option<&str>) -> WatchSpec {
        WatchSpec {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: namespace.map(str::to_owned),
            label_selector: labels.map(str::to_owned),
            field_selector: None,
            indexes: Vec::new(),
        }
    }

    fn world(watches: Vec<WatchSpec>) -> World {
        let cluster = FakeCluster::new(VirtualClock::default()).expect("cluster");
        let m = Manifest {
            name: "t".into(),
            watches,
            writes: Vec::new(),
            resync_period: None,
            workers: 1,
            records_events: false,
        };
        World::new(cluster, &m).expect("world")
    }

    fn cm(ns: &str, name: &str, app: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}}})
    }

    fn calls(n: &[Notification]) -> Vec<String> {
        n.iter()
            .map(|n| format!("{} {} {}", n.call(), n.watch(), n.key()))
            .collect()
    }

    #[test]
    fn selector_transitions_become_adds_and_deletes_and_namespaces_scope_watches() {
        let w = world(vec![watch(None, Some("app=web")), watch(Some("a"), None)]);
        let c = &w.cluster;
        c.create(cm("a", "x", "web")).expect("create");
        c.create(cm("b", "y", "db")).expect("create");
        assert_eq!(calls(&w.sync()), ["on-add 0 a/x", "on-add 1 a/x"]);
        c.replace(cm("a", "x", "db")).expect("relabel");
        assert_eq!(calls(&w.sync()), ["on-delete 0 a/x", "on-update 1 a/x"]);
        assert!(w.cached(0, "a/x").is_none());
        c.replace(cm("b", "y", "web")).expect("relabel");
        assert_eq!(calls(&w.sync()), ["on-add 0 b/y"]);
        c.delete("v1", "ConfigMap", Some("b"), "y").expect("delete");
        let n = w.sync();
        assert_eq!(calls(&n), ["on-delete 0 b/y"]);
        assert!(matches!(
            n[0],
            Notification::Delete {
                tombstone: false,
                ..
            }
        ));
        // Old and new states of an update are the cached one and the stored one.
        c.replace(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "a"}, "data": {"v": "2"}}))
            .expect("replace");
        match &w.sync()[..] {
            [Notification::Update { old, new, .. }] => {
                assert_eq!(old.meta().label("app"), Some("db"));
                assert_eq!(new.to_value().expect("json")["data"]["v"], "2");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn history_beyond_the_window_is_recovered_by_a_relist() {
        let w = world(vec![watch(None, None)]);
        let c = &w.cluster;
        c.create(cm("a", "x", "web")).expect("create");
        c.create(cm("a", "gone", "web")).expect("create");
        assert_eq!(w.sync().len(), 2);
        c.shared().store.set_window(1);
        c.replace(cm("a", "x", "db")).expect("update");
        c.delete("v1", "ConfigMap", Some("a"), "gone")
            .expect("delete");
        c.create(cm("a", "new", "web")).expect("create");
        c.create(cm("a", "newer", "web")).expect("create");
        let n = w.sync();
        let mut got = calls(&n);
        got.sort();
        assert_eq!(
            got,
            [
                "on-add 0 a/new",
                "on-add 0 a/newer",
                "on-delete 0 a/gone",
                "on-update 0 a/x"
            ]
        );
        assert!(n.iter().any(|n| matches!(
            n,
            Notification::Delete {
                tombstone: true,
                ..
            }
        )));
        assert!(w.cached(0, "a/gone").is_none());
    }

    #[test]
    fn writes_outside_a_confined_plugins_namespace_are_refused_as_in_production() {
        // All watches in "team" and only namespaced writes: the host confines the plugin there
        // (rbac::namespace_scope), so the harness must refuse the same writes.
        let cluster_with_namespaces = || {
            let c = FakeCluster::new(VirtualClock::default()).expect("cluster");
            for ns in ["team", "other"] {
                c.create(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": ns}}))
                    .expect("namespace");
            }
            c
        };
        let cluster = cluster_with_namespaces();
        let m = Manifest {
            name: "t".into(),
            watches: vec![watch(Some("team"), None)],
            writes: vec![kwh_plugin::manifest::WriteSpec::new(
                "v1",
                "ConfigMap",
                &[kwh_plugin::manifest::Verb::Create],
            )],
            resync_period: None,
            workers: 1,
            records_events: false,
        };
        let w = World::new(cluster, &m).expect("world");
        let create = |ns: &str| WriteRequest {
            op: WriteOp::Create,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some(ns.into()),
            name: None,
            body: serde_json::to_vec(&cm(ns, "made", "web")).expect("json"),
            reconciling: None,
        };
        let e = w.perform(create("other")).expect_err("refused");
        assert_eq!(e.code, 403, "{e}");
        assert!(e.message.contains("confined to namespace \"team\""), "{e}");
        assert!(
            w.writes().is_empty(),
            "a refused write never reaches the cluster"
        );
        w.perform(create("team"))
            .expect("allowed in its own namespace");
        assert_eq!(w.writes().len(), 1);

        // Watching every namespace confines nothing.
        let cluster = cluster_with_namespaces();
        let m = Manifest {
            watches: vec![watch(None, None)],
            ..m
        };
        let w = World::new(cluster, &m).expect("world");
        w.perform(create("other")).expect("not confined");
    }

    #[test]
    fn scenario_verb_names_match_the_status_writes_apart_from_the_object_writes() {
        let status_patches = [
            WriteVerb::JsonPatchStatus,
            WriteVerb::MergePatchStatus,
            WriteVerb::StrategicMergePatchStatus,
        ];
        for v in status_patches {
            assert!(v.matches("patch-status"), "{v:?}");
            assert!(!v.matches("patch"), "{v:?}");
            assert!(v.matches(v.as_str()), "{v:?}");
        }
        assert!(!WriteVerb::MergePatch.matches("patch-status"));
        assert!(!WriteVerb::MergePatch.matches("merge-patch-status"));
        assert!(WriteVerb::ApplyStatus.matches("apply-status"));
        assert!(!WriteVerb::ApplyStatus.matches("apply"));
        assert!(!WriteVerb::Apply.matches("apply-status"));
        assert!(!WriteVerb::ApplyStatus.matches("patch-status"));
        let field_manager: Arc<str> = Arc::from("p");
        let op = WriteOp::ApplyStatus {
            field_manager,
            force: true,
        };
        assert_eq!(WriteVerb::of(&op), WriteVerb::ApplyStatus);
        assert_eq!(
            WriteVerb::of(&WriteOp::PatchStatus(PatchKind::Json)),
            WriteVerb::JsonPatchStatus
        );
    }

    #[test]
    fn given_state_fills_caches_without_notifications() {
        let cluster = FakeCluster::new(VirtualClock::default()).expect("cluster");
        cluster.create(cm("a", "x", "web")).expect("create");
        let m = Manifest {
            name: "t".into(),
            watches: vec![watch(None, None)],
            writes: Vec::new(),
            resync_period: None,
            workers: 1,
            records_events: false,
        };
        let w = World::new(cluster, &m).expect("world");
        assert!(w.cached(0, "a/x").is_some());
        assert!(w.sync().is_empty());
    }
}
