//! What a plugin's imports reach in the host, as small traits.
//!
//! The imports do not depend on the informer, the API client or the workqueue directly: the
//! submodules implement these traits over the shared informer stores ([`informer`]), the API
//! client ([`kube`]; a shadow revision's dry runs in [`shadow`]) and the plugin's workqueue
//! ([`workqueue`]); the test harness implements
//! them with in-memory fakes. Permission checks happen before a backend is called, so backends
//! never see a call the manifest forbids.

pub mod informer;
pub mod kube;
pub mod shadow;
pub mod workqueue;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::events::NewEvent;
use kwh_client::object::Object;

/// A boxed future: client backends do network I/O, and one allocation per write is noise next to it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An API error as the guest sees it (`api-error` in the WIT): the fields of a failure `Status`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `Conflict`, `Forbidden`.
    pub reason: String,
    /// `Status.message`.
    pub message: String,
}

impl ApiError {
    /// Builds an error from its parts.
    pub fn new(code: u16, reason: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The refusal of a call the manifest does not declare (shaped like the API server's 403).
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    /// A malformed request from the guest (e.g. an unparsable selector).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// A backend that is not wired up (e.g. while only the manifest is being read).
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(503, "ServiceUnavailable", message)
    }
}

/// Reads from the informer caches. Only kinds the manifest watches are ever asked for.
///
/// Returned [`Object`]s are shared handles (no copy); the import layer copies each object's bytes
/// once, into guest memory, or extracts only keys or metadata when the guest asked for those.
pub trait ListerBackend: Send + Sync {
    /// One object by namespace and name.
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, ApiError>;

    /// One object in the cache of watch number `watch` by its key (`namespace/name`, or `name`).
    /// The caller has checked `watch` against the manifest; a watch whose cache is not wired
    /// yet finds nothing, as an unsynced cache answers.
    fn get_by_key(&self, watch: u32, key: &str) -> Result<Option<Object>, ApiError>;

    /// Objects in `namespace` (all when none) matching `label_selector` (all when none).
    /// An unparsable selector is a 400 `BadRequest`.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Object>, ApiError>;

    /// Objects whose index `index_name` yields `index_value`; an unknown index is a 400.
    fn by_index(
        &self,
        api_version: &str,
        kind: &str,
        index_name: &str,
        index_value: &str,
    ) -> Result<Vec<Object>, ApiError>;
}

/// How a patch body is to be read (`Content-Type` of the PATCH request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
}

impl PatchKind {
    /// The request's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchKind::Json => "application/json-patch+json",
            PatchKind::Merge => "application/merge-patch+json",
            PatchKind::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// `Orphan`.
    Orphan,
    /// `Background`.
    Background,
    /// `Foreground`.
    Foreground,
}

/// `DeleteOptions` of a delete, as far as the contract exposes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_resource_version: Option<String>,
    /// `propagationPolicy`.
    pub propagation: Option<Propagation>,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
}

/// The operation of a write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// POST to the collection.
    Create,
    /// PUT to the object.
    Replace,
    /// PATCH with the given patch type.
    Patch(PatchKind),
    /// DELETE with options.
    Delete(DeleteParams),
    /// PUT to the `status` subresource.
    ReplaceStatus,
    /// Server-side apply: PATCH `application/apply-patch+yaml` with `fieldManager`.
    Apply {
        /// `fieldManager`: the plugin's name.
        field_manager: Arc<str>,
        /// `force=true`.
        force: bool,
    },
    /// PATCH to the `status` subresource with the given patch type.
    PatchStatus(PatchKind),
    /// Server-side apply to the `status` subresource (never creates the object).
    ApplyStatus {
        /// `fieldManager`: the plugin's name.
        field_manager: Arc<str>,
        /// `force=true`.
        force: bool,
    },
}

impl WriteOp {
    /// How a shadow's difference (and the live write beside it) names the operation:
    /// `create`, `replace`, `patch`, `delete`, `replace-status`, `apply`, `patch-status`,
    /// `apply-status`.
    pub fn name(&self) -> &'static str {
        match self {
            WriteOp::Create => "create",
            WriteOp::Replace => "replace",
            WriteOp::Patch(_) => "patch",
            WriteOp::Delete(_) => "delete",
            WriteOp::ReplaceStatus => "replace-status",
            WriteOp::Apply { .. } => "apply",
            WriteOp::PatchStatus(_) => "patch-status",
            WriteOp::ApplyStatus { .. } => "apply-status",
        }
    }
}

impl WriteOp {
    /// The subresource the request goes to.
    pub fn subresource(&self) -> Option<&'static str> {
        match self {
            WriteOp::ReplaceStatus | WriteOp::PatchStatus(_) | WriteOp::ApplyStatus { .. } => {
                Some("status")
            }
            _ => None,
        }
    }
}

/// One write a guest asked for, already permitted by its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest {
    /// What to do.
    pub op: WriteOp,
    /// `group/version` of the kind.
    pub api_version: String,
    /// The kind (resolved to a resource by discovery in the backend).
    pub kind: String,
    /// The namespace, none for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object's name; none for `Create` (the name is in the body).
    pub name: Option<String>,
    /// The request body: object, patch, or empty for deletes.
    pub body: Vec<u8>,
    /// The reconcile key it is written for (none from a handler): a sharded replica refuses
    /// a write for a key that moved to another replica while its reconcile was running.
    pub reconciling: Option<std::sync::Arc<str>>,
}

/// Writes to the API server.
pub trait ClientBackend: Send + Sync {
    /// Performs `req`. Returns the object the server answered with, or none when it answered with
    /// a `Status` (e.g. an immediate delete).
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>>;
}

/// The plugin's workqueue.
pub trait QueueBackend: Send + Sync {
    /// Adds `key` now. Borrowed: a key already queued costs no copy.
    fn add(&self, key: &str);
    /// Adds `key` after `delay`.
    fn add_after(&self, key: &str, delay: Duration);
}

/// Where the Kubernetes Events a plugin records go.
///
/// `record` runs inside a guest call (often a reconcile), so it must return at once: the
/// production backend aggregates in memory and leaves the API writes to a task of its own.
pub trait EventBackend: Send + Sync {
    /// Records `event`, reported by the plugin `reporting_controller`.
    fn record(&self, reporting_controller: &str, event: NewEvent);

    /// Records `event` from a guest call: a reconcile of the key `reconciling`, or a handler
    /// (none). Where that makes no difference, as [`EventBackend::record`].
    fn record_from(&self, reporting_controller: &str, event: NewEvent, reconciling: Option<&str>) {
        let _ = reconciling;
        self.record(reporting_controller, event);
    }
}

impl EventBackend for crate::events::EventRecorder {
    fn record(&self, reporting_controller: &str, event: NewEvent) {
        crate::events::EventRecorder::record(self, reporting_controller, event);
    }
}

/// One live plugin's `events` import on the host's recorder. Under `--shards` every replica
/// runs a sharded plugin's handlers, so an Event recorded by a handler would be recorded once
/// per replica: it is dropped (the first one logged as a warning, then at debug), and only a
/// reconcile, which runs on its key's one owner, records Events. The same rule as for the
/// plugin's writes (`KubeClientBackend`).
pub struct PluginEvents {
    recorder: crate::events::EventRecorder,
    own: kwh_coordination::ownership::PluginOwnership,
    warned: std::sync::atomic::AtomicBool,
}

impl PluginEvents {
    /// `recorder` for a plugin whose work `own` decides.
    pub fn new(
        recorder: crate::events::EventRecorder,
        own: kwh_coordination::ownership::PluginOwnership,
    ) -> Self {
        PluginEvents {
            recorder,
            own,
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl EventBackend for PluginEvents {
    fn record(&self, reporting_controller: &str, event: NewEvent) {
        self.recorder.record(reporting_controller, event);
    }

    fn record_from(&self, reporting_controller: &str, event: NewEvent, reconciling: Option<&str>) {
        if reconciling.is_none() && self.own.sharded() {
            let first = !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed);
            if first {
                tracing::warn!(plugin = reporting_controller, reason = %event.reason,
                    "event dropped: under --shards handlers run on every replica, so only reconciles record Events (logged once)");
            } else {
                tracing::debug!(plugin = reporting_controller, reason = %event.reason,
                    "event dropped: recorded by a handler under --shards");
            }
            return;
        }
        self.recorder.record(reporting_controller, event);
    }
}

/// The backends a plugin's instances share.
#[derive(Clone)]
pub struct Backends {
    /// Cache reads.
    pub lister: Arc<dyn ListerBackend>,
    /// API writes.
    pub client: Arc<dyn ClientBackend>,
    /// The workqueue.
    pub queue: Arc<dyn QueueBackend>,
    /// Kubernetes Events the plugin records.
    pub events: Arc<dyn EventBackend>,
}

impl Backends {
    /// Backends that refuse every call with 503: used while only the manifest is read, when no
    /// informer, client or queue exists yet for the plugin.
    pub fn unavailable() -> Self {
        let none = Arc::new(Unavailable);
        Backends {
            lister: none.clone(),
            client: none.clone(),
            queue: none.clone(),
            events: none,
        }
    }
}

struct Unavailable;

const UNAVAILABLE: &str = "not available while the plugin's manifest is being read";

impl ListerBackend for Unavailable {
    fn get(&self, _: &str, _: &str, _: Option<&str>, _: &str) -> Result<Option<Object>, ApiError> {
        Err(ApiError::unavailable(UNAVAILABLE))
    }
    fn get_by_key(&self, _: u32, _: &str) -> Result<Option<Object>, ApiError> {
        Err(ApiError::unavailable(UNAVAILABLE))
    }
    fn list(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<Object>, ApiError> {
        Err(ApiError::unavailable(UNAVAILABLE))
    }
    fn by_index(&self, _: &str, _: &str, _: &str, _: &str) -> Result<Vec<Object>, ApiError> {
        Err(ApiError::unavailable(UNAVAILABLE))
    }
}

impl ClientBackend for Unavailable {
    fn write(&self, _: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>> {
        Box::pin(async { Err(ApiError::unavailable(UNAVAILABLE)) })
    }
}

impl EventBackend for Unavailable {
    fn record(&self, reporting_controller: &str, event: NewEvent) {
        tracing::debug!(plugin = reporting_controller, reason = %event.reason, "event ignored: {UNAVAILABLE}");
    }
}

impl QueueBackend for Unavailable {
    fn add(&self, key: &str) {
        tracing::debug!(%key, "queue add ignored: {UNAVAILABLE}");
    }
    fn add_after(&self, key: &str, _: Duration) {
        tracing::debug!(%key, "queue add-after ignored: {UNAVAILABLE}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventRecorder, EventType, ObjectRef, RecorderConfig};
    use kwh_coordination::leader_election::Fence;
    use kwh_coordination::ownership::{Ownership, Shards};

    fn event() -> NewEvent {
        NewEvent {
            regarding: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("default".into()),
                name: "a".into(),
                uid: None,
            },
            event_type: EventType::Normal,
            reason: "Seen".into(),
            action: "Look".into(),
            note: None,
        }
    }

    /// Under `--shards` every replica runs a sharded plugin's handlers: an Event a handler
    /// records is dropped (it would be recorded once per replica), a reconcile's is kept; a
    /// plugin on the leader only is not sharded, and its handlers' Events are kept.
    #[tokio::test]
    async fn a_sharded_plugins_handlers_record_no_events() {
        let client = kwh_client::Client::new(kwh_client::Config::new(
            "http://127.0.0.1:9".parse().unwrap(),
        ))
        .unwrap();
        let (recorder, _writer) = EventRecorder::new(client, RecorderConfig::new("test"));
        let shards = std::sync::Arc::new(Shards::new(
            "a",
            Fence::always_open(),
            std::time::Duration::ZERO,
        ));
        let own = Ownership::new(Fence::always_open(), Some(shards), None);
        let sharded = PluginEvents::new(recorder.clone(), own.for_plugin("p", false));
        sharded.record_from("p", event(), None);
        assert_eq!(recorder.stats().recorded, 0, "a handler's Event is dropped");
        sharded.record_from("p", event(), Some("default/a"));
        assert_eq!(recorder.stats().recorded, 1, "a reconcile's is recorded");
        let leader_only = PluginEvents::new(recorder.clone(), own.for_plugin("q", true));
        leader_only.record_from("q", event(), None);
        assert_eq!(recorder.stats().recorded, 2, "not sharded: recorded");
    }
}
