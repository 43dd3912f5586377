//! The watch-stream decoder's output types. (The decoder itself is to be written.)

use super::error::Status;
use super::object::Object;

/// One event of a watch stream (spec 6.3), decoded.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    Added(Object),
    Modified(Object),
    /// Carries the object's last state.
    Deleted(Object),
    /// Only a resourceVersion; `initial_events_end` is set when the bookmark carries the
    /// `k8s.io/initial-events-end: "true"` annotation (spec 1.12, 6.4).
    Bookmark {
        resource_version: String,
        initial_events_end: bool,
    },
    /// An in-stream error, e.g. 410 Expired (spec 6.6).
    Error(Status),
}

/// One page (or the whole) of a LIST response (spec 6.2).
#[derive(Debug, Clone, Default)]
pub struct ObjectList {
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
    pub items: Vec<Object>,
}
