//! The lines the simulated plugins print, kept in order of emission: every host runs on the
//! simulation's one thread, so the order is the order in which things happened.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One `REV <revision> <what> <key> <rv>` line of the `reviser` guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rev {
    /// The revision label of the plugin that printed it.
    pub revision: String,
    /// `add`, `update`, `delete` or `reconcile`.
    pub what: String,
    /// The object's key.
    pub key: String,
    /// The resourceVersion it saw (`-` when none).
    pub rv: String,
}

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<Rev>>>);

struct Capture(Lines);

#[derive(Default)]
struct Message(Option<String>);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut m = Message::default();
        event.record(&mut m);
        let Some(msg) = m.0 else { return };
        if dump() {
            eprintln!(
                "{} {}: {msg}",
                event.metadata().level(),
                event.metadata().target()
            );
        }
        let Some(rest) = msg.strip_prefix("REV ") else {
            return;
        };
        let mut f = rest.split(' ');
        if let (Some(revision), Some(what), Some(key), Some(rv)) =
            (f.next(), f.next(), f.next(), f.next())
        {
            self.0 .0.lock().push(Rev {
                revision: revision.into(),
                what: what.into(),
                key: key.into(),
                rv: rv.into(),
            });
        }
    }
}

/// Whether `SIM_DUMP` asks for every line on stderr (read once).
pub fn dump() -> bool {
    static DUMP: OnceLock<bool> = OnceLock::new();
    *DUMP.get_or_init(|| std::env::var_os("SIM_DUMP").is_some())
}

fn lines() -> &'static Lines {
    static LINES: OnceLock<Lines> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Lines::default();
        // Guests' lines are at info; debug and trace events are not even built.
        let subscriber = tracing_subscriber::registry().with(
            Capture(lines.clone()).with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        );
        // A process that installed its own subscriber first keeps it; the simulation's lines
        // are then not seen, and every check fails loudly rather than passing on nothing.
        let _ = tracing::subscriber::set_global_default(subscriber);
        lines
    })
}

/// Starts capturing (installs the process's subscriber on first use) and forgets earlier lines.
pub fn reset() {
    lines().0.lock().clear();
}

/// The lines captured since the last [`reset`], in order.
pub fn take() -> Vec<Rev> {
    std::mem::take(&mut *lines().0.lock())
}
