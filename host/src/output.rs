//! What the binary writes itself: the log subscriber on stderr (text or JSON) and the
//! announcement lines on stdout that scripts and tests read addresses from.

use std::io::{IsTerminal as _, Write as _};

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Writes one announcement line to stdout (what scripts and tests read addresses from): `text`
/// as is, or in JSON mode an object shaped like the log lines with `message` and `fields`.
pub fn announce(
    format: LogFormat,
    text: std::fmt::Arguments<'_>,
    message: &str,
    fields: serde_json::Value,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        LogFormat::Text => writeln!(out, "{text}")?,
        LogFormat::Json => {
            let mut f = serde_json::json!({ "message": message });
            if let (Some(f), Some(extra)) = (f.as_object_mut(), fields.as_object()) {
                f.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let line = serde_json::json!({ "level": "INFO", "fields": f, "target": "host" });
            writeln!(out, "{line}")?
        }
    }
    out.flush()
}

pub fn init_logs(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour only on a terminal: a log file or a collector would get the escape codes.
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}
