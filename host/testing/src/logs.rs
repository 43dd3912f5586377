//! Captures what a harnessed guest logs: `log` import calls, stdout and stderr lines, and the
//! host's refusals of calls its manifest does not allow.
//!
//! The capture is a `tracing` subscriber installed only around the harness's own guest calls
//! (`WithSubscriber`), so it sees exactly the lines of that harness's plugin even when several
//! harnesses run in parallel test threads, and nothing leaks into the process's real log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// Where a captured line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogSource {
    /// The `log` import.
    Log,
    /// The guest's stdout (one line per newline).
    Stdout,
    /// The guest's stderr.
    Stderr,
    /// The host about the guest: a lister read or write refused by the manifest.
    Host,
}

impl LogSource {
    /// `log`, `stdout`, `stderr` or `host`, as scenario files name it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogSource::Log => "log",
            LogSource::Stdout => "stdout",
            LogSource::Stderr => "stderr",
            LogSource::Host => "host",
        }
    }
}

/// Severity, as the `level` enum of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `trace`.
    Trace,
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn`.
    Warn,
    /// `error`.
    Error,
}

impl LogLevel {
    /// Parses `trace`, `debug`, `info`, `warn` (or `warning`), `error`, any case.
    pub fn parse(s: &str) -> Option<LogLevel> {
        match s.to_ascii_lowercase().as_str() {
            "trace" => Some(LogLevel::Trace),
            "debug" => Some(LogLevel::Debug),
            "info" => Some(LogLevel::Info),
            "warn" | "warning" => Some(LogLevel::Warn),
            "error" => Some(LogLevel::Error),
            _ => None,
        }
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }

    fn of(l: &tracing::Level) -> LogLevel {
        match *l {
            tracing::Level::TRACE => LogLevel::Trace,
            tracing::Level::DEBUG => LogLevel::Debug,
            tracing::Level::INFO => LogLevel::Info,
            tracing::Level::WARN => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }
}

/// One captured line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Where it came from.
    pub source: LogSource,
    /// Its level (stdout lines are `info`, stderr lines `warn`, refusals `warn`).
    pub level: LogLevel,
    /// The text.
    pub message: String,
}

/// The capture: a dispatcher to install around guest calls and the lines it collected.
#[derive(Clone)]
pub(crate) struct LogCapture {
    lines: Arc<Mutex<Vec<LogLine>>>,
    dispatch: Dispatch,
}

impl LogCapture {
    pub(crate) fn new() -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let dispatch = Dispatch::new(Capturer {
            lines: lines.clone(),
            next_span: AtomicU64::new(1),
        });
        LogCapture { lines, dispatch }
    }

    pub(crate) fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    pub(crate) fn lines(&self) -> Vec<LogLine> {
        self.lines.lock().clone()
    }

    pub(crate) fn take(&self) -> Vec<LogLine> {
        std::mem::take(&mut *self.lines.lock())
    }
}

struct Capturer {
    lines: Arc<Mutex<Vec<LogLine>>>,
    next_span: AtomicU64,
}

fn source_of(target: &str) -> Option<LogSource> {
    match target {
        "plugin::guest" => Some(LogSource::Log),
        "plugin::stdout" => Some(LogSource::Stdout),
        "plugin::stderr" => Some(LogSource::Stderr),
        "kwh_plugin::imports" => Some(LogSource::Host),
        _ => None,
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    extra: Vec<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "plugin" => {}
            other => self.extra.push(format!("{other}={value:?}")),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "plugin" => {}
            other => self.extra.push(format!("{other}={value}")),
        }
    }
}

impl Subscriber for Capturer {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // Events, and the level hints `tracing::enabled!` asks about (the guest's `log.enabled`,
        // which SDK log macros check before formatting).
        !metadata.is_span() && source_of(metadata.target()).is_some()
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let Some(source) = source_of(meta.target()) else {
            return;
        };
        let mut f = Fields::default();
        event.record(&mut f);
        let message = if source == LogSource::Host && !f.extra.is_empty() {
            // Refusals carry the kind and verb as fields; keep them in the line.
            format!("{} ({})", f.message, f.extra.join(" "))
        } else {
            f.message
        };
        self.lines.lock().push(LogLine {
            source,
            level: LogLevel::of(meta.level()),
            message,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_lines_are_captured_and_enabled_at_every_level_others_are_not() {
        let cap = LogCapture::new();
        tracing::dispatcher::with_default(cap.dispatch(), || {
            // What the `log.enabled` import asks before a guest formats a message.
            assert!(tracing::enabled!(target: "plugin::guest", tracing::Level::TRACE));
            assert!(!tracing::enabled!(target: "host::other", tracing::Level::ERROR));
            tracing::debug!(target: "plugin::guest", plugin = "p", "hello {}", 1);
            tracing::warn!(target: "kwh_plugin::imports", plugin = "p", kind = "Secret", "refused");
            tracing::error!(target: "host::other", "not the guest's");
        });
        assert_eq!(
            cap.take(),
            [
                LogLine {
                    source: LogSource::Log,
                    level: LogLevel::Debug,
                    message: "hello 1".into()
                },
                LogLine {
                    source: LogSource::Host,
                    level: LogLevel::Warn,
                    message: "refused (kind=Secret)".into()
                },
            ]
        );
        assert!(cap.lines().is_empty());
    }
}
