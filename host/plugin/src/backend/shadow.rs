//! A shadow revision's `client` import: every write is sent with `dryRun=All` (the server
//! validates it and runs its admission, and persists nothing), and the object the server would
//! store is compared with the object as it is stored. The guest gets the server's answer, as
//! its live twin would; the comparison is kept in a [`ShadowLedger`].
//!
//! What is compared: the whole object, less what the server sets on every write whatever the
//! writer asked (`metadata.resourceVersion`, `managedFields`, `generation`, `uid`,
//! `creationTimestamp`, `selfLink`) and the times conditions carry (`last*Time` under
//! `status`), which a controller stamps with its own clock. A write that would change nothing
//! else is an agreement; one that would is a difference, kept with the JSON patch from the
//! stored object to the one the server would store; a refusal (a validation error, a webhook's
//! denial, a 403) is a difference of its own kind.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use kwh_client::client::WriteParams;
use kwh_client::{ApiResource, Client};
use parking_lot::Mutex;
use serde_json::Value;

use super::kube::{refuse_outside_scope, resolved, send};
use super::{
    ApiError, BoxFuture, ClientBackend, EventBackend, ListerBackend, QueueBackend, WriteOp,
    WriteRequest,
};
use crate::events::{EventRecorder, EventType, NewEvent, ObjectRef};
use crate::follow::{Follow, LiveWrite};

/// How many differences a ledger keeps (the newest).
pub const KEPT_DIFFERENCES: usize = 20;

/// What one shadow write would have done.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing would change.
    Agreement,
    /// The stored object would change by this JSON patch (RFC 6902), from the stored object
    /// (none: a create) to the one the server would store (none: a delete).
    Changes(Value),
    /// The server refused the write.
    Refused(ApiError),
}

/// One difference: which write, of what, and what it would have done.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The reconcile key it was written for (none from a handler).
    pub key: Option<Arc<str>>,
    /// `create`, `replace`, `patch`, `apply`, `delete`, `replace-status`, `patch-status`,
    /// `apply-status`.
    pub op: &'static str,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub outcome: Outcome,
    pub at: SystemTime,
    /// The live revision's last write of the same object, when one was made while the shadow
    /// ran (kept for the newest 1,024 objects it wrote).
    pub live_write: Option<LiveWrite>,
    /// The log lines of the shadow's reconcile that made the write (its `log` import, every
    /// level, the first 20); none until that reconcile has returned, and for a handler's write.
    pub logs: Option<Vec<String>>,
}

/// A shadow revision's writes, counted by outcome, with the newest differences.
#[derive(Debug, Default)]
pub struct ShadowLedger {
    pub agreements: AtomicU64,
    pub differences: AtomicU64,
    pub refusals: AtomicU64,
    /// Events the shadow would have recorded (none is written to the cluster).
    pub events: AtomicU64,
    last: Mutex<VecDeque<Difference>>,
    /// The kinds of difference seen so far (op, kind, and the paths a patch touches, or the
    /// refusal's reason): the first of each kind is an Event.
    kinds: Mutex<std::collections::HashSet<String>>,
}

/// A shadow's `queue` import, and where its handlers' keys go: nowhere. A shadow reconciles
/// the keys the live revision reconciles, each after it (the live workers hand them on), so
/// what its own handlers and reconciles would enqueue is not followed.
pub struct ShadowQueue;

impl QueueBackend for ShadowQueue {
    fn add(&self, _: &str) {}
    fn add_after(&self, _: &str, _: std::time::Duration) {}
}

/// A shadow's `events` import: counted in its ledger and logged at debug, never written.
pub struct ShadowEvents(pub Arc<ShadowLedger>);

impl EventBackend for ShadowEvents {
    fn record(&self, reporting_controller: &str, event: NewEvent) {
        self.0.events.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(controller = reporting_controller, reason = %event.reason,
            "shadow Event not recorded");
    }
}

impl ShadowLedger {
    /// The newest differences, oldest first.
    pub fn differences(&self) -> Vec<Difference> {
        self.last.lock().iter().cloned().collect()
    }

    /// Gives the differences recorded during the reconcile of `key` that just returned its
    /// log lines (the shadow reconciles a key on one worker at a time, so those are the ones
    /// without lines yet).
    pub fn attach_logs(&self, key: &str, lines: &[String]) {
        for d in self.last.lock().iter_mut() {
            if d.logs.is_none() && d.key.as_deref() == Some(key) {
                d.logs = Some(lines.to_vec());
            }
        }
    }

    /// The kinds of difference seen so far (see [`kind_of`]), in no order.
    pub fn kinds(&self) -> Vec<String> {
        self.kinds.lock().iter().cloned().collect()
    }

    /// Records `d`; whether it is a difference of a kind not seen before.
    fn record(&self, d: Difference) -> bool {
        let new_kind = match &d.outcome {
            Outcome::Agreement => false,
            outcome => self.kinds.lock().insert(kind_of(d.op, &d.kind, outcome)),
        };
        self.keep(d);
        new_kind
    }

    fn keep(&self, d: Difference) {
        match &d.outcome {
            Outcome::Agreement => {
                self.agreements.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Outcome::Changes(_) => self.differences.fetch_add(1, Ordering::Relaxed),
            Outcome::Refused(_) => self.refusals.fetch_add(1, Ordering::Relaxed),
        };
        let mut last = self.last.lock();
        if last.len() == KEPT_DIFFERENCES {
            last.pop_front();
        }
        last.push_back(d);
    }
}

/// A difference's kind: the operation, the object's kind, and the paths its patch touches (or
/// the refusal's reason), e.g. `patch ConfigMap /metadata/annotations/x`.
pub fn kind_of(op: &str, kind: &str, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Agreement => format!("{op} {kind} agreement"),
        Outcome::Refused(e) => format!("{op} {kind} refused {}", e.reason),
        Outcome::Changes(patch) => {
            let mut paths: Vec<&str> = patch
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["path"].as_str())
                .collect();
            paths.sort_unstable();
            paths.dedup();
            format!("{op} {kind} {}", paths.join(" "))
        }
    }
}

/// Removes from `v` what the server sets on every write, and condition times.
fn normalized(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "managedFields",
            "generation",
            "uid",
            "creationTimestamp",
            "selfLink",
        ] {
            m.remove(k);
        }
    }
    fn drop_times(v: &mut Value) {
        match v {
            Value::Object(o) => {
                o.retain(|k, _| !(k.starts_with("last") && k.ends_with("Time")));
                o.values_mut().for_each(drop_times);
            }
            Value::Array(a) => a.iter_mut().for_each(drop_times),
            _ => {}
        }
    }
    if let Some(s) = v.get_mut("status") {
        drop_times(s);
    }
    v
}

/// The outcome of turning `stored` (none: absent) into `would` (none: deleted).
pub fn compare(stored: Option<&Value>, would: Option<&Value>) -> Outcome {
    let a = stored.cloned().map(normalized).unwrap_or(Value::Null);
    let b = would.cloned().map(normalized).unwrap_or(Value::Null);
    let patch = json_patch::diff(&a, &b);
    if patch.0.is_empty() {
        Outcome::Agreement
    } else {
        Outcome::Changes(serde_json::to_value(patch).unwrap_or(Value::Null))
    }
}

/// The Event of a difference of a new kind, on the object it concerns.
fn shadow_event(d: &Difference, stored: Option<&Value>) -> NewEvent {
    let (reason, note) = match &d.outcome {
        Outcome::Refused(e) => (
            "ShadowRefused",
            format!("the shadow revision's {} was refused: {e}", d.op),
        ),
        Outcome::Changes(patch) => (
            "ShadowDifference",
            format!(
                "the shadow revision's {} would change: {}",
                d.op,
                serde_json::to_string(patch).unwrap_or_default()
            ),
        ),
        Outcome::Agreement => ("ShadowAgreement", String::new()),
    };
    NewEvent {
        regarding: ObjectRef {
            api_version: d.api_version.clone(),
            kind: d.kind.clone(),
            namespace: d.namespace.clone(),
            name: d.name.clone(),
            uid: stored.and_then(|v| v["metadata"]["uid"].as_str().map(str::to_owned)),
        },
        event_type: EventType::Warning,
        reason: reason.into(),
        action: "Shadow".into(),
        note: Some(note),
    }
    .within_api_limits()
}

/// Writes as dry runs, each compared and recorded.
pub struct ShadowClientBackend {
    client: Client,
    field_manager: String,
    resources: HashMap<(String, String), ApiResource>,
    confined_to: Option<String>,
    ledger: Arc<ShadowLedger>,
    /// Where the first difference of each kind is recorded as an Event on its object.
    events: Option<EventRecorder>,
    /// The plugin's caches: a stored object of a kind it watches is read there, not fetched.
    lister: Option<Arc<super::informer::InformerLister>>,
    /// The link to the live revision: its last write of an object, shown beside a difference.
    follow: Option<Arc<Follow>>,
}

impl ShadowClientBackend {
    /// A backend for the shadow of plugin `field_manager` (writes carry the live plugin's
    /// field manager, so that an apply compares as the live one's would), with the kinds
    /// resolved at load.
    pub fn new(
        client: Client,
        field_manager: &str,
        resources: HashMap<(String, String), ApiResource>,
        ledger: Arc<ShadowLedger>,
    ) -> Self {
        ShadowClientBackend {
            client,
            field_manager: field_manager.to_owned(),
            resources,
            confined_to: None,
            ledger,
            events: None,
            lister: None,
            follow: None,
        }
    }

    /// Shows the live revision's last write of an object (noted in `follow`) beside each
    /// difference on it.
    pub fn following(mut self, follow: Arc<Follow>) -> Self {
        self.follow = Some(follow);
        self
    }

    /// Reads the stored object from `lister`'s caches when they cover its kind (one request
    /// fewer per write; the shadow's reconcile runs after the live one's writes reached them).
    pub fn with_lister(mut self, lister: Arc<super::informer::InformerLister>) -> Self {
        self.lister = Some(lister);
        self
    }

    /// Records the first difference of each kind as a Warning Event on the object it concerns
    /// (`ShadowDifference`, or `ShadowRefused`), reported by the plugin.
    pub fn with_events(mut self, events: EventRecorder) -> Self {
        self.events = Some(events);
        self
    }

    /// The live revision's confinement (see `KubeClientBackend::confined_to`).
    pub fn confined_to(mut self, namespace: Option<String>) -> Self {
        self.confined_to = namespace;
        self
    }
}

impl ClientBackend for ShadowClientBackend {
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>> {
        let res = match resolved(&self.resources, &req) {
            Ok(r) => r,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let client = self.client.clone();
        let ledger = self.ledger.clone();
        let field_manager = self.field_manager.clone();
        let field_manager_name = self.field_manager.clone();
        let events = self.events.clone();
        let lister = self.lister.clone();
        let follow = self.follow.clone();
        let confined = refuse_outside_scope(
            self.confined_to.as_deref(),
            &self.field_manager,
            &res.kind,
            res.namespaced,
            req.namespace.as_deref(),
        );
        Box::pin(async move {
            // The name a create gives in its body (none: `generateName`, nothing stored yet).
            let name = match &req.name {
                Some(n) => n.clone(),
                None => serde_json::from_slice::<Value>(&req.body)
                    .ok()
                    .and_then(|v| v["metadata"]["name"].as_str().map(str::to_owned))
                    .unwrap_or_default(),
            };
            let ns = req.namespace.clone().filter(|_| res.namespaced);
            let cached = lister
                .as_ref()
                .filter(|l| l.covers(&req.api_version, &req.kind, ns.as_deref()));
            let stored = if name.is_empty() {
                None
            } else if let Some(l) = cached {
                l.get(&req.api_version, &req.kind, ns.as_deref(), &name)?
                    .and_then(|o| serde_json::from_slice::<Value>(o.raw()).ok())
            } else {
                match client.get(&res, ns.as_deref(), &name).await {
                    Ok(o) => serde_json::from_slice::<Value>(o.raw()).ok(),
                    Err(e) if e.code() == Some(404) => None,
                    Err(e) => return Err(ApiError::from(e)),
                }
            };
            let mut difference = Difference {
                key: req.reconciling.clone(),
                op: req.op.name(),
                api_version: req.api_version.clone(),
                kind: req.kind.clone(),
                namespace: ns,
                name,
                outcome: Outcome::Agreement,
                at: SystemTime::now(),
                live_write: None,
                logs: None,
            };
            let deleting = matches!(req.op, WriteOp::Delete(_));
            let answer = match confined {
                Err(e) => Err(e),
                Ok(()) => {
                    let params = WriteParams {
                        field_manager: Some(field_manager),
                        dry_run: true,
                        ..WriteParams::default()
                    };
                    send(client, res, req, params).await
                }
            };
            difference.outcome = match &answer {
                Err(e) => Outcome::Refused(e.clone()),
                Ok(body) => {
                    let would = body
                        .as_ref()
                        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                        // A delete's answer is the object as it goes: gone, unless a finalizer
                        // holds it (then it stays, marked for deletion).
                        .filter(|v| !deleting || v["metadata"]["deletionTimestamp"].is_string());
                    compare(stored.as_ref(), would.as_ref())
                }
            };
            if difference.outcome != Outcome::Agreement {
                difference.live_write = follow.and_then(|f| {
                    f.last_write(
                        &difference.api_version,
                        &difference.kind,
                        difference.namespace.as_deref(),
                        &difference.name,
                    )
                });
                if difference.key.is_none() {
                    difference.logs = Some(Vec::new());
                }
            }
            tracing::debug!(kind = %difference.kind, name = %difference.name, op = difference.op,
                outcome = ?difference.outcome, "shadow write checked");
            let event = events.map(|e| (e, shadow_event(&difference, stored.as_ref())));
            if ledger.record(difference) {
                if let Some((recorder, event)) = event {
                    recorder.record(&field_manager_name, event);
                }
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_set_fields_and_condition_times_are_not_differences() {
        let stored = json!({"metadata": {"name": "a", "resourceVersion": "5", "generation": 1,
            "uid": "u", "managedFields": [{"manager": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let would = json!({"metadata": {"name": "a", "resourceVersion": "6", "generation": 2,
            "uid": "u", "managedFields": []},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                        "lastTransitionTime": "2026-11-29T00:00:00Z"}]}});
        assert_eq!(compare(Some(&stored), Some(&would)), Outcome::Agreement);
    }

    #[test]
    fn a_change_is_the_json_patch_from_the_stored_object() {
        let stored = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let would = json!({"metadata": {"name": "a", "annotations": {"x": "1"}},
                           "data": {"k": "v"}});
        assert_eq!(
            compare(Some(&stored), Some(&would)),
            Outcome::Changes(json!([
                {"op": "add", "path": "/metadata/annotations", "value": {"x": "1"}}
            ]))
        );
        // A create and a delete are whole-object changes.
        assert!(matches!(compare(None, Some(&stored)), Outcome::Changes(_)));
        assert!(matches!(compare(Some(&stored), None), Outcome::Changes(_)));
        assert_eq!(compare(None, None), Outcome::Agreement);
    }

    #[test]
    fn a_kind_of_difference_is_its_operation_kind_and_paths() {
        let patch = Outcome::Changes(json!([
            {"op": "replace", "path": "/data/b", "value": "1"},
            {"op": "add", "path": "/data/a", "value": "2"},
            {"op": "replace", "path": "/data/b", "value": "3"}
        ]));
        assert_eq!(
            kind_of("patch", "ConfigMap", &patch),
            "patch ConfigMap /data/a /data/b"
        );
        assert_eq!(
            kind_of(
                "create",
                "Pod",
                &Outcome::Refused(ApiError::forbidden("no"))
            ),
            "create Pod refused Forbidden"
        );
        let l = ShadowLedger::default();
        let d = |name: &str| Difference {
            key: None,
            op: "patch",
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: name.into(),
            outcome: patch.clone(),
            at: SystemTime::now(),
            live_write: None,
            logs: None,
        };
        assert!(l.record(d("a")), "a new kind");
        assert!(!l.record(d("b")), "the same kind on another object");
        assert_eq!(l.kinds(), ["patch ConfigMap /data/a /data/b"]);
    }

    #[test]
    fn a_reconciles_lines_go_to_its_differences_only() {
        let l = ShadowLedger::default();
        let d = |key: &str| Difference {
            key: Some(Arc::from(key)),
            op: "patch",
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: key.into(),
            outcome: Outcome::Changes(json!([])),
            at: SystemTime::now(),
            live_write: None,
            logs: None,
        };
        l.record(d("a"));
        l.record(d("b"));
        l.attach_logs("a", &["INFO first".to_owned()]);
        l.record(d("a"));
        l.attach_logs("a", &["INFO second".to_owned()]);
        let logs: Vec<_> = l.differences().into_iter().map(|d| d.logs).collect();
        assert_eq!(
            logs,
            [
                Some(vec!["INFO first".to_owned()]),
                None,
                Some(vec!["INFO second".to_owned()])
            ]
        );
    }

    #[test]
    fn the_ledger_counts_every_outcome_and_keeps_the_newest_differences() {
        let l = ShadowLedger::default();
        let d = |i: usize, outcome: Outcome| Difference {
            key: None,
            op: "patch",
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: format!("cm-{i}"),
            outcome,
            at: SystemTime::now(),
            live_write: None,
            logs: None,
        };
        l.record(d(0, Outcome::Agreement));
        for i in 0..KEPT_DIFFERENCES + 5 {
            l.record(d(i, Outcome::Changes(json!([]))));
        }
        l.record(d(99, Outcome::Refused(ApiError::forbidden("no"))));
        assert_eq!(l.agreements.load(Ordering::Relaxed), 1);
        assert_eq!(
            l.differences.load(Ordering::Relaxed),
            (KEPT_DIFFERENCES + 5) as u64
        );
        assert_eq!(l.refusals.load(Ordering::Relaxed), 1);
        let kept = l.differences();
        assert_eq!(kept.len(), KEPT_DIFFERENCES);
        assert_eq!(kept.last().map(|d| d.name.as_str()), Some("cm-99"));
        assert_eq!(kept[0].name, "cm-6");
    }
}
