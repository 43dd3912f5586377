//! Guest stdout/stderr as `tracing` lines tagged with the plugin's name.
//!
//! Guests get no inherited stdio: whatever they print is split into lines and logged, so a
//! `println!` in a controller lands in the host's structured log instead of interleaving with it.
//! The lines count against the plugin's log budget ([`GuestLog`]), as its `log` import does.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use super::guest_log::{GuestLog, MAX_LINE};

/// Which guest stream a line came from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// A line-splitting sink; clones share the pending partial line.
#[derive(Clone)]
pub(crate) struct LogStream(Arc<Inner>);

struct Inner {
    log: Arc<GuestLog>,
    stream: Stream,
    pending: Mutex<Vec<u8>>,
}

impl LogStream {
    /// A stream whose lines count against `log` (a line longer than [`MAX_LINE`] is logged in
    /// pieces, so a guest printing without newlines cannot grow host memory either).
    pub(crate) fn new(log: Arc<GuestLog>, stream: Stream) -> Self {
        LogStream(Arc::new(Inner {
            log,
            stream,
            pending: Mutex::new(Vec::new()),
        }))
    }

    fn push(&self, mut bytes: &[u8]) {
        let mut pending = self.0.pending.lock();
        while let Some(nl) = bytes.iter().position(|b| *b == b'\n') {
            pending.extend_from_slice(&bytes[..nl]);
            self.0.emit(&pending);
            pending.clear();
            bytes = &bytes[nl + 1..];
        }
        pending.extend_from_slice(bytes);
        while pending.len() >= MAX_LINE {
            let rest = pending.split_off(MAX_LINE);
            self.0.emit(&pending);
            *pending = rest;
        }
    }
}

impl Inner {
    fn emit(&self, line: &[u8]) {
        if !self.log.admit() {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        let plugin = self.log.plugin();
        match self.stream {
            Stream::Stdout => {
                tracing::info!(target: "plugin::stdout", plugin = %plugin, "{line}")
            }
            Stream::Stderr => {
                tracing::warn!(target: "plugin::stderr", plugin = %plugin, "{line}")
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let pending = std::mem::take(self.pending.get_mut());
        if !pending.is_empty() {
            self.emit(&pending);
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(MAX_LINE)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<(String, String)>>>);

    struct Msg(String, String);

    impl Visit for Msg {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            match field.name() {
                "message" => self.0 = format!("{value:?}"),
                "plugin" => self.1 = format!("{value:?}"),
                _ => {}
            }
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Lines {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut m = Msg(String::new(), String::new());
            event.record(&mut m);
            self.0.lock().push((m.1, m.0));
        }
    }

    fn captured(f: impl FnOnce()) -> Vec<(String, String)> {
        let lines = Lines::default();
        let sub = tracing_subscriber::registry().with(lines.clone());
        tracing::subscriber::with_default(sub, f);
        let out = lines.0.lock().clone();
        out
    }

    #[test]
    fn splits_lines_across_writes_and_flushes_the_tail_on_drop() {
        let lines = captured(|| {
            let s = LogStream::new(Arc::new(GuestLog::new(Arc::from("p"), 0)), Stream::Stdout);
            let mut clone = s.clone();
            s.push(b"hel");
            s.push(b"lo\r\nwor");
            OutputStream::write(&mut clone, Bytes::from_static(b"ld\nlast")).expect("write");
            drop(s);
            drop(clone);
        });
        let msgs: Vec<&str> = lines.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(msgs, ["hello", "world", "last"]);
        assert!(lines.iter().all(|(p, _)| p == "p"));
    }

    #[test]
    fn overlong_lines_are_cut_so_memory_stays_bounded() {
        let lines = captured(|| {
            let s = LogStream::new(Arc::new(GuestLog::new(Arc::from("p"), 0)), Stream::Stderr);
            s.push(&vec![b'a'; MAX_LINE * 2 + 10]);
            assert_eq!(s.0.pending.lock().len(), 10);
        });
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].1.len(), MAX_LINE);
        assert_eq!(lines[2].1.len(), 10);
    }
}
