//! The guest's `client` import over the API client, with kinds resolved to resources by
//! discovery once, at load: nothing here talks to discovery again, so a write never waits on a
//! discovery round trip.
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::{
    ApiError, BoxFuture, ClientBackend, DeleteParams, PatchKind, Propagation, WriteOp, WriteRequest,
};
use crate::follow::{Follow, Mirror, WriteTarget};
use kwh_client::client::{Deleted, Patch, WriteParams};
use kwh_client::{ApiResource, Client};
use kwh_coordination::ownership::{Admit, Ownership, PluginOwnership};

/// Writes through the API client, with kinds resolved at load.
pub struct KubeClientBackend {
    client: Client,
    field_manager: String,
    resources: HashMap<(String, String), ApiResource>,
    confined_to: Option<String>,
    own: PluginOwnership,
    /// Where the writes made while reconciling are noted while a shadow follows the plugin.
    mirror: Option<Mirror>,
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
            mirror: None,
        }
    }

    /// Notes each write made while reconciling a key in `mirror`'s link, while a shadow
    /// revision follows the plugin: the shadow waits for them to reach its caches.
    pub fn noting_writes_in(mut self, mirror: Mirror) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// Refuses every write while `own` is not active: a standby, or a leader whose lease may
    /// have passed to another replica, sends nothing.
    pub fn owned_by(mut self, own: PluginOwnership) -> Self {
        self.own = own;
        self
    }

    /// Refuses writes outside `namespace` (see [`crate::rbac::namespace_scope`]): the plugin's
    /// RBAC is then a Role in that namespace, and a write elsewhere must fail the same way
    /// whether or not the cluster's RBAC is that tight.
    pub fn confined_to(mut self, namespace: Option<String>) -> Self {
        self.confined_to = namespace;
        self
    }
}

/// The confinement rule of [`crate::rbac::namespace_scope`]: a write of a namespaced kind
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

fn delete_params(
    d: DeleteParams,
    dry_run: bool,
) -> Result<kwh_client::client::DeleteParams, ApiError> {
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
        dry_run,
    })
}

/// One write sent as the guest asked it: the verb its operation maps to, PATCH of
/// `.../status` for the status writes (the server keeps only their status there); with
/// `params.dry_run`, as `dryRun=All` (a shadow revision's writes).
pub(crate) async fn send(
    client: Client,
    res: ApiResource,
    req: WriteRequest,
    params: WriteParams,
) -> Result<Option<Bytes>, ApiError> {
    // The moment a write leaves (its fence checked): what the simulation judges ownership at.
    tracing::debug!(
        plugin = params.field_manager.as_deref().unwrap_or(""),
        key = req.reconciling.as_deref().unwrap_or(""),
        "client write sent"
    );
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
                dry_run: params.dry_run,
            };
            client
                .patch(&res, ns, name()?, sub, &Patch::Apply(body), &params)
                .await?
        }
        WriteOp::Delete(d) => {
            let p = delete_params(d, params.dry_run)?;
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
        match &req.reconciling {
            Some(key) if self.own.admit(key) == Admit::No => {
                let msg = format!(
                    "plugin {:?}: key {key} moved to another replica during its reconcile; write of {} refused",
                    self.field_manager, req.kind
                );
                return Some(ApiError::unavailable(msg));
            }
            // Under `--shards` every replica runs the handlers: a handler's write would be sent
            // once per replica. Only reconciles, each on its key's one owner, write.
            None if self.own.sharded() => {
                return Some(ApiError::forbidden(format!(
                    "plugin {:?}: under --shards handlers run on every replica, so a write of {} outside reconcile is refused; write from reconcile (enqueue a key)",
                    self.field_manager, req.kind
                )));
            }
            _ => {}
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

/// The resource of `req`'s kind among those resolved at load; a kind that was not is the
/// host's error (the manifest check lets through only declared kinds, all resolved).
pub(crate) fn resolved(
    resources: &HashMap<(String, String), ApiResource>,
    req: &WriteRequest,
) -> Result<ApiResource, ApiError> {
    resources
        .get(&(req.api_version.clone(), req.kind.clone()))
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                500,
                "InternalError",
                format!(
                    "kind {} ({}) was not resolved at load",
                    req.kind, req.api_version
                ),
            )
        })
}

impl KubeClientBackend {
    /// What to note of `req` once answered, when a shadow follows and a reconcile writes it.
    fn note(&self, req: &WriteRequest) -> Option<(Arc<Follow>, Arc<str>, WriteTarget)> {
        let follow = self.mirror.as_ref()?.lock().clone()?;
        let key = req.reconciling.clone()?;
        let target = WriteTarget {
            api_version: req.api_version.clone(),
            kind: req.kind.clone(),
            namespace: req.namespace.clone(),
            name: req.name.clone(),
            delete: matches!(req.op, WriteOp::Delete(_)),
            op: req.op.name(),
            body: WriteTarget::body_of(&req.body),
        };
        Some((follow, key, target))
    }
}

impl ClientBackend for KubeClientBackend {
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>> {
        let res = match resolved(&self.resources, &req) {
            Ok(r) => r,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        if let Some(e) = self.refusal(&req, &res) {
            return Box::pin(async move { Err(e) });
        }
        let client = self.client.clone();
        let params = WriteParams {
            field_manager: Some(self.field_manager.clone()),
            ..WriteParams::default()
        };
        let own = self.own.clone();
        let plugin = self.field_manager.clone();
        let kind = req.kind.clone();
        let key = req.reconciling.clone();
        let note = self.note(&req);
        let write = send(client, res, req, params);
        // Bounded by this replica's right to act, not only by the client's timeout: a write
        // still in flight when its lease may lapse, or when its key moves to another shard
        // member, is abandoned before another replica can act on it.
        Box::pin(async move {
            let r = match own.guard(key, write).await {
                Ok(r) => r,
                Err(cut) => {
                    tracing::warn!(plugin = %plugin, kind = %kind, "client write abandoned: {cut}");
                    Err(ApiError::unavailable(format!(
                        "plugin {plugin:?}: write of {kind}: {cut}"
                    )))
                }
            };
            if let (Some((follow, key, target)), Ok(answer)) = (note, &r) {
                follow.wrote(&key, target, answer.as_deref());
            }
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A client of `url`'s server (nothing need listen there: a refused write never gets as
    /// far as a request).
    fn client_of(url: &str) -> Client {
        Client::new(kwh_client::Config::new(url.parse().unwrap())).unwrap()
    }

    /// ConfigMaps, resolved.
    fn configmaps() -> HashMap<(String, String), ApiResource> {
        HashMap::from([(
            ("v1".to_string(), "ConfigMap".to_string()),
            ApiResource::new("v1", "ConfigMap", "configmaps", true),
        )])
    }

    /// A create of a ConfigMap in `namespace`, made while reconciling `key` (none: a handler's).
    fn create(namespace: &str, key: Option<&str>) -> WriteRequest {
        WriteRequest {
            op: WriteOp::Create,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some(namespace.into()),
            name: None,
            body: b"{}".to_vec(),
            reconciling: key.map(Arc::from),
        }
    }

    #[tokio::test]
    async fn a_confined_plugin_may_not_write_in_another_namespace() {
        let b = KubeClientBackend::new(client_of("http://127.0.0.1:9"), "p", configmaps())
            .confined_to(Some("team".into()));
        let req = |ns: &str| create(ns, None);
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
        use tokio::time::Instant;
        let fence = Fence::closed();
        let shards = Arc::new(Shards::new("a", fence.clone(), Duration::ZERO));
        shards.update(&["a".to_string(), "b".to_string()], Instant::now());
        let own = Ownership::new(Fence::closed(), Some(shards), None).for_plugin("p", false);
        let b = KubeClientBackend::new(client_of("http://127.0.0.1:9"), "p", configmaps())
            .owned_by(own.clone());
        let req = |key: Option<&str>| create("default", key);
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
        // An owned key's write is attempted (no server: not a 503 refusal).
        let e = b.write(req(Some(&mine))).await.unwrap_err();
        assert!(e.message.contains("cannot connect"), "{e}");
        // A handler's is not: every shard member runs the handlers.
        let e = b.write(req(None)).await.unwrap_err();
        assert_eq!(e.code, 403, "{e}");
        assert!(e.message.contains("outside reconcile"), "{e}");
        // A plugin that runs on the leader only is not sharded: its handlers write.
        let leader = Fence::closed();
        leader.open_until(Instant::now() + Duration::from_secs(60));
        let shards = Arc::new(Shards::new("a", fence.clone(), Duration::ZERO));
        let only = Ownership::new(leader, Some(shards), None).for_plugin("p", true);
        let b = KubeClientBackend::new(client_of("http://127.0.0.1:9"), "p", configmaps())
            .owned_by(only);
        let e = b.write(req(None)).await.unwrap_err();
        assert!(e.message.contains("cannot connect"), "{e}");
    }

    /// A write in flight for a key that moves to another shard member is cut as this replica
    /// reads the new membership, not left to the client's 30 s timeout: the new owner starts
    /// on the key a lease duration after it saw the change, and must not meet this write.
    #[tokio::test]
    async fn a_write_in_flight_is_abandoned_when_its_key_moves_away() {
        use kwh_coordination::leader_election::Fence;
        use kwh_coordination::ownership::Shards;
        use tokio::time::Instant;
        // A server that takes the connection and never answers: the write stays in flight.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted_tx, mut accepted) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
                let _ = accepted_tx.send(()).await;
            }
        });
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(600));
        let shards = Arc::new(Shards::new("a", fence, Duration::from_secs(15)));
        shards.update(&["a".to_string()], Instant::now());
        let own =
            Ownership::new(Fence::closed(), Some(shards.clone()), None).for_plugin("p", false);
        // A key that b will own once it joins.
        let key = (0..)
            .map(|i| format!("default/k{i}"))
            .find(|k| {
                let probe = Shards::new("a", Fence::always_open(), Duration::ZERO);
                probe.update(&["a".to_string(), "b".to_string()], Instant::now());
                probe.admit("p", k) == Admit::No
            })
            .unwrap();
        assert_eq!(own.admit(&key), Admit::Now);
        let b = KubeClientBackend::new(client_of(&format!("http://{addr}")), "p", configmaps())
            .owned_by(own.clone());
        let write = tokio::spawn(b.write(create("default", Some(&key))));
        // The request reached the server; it will never answer.
        accepted.recv().await.expect("the write connects");
        assert!(!write.is_finished());
        // b joins: this replica reads the membership, the key is b's now.
        shards.update(&["a".to_string(), "b".to_string()], Instant::now());
        let e = tokio::time::timeout(Duration::from_secs(10), write)
            .await
            .expect("cut as the membership is read, not at the client's timeout")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.code, 503, "{e}");
        assert!(e.message.contains("moved to another replica"), "{e}");
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
        assert!(delete_params(
            DeleteParams {
                grace_period_seconds: Some(-1),
                ..DeleteParams::default()
            },
            false
        )
        .is_err());
    }
}
