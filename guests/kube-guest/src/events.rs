//! Kubernetes Events, in the shape of kube-rs's `kube::runtime::events::Recorder`.
//!
//! `kubectl describe` and `kubectl events` show them to the people who run the cluster, which
//! log lines inside a host process never reach. The host writes `events.k8s.io/v1` Events with
//! the plugin's name as `reportingController`, aggregates identical ones (same object, type,
//! reason and action) into one Event with a growing `series.count`, rate-limits new ones per
//! object, and never blocks the caller: publishing is fire-and-forget.
//!
//! ```no_run
//! use kube_guest::events::{Event, EventType, Recorder};
//! # fn f(obj: &kube_guest::Object) {
//! Recorder::new().publish(
//!     &Event {
//!         type_: EventType::Normal,
//!         reason: "Expired".into(),
//!         note: Some(format!("deleted {}: TTL passed", obj.key())),
//!         action: "Delete".into(),
//!     },
//!     &obj.object_ref(),
//! );
//! # }
//! ```

pub use crate::bindings::kube::controller::types::{EventType, ObjectReference};

/// One event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `Normal` for what is expected, `Warning` for what needs attention.
    pub type_: EventType,
    /// Why, in UpperCamelCase (`Expired`, `ConfigChanged`); at most 128 characters.
    pub reason: String,
    /// For humans; at most 1024 bytes (the host truncates longer notes).
    pub note: Option<String>,
    /// What the controller did or failed to do (`Delete`, `Roll`); at most 128 characters.
    pub action: String,
}

/// Publishes events as the plugin (the host knows who is reporting, so there is nothing to set
/// up: `Recorder::new()` anywhere is enough).
#[derive(Debug, Clone, Copy, Default)]
pub struct Recorder;

impl Recorder {
    /// A recorder for this plugin.
    pub fn new() -> Self {
        Recorder
    }

    /// Records `ev` about `regarding`. Never blocks and never fails: the host drops (and
    /// counts) events it has no room for rather than slow a reconcile down.
    pub fn publish(&self, ev: &Event, regarding: &ObjectReference) {
        crate::bindings::kube::controller::events::record(
            regarding,
            ev.type_,
            &ev.reason,
            &ev.action,
            ev.note.as_deref(),
        );
    }
}
