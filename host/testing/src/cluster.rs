//! The fake cluster: the API-server emulator's store and write logic, called in-process.
//!
//! Writes behave as on kube-apiserver because they are the emulator's own code paths: uid and
//! creationTimestamp on create, resourceVersion bumps, 409 on a stale resourceVersion, 404 and
//! 409 AlreadyExists, JSON / merge / strategic-merge patches, server-side apply with
//! managedFields, finalizers deferring deletes with deletionTimestamp, the status subresource.
//! Server-set timestamps come from the harness's virtual clock.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::clock::VirtualClock;
use kwh_client::object::{object_key, Object};
use kwh_client::Status;
use kwh_emulator::registry::ResourceDef;
use kwh_emulator::request::ResourceRequest;
use kwh_emulator::store::{Event, EventType};
use kwh_emulator::write::{self, DeleteOptions, PatchQuery, WriteOpts};
use kwh_emulator::{self as emulator, Shared};
use kwh_plugin::backend::{ApiError, DeleteParams, Propagation, WriteOp, WriteRequest};

/// The field manager of objects the test itself creates or changes.
pub const TEST_MANAGER: &str = "test-harness";

/// Why seeding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// The text is not YAML (or JSON).
    #[error("document {index} is not valid YAML or JSON: {message}")]
    Parse {
        /// Position of the document in the text.
        index: usize,
        /// The parser's message.
        message: String,
    },
    /// The cluster refused an object.
    #[error("document {index} rejected: {message}")]
    Rejected {
        /// Position of the document in the text.
        index: usize,
        /// The API error's message.
        message: String,
    },
}

/// An in-memory cluster serving the emulator's built-in kinds (and CRDs created in it).
#[derive(Clone)]
pub struct FakeCluster {
    shared: Arc<Shared>,
    clock: VirtualClock,
}

fn api_error(s: Status) -> ApiError {
    ApiError::new(s.code, s.reason, s.message)
}

impl FakeCluster {
    /// An empty cluster (the default namespaces only) whose timestamps follow `clock`.
    pub fn new(clock: VirtualClock) -> Result<Self, ApiError> {
        let c = clock.clone();
        let shared =
            Shared::in_process(Some(Arc::new(move || c.unix_secs()))).map_err(api_error)?;
        Ok(FakeCluster { shared, clock })
    }

    /// The clock its timestamps come from.
    pub fn clock(&self) -> &VirtualClock {
        &self.clock
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Creates every object of a YAML or JSON text (several `---` documents, `List`s unpacked),
    /// creating missing namespaces first. Returns the stored objects.
    pub fn seed_yaml(&self, text: &str) -> Result<Vec<Object>, SeedError> {
        emulator::seed_yaml(&self.shared, text, TEST_MANAGER).map_err(|e| match e {
            emulator::EmulatorError::Yaml { index, message } => SeedError::Parse { index, message },
            emulator::EmulatorError::Rejected { index, status } => SeedError::Rejected {
                index,
                message: status,
            },
            other => SeedError::Rejected {
                index: 0,
                message: other.to_string(),
            },
        })
    }

    /// Creates `obj` as a POST would (its namespace is created first when missing).
    pub fn create(&self, obj: Value) -> Result<Object, ApiError> {
        emulator::seed_value(&self.shared, obj, TEST_MANAGER).map_err(api_error)
    }

    /// Replaces `obj` as a PUT would: with `metadata.resourceVersion` set, a stale one is a 409.
    pub fn replace(&self, obj: Value) -> Result<Object, ApiError> {
        write::update_value(&self.shared, obj, TEST_MANAGER).map_err(api_error)
    }

    /// Replaces the status of `obj` as a PUT to its `status` subresource would.
    pub fn replace_status(&self, obj: Value) -> Result<Object, ApiError> {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let meta = |f: &str| {
            obj.pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let req = WriteRequest {
            op: WriteOp::ReplaceStatus,
            api_version: av.to_owned(),
            kind: kind.to_owned(),
            namespace: meta("namespace"),
            name: meta("name"),
            body: serde_json::to_vec(&obj).unwrap_or_default(),
            reconciling: None,
        };
        self.write(&req, TEST_MANAGER)?
            .ok_or_else(|| ApiError::new(500, "InternalError", "no object returned"))
            .and_then(|b| Object::from_bytes(b).map_err(|e| internal(&e.to_string())))
    }

    /// Deletes an object as a DELETE without options would. With finalizers it stays, with
    /// `deletionTimestamp` set; the returned object is its last (or current) state.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Object, ApiError> {
        let def = self.def(api_version, kind)?;
        write::delete_inner(
            &self.shared,
            &def,
            namespace,
            name,
            &DeleteOptions::default(),
        )
        .map(|(o, _)| o)
        .map_err(api_error)
    }

    /// One object.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Object> {
        let def = self.def(api_version, kind).ok()?;
        write::get(&self.shared, &def, namespace, name).ok()
    }

    /// Every object of a kind in one namespace (all when none), by namespace and name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Object> {
        let Ok(def) = self.def(api_version, kind) else {
            return Vec::new();
        };
        self.shared
            .store
            .snapshot(&def.store_key, &prefix_of(&def, namespace))
            .1
    }

    /// The served resource of `api_version`/`kind` (404 `NotFound` when nothing serves it).
    pub(crate) fn def(&self, api_version: &str, kind: &str) -> Result<Arc<ResourceDef>, ApiError> {
        write::def_for(&self.shared, api_version, kind).map_err(api_error)
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Why `r` is not an object kept since the cluster began: absent now, or deleted (and
    /// perhaps created again) on the way; none when it is. Read from the cluster's event
    /// history (the last 10,000 changes of its resource).
    pub fn deleted_since_start(&self, r: &super::scenario::ObjectRef) -> Option<String> {
        let what = format!("{} {}", r.kind, object_key(r.namespace.as_deref(), &r.name));
        let def = match self.def(&r.api_version, &r.kind) {
            Ok(d) => d,
            Err(e) => return Some(format!("{what}: {e}")),
        };
        if self
            .get(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name)
            .is_none()
        {
            return Some(format!("{what} not found"));
        }
        let key = format!("{}{}", prefix_of(&def, r.namespace.as_deref()), r.name);
        let (events, complete) = self.history(&def);
        if !complete {
            return Some(format!("{what}: too long a history to tell"));
        }
        let deletions = events
            .iter()
            .filter(|e| &*e.key == key.as_str() && e.ty == EventType::Deleted)
            .count();
        (deletions > 0).then(|| format!("{what} was deleted {deletions} time(s) and made again"))
    }
    /// Every change of `def`'s resource the history window holds (10,000 per resource), oldest
    /// first, each with the object before it; and whether that is every change since the
    /// cluster began.
    pub(crate) fn history(&self, def: &ResourceDef) -> (Vec<Arc<Event>>, bool) {
        let store = &self.shared.store;
        let mut events = Vec::new();
        match store.events_after(&def.store_key, 0, usize::MAX, &mut events) {
            Ok(_) => (events, true),
            Err(e) => {
                events.clear();
                let _ = store.events_after(&def.store_key, e.oldest, usize::MAX, &mut events);
                (events, false)
            }
        }
    }

    /// Performs a guest's write as the API server would answer the request the production
    /// client sends for it (the plugin's name as `fieldManager`).
    pub fn write(&self, req: &WriteRequest, manager: &str) -> Result<Option<Bytes>, ApiError> {
        let def = self
            .def(&req.api_version, &req.kind)
            .map_err(|_| not_resolved(req))?;
        let namespace = if def.namespaced {
            match &req.namespace {
                Some(ns) => Some(ns.clone()),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "{} is namespaced: a namespace is required",
                        def.kind
                    )))
                }
            }
        } else {
            None
        };
        let name = || {
            req.name
                .clone()
                .ok_or_else(|| ApiError::bad_request("a name is required"))
        };
        let rr = |name: Option<String>, sub: Option<&str>| ResourceRequest {
            def: def.clone(),
            namespace: namespace.clone(),
            name,
            subresource: sub.map(str::to_owned),
            watch_path: false,
        };
        let w = WriteOpts::by(manager);
        let sh = &*self.shared;
        let sub = req.op.subresource();
        if sub == Some("status") && !def.status {
            // The API server has no route for it: the same 404 whatever the method.
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("{} has no status subresource", def.plural),
            ));
        }
        let obj = match &req.op {
            WriteOp::Create => write::create(sh, &rr(None, None), &req.body, w),
            WriteOp::Replace => write::update(sh, &rr(Some(name()?), None), &req.body, w),
            WriteOp::ReplaceStatus => write::update(sh, &rr(Some(name()?), sub), &req.body, w),
            WriteOp::Patch(kind) | WriteOp::PatchStatus(kind) => {
                let q = PatchQuery {
                    field_manager: Some(manager),
                    ..PatchQuery::default()
                };
                let r = rr(Some(name()?), sub);
                write::patch(sh, &r, kind.content_type(), &req.body, w, q).map(|(_, o)| o)
            }
            WriteOp::Apply {
                field_manager,
                force,
            }
            | WriteOp::ApplyStatus {
                field_manager,
                force,
            } => {
                let q = PatchQuery {
                    field_manager: Some(field_manager),
                    force: *force,
                    force_given: *force,
                };
                let r = rr(Some(name()?), sub);
                let w = WriteOpts::by(field_manager);
                write::patch(sh, &r, "application/apply-patch+yaml", &req.body, w, q)
                    .map(|(_, o)| o)
            }
            WriteOp::Delete(d) => {
                let opts = delete_options(d)?;
                let n = name()?;
                let (o, gone) = write::delete_inner(sh, &def, namespace.as_deref(), &n, &opts)
                    .map_err(api_error)?;
                // kube-apiserver answers an immediate delete of a built-in kind (other than
                // pods) with a Status, everything else with the object.
                if gone && def.builtin && def.plural != "pods" {
                    return Ok(None);
                }
                return Ok(Some(o.raw_bytes()));
            }
        };
        obj.map(|o| Some(o.raw_bytes())).map_err(api_error)
    }
}

fn internal(msg: &str) -> ApiError {
    ApiError::new(500, "InternalError", msg)
}

fn not_resolved(req: &WriteRequest) -> ApiError {
    internal(&format!(
        "kind {} ({}) was not resolved at load",
        req.kind, req.api_version
    ))
}

pub(crate) fn prefix_of(def: &ResourceDef, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if def.namespaced => format!("{ns}/"),
        _ => String::new(),
    }
}

/// The production client's mapping of `DeleteParams` to `DeleteOptions`.
fn delete_options(d: &DeleteParams) -> Result<DeleteOptions, ApiError> {
    if let Some(g) = d.grace_period_seconds.filter(|g| *g < 0) {
        return Err(ApiError::bad_request(format!(
            "gracePeriodSeconds must be non-negative, got {g}"
        )));
    }
    Ok(DeleteOptions {
        // None: the kind's default, as the API server decides it.
        propagation: d.propagation.map(|p| match p {
            Propagation::Orphan => write::Propagation::Orphan,
            Propagation::Foreground => write::Propagation::Foreground,
            Propagation::Background => write::Propagation::Background,
        }),
        dry_run: false,
        precondition_uid: d.precondition_uid.clone(),
        precondition_rv: d.precondition_resource_version.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kwh_plugin::backend::PatchKind;
    use serde_json::json;

    fn cluster() -> FakeCluster {
        FakeCluster::new(VirtualClock::default()).expect("cluster")
    }

    fn req(op: WriteOp, name: Option<&str>, body: Value) -> WriteRequest {
        WriteRequest {
            op,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.map(str::to_owned),
            body: if body.is_null() {
                Vec::new()
            } else {
                body.to_string().into_bytes()
            },
            reconciling: None,
        }
    }

    #[test]
    fn writes_behave_as_the_api_server_with_virtual_timestamps() {
        let c = cluster();
        c.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}))
            .expect("ns");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "1"}});
        let created = c
            .write(&req(WriteOp::Create, None, cm.clone()), "p")
            .expect("create")
            .expect("object");
        let o = Object::from_bytes(created).expect("object");
        assert!(!o.uid().is_empty());
        let v = o.to_value().expect("json");
        assert_eq!(
            v["metadata"]["creationTimestamp"], "2025-01-01T00:00:00Z",
            "virtual clock"
        );
        let again = c.write(&req(WriteOp::Create, None, cm), "p").unwrap_err();
        assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
        let stale = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}});
        let e = c
            .write(&req(WriteOp::Replace, Some("a"), stale), "p")
            .unwrap_err();
        assert_eq!(e.code, 409);
        let patched = c
            .write(
                &req(
                    WriteOp::Patch(PatchKind::Merge),
                    Some("a"),
                    json!({"data": {"k": "2"}}),
                ),
                "p",
            )
            .expect("patch")
            .expect("object");
        let p = Object::from_bytes(patched).expect("object");
        assert_ne!(p.resource_version(), o.resource_version());
        let missing = c
            .write(
                &req(WriteOp::Patch(PatchKind::Merge), Some("b"), json!({})),
                "p",
            )
            .unwrap_err();
        assert_eq!(missing.code, 404);
        let gone = c
            .write(
                &req(
                    WriteOp::Delete(DeleteParams::default()),
                    Some("a"),
                    Value::Null,
                ),
                "p",
            )
            .expect("delete");
        assert!(gone.is_none(), "a built-in kind's delete answers a Status");
        assert!(c.get("v1", "ConfigMap", Some("ns"), "a").is_none());
    }
}

#[cfg(test)]
mod crd_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_seeded_crd_serves_its_kind_with_a_status_subresource() {
        let c = FakeCluster::new(VirtualClock::default()).expect("cluster");
        c.seed_yaml(WIDGETS).expect("seed");
        let w = c
            .get("example.com/v1", "Widget", Some("team"), "w")
            .expect("widget");
        assert_eq!(w.meta().generation, 1);
        let status = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team"}, "spec": {"size": 9},
            "status": {"ready": true}});
        let o = c.replace_status(status).expect("status");
        let v = o.to_value().expect("json");
        assert_eq!(v["status"]["ready"], true);
        assert_eq!(v["spec"]["size"], 1, "a status write leaves spec alone");
        assert_eq!(o.meta().generation, 1);
    }

    const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: team, labels: {a: "1"}}
spec: {size: 1}
status: {phase: Old, note: kept}
"#;

    fn widget_req(op: WriteOp, name: &str, body: Value) -> WriteRequest {
        WriteRequest {
            op,
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            namespace: Some("team".into()),
            name: Some(name.into()),
            body: body.to_string().into_bytes(),
            reconciling: None,
        }
    }

    fn stored(b: Option<Bytes>) -> Value {
        Object::from_bytes(b.expect("object"))
            .expect("object")
            .to_value()
            .expect("json")
    }

    fn manager_entry<'a>(v: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
        v["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
    }

    #[test]
    fn a_status_patch_changes_only_status_and_needs_no_current_resource_version() {
        use kwh_plugin::backend::PatchKind;
        let c = FakeCluster::new(VirtualClock::default()).expect("cluster");
        c.seed_yaml(WIDGETS).expect("seed");
        let before = c
            .get("example.com/v1", "Widget", Some("team"), "w")
            .expect("widget");
        // The status a seed sets is dropped on create (status subresource): give it one.
        c.replace_status(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team"}, "status": {"phase": "Old", "note": "kept"}}))
            .expect("status");
        let patch = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"size": 9},
            "status": {"phase": "Ready"}});
        let out = c
            .write(
                &widget_req(WriteOp::PatchStatus(PatchKind::Merge), "w", patch),
                "p",
            )
            .expect("status patch");
        let v = stored(out);
        assert_eq!(v["status"], json!({"phase": "Ready", "note": "kept"}));
        assert_eq!(v["spec"]["size"], 1, "spec is not the status subresource's");
        assert_eq!(v["metadata"]["labels"]["a"], "1", "nor is metadata");
        assert_eq!(v["metadata"]["generation"], 1);
        assert_ne!(v["metadata"]["resourceVersion"], before.resource_version());
        let e = manager_entry(&v, "p", "Update").expect("p's entry");
        assert_eq!(e["subresource"], "status");

        // A patch that states a stale resourceVersion is refused like a stale PUT.
        let stale = json!({"metadata": {"resourceVersion": before.resource_version()},
            "status": {"phase": "Stale"}});
        let e = c
            .write(
                &widget_req(WriteOp::PatchStatus(PatchKind::Merge), "w", stale),
                "p",
            )
            .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));

        // A JSON patch addresses status paths the same way.
        let ops = json!([{"op": "replace", "path": "/status/phase", "value": "Done"}]);
        let v = stored(
            c.write(
                &widget_req(WriteOp::PatchStatus(PatchKind::Json), "w", ops),
                "p",
            )
            .expect("json patch"),
        );
        assert_eq!(v["status"]["phase"], "Done");

        // Kinds without a status subresource, and missing objects, are 404s.
        let e = c
            .write(
                &WriteRequest {
                    op: WriteOp::PatchStatus(PatchKind::Merge),
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("team".into()),
                    name: Some("x".into()),
                    body: b"{}".to_vec(),
                    reconciling: None,
                },
                "p",
            )
            .unwrap_err();
        assert_eq!(e.code, 404, "{e}");
        let e = c
            .write(
                &widget_req(WriteOp::PatchStatus(PatchKind::Merge), "nope", json!({})),
                "p",
            )
            .unwrap_err();
        assert_eq!(e.code, 404, "{e}");
    }

    #[test]
    fn a_status_apply_owns_the_status_fields_it_states_and_never_creates() {
        let c = FakeCluster::new(VirtualClock::default()).expect("cluster");
        c.seed_yaml(WIDGETS).expect("seed");
        let apply = |force: bool| WriteOp::ApplyStatus {
            field_manager: "p".into(),
            force,
        };
        let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team", "labels": {"b": "x"}},
            "spec": {"size": 5}, "status": {"phase": "Ready", "count": 2}});
        let v = stored(
            c.write(
                &widget_req(apply(false), "w", body),
                "ignored: an apply writes as its field manager",
            )
            .expect("status apply"),
        );
        assert_eq!(v["status"]["phase"], "Ready");
        assert_eq!(v["status"]["count"], 2);
        assert_eq!(v["spec"]["size"], 1, "spec is not the status subresource's");
        assert!(v["metadata"]["labels"].get("b").is_none(), "{v}");
        let e = manager_entry(&v, "p", "Apply").expect("p owns what it applied");
        assert_eq!(e["subresource"], "status");
        assert!(
            e["fieldsV1"]["f:status"]["f:count"].is_object(),
            "{}",
            e["fieldsV1"]
        );
        assert!(e["fieldsV1"].get("f:spec").is_none(), "{}", e["fieldsV1"]);

        // Stating fewer fields removes the ones it stops stating.
        let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team"}, "status": {"phase": "Ready"}});
        let v = stored(
            c.write(&widget_req(apply(false), "w", body), "p")
                .expect("status apply"),
        );
        assert_eq!(v["status"], json!({"phase": "Ready"}));

        // Status apply never creates.
        let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "new", "namespace": "team"}, "status": {"phase": "Ready"}});
        let e = c
            .write(&widget_req(apply(true), "new", body), "p")
            .unwrap_err();
        assert_eq!(e.code, 404, "{e}");
        assert!(c
            .get("example.com/v1", "Widget", Some("team"), "new")
            .is_none());
    }
}
