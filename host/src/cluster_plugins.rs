//! Plugins from the cluster (`--plugins-from-cluster`): each `WasmController` resource
//! (`kube-wasm.dev/v1alpha1`, cluster-scoped, `deploy/crds/wasmcontroller.yaml`) is one plugin,
//! its spec one entry of a plugins file. The host watches them with an informer of its own and
//! applies each change while it runs, as it does for the watched plugins file
//! ([`crate::plugins_watch`]): a new generation is applied ([`PluginRuntime::apply`]: an
//! upgrade in place when its plugin runs, else a start), a deleted resource removes its plugin,
//! and a revision that fails leaves the running one running.
//!
//! The host writes each resource's status, as Kubernetes conditions are written (a condition's
//! `lastTransitionTime` moves only when its status does): `Fetched` (the module was read),
//! `Compiled` (it compiled, linked and its configuration was accepted), `Ready` (a revision
//! runs and its caches synced), `Quarantined`; `observedGeneration`, the plugin's name, the
//! running `revision` and its `digest`, the last `failedRevision`'s error, and reconcile
//! counters. Status is refreshed as readiness and counters change (checked every few seconds)
//! and written only when it differs from what the resource holds. Each applied generation is
//! also an Event on its resource (`RevisionApplied`, or a Warning `RevisionFailed` with the
//! reason), which `kubectl describe` lists. With `--leader-elect`,
//! every replica applies the resources (a standby's plugins are compiled and wired, so a
//! takeover needs no compile) and only the leader writes status.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kwh_oci::{Credentials, PublicKey, Reference};

use kwh_client::client::{Patch, WriteParams};
use kwh_client::{ApiResource, Client, Object, ResourceClient};
use kwh_coordination::ownership::Ownership;
use kwh_informer::processor::ResourceEventHandler;
use kwh_informer::shared::{InformerOptions, SharedIndexInformer};
use kwh_informer::tombstone::ObjOrTombstone;
use kwh_plugin::events::{EventRecorder, EventType, NewEvent, ObjectRef};
use kwh_plugin::{Limits, PluginRuntime};
use serde_json::{json, Value};

use crate::commands::LOG_TARGET;
use crate::modules::Modules;
use crate::plugins_file::{self, Defaults};

/// The resource.
pub fn resource() -> ApiResource {
    ApiResource::new(
        "kube-wasm.dev/v1alpha1",
        "WasmController",
        "wasmcontrollers",
        false,
    )
}

/// The cluster-wide rules `--plugins-from-cluster` needs (`host rbac --plugins-from-cluster`
/// prints them): read and watch the resources, write their status; nothing else on them.
pub fn rbac_rules() -> Vec<Value> {
    let group = "kube-wasm.dev";
    vec![
        json!({"apiGroups": [group], "resources": ["wasmcontrollers"],
               "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": [group], "resources": ["wasmcontrollers/status"],
               "verbs": ["get", "patch", "update"]}),
        // A resource's `pullSecret` names a Secret the host reads its registry credentials from.
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        // An Event per applied generation; a cluster-scoped object's Events go to `default`.
        json!({"apiGroups": ["events.k8s.io"], "resources": ["events"],
               "verbs": ["create", "patch"]}),
    ]
}

/// How often status is compared with the runtime's state (readiness, counters).
const REFRESH: Duration = Duration::from_secs(2);

/// What a handler returns (`futures_util`'s `BoxFuture`, spelled out).
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Wakes the apply loop on any change of a resource.
struct Wake(Arc<tokio::sync::Notify>);

impl ResourceEventHandler for Wake {
    fn on_add(&self, _: Object, _: bool) -> BoxFuture<'_, ()> {
        self.0.notify_one();
        Box::pin(std::future::ready(()))
    }
    fn on_update(&self, _: Object, _: Object) -> BoxFuture<'_, ()> {
        self.0.notify_one();
        Box::pin(std::future::ready(()))
    }
    fn on_delete(&self, _: ObjOrTombstone) -> BoxFuture<'_, ()> {
        self.0.notify_one();
        Box::pin(std::future::ready(()))
    }
}

/// What was last applied for one resource.
struct Applied {
    generation: i64,
    /// Its plugin, once a revision of it ran.
    plugin: Option<String>,
    /// Why its last generation did not run, and which condition failed.
    failure: Option<(&'static str, String)>,
    /// Where its module comes from, when a registry reference names it.
    pull: Option<Pull>,
    /// The kinds of shadow difference already recorded as Events on it.
    shadow_kinds: std::collections::HashSet<String>,
}

/// A module named by reference: asked for its digest again every `interval`.
struct Pull {
    reference: Reference,
    credentials: Credentials,
    interval: Duration,
    /// The manifest digest last pulled, and when the tag was last asked.
    manifest: Option<String>,
    checked: Instant,
}

/// A resource's spec split: the plugins-file entry, and the keys about pulling its module.
struct PullSpec {
    secret: Option<(String, String)>,
    interval: Option<Duration>,
    /// `publicKey`: the module must be signed by it (besides the host's `--verify-key`s).
    key: Option<PublicKey>,
}

/// Takes `pullSecret` (`{namespace, name}`), `pullInterval` and `publicKey` out of `spec`.
fn split_pull(spec: &Value) -> Result<(Value, PullSpec), String> {
    let mut entry = spec.clone();
    let obj = entry.as_object_mut().ok_or("spec: not a mapping")?;
    let secret = match obj.remove("pullSecret") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let field = |k: &str| v[k].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
            match (field("namespace"), field("name")) {
                (Some(ns), Some(n)) => Some((ns, n)),
                _ => return Err("pullSecret: needs `namespace` and `name`".into()),
            }
        }
    };
    let interval = match obj.remove("pullInterval") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            kwh_client::duration::parse_duration(&s).map_err(|e| format!("pullInterval: {e}"))?,
        ),
        Some(_) => return Err("pullInterval: expected a duration such as 5m".into()),
    };
    let key = match obj.remove("publicKey") {
        None | Some(Value::Null) => None,
        Some(Value::String(pem)) => {
            Some(PublicKey::from_pem(&pem).map_err(|e| format!("publicKey: {e}"))?)
        }
        Some(_) => return Err("publicKey: expected a PEM string".into()),
    };
    Ok((
        entry,
        PullSpec {
            secret,
            interval,
            key,
        },
    ))
}

/// The `WasmController` resources and what was applied of them.
pub struct ClusterPlugins {
    client: Client,
    informer: SharedIndexInformer<ResourceClient>,
    wake: Arc<tokio::sync::Notify>,
    limits: Limits,
    namespace: Option<String>,
    grace: Duration,
    /// Whether this replica leads: only the leader writes status.
    ownership: Ownership,
    /// The runtime's recorder (written behind the same fence as the plugins' Events).
    events: EventRecorder,
    applied: HashMap<String, Applied>,
    modules: Arc<Modules>,
}

impl ClusterPlugins {
    /// Starts the informer on `WasmController` resources (it lists and watches from now on; a
    /// cluster without the CRD is retried with backoff, as any informer is).
    pub fn start(
        client: &Client,
        limits: Limits,
        namespace: Option<String>,
        grace: Duration,
        ownership: Ownership,
        events: EventRecorder,
        modules: Arc<Modules>,
    ) -> Self {
        let informer = SharedIndexInformer::new(
            ResourceClient::new(client.clone(), resource(), None),
            InformerOptions::default(),
        );
        let wake = Arc::new(tokio::sync::Notify::new());
        // A fresh informer takes its first handler.
        let _ = informer.add_event_handler(Arc::new(Wake(wake.clone())));
        let run = informer.clone();
        tokio::spawn(async move {
            if let Err(e) = run.run().await {
                tracing::error!(target: LOG_TARGET, error = %e, "the WasmController informer stopped");
            }
        });
        ClusterPlugins {
            client: client.clone(),
            informer,
            wake,
            limits,
            namespace,
            grace,
            ownership,
            events,
            applied: HashMap::new(),
            modules,
        }
    }

    /// Resolves when a resource changed, or when status is due a refresh.
    pub async fn changed(&mut self) {
        let _ = tokio::time::timeout(REFRESH, self.wake.notified()).await;
    }

    /// Applies every resource whose generation was not applied yet, removes the plugins of
    /// deleted ones, and writes each resource's status where it changed.
    pub async fn apply(&mut self, runtime: &mut PluginRuntime) {
        if !self.informer.has_synced() {
            // A partial list would read as deletions.
            return;
        }
        for plugin in runtime.promote_due(self.grace).await {
            tracing::info!(target: LOG_TARGET, plugin = %plugin, "the shadow of plugin {plugin} was promoted");
        }
        let objects = self.informer.indexer().list();
        for obj in &objects {
            let Ok(v) = serde_json::from_slice::<Value>(obj.raw()) else {
                continue;
            };
            let name = obj.name().to_owned();
            let generation = v["metadata"]["generation"].as_i64().unwrap_or(0);
            if self
                .applied
                .get(&name)
                .is_none_or(|a| a.generation != generation)
                || self.tag_moved(&name).await
            {
                self.apply_one(runtime, &name, generation, &v["spec"]).await;
                self.record(obj, generation);
            }
            self.shadow_events(runtime, obj);
            self.write_status(runtime, &name, &v).await;
        }
        let present: Vec<&str> = objects.iter().map(|o| o.name()).collect();
        let gone: Vec<String> = self
            .applied
            .keys()
            .filter(|n| !present.contains(&n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(Applied {
                plugin: Some(plugin),
                ..
            }) = self.applied.remove(&name)
            {
                let clean = runtime.remove(&plugin, self.grace).await;
                tracing::info!(target: LOG_TARGET, plugin = %plugin, clean,
                    "WasmController {name} deleted: plugin removed");
            }
        }
    }

    /// Whether the tag of resource `name`'s module, asked again once its pull interval has
    /// passed, names another manifest than the one running (a new digest is an upgrade).
    async fn tag_moved(&mut self, name: &str) -> bool {
        let Some(pull) = self.applied.get_mut(name).and_then(|a| a.pull.as_mut()) else {
            return false;
        };
        if pull.reference.digest.is_some() || pull.checked.elapsed() < pull.interval {
            return false;
        }
        pull.checked = Instant::now();
        match self
            .modules
            .registry()
            .resolve(&pull.reference, &pull.credentials, Duration::ZERO)
            .await
        {
            Ok(d) => pull.manifest.as_deref() != Some(d.as_str()),
            Err(e) => {
                tracing::warn!(target: LOG_TARGET,
                    "WasmController {name}: {e}; the running revision carries on");
                false
            }
        }
    }

    /// The credentials of the Secret `namespace/name` (its `.dockerconfigjson`).
    async fn pull_secret(&self, namespace: &str, name: &str) -> Result<Credentials, String> {
        let secrets = ApiResource::new("v1", "Secret", "secrets", true);
        let secret = self
            .client
            .get(&secrets, Some(namespace), name)
            .await
            .map_err(|e| format!("pullSecret {namespace}/{name}: {e}"))?;
        let v: Value = serde_json::from_slice(secret.raw())
            .map_err(|e| format!("pullSecret {namespace}/{name}: {e}"))?;
        let data = v["data"][".dockerconfigjson"].as_str().ok_or_else(|| {
            format!("pullSecret {namespace}/{name}: no .dockerconfigjson key (type kubernetes.io/dockerconfigjson)")
        })?;
        let json = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|_| {
                format!("pullSecret {namespace}/{name}: .dockerconfigjson is not base64")
            })?;
        Credentials::from_docker_config(&json)
            .map_err(|e| format!("pullSecret {namespace}/{name}: .dockerconfigjson: {e}"))
    }

    /// Applies one resource's spec (generation `generation`).
    async fn apply_one(
        &mut self,
        runtime: &mut PluginRuntime,
        name: &str,
        generation: i64,
        spec: &Value,
    ) {
        let previous = self.applied.get(name).and_then(|a| a.plugin.clone());
        let defaults = Defaults {
            limits: &self.limits,
            namespace: self.namespace.as_deref(),
        };
        let parsed = split_pull(spec).and_then(|(entry, pull)| {
            let spec = yaml_serde::to_value(&entry)
                .map_err(|e| e.to_string())
                .and_then(|item| plugins_file::one(item, Path::new("/"), &defaults))?;
            Ok((spec, pull))
        });
        let (fetched, pull) = match parsed {
            Err(e) => (Err(format!("spec: {e}")), None),
            Ok((spec, how)) => self.fetch(name, spec, how).await,
        };
        let (plugin, failure) = match fetched {
            Err(e) => {
                let kept = match &previous {
                    Some(p) => format!("plugin {p} keeps its running revision"),
                    None => "nothing was started".to_owned(),
                };
                tracing::error!(target: LOG_TARGET,
                    "WasmController {name} generation {generation}: {e}; {kept}");
                (previous.clone(), Some(("Fetched", e)))
            }
            Ok(spec) => {
                self.start_or_upgrade(runtime, name, generation, previous.as_deref(), spec)
                    .await
            }
        };
        self.applied.insert(
            name.to_owned(),
            Applied {
                generation,
                plugin,
                failure,
                pull,
                shadow_kinds: self
                    .applied
                    .get(name)
                    .map(|a| a.shadow_kinds.clone())
                    .unwrap_or_default(),
            },
        );
    }

    /// The module of `spec`: a file as it is, an `oci://` reference pulled (or found in the
    /// blob cache) with the resource's pull secret and keys, and how to ask for it again.
    async fn fetch(
        &self,
        name: &str,
        spec: kwh_plugin::PluginSpec,
        how: PullSpec,
    ) -> (Result<kwh_plugin::PluginSpec, String>, Option<Pull>) {
        match spec.path.to_str().filter(|s| Reference::is_reference(s)) {
            None => (Ok(spec), None),
            Some(text) => {
                let credentials = match &how.secret {
                    Some((ns, n)) => self.pull_secret(ns, n).await,
                    None => Ok(Credentials::none()),
                };
                match (Reference::parse(text), credentials) {
                    (Err(e), _) => (Err(e.to_string()), None),
                    (_, Err(e)) => (Err(e), None),
                    (Ok(reference), Ok(credentials)) => {
                        let interval = how.interval.unwrap_or(self.modules.pull_interval());
                        let r = self
                            .modules
                            .fetch(spec, &credentials, Some(Duration::ZERO), how.key.as_slice())
                            .await;
                        // A failed pull keeps the digest running, so the tag is asked
                        // again only when it moves.
                        let manifest = r
                            .as_ref()
                            .ok()
                            .and_then(|(_, p)| p.as_ref())
                            .map(|p| p.manifest_digest.clone())
                            .or_else(|| {
                                self.applied
                                    .get(name)
                                    .and_then(|a| a.pull.as_ref())
                                    .and_then(|p| p.manifest.clone())
                            });
                        let pull = Pull {
                            reference,
                            credentials,
                            interval,
                            manifest,
                            checked: Instant::now(),
                        };
                        (r.map(|(s, _)| s).map_err(|e| e.to_string()), Some(pull))
                    }
                }
            }
        }
    }

    /// Starts the plugin of `spec`, or upgrades the one this resource runs (`previous`), unless
    /// another source runs it. The plugin it runs after, and the failed condition if any.
    async fn start_or_upgrade(
        &self,
        runtime: &mut PluginRuntime,
        name: &str,
        generation: i64,
        previous: Option<&str>,
        spec: kwh_plugin::PluginSpec,
    ) -> (Option<String>, Option<(&'static str, String)>) {
        let module = spec.path.clone();
        // A plugin runs for one source only: this resource's own, or one no other
        // resource, plugins file or `--plugin` runs.
        let others: Vec<(String, String)> = self
            .applied
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .filter_map(|(n, a)| Some((a.plugin.clone()?, n.clone())))
            .collect();
        let running: Vec<String> = runtime
            .plugins()
            .iter()
            .map(|p| p.name().to_owned())
            .collect();
        let check = |plugin: &str| match others.iter().find(|(p, _)| p == plugin) {
            Some((_, other)) => Err(format!("already run by WasmController {other}")),
            None if previous != Some(plugin) && running.iter().any(|r| r == plugin) => {
                Err("already run from the plugins file or --plugin".to_owned())
            }
            None => Ok(()),
        };
        match runtime.apply_checked(spec, self.grace, check).await {
            Ok((plugin, _)) => {
                tracing::info!(target: LOG_TARGET, plugin = %plugin,
                    "WasmController {name} generation {generation} applied");
                (Some(plugin), None)
            }
            Err(e) => {
                let message = e.to_string();
                if let Some(p) = &previous {
                    runtime.record_failure(p, &module, &message);
                }
                let kept = match &previous {
                    Some(p) => format!("plugin {p} keeps its running revision"),
                    None => "nothing was started".to_owned(),
                };
                tracing::error!(target: LOG_TARGET,
                    "WasmController {name} generation {generation}: {message}; {kept}");
                let condition = if matches!(&e, kwh_plugin::UpgradeError::Load(l)
                    if matches!(l.cause, kwh_plugin::LoadCause::Read(_)))
                {
                    "Fetched"
                } else {
                    "Compiled"
                };
                (previous.map(str::to_owned), Some((condition, message)))
            }
        }
    }

    /// An Event on `obj` for each kind of difference its plugin's shadow met since the last
    /// look (the first of each kind is also an Event on the object it concerns).
    fn shadow_events(&mut self, runtime: &PluginRuntime, obj: &Object) {
        let Some(applied) = self.applied.get_mut(obj.name()) else {
            return;
        };
        let Some(plugin) = applied.plugin.clone() else {
            return;
        };
        let Some(ledger) = runtime.shadow_ledger(&plugin) else {
            return;
        };
        let mut new: Vec<String> = ledger
            .kinds()
            .into_iter()
            .filter(|k| !applied.shadow_kinds.contains(k))
            .collect();
        new.sort();
        for kind in new {
            applied.shadow_kinds.insert(kind.clone());
            record_on(
                &self.events,
                obj,
                EventType::Warning,
                "ShadowDifference",
                "Shadow",
                format!("the shadow of plugin {plugin} differs: {kind}"),
            );
        }
    }

    /// The Event of the generation just applied to `obj`.
    fn record(&self, obj: &Object, generation: i64) {
        let Some(applied) = self.applied.get(obj.name()) else {
            return;
        };
        let (event_type, reason, note) = match &applied.failure {
            None => (
                EventType::Normal,
                "RevisionApplied",
                format!(
                    "generation {generation} runs as plugin {}",
                    applied.plugin.as_deref().unwrap_or("-")
                ),
            ),
            Some((_, message)) => (
                EventType::Warning,
                "RevisionFailed",
                format!("generation {generation}: {message}"),
            ),
        };
        record_on(&self.events, obj, event_type, reason, "Apply", note);
    }

    /// Writes the status of resource `name` (its object `v`) if it differs from what it holds.
    async fn write_status(&self, runtime: &PluginRuntime, name: &str, v: &Value) {
        let Some(applied) = self.applied.get(name) else {
            return;
        };
        if !self.ownership.is_leader() {
            return;
        }
        let running = applied.plugin.as_deref().and_then(|p| runtime.plugin(p));
        let mut status = status(applied, running.as_deref(), &v["status"]);
        if let Some(ledger) = applied
            .plugin
            .as_deref()
            .and_then(|p| runtime.shadow_ledger(p))
        {
            status["shadow"] = shadow_status(&ledger);
        }
        if status == v["status"] {
            return;
        }
        let patch = json!({ "status": status }).to_string();
        let r = self
            .client
            .patch(
                &resource(),
                None,
                name,
                Some("status"),
                &Patch::Merge(patch.into()),
                &WriteParams {
                    field_manager: Some("kube-wasm-host".into()),
                    ..WriteParams::default()
                },
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(target: LOG_TARGET, error = %e, "WasmController {name}: status not written");
        }
    }
}

/// The status of a resource as applied, its plugin's running state, keeping each condition's
/// `lastTransitionTime` from `old` while its status holds.
fn status(applied: &Applied, running: Option<&kwh_plugin::RunningPlugin>, old: &Value) -> Value {
    let failed = |c: &str| applied.failure.as_ref().is_some_and(|(f, _)| *f == c);
    let message = applied
        .failure
        .as_ref()
        .map(|(_, m)| m.clone())
        .unwrap_or_default();
    let (synced, quarantined) = running.map_or((false, false), |p| {
        (
            p.has_synced() && p.workers_started(),
            p.health().is_quarantined(),
        )
    });
    let cond = |kind: &str, ok: bool, reason: &str, message: &str| {
        let status = if ok { "True" } else { "False" };
        let since = old["conditions"]
            .as_array()
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == kind && c["status"] == status)
            })
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_owned))
            .unwrap_or_else(now);
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": since})
    };
    let conditions = vec![
        if failed("Fetched") {
            cond("Fetched", false, "FetchFailed", &message)
        } else {
            cond("Fetched", true, "ModuleRead", "")
        },
        if failed("Compiled") {
            cond("Compiled", false, "RevisionFailed", &message)
        } else if failed("Fetched") {
            cond("Compiled", false, "NotFetched", "")
        } else {
            cond("Compiled", true, "Compiled", "")
        },
        match running {
            None => cond("Ready", false, "NotRunning", &message),
            Some(_) if quarantined => cond("Ready", false, "Quarantined", ""),
            Some(_) if !synced => cond("Ready", false, "CachesSyncing", ""),
            Some(p) if applied.failure.is_some() => cond(
                "Ready",
                true,
                "PreviousRevisionRunning",
                &format!("revision {} runs; the new one failed", p.revisions()),
            ),
            Some(_) => cond("Ready", true, "Running", ""),
        },
        cond(
            "Quarantined",
            quarantined,
            if quarantined {
                "Quarantined"
            } else {
                "Healthy"
            },
            "",
        ),
    ];
    let mut s = json!({
        "observedGeneration": applied.generation,
        "conditions": conditions,
        "failedRevision": applied.failure.as_ref().map(|(_, m)| json!({"error": m})),
    });
    // The manifest pulled, when a reference names the module: what `kubectl get -o yaml`
    // shows a tag resolved to.
    if let Some(pull) = &applied.pull {
        if let Some(d) = &pull.manifest {
            s["pulled"] = json!(pull.reference.at(d).to_string());
        }
    }
    if let Some(p) = running {
        s["plugin"] = json!(p.name());
        s["revision"] = json!(p.revisions());
        s["digest"] = json!(p.plugin().digest());
        s["reconciles"] = json!(p
            .reconcile_stats()
            .total
            .load(std::sync::atomic::Ordering::Relaxed));
        s["reconcileErrors"] = json!(p
            .reconcile_stats()
            .errors
            .load(std::sync::atomic::Ordering::Relaxed));
    }
    s
}

/// An Event on the `WasmController` `obj`, reported by the host.
fn record_on(
    events: &EventRecorder,
    obj: &Object,
    event_type: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    events.record(
        "kube-wasm-host",
        NewEvent {
            regarding: ObjectRef {
                api_version: "kube-wasm.dev/v1alpha1".into(),
                kind: "WasmController".into(),
                namespace: None,
                name: obj.name().to_owned(),
                uid: Some(obj.uid().to_owned()),
            },
            event_type,
            reason: reason.into(),
            action: action.into(),
            note: Some(note),
        },
    );
}

/// A shadow's figures and its three newest differences, for the resource's status.
fn shadow_status(l: &kwh_plugin::backend::shadow::ShadowLedger) -> Value {
    use kwh_plugin::backend::shadow::Outcome;
    use std::sync::atomic::Ordering::Relaxed;
    let last: Vec<Value> = l
        .differences()
        .iter()
        .rev()
        .take(3)
        .map(|d| {
            let mut v = json!({"op": d.op, "kind": d.kind, "namespace": d.namespace,
                               "name": d.name});
            match &d.outcome {
                Outcome::Changes(patch) => v["patch"] = patch.clone(),
                Outcome::Refused(e) => v["refused"] = json!(e.to_string()),
                Outcome::Agreement => {}
            }
            v
        })
        .collect();
    json!({
        "agreements": l.agreements.load(Relaxed),
        "differences": l.differences.load(Relaxed),
        "refusals": l.refusals.load(Relaxed),
        "lastDifferences": last,
    })
}

/// Now, as `metav1.Time` writes it.
fn now() -> String {
    kwh_client::time::time(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_keys_are_taken_out_of_the_entry() {
        let spec = json!({"module": "oci://r.io/a:v1", "config": {"x": 1},
            "pullSecret": {"namespace": "ops", "name": "regcred"}, "pullInterval": "90s"});
        let (entry, pull) = split_pull(&spec).expect("splits");
        assert_eq!(
            entry,
            json!({"module": "oci://r.io/a:v1", "config": {"x": 1}})
        );
        assert_eq!(pull.secret, Some(("ops".into(), "regcred".into())));
        assert_eq!(pull.interval, Some(Duration::from_secs(90)));
        let (_, none) = split_pull(&json!({"module": "/m.wasm"})).expect("splits");
        assert!(none.secret.is_none() && none.interval.is_none());
        for (bad, why) in [
            (json!({"pullSecret": {"name": "x"}}), "pullSecret: needs"),
            (
                json!({"pullInterval": "soon"}),
                "pullInterval: invalid duration",
            ),
            (
                json!({"pullInterval": 5}),
                "pullInterval: expected a duration",
            ),
            (json!([]), "not a mapping"),
        ] {
            let e = split_pull(&bad).err().expect("refused");
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
