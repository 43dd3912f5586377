//! The Events a guest records, kept in order instead of written, so tests assert on them.
//!
//! Production aggregates and rate-limits before writing (`kwh_plugin::events`); a unit test
//! wants to see every `record` call as the guest made it, so nothing is aggregated here.

use std::time::SystemTime;

use parking_lot::Mutex;

use super::clock::VirtualClock;
use kwh_plugin::backend::EventBackend;
use kwh_plugin::events::{EventType, NewEvent};

/// One `events.record` call.
#[derive(Debug, Clone)]
pub struct RecordedEvent {
    /// The plugin that recorded it (the Event's `reportingController`).
    pub reporting_controller: String,
    /// What it recorded (after the host's checks and truncation).
    pub event: NewEvent,
    /// When, on the virtual clock.
    pub at: SystemTime,
}

impl RecordedEvent {
    /// `Normal` or `Warning`, as the API spells it.
    pub fn type_name(&self) -> &'static str {
        match self.event.event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }

    /// The regarding object's key, `namespace/name` (or `name`).
    pub fn key(&self) -> String {
        let r = &self.event.regarding;
        kwh_client::object::object_key(r.namespace.as_deref(), &r.name)
    }
}

/// The harness's event backend.
pub struct FakeRecorder {
    clock: VirtualClock,
    events: Mutex<Vec<RecordedEvent>>,
}

impl FakeRecorder {
    /// An empty recorder timing events on `clock`.
    pub fn new(clock: VirtualClock) -> Self {
        FakeRecorder {
            clock,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Every event recorded so far, in order.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.lock().clone()
    }

    /// Takes the events recorded so far.
    pub fn take(&self) -> Vec<RecordedEvent> {
        std::mem::take(&mut *self.events.lock())
    }
}

impl EventBackend for FakeRecorder {
    fn record(&self, reporting_controller: &str, event: NewEvent) {
        self.events.lock().push(RecordedEvent {
            reporting_controller: reporting_controller.to_string(),
            event,
            at: self.clock.now(),
        });
    }
}
