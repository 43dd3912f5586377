//! The real implementations of the [`super::backend`] traits: the shared informer stores for
//! reads, `kube::Client` for writes, and the plugin's rate-limited workqueue.
//!
//! Kinds are resolved to resources by discovery once, at load; nothing here talks to discovery
//! again, so a write never waits on a discovery round trip.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::RwLock;

use super::backend::{
    ApiError, BoxFuture, ClientBackend, DeleteParams, ListerBackend, PatchKind, Propagation,
    QueueBackend, WriteOp, WriteRequest,
};
use super::index::IndexNames;
use super::reconcile::PluginQueue;
use kwh_client::client::{Deleted, Patch, WriteParams};
use kwh_client::object::{with_object_key, Object};
use kwh_client::selector::LabelSelector;
use kwh_client::{ApiResource, Client};
use kwh_coordination::ownership::{Admit, Ownership, PluginOwnership};
use kwh_informer::store::{Store, NAMESPACE_INDEX};

/// One watched scope's cache: the informer's indexer, the namespace it is limited to, and the
/// custom indexes the plugin declared on that watch (its index name → the store's).
struct Scope {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    store: Arc<Store>,
    indexes: IndexNames,
}

/// Lister reads served from the shared informer caches of the plugin's watches.
///
/// Filled after the plugin's handlers are registered (the stores belong to informers that only
/// exist then); until then every read finds nothing, which is what an unsynced cache answers.
#[derive(Default)]
pub struct InformerLister {
    scopes: RwLock<Vec<Scope>>,
}

impl InformerLister {
    /// An empty lister.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the cache of one watch of `api_version`/`kind` (limited to `namespace` if set).
    pub fn add_store(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        store: Arc<Store>,
    ) {
        self.add_indexed_store(api_version, kind, namespace, store, IndexNames::new());
    }

    /// Adds the cache of one watch together with the custom indexes the plugin declared on it
    /// (already registered on `store`, see [`super::index::register`]). Caches are added in the
    /// manifest's order: the n-th added is watch number n, which `get_by_key` reads. Index
    /// queries resolve the guest's names through `indexes` only, so a plugin reaches the built-in
    /// `namespace` index and its own indexes, never another plugin's on the same shared store.
    pub fn add_indexed_store(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        store: Arc<Store>,
        indexes: IndexNames,
    ) {
        self.scopes.write().push(Scope {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            store,
            indexes,
        });
    }

    /// Stores of one kind. Several watches of a kind (different namespaces or selectors) are
    /// several caches; reads consult each.
    fn stores(&self, api_version: &str, kind: &str) -> Vec<(Option<String>, Arc<Store>)> {
        self.scopes
            .read()
            .iter()
            .filter(|s| s.api_version == api_version && s.kind == kind)
            .map(|s| (s.namespace.clone(), s.store.clone()))
            .collect()
    }
}

fn bad_index(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(e.to_string())
}

impl ListerBackend for InformerLister {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, ApiError> {
        // Every reconcile's read passes here: the scopes are searched in place (no list of them
        // collected, no store handle cloned), under their read lock, which only a new watch
        // ever takes for writing.
        Ok(with_object_key(namespace, name, |key| {
            self.scopes
                .read()
                .iter()
                .filter(|s| s.api_version == api_version && s.kind == kind)
                .find_map(|s| s.store.get_by_key(key))
        }))
    }

    fn get_by_key(&self, watch: u32, key: &str) -> Result<Option<Object>, ApiError> {
        let scopes = self.scopes.read();
        let Some(scope) = usize::try_from(watch).ok().and_then(|i| scopes.get(i)) else {
            return Ok(None);
        };
        Ok(scope.store.get_by_key(key))
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Object>, ApiError> {
        let selector = match label_selector.filter(|s| !s.trim().is_empty()) {
            Some(s) => Some(
                LabelSelector::parse(s)
                    .map_err(|e| ApiError::bad_request(format!("label selector {s:?}: {e}")))?,
            ),
            None => None,
        };
        let pred = |o: &Object| selector.as_ref().is_none_or(|s| s.matches_meta(&o.meta()));
        let stores = self.stores(api_version, kind);
        let mut out = Vec::new();
        for (scope_ns, store) in &stores {
            if let (Some(want), Some(have)) = (namespace, scope_ns.as_deref()) {
                if want != have {
                    continue;
                }
            }
            out.extend(store.list_filtered(namespace, &pred));
        }
        if stores.len() > 1 {
            // Overlapping watches of one kind hold the same object twice.
            out.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
            out.dedup_by(|a, b| a.namespace() == b.namespace() && a.name() == b.name());
        }
        Ok(out)
    }

    fn by_index(
        &self,
        api_version: &str,
        kind: &str,
        index_name: &str,
        index_value: &str,
    ) -> Result<Vec<Object>, ApiError> {
        // (store, the store's name for the index) of every cache of the kind that has it.
        let mut stores: Vec<(Arc<Store>, String)> = Vec::new();
        let mut declared: Vec<&str> = Vec::new();
        let scopes = self.scopes.read();
        let mut any_scope = false;
        for sc in scopes
            .iter()
            .filter(|s| s.api_version == api_version && s.kind == kind)
        {
            any_scope = true;
            declared.extend(sc.indexes.keys().map(String::as_str));
            let internal = if index_name == NAMESPACE_INDEX {
                Some(NAMESPACE_INDEX.to_string())
            } else {
                sc.indexes.get(index_name).cloned()
            };
            if let Some(internal) = internal {
                stores.push((sc.store.clone(), internal));
            }
        }
        if !any_scope {
            // Not wired yet: an unsynced cache finds nothing.
            return Ok(Vec::new());
        }
        if stores.is_empty() {
            declared.sort_unstable();
            declared.dedup();
            declared.insert(0, NAMESPACE_INDEX);
            return Err(ApiError::bad_request(format!(
                "no index {index_name:?} on {kind} ({api_version}): the manifest's watches of that \
                 kind declare {}",
                declared.join(", ")
            )));
        }
        drop(scopes);
        let mut out = Vec::new();
        for (store, internal) in &stores {
            out.extend(store.by_index(internal, index_value).map_err(bad_index)?);
        }
        if stores.len() > 1 {
            out.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
            out.dedup_by(|a, b| a.namespace() == b.namespace() && a.name() == b.name());
        }
        Ok(out)
    }
}

/// Writes through the API client, with kinds resolved at load.
pub struct KubeClientBackend {
    client: Client,
    field_manager: String,
    resources: HashMap<(String, String), ApiResource>,
    confined_to: Option<String>,
    own: PluginOwnership,
}

impl KubeClientBackend {
    /// A backend writing as `field_manager` (the plugin's name) with the given resolved kinds,
    /// keyed by (apiVersion, kind).
    pub fn new(
        client: Client,
        field_manager: &str,
        resources: HashMap<(String, String), ApiResource>,
    ) -> Self {
        KubeClientBackend {
            client,
            field_manager: field_manager.to_string(),
            resources,
            confined_to: None,
            own: Ownership::single().for_plugin(field_manager, false),
        }
    }

    /// Refuses every write while `own` is not active: a standby, or a leader whose lease may
    /// have passed to another replica, sends nothing.
    pub fn owned_by(mut self, own: PluginOwnership) -> Self {
        self.own = own;
        self
    }

    /// Refuses writes outside `namespace` (see [`super::rbac::namespace_scope`]): the plugin's
    /// RBAC is then a Role in that namespace, and a write elsewhere must fail the same way
    /// whether or not the cluster's RBAC is that tight.
    pub fn confined_to(mut self, namespace: Option<String>) -> Self {
        self.confined_to = namespace;
        self
    }
}

/// The confinement rule of [`super::rbac::namespace_scope`]: a write of a namespaced kind
/// outside the plugin's one namespace is refused (403), and the log names it. One function for
/// the host's client and the test harness's fake one, so a guest's tests see what production does.
pub fn refuse_outside_scope(
    scope: Option<&str>,
    plugin: &str,
    kind: &str,
    namespaced: bool,
    namespace: Option<&str>,
) -> Result<(), ApiError> {
    let Some(scope) = scope.filter(|_| namespaced) else {
        return Ok(());
    };
    match namespace {
        Some(ns) if ns != scope => {
            tracing::warn!(
                plugin,
                kind,
                namespace = ns,
                scope,
                "client write refused: outside the plugin's namespace"
            );
            Err(ApiError::forbidden(format!(
                "plugin {plugin:?} is confined to namespace {scope:?} (all its watches are there) and may not write {kind} in namespace {ns:?}"
            )))
        }
        _ => Ok(()),
    }
}

impl From<kwh_client::Error> for ApiError {
    fn from(e: kwh_client::Error) -> Self {
        use kwh_client::Error as E;
        match e {
            E::Api(s) => ApiError::new(s.code, s.reason, s.message),
            E::Timeout(d) => {
                ApiError::new(504, "Timeout", format!("request timed out after {d:?}"))
            }
            other => ApiError::unavailable(other.to_string()),
        }
    }
}

fn delete_params(d: DeleteParams) -> Result<kwh_client::client::DeleteParams, ApiError> {
    let grace = match d.grace_period_seconds {
        Some(g) => Some(u32::try_from(g).map_err(|_| {
            ApiError::bad_request(format!("gracePeriodSeconds must be non-negative, got {g}"))
        })?),
        None => None,
    };
    Ok(kwh_client::client::DeleteParams {
        propagation_policy: d.propagation.map(|p| {
            match p {
                Propagation::Orphan => "Orphan",
                Propagation::Background => "Background",
                Propagation::Foreground => "Foreground",
            }
            .to_string()
        }),
        grace_period_seconds: grace,
        precondition_uid: d.precondition_uid,
        precondition_resource_version: d.precondition_resource_version,
        dry_run: false,
    })
}

/// One write sent as the guest asked it: the verb its operation maps to, PATCH of
/// `.../status` for the status writes (the server keeps only their status there).
async fn send(
    client: Client,
    res: ApiResource,
    req: WriteRequest,
    params: WriteParams,
) -> Result<Option<Bytes>, ApiError> {
    let ns = if res.namespaced {
        match req.namespace.as_deref() {
            Some(ns) => Some(ns),
            None => {
                return Err(ApiError::bad_request(format!(
                    "{} is namespaced: a namespace is required",
                    res.kind
                )))
            }
        }
    } else {
        None
    };
    let body = Bytes::from(req.body);
    let name = || {
        req.name
            .as_deref()
            .ok_or_else(|| ApiError::bad_request("a name is required"))
    };
    // PATCH .../status for the status writes: the server keeps only their status.
    let sub = req.op.subresource();
    let obj = match req.op {
        WriteOp::Create => client.create(&res, ns, body, &params).await?,
        WriteOp::Replace => client.replace(&res, ns, name()?, body, &params).await?,
        WriteOp::ReplaceStatus => {
            client
                .replace_status(&res, ns, name()?, body, &params)
                .await?
        }
        WriteOp::Patch(kind) | WriteOp::PatchStatus(kind) => {
            let patch = match kind {
                PatchKind::Json => Patch::Json(body),
                PatchKind::Merge => Patch::Merge(body),
                PatchKind::StrategicMerge => Patch::Strategic(body),
            };
            client
                .patch(&res, ns, name()?, sub, &patch, &params)
                .await?
        }
        WriteOp::Apply {
            field_manager,
            force,
        }
        | WriteOp::ApplyStatus {
            field_manager,
            force,
        } => {
            let params = WriteParams {
                field_manager: Some(field_manager.to_string()),
                force,
                dry_run: false,
            };
            client
                .patch(&res, ns, name()?, sub, &Patch::Apply(body), &params)
                .await?
        }
        WriteOp::Delete(d) => {
            let p = delete_params(d)?;
            return match client.delete(&res, ns, name()?, &p).await? {
                Deleted::Object(o) => Ok(Some(o.raw_bytes())),
                Deleted::Status(_) => Ok(None),
            };
        }
    };
    Ok(Some(obj.raw_bytes()))
}

impl KubeClientBackend {
    /// Why this write may not be sent, if it may not: this replica is not active, the key
    /// being reconciled moved to another replica, or the object is outside the plugin's
    /// namespace.
    fn refusal(&self, req: &WriteRequest, res: &ApiResource) -> Option<ApiError> {
        if !self.own.active() {
            let msg = format!(
                "plugin {:?}: this replica is not the leader or lost its lease; write of {} refused",
                self.field_manager, req.kind
            );
            return Some(ApiError::unavailable(msg));
        }
        if let Some(key) = &req.reconciling {
            if self.own.admit(key) == Admit::No {
                let msg = format!(
                    "plugin {:?}: key {key} moved to another replica during its reconcile; write of {} refused",
                    self.field_manager, req.kind
                );
                return Some(ApiError::unavailable(msg));
            }
        }
        refuse_outside_scope(
            self.confined_to.as_deref(),
            &self.field_manager,
            &res.kind,
            res.namespaced,
            req.namespace.as_deref(),
        )
        .err()
    }
}

impl ClientBackend for KubeClientBackend {
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>> {
        let Some(res) = self
            .resources
            .get(&(req.api_version.clone(), req.kind.clone()))
            .cloned()
        else {
            let msg = format!(
                "kind {} ({}) was not resolved at load",
                req.kind, req.api_version
            );
            return Box::pin(async move { Err(ApiError::new(500, "InternalError", msg)) });
        };
        if let Some(e) = self.refusal(&req, &res) {
            return Box::pin(async move { Err(e) });
        }
        let client = self.client.clone();
        let params = WriteParams {
            field_manager: Some(self.field_manager.clone()),
            ..WriteParams::default()
        };
        let fence = self.own.fence().clone();
        let plugin = self.field_manager.clone();
        let kind = req.kind.clone();
        let write = send(client, res, req, params);
        // Bounded by the fence, not only by the client's timeout: a write still in flight
        // when this replica's lease may lapse is abandoned before another replica can act.
        Box::pin(async move {
            match fence.guard(write).await {
                Ok(r) => r,
                Err(closed) => {
                    tracing::warn!(plugin = %plugin, kind = %kind, "client write abandoned: {closed}");
                    Err(ApiError::unavailable(format!(
                        "plugin {plugin:?}: write of {kind}: {closed}"
                    )))
                }
            }
        })
    }
}

/// The longest key a plugin may enqueue, in bytes. A Kubernetes key is at most 317
/// (`namespace/name`: 63 + 1 + 253); longer ones are not object keys and only cost memory.
pub const MAX_KEY_BYTES: usize = 1024;

/// Adds a plugin's workqueue refused, by cause (the `plugin_queue_adds_refused` metric).
#[derive(Debug, Default)]
pub struct QueueRefusals {
    /// Keys longer than [`MAX_KEY_BYTES`].
    pub too_long: AtomicU64,
    /// Adds while the queue held [`super::instance::Limits::max_queued_keys`] keys.
    pub full: AtomicU64,
}

/// The guest's `queue` import over the plugin's workqueue.
pub struct WorkqueueBackend {
    queue: PluginQueue,
    own: PluginOwnership,
    max_keys: usize,
    refusals: Arc<QueueRefusals>,
    plugin: Arc<str>,
}

impl WorkqueueBackend {
    /// Adds go to `queue`.
    pub fn new(queue: PluginQueue) -> Self {
        WorkqueueBackend {
            queue,
            own: Ownership::single().for_plugin("", false),
            max_keys: super::instance::Limits::default().max_queued_keys,
            refusals: Arc::default(),
            plugin: Arc::from(""),
        }
    }

    /// Holds at most `max_keys` keys (queued and delayed) for `plugin`, counting refusals
    /// into `refusals`.
    pub fn bounded(mut self, plugin: &str, max_keys: usize, refusals: Arc<QueueRefusals>) -> Self {
        self.plugin = Arc::from(plugin);
        self.max_keys = max_keys;
        self.refusals = refusals;
        self
    }

    /// Whether `key` may be added: not over-long, and room in the queue. A refusal is
    /// counted; it is logged at the first and then at every power of two, so a guest adding
    /// keys in a loop cannot flood the log either.
    fn fits(&self, key: &str) -> bool {
        let (counter, why) = if key.len() > MAX_KEY_BYTES {
            (&self.refusals.too_long, "key longer than 1024 bytes")
        } else if self.queue.len() + self.queue.waiting_len() >= self.max_keys {
            (&self.refusals.full, "workqueue full")
        } else {
            return true;
        };
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(plugin = %self.plugin, refused = n, max_keys = self.max_keys,
                key = %kwh_client::clip::clip(key), "queue add refused: {why}");
        }
        false
    }

    /// Admits only the keys `own` says are this replica's (a standby's queue stays empty).
    pub fn owned_by(mut self, own: PluginOwnership) -> Self {
        self.own = own;
        self
    }
}

impl QueueBackend for WorkqueueBackend {
    fn add(&self, key: &str) {
        if !self.fits(key) {
            return;
        }
        match self.own.admit(key) {
            Admit::Now => self.queue.add_borrowed(key),
            Admit::After(wait) => self.queue.add_after(key.into(), wait),
            Admit::No => {}
        }
    }
    fn add_after(&self, key: &str, delay: Duration) {
        if !self.fits(key) {
            return;
        }
        match self.own.admit(key) {
            Admit::Now => self.queue.add_after(key.into(), delay),
            Admit::After(wait) => self.queue.add_after(key.into(), delay.max(wait)),
            Admit::No => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(ns: &str, name: &str, labels: &str) -> Object {
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "resourceVersion": "1",
                         "labels": serde_json::from_str::<serde_json::Value>(labels).unwrap()}
        });
        Object::from_value(&v).unwrap()
    }

    /// A guest enqueueing keys in a loop meets the queue's bound: over-long keys and adds to
    /// a full queue are refused and counted; delayed keys count against the bound too.
    #[tokio::test]
    async fn queue_adds_are_bounded_in_length_and_number() {
        let queue = PluginQueue::new(kwh_informer::workqueue::default_controller_rate_limiter());
        let refusals = Arc::new(QueueRefusals::default());
        let q = WorkqueueBackend::new(queue.clone()).bounded("p", 5, refusals.clone());
        for i in 0..4 {
            q.add(&format!("ns/k{i}"));
        }
        q.add_after("ns/later", Duration::from_secs(3600));
        assert_eq!((queue.len(), queue.waiting_len()), (4, 1));
        q.add("ns/k9");
        q.add_after("ns/k10", Duration::from_secs(1));
        assert_eq!(queue.len(), 4, "full: nothing more");
        assert_eq!(refusals.full.load(Ordering::Relaxed), 2);
        let long = format!("ns/{}", "x".repeat(MAX_KEY_BYTES));
        let _ = queue.get().await;
        q.add(&long);
        assert_eq!(refusals.too_long.load(Ordering::Relaxed), 1);
        assert_eq!(queue.len(), 3, "an over-long key is refused even with room");
        q.add("ns/k4");
        assert_eq!(queue.len(), 4, "room again: added");
    }

    #[test]
    fn lister_reads_only_the_registered_caches_and_filters_by_selector() {
        let store = Arc::new(Store::with_namespace_index());
        store.add(cm("a", "x", r#"{"app":"web"}"#));
        store.add(cm("a", "y", r#"{"app":"db"}"#));
        store.add(cm("b", "z", r#"{"app":"web"}"#));
        let l = InformerLister::new();
        assert_eq!(l.list("v1", "ConfigMap", None, None).unwrap().len(), 0);
        l.add_store("v1", "ConfigMap", None, store);
        assert_eq!(
            l.get("v1", "ConfigMap", Some("a"), "x")
                .unwrap()
                .unwrap()
                .name(),
            "x"
        );
        assert!(l.get("v1", "ConfigMap", Some("b"), "x").unwrap().is_none());
        assert!(l.get("v1", "Secret", Some("a"), "x").unwrap().is_none());
        let web = l.list("v1", "ConfigMap", None, Some("app=web")).unwrap();
        assert_eq!(web.len(), 2);
        let in_a = l.list("v1", "ConfigMap", Some("a"), Some("app")).unwrap();
        assert_eq!(in_a.len(), 2);
        let e = l
            .list("v1", "ConfigMap", None, Some("app in (web"))
            .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            l.by_index("v1", "ConfigMap", "namespace", "b")
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            l.by_index("v1", "ConfigMap", "nope", "b").unwrap_err().code,
            400
        );
    }

    #[tokio::test]
    async fn a_confined_plugin_may_not_write_in_another_namespace() {
        // Nothing listens there: a refused write never gets as far as a request.
        let client = Client::new(kwh_client::Config::new(
            "http://127.0.0.1:9".parse().unwrap(),
        ))
        .unwrap();
        let mut resources = HashMap::new();
        resources.insert(
            ("v1".to_string(), "ConfigMap".to_string()),
            ApiResource::new("v1", "ConfigMap", "configmaps", true),
        );
        let b = KubeClientBackend::new(client, "p", resources).confined_to(Some("team".into()));
        let req = |ns: &str| WriteRequest {
            op: WriteOp::Create,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some(ns.into()),
            name: None,
            body: b"{}".to_vec(),
            reconciling: None,
        };
        let e = b.write(req("other")).await.unwrap_err();
        assert_eq!(e.code, 403);
        assert!(e.message.contains("confined to namespace \"team\""), "{e}");
        // In its own namespace the write is attempted (and fails only for want of a server).
        let e = b.write(req("team")).await.unwrap_err();
        assert_ne!(e.code, 403, "{e}");
    }

    #[tokio::test]
    async fn writes_are_refused_when_not_active_or_for_a_key_that_moved_away() {
        use kwh_coordination::leader_election::Fence;
        use kwh_coordination::ownership::Shards;
        use std::time::Instant;
        let client = Client::new(kwh_client::Config::new(
            "http://127.0.0.1:9".parse().unwrap(),
        ))
        .unwrap();
        let resources = HashMap::from([(
            ("v1".to_string(), "ConfigMap".to_string()),
            ApiResource::new("v1", "ConfigMap", "configmaps", true),
        )]);
        let fence = Fence::closed();
        let shards = Arc::new(Shards::new("a", fence.clone(), Duration::ZERO));
        shards.update(&["a".to_string(), "b".to_string()], Instant::now());
        let own = Ownership::new(Fence::closed(), Some(shards), None).for_plugin("p", false);
        let b = KubeClientBackend::new(client, "p", resources).owned_by(own.clone());
        let req = |key: Option<&str>| WriteRequest {
            op: WriteOp::Create,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: None,
            body: b"{}".to_vec(),
            reconciling: key.map(Arc::from),
        };
        let e = b.write(req(None)).await.unwrap_err();
        assert_eq!(e.code, 503, "not a member yet: {e}");
        assert!(
            e.message.contains("not the leader or lost its lease"),
            "{e}"
        );
        fence.open_until(Instant::now() + Duration::from_secs(60));
        let (mine, theirs) = {
            let mut keys = (0..).map(|i| format!("default/k{i}"));
            let mine = keys.find(|k| own.admit(k) == Admit::Now).unwrap();
            let theirs = keys.find(|k| own.admit(k) == Admit::No).unwrap();
            (mine, theirs)
        };
        let e = b.write(req(Some(&theirs))).await.unwrap_err();
        assert_eq!(e.code, 503, "{e}");
        assert!(e.message.contains("moved to another replica"), "{e}");
        // An owned key's write, and a handler's, are attempted (no server: not 503 refusals).
        for r in [req(Some(&mine)), req(None)] {
            let e = b.write(r).await.unwrap_err();
            assert!(e.message.contains("cannot connect"), "{e}");
        }
    }

    #[test]
    fn custom_indexes_resolve_through_each_plugins_own_names() {
        use super::super::index::{internal_name, register};
        use super::super::manifest::IndexSpec;
        let spec = |name: &str, path: &str| IndexSpec {
            name: name.into(),
            paths: vec![path.into()],
            namespaced: true,
        };
        let cm_with = |ns: &str, name: &str, data: serde_json::Value| {
            Object::from_value(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": ns, "name": name}, "data": data
            }))
            .unwrap()
        };
        // One shared store, as two plugins watching the same kind get from the factory.
        let store = Arc::new(Store::with_namespace_index());
        store.add(cm_with(
            "a",
            "x",
            serde_json::json!({"ref": "t", "other": "u"}),
        ));
        let a = InformerLister::new();
        let a_ix = register(&store, &[spec("refs", "data.ref")]);
        a.add_indexed_store("v1", "ConfigMap", None, store.clone(), a_ix);
        let b = InformerLister::new();
        // Same paths under another name share the store's index; different paths get their own.
        let b_ix = register(
            &store,
            &[spec("mine", "data.ref"), spec("refs", "data.other")],
        );
        b.add_indexed_store("v1", "ConfigMap", None, store.clone(), b_ix);
        assert_eq!(store.index_names().len(), 3, "namespace + two definitions");

        let names = |l: &InformerLister, ix: &str, v: &str| -> Vec<String> {
            l.by_index("v1", "ConfigMap", ix, v)
                .unwrap()
                .iter()
                .map(|o| o.key())
                .collect()
        };
        assert_eq!(names(&a, "refs", "a/t"), vec!["a/x"]);
        assert!(names(&a, "refs", "a/u").is_empty());
        assert_eq!(names(&b, "refs", "a/u"), vec!["a/x"]);
        assert_eq!(names(&b, "mine", "a/t"), vec!["a/x"]);
        assert_eq!(names(&a, "namespace", "a"), vec!["a/x"]);

        // A name only the other plugin declared, or the store's own name, is not reachable.
        let e = a.by_index("v1", "ConfigMap", "mine", "a/t").unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert!(e.message.contains("namespace, refs"), "{}", e.message);
        let internal = internal_name(&spec("refs", "data.ref"));
        assert_eq!(
            a.by_index("v1", "ConfigMap", &internal, "a/t")
                .unwrap_err()
                .code,
            400
        );
        // A kind with no cache wired yet finds nothing, as an unsynced cache does.
        assert!(a.by_index("v1", "Secret", "refs", "x").unwrap().is_empty());
    }

    #[test]
    fn api_errors_keep_code_reason_and_message() {
        let s = kwh_client::Status::failure(409, "Conflict", "the object has been modified");
        let e: ApiError = kwh_client::Error::Api(Box::new(s)).into();
        assert_eq!(
            e,
            ApiError::new(409, "Conflict", "the object has been modified")
        );
        let e: ApiError = kwh_client::Error::Timeout(Duration::from_secs(1)).into();
        assert_eq!(e.code, 504);
        assert!(delete_params(DeleteParams {
            grace_period_seconds: Some(-1),
            ..DeleteParams::default()
        })
        .is_err());
    }
}
