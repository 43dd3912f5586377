//! Captures tracing events (target, `plugin` field, message) on the current thread.

use std::sync::Arc;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub target: String,
    pub level: tracing::Level,
    pub plugin: Option<String>,
    pub message: String,
}

#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<Line>>>);

impl Captured {
    pub fn lines(&self) -> Vec<Line> {
        self.0.lock().clone()
    }
}

struct Capture(Captured);

#[derive(Default)]
struct Fields {
    plugin: Option<String>,
    message: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "plugin" => self.plugin = Some(value.to_string()),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "plugin" => self.plugin = Some(format!("{value:?}")),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        self.0 .0.lock().push(Line {
            target: event.metadata().target().to_string(),
            level: *event.metadata().level(),
            plugin: f.plugin,
            message: f.message,
        });
    }
}

/// Installs a capturing subscriber for the current thread until the guard drops.
pub fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(Capture(captured.clone()));
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

/// A process-wide capturing subscriber, installed on first use and shared by every test of the
/// process. Thread-local capture can miss events when tests in one process register and drop
/// subscribers concurrently; tests using this filter the lines by what only they produce.
pub fn capture_global() -> Captured {
    static GLOBAL: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    GLOBAL
        .get_or_init(|| {
            let captured = Captured::default();
            let subscriber = tracing_subscriber::registry().with(Capture(captured.clone()));
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test process");
            captured
        })
        .clone()
}
