//! Placeholder types of the event recorder (being written on another branch).

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// The object an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// apiVersion.
    pub api_version: String,
    /// kind.
    pub kind: String,
    /// namespace.
    pub namespace: Option<String>,
    /// name.
    pub name: String,
    /// uid.
    pub uid: Option<String>,
}

/// One event to record.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// regarding.
    pub regarding: ObjectRef,
    /// type.
    pub event_type: EventType,
    /// reason.
    pub reason: String,
    /// action.
    pub action: String,
    /// note.
    pub note: Option<String>,
}

/// Placeholder.
#[derive(Clone)]
pub struct EventRecorder;

impl EventRecorder {
    /// Placeholder.
    pub fn record(&self, _reporting_controller: &str, _event: NewEvent) {}
}

/// Placeholder.
pub struct RecorderConfig;
impl RecorderConfig {
    /// Placeholder.
    pub fn new(_instance: String) -> Self {
        RecorderConfig
    }
}
/// Placeholder.
pub struct EventWriter;
impl EventWriter {
    /// Placeholder.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        shutdown.await
    }
}
impl EventRecorder {
    /// Placeholder.
    pub fn new(_c: crate::Client, _cfg: RecorderConfig) -> (Self, EventWriter) {
        (EventRecorder, EventWriter)
    }
}
