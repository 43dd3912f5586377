//! What an Event is made of, as callers give it: its type, the object it regards, and one
//! occurrence, cut to the API server's limits.

use std::fmt;
use std::str::FromStr;

/// The API server's limit on `note`, in bytes (validation of `events.k8s.io/v1` Events).
pub const NOTE_LIMIT: usize = 1024;

/// The API server's limit on `reason` and `action`, in bytes.
pub const FIELD_LIMIT: usize = 128;

/// An Event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// The value of the Event's `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event type other than `Normal` or `Warning`, which the API server refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event type {0:?} (want Normal or Warning)")]
pub struct UnknownEventType(pub String);

impl FromStr for EventType {
    type Err = UnknownEventType;
    /// Exact names only: the API server matches them case-sensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Normal" => Ok(EventType::Normal),
            "Warning" => Ok(EventType::Warning),
            other => Err(UnknownEventType(other.to_owned())),
        }
    }
}

/// The object an Event is about (the Event's `regarding`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// `None` (or empty) for cluster-scoped objects, whose Events go to `default`.
    pub namespace: Option<String>,
    pub name: String,
    /// Lets `kubectl describe` tell this object from an earlier one of the same name.
    pub uid: Option<String>,
}

impl ObjectRef {
    /// Empty namespace and uid mean absent, so that both spellings are one identity.
    pub(super) fn normalized(mut self) -> Self {
        if self.namespace.as_deref() == Some("") {
            self.namespace = None;
        }
        if self.uid.as_deref() == Some("") {
            self.uid = None;
        }
        self
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One occurrence, as a controller reports it.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub regarding: ObjectRef,
    pub event_type: EventType,
    /// Why the action was taken, in PascalCase (`Expired`); part of the series identity.
    pub reason: String,
    /// What was done (`Delete`); part of the series identity.
    pub action: String,
    /// Human-readable detail; cut to [`NOTE_LIMIT`] bytes. Not part of the identity: a series
    /// keeps its first note.
    pub note: Option<String>,
}

impl NewEvent {
    /// The event cut to what the API server accepts: `reason` and `action` to [`FIELD_LIMIT`]
    /// bytes, `note` to [`NOTE_LIMIT`], at character boundaries. For events that come from
    /// outside the process (a guest's import call), cut where they enter rather than refused
    /// later by the server, away from the caller.
    pub fn within_api_limits(mut self) -> Self {
        truncate_at(&mut self.reason, FIELD_LIMIT);
        truncate_at(&mut self.action, FIELD_LIMIT);
        if let Some(n) = &mut self.note {
            truncate_note(n);
        }
        self
    }
}

/// Cut to [`NOTE_LIMIT`] bytes at a character boundary: a longer note makes the server refuse
/// the whole Event.
pub(super) fn truncate_note(note: &mut String) {
    truncate_at(note, NOTE_LIMIT);
}

/// Cut to at most `max` bytes, at a character boundary.
pub(super) fn truncate_at(s: &mut String, max: usize) {
    s.truncate(kwh_client::clip::floor_char_boundary(s, max));
}
