//! The watch stream: its event types and the streaming decoder (spec 6.3, 6.4).
//!
//! Why a hand-written decoder: chunks from the network do not align with events or lines,
//! events may be large, and the pipeline wants for each event only its type, the object's bytes
//! (own allocation, `managedFields` cut) and its metadata. The decoder finds each complete JSON
//! value with a resumable brace counter (linear in the input whatever the chunking), then scans
//! it once with the borrowing scanner.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::stream;
use http_body::Body;
use http_body_util::BodyExt;

use super::error::{Error, Status};
use super::json::{self, Scanner};
use super::object::{IngestOptions, Object};
use super::resource_version;

/// A stream of decoded watch events; it ends when the server closes the watch.
pub type WatchStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<WatchEvent, Error>> + Send>>;

/// One event of a watch stream (spec 6.3), decoded.
// `Error` is large but rare (at most one per stream); boxing it would only move the cost.
#[allow(clippy::large_enum_variant)]
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

/// The annotation that marks the bookmark ending a watch-list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Events larger than this end the watch instead of growing the buffer without bound (the
/// ingest options' [`max_object_bytes`](IngestOptions::max_object_bytes) by default).
pub const DEFAULT_MAX_EVENT_BYTES: usize = crate::object::DEFAULT_MAX_OBJECT_BYTES;

/// Watch events decoded by this process, from every stream.
///
/// Why a process-wide count: the host batches its runtime's wake-ups only while events arrive
/// fast enough for a wake-up to find several (`host`'s `wakeups`); what else wakes the runtime
/// (a guest's timers, a neighbour's requeues) must not make every event wait out the window.
static EVENTS_DECODED: AtomicU64 = AtomicU64::new(0);

/// Watch events this process has decoded so far, from every stream (see [`WatchDecoder`]).
pub fn events_decoded() -> u64 {
    EVENTS_DECODED.load(Ordering::Relaxed)
}

/// Incremental decoder of a watch body: feed chunks with [`push`](Self::push), take events
/// with [`next_event`](Self::next_event), and call [`finish`](Self::finish) at end of stream.
#[derive(Debug)]
pub struct WatchDecoder {
    buf: BytesMut,
    opts: IngestOptions,
    max_event: usize,
    /// Boundary-scan state for the value at the start of `buf`.
    scanned: usize,
    /// Fast path: no newline in `buf[..no_newline_before]` (valid while not `started`).
    no_newline_before: usize,
    value: json::ValueEnd,
    started: bool,
    /// Where the value at the start of `buf` begins (after whitespace), once `started`.
    value_start: usize,
    /// Events decoded so far, and bytes consumed before `buf`, for error messages.
    events: u64,
    consumed: u64,
}

impl Default for WatchDecoder {
    fn default() -> Self {
        Self::new(IngestOptions::default())
    }
}

impl WatchDecoder {
    pub fn new(opts: IngestOptions) -> Self {
        WatchDecoder {
            buf: BytesMut::new(),
            opts,
            max_event: opts.max_object_bytes,
            scanned: 0,
            no_newline_before: 0,
            value: json::ValueEnd::default(),
            started: false,
            value_start: 0,
            events: 0,
            consumed: 0,
        }
    }

    /// Limit the size of one event (default: the ingest options' `max_object_bytes`).
    pub fn with_max_event_bytes(mut self, max: usize) -> Self {
        self.max_event = max;
        self
    }

    /// Append bytes read from the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, `Ok(None)` when more input is needed. After an error the
    /// stream is unusable: the caller ends the watch.
    pub fn next_event(&mut self) -> Result<Option<WatchEvent>, Error> {
        if !self.started {
            if let Some(ev) = self.next_line()? {
                return Ok(Some(ev));
            }
        }
        // The bound holds for an event however its bytes arrive: one that a single read
        // completed is refused as one still arriving is.
        let Some(end) = self.find_value_end()? else {
            if self.buf.len() - self.value_start > self.max_event {
                return Err(self.too_large());
            }
            return Ok(None);
        };
        if end - self.value_start > self.max_event {
            return Err(self.too_large());
        }
        let value = &self.buf[..end];
        let ev = decode_event(value, &self.opts).map_err(|m| self.error(m))?;
        self.consume(end);
        Ok(Some(ev))
    }

    /// Fast path for the server's framing (spec 6.3: one event per line): decode a complete
    /// line directly, without the brace-counting pre-scan. Anything unusual (several values
    /// on a line, pretty-printed values, malformed input) falls back to the general path,
    /// which also produces the precise error.
    fn next_line(&mut self) -> Result<Option<WatchEvent>, Error> {
        loop {
            let from = self.no_newline_before.min(self.buf.len());
            let Some(p) = find_newline(&self.buf[from..]) else {
                self.no_newline_before = self.buf.len();
                return Ok(None);
            };
            let nl = from + p;
            let line = &self.buf[..nl];
            let first = json::skip_ws(line, 0);
            if first == line.len() {
                // A blank line between events.
                self.advance(nl + 1);
                continue;
            }
            if nl - first > self.max_event {
                // Possibly too large: the general path measures the value itself.
                return Ok(None);
            }
            return match decode_event(line, &self.opts) {
                Ok(ev) => {
                    self.consume(nl + 1);
                    Ok(Some(ev))
                }
                Err(_) => Ok(None),
            };
        }
    }

    /// Drop a decoded event's `n` bytes from the buffer.
    fn consume(&mut self, n: usize) {
        self.events += 1;
        EVENTS_DECODED.fetch_add(1, Ordering::Relaxed);
        self.advance(n);
    }

    fn advance(&mut self, n: usize) {
        self.consumed += n as u64;
        self.buf.advance(n);
        self.scanned = 0;
        self.started = false;
        self.value_start = 0;
        self.no_newline_before = self.no_newline_before.saturating_sub(n);
    }

    /// End of input: anything but whitespace left over is a truncated event.
    pub fn finish(&self) -> Result<(), Error> {
        if json::skip_ws(&self.buf, 0) < self.buf.len() {
            return Err(self.error(format!(
                "stream ended inside an event ({} bytes buffered)",
                self.buf.len()
            )));
        }
        Ok(())
    }

    fn too_large(&self) -> Error {
        self.error(format!("event larger than {} bytes", self.max_event))
    }

    fn error(&self, message: String) -> Error {
        Error::Decode(format!(
            "watch event #{} (stream byte {}): {message}",
            self.events + 1,
            self.consumed
        ))
    }

    /// Resume scanning for the end of the value at the start of the buffer.
    fn find_value_end(&mut self) -> Result<Option<usize>, Error> {
        let mut i = self.scanned;
        if !self.started {
            i = json::skip_ws(&self.buf, i);
            if i == self.buf.len() {
                // Drop whitespace between events so it does not accumulate.
                self.consumed += i as u64;
                self.buf.clear();
                self.scanned = 0;
                return Ok(None);
            }
            if self.buf[i] != b'{' {
                return Err(self.error(format!(
                    "expected '{{' at the start of an event, found {:?}",
                    char::from(self.buf[i])
                )));
            }
            self.started = true;
            self.value_start = i;
            self.value = json::ValueEnd::begin(b'{');
            i += 1;
        }
        match self.value.resume(&self.buf, i) {
            Ok(end) => {
                self.scanned = end;
                Ok(Some(end))
            }
            Err(scanned) => {
                self.scanned = scanned;
                Ok(None)
            }
        }
    }
}

/// Position of the first `\n`: every event's bytes pass here once, so a vector search
/// (memchr's, 16 or 32 bytes a step) rather than a word at a time.
fn find_newline(b: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', b)
}

/// Decode one complete event value. The scan checks it as UTF-8 on the way.
fn decode_event(value: &[u8], opts: &IngestOptions) -> Result<WatchEvent, String> {
    let mut sc = Scanner::new(value);
    let mut kind: Option<EventType> = None;
    let mut object: Option<Result<Object, String>> = None;
    let mut object_at: Option<usize> = None;
    let res = sc.object(|sc, key, _| {
        match key {
            b"type" => {
                let (a, b, _) = sc.string()?;
                kind = Some(
                    EventType::parse(&value[a..b])
                        .ok_or_else(|| sc.error_at(a, "unknown event type"))?,
                );
            }
            b"object" => match kind {
                Some(t) if t.carries_object() => {
                    let start = sc.pos();
                    object = Some(Object::ingest_from(sc, opts, None).map_err(|e| e.to_string()));
                    if matches!(object, Some(Err(_))) {
                        sc.seek(start);
                        sc.skip_value()?;
                    }
                }
                _ => {
                    object_at = Some(sc.pos());
                    sc.skip_value()?;
                }
            },
            _ => {
                sc.skip_value()?;
            }
        }
        Ok(())
    });
    res.and_then(|_| sc.end()).map_err(|e| e.to_string())?;
    let kind = kind.ok_or("event has no type")?;
    let object_value = |at: Option<usize>| -> Result<&[u8], String> {
        let mut sc = Scanner::new(value);
        sc.seek(at.ok_or("event has no object")?);
        let (a, b) = sc.skip_value().map_err(|e| e.to_string())?;
        Ok(&value[a..b])
    };
    let take_object = |object: Option<Result<Object, String>>| -> Result<Object, String> {
        let o = match object {
            Some(o) => o.map_err(|e| format!("object: {e}"))?,
            None => {
                let raw = object_value(object_at)?;
                Object::ingest(raw, opts).map_err(|e| format!("object: {e}"))?
            }
        };
        // The reflector keeps the RV of every event it applies, to send back.
        resource_version::check(o.resource_version()).map_err(|e| format!("object: {e}"))?;
        Ok(o)
    };
    Ok(match kind {
        EventType::Added => WatchEvent::Added(take_object(object)?),
        EventType::Modified => WatchEvent::Modified(take_object(object)?),
        EventType::Deleted => WatchEvent::Deleted(take_object(object)?),
        EventType::Bookmark => {
            let o = Object::ingest(object_value(object_at)?, opts)
                .map_err(|e| format!("bookmark object: {e}"))?;
            resource_version::check(o.resource_version())
                .map_err(|e| format!("bookmark object: {e}"))?;
            WatchEvent::Bookmark {
                resource_version: o.resource_version().to_owned(),
                initial_events_end: o.meta().annotation(INITIAL_EVENTS_END) == Some("true"),
            }
        }
        EventType::Error => {
            let raw = object_value(object_at)?;
            let status: Status =
                serde_json::from_slice(raw).map_err(|e| format!("ERROR event status: {e}"))?;
            WatchEvent::Error(status)
        }
    })
}

#[derive(Debug, Clone, Copy)]
enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl EventType {
    fn parse(s: &[u8]) -> Option<Self> {
        Some(match s {
            b"ADDED" => EventType::Added,
            b"MODIFIED" => EventType::Modified,
            b"DELETED" => EventType::Deleted,
            b"BOOKMARK" => EventType::Bookmark,
            b"ERROR" => EventType::Error,
            _ => return None,
        })
    }
    fn carries_object(self) -> bool {
        matches!(
            self,
            EventType::Added | EventType::Modified | EventType::Deleted
        )
    }
}

/// Turn a watch response body into a stream of events. The stream ends when the body ends; a
/// decode error, a broken connection or `idle` without any bytes ends it with one error.
pub fn event_stream<B>(body: B, opts: IngestOptions, idle: Duration) -> WatchStream
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display,
{
    struct State<B> {
        body: B,
        dec: WatchDecoder,
        done: bool,
    }
    let st = State {
        body,
        dec: WatchDecoder::new(opts),
        done: false,
    };
    Box::pin(stream::unfold(st, move |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            match st.dec.next_event() {
                Ok(Some(ev)) => return Some((Ok(ev), st)),
                Ok(None) => {}
                Err(e) => {
                    st.done = true;
                    tracing::debug!(events = st.dec.events, error = %e, "watch stream undecodable");
                    return Some((Err(e), st));
                }
            }
            let frame = match tokio::time::timeout(idle, st.body.frame()).await {
                Ok(f) => f,
                Err(_) => {
                    st.done = true;
                    tracing::debug!(?idle, "watch stream idle; closing");
                    return Some((Err(Error::Timeout(idle)), st));
                }
            };
            match frame {
                Some(Ok(f)) => {
                    if let Some(data) = f.data_ref() {
                        st.dec.push(data);
                    }
                }
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(Error::Http(format!("watch stream broke: {e}"))), st));
                }
                None => {
                    st.done = true;
                    tracing::debug!(events = st.dec.events, "watch stream closed by the server");
                    return match st.dec.finish() {
                        Ok(()) => None,
                        Err(e) => Some((Err(e), st)),
                    };
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/apiserver-samples"
    );

    fn samples() -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for dir in [DIR.to_owned(), format!("{DIR}/first-run")] {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "jsonl") {
                    out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        assert!(out.len() >= 8, "found {}", out.len());
        out
    }

    fn decode_all(chunks: &[&[u8]]) -> Result<Vec<WatchEvent>, Error> {
        let mut d = WatchDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(ev) = d.next_event()? {
                out.push(ev);
            }
        }
        d.finish()?;
        Ok(out)
    }

    /// Text that is not UTF-8 is refused wherever it is, in a line or split across chunks,
    /// naming the event; the same event with its character intact decodes.
    #[test]
    fn an_event_that_is_not_utf8_is_an_error_naming_it() {
        let ok = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"caf\u{e9}\",\"resourceVersion\":\"1\"}}}\n";
        assert_eq!(decode_all(&[ok.as_bytes()]).unwrap().len(), 1);
        let mut bad = ok.as_bytes().to_vec();
        let at = bad.iter().position(|&c| c == 0xc3).unwrap();
        bad[at + 1] = b'x';
        let two = [ok.as_bytes(), &bad].concat();
        for chunks in [vec![&two[..]], two.chunks(7).collect::<Vec<_>>()] {
            let e = decode_all(&chunks).unwrap_err().to_string();
            assert!(
                e.contains("watch event #2") && e.contains("invalid UTF-8 in string"),
                "{e}"
            );
        }
    }

    /// What serde says each line is: (type, name, rv, initial-events-end).
    fn expected(raw: &[u8]) -> Vec<(String, String, String)> {
        serde_json::Deserializer::from_slice(raw)
            .into_iter::<serde_json::Value>()
            .map(|v| {
                let v = v.unwrap();
                let m = &v["object"]["metadata"];
                (
                    v["type"].as_str().unwrap().to_owned(),
                    m["name"].as_str().unwrap_or("").to_owned(),
                    m["resourceVersion"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    fn summary(evs: &[WatchEvent]) -> Vec<(String, String, String)> {
        evs.iter()
            .map(|e| match e {
                WatchEvent::Added(o) => {
                    ("ADDED".into(), o.name().into(), o.resource_version().into())
                }
                WatchEvent::Modified(o) => (
                    "MODIFIED".into(),
                    o.name().into(),
                    o.resource_version().into(),
                ),
                WatchEvent::Deleted(o) => (
                    "DELETED".into(),
                    o.name().into(),
                    o.resource_version().into(),
                ),
                WatchEvent::Bookmark {
                    resource_version, ..
                } => ("BOOKMARK".into(), String::new(), resource_version.clone()),
                WatchEvent::Error(_) => ("ERROR".into(), String::new(), String::new()),
            })
            .collect()
    }

    /// Every metadata field the pipeline reads, and the bytes themselves, agree with what serde
    /// reads from the sample's line (less `managedFields`, which ingest strips).
    fn assert_matches_serde(name: &str, o: &Object, line: &serde_json::Value) {
        let mut want = line["object"].clone();
        let meta = want["metadata"].as_object_mut().unwrap();
        meta.remove("managedFields");
        let want_meta = want["metadata"].clone();
        assert_eq!(o.to_value().unwrap(), want, "{name}: bytes");
        let m = o.meta();
        let str_map = |pairs: Vec<(&str, &str)>| -> serde_json::Value {
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), serde_json::Value::from(v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let or_empty = |v: &serde_json::Value| {
            if v.is_null() {
                serde_json::json!({})
            } else {
                v.clone()
            }
        };
        assert_eq!(
            str_map(m.labels.iter().collect()),
            or_empty(&want_meta["labels"]),
            "{name}: labels"
        );
        assert_eq!(
            str_map(m.annotations.iter().collect()),
            or_empty(&want_meta["annotations"]),
            "{name}: annotations"
        );
        assert_eq!(
            m.generation,
            want_meta["generation"].as_i64().unwrap_or(0),
            "{name}: generation"
        );
        let finalizers: Vec<&str> = m.finalizers.iter().collect();
        let want_finalizers: Vec<&str> = want_meta["finalizers"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(finalizers, want_finalizers, "{name}: finalizers");
        let owners: Vec<(&str, &str, &str, &str)> = m
            .owner_references
            .iter()
            .map(|r| (r.api_version, r.kind, r.name, r.uid))
            .collect();
        let want_owners: Vec<(&str, &str, &str, &str)> = want_meta["ownerReferences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        let f = |k: &str| r[k].as_str().unwrap_or("");
                        (f("apiVersion"), f("kind"), f("name"), f("uid"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(owners, want_owners, "{name}: ownerReferences");
        assert_eq!(
            m.deletion_timestamp,
            want_meta["deletionTimestamp"].as_str(),
            "{name}: deletionTimestamp"
        );
        assert_eq!(
            m.uid,
            want_meta["uid"].as_str().unwrap_or(""),
            "{name}: uid"
        );
    }

    #[test]
    fn golden_every_watch_sample_spec_6_3() {
        for (name, raw) in samples() {
            let evs = decode_all(&[&raw]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(summary(&evs), expected(&raw), "{name}");
            let lines: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&raw)
                .into_iter::<serde_json::Value>()
                .map(Result::unwrap)
                .collect();
            for (ev, line) in evs.iter().zip(&lines) {
                if let WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) = ev
                {
                    assert_matches_serde(&name, o, line);
                }
            }
            for ev in &evs {
                match ev {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                        assert!(!o.as_str().contains("managedFields"), "{name}");
                        assert_eq!(o.namespace(), Some("samples"));
                        assert!(!o.uid().is_empty());
                        let v = o.to_value().unwrap();
                        assert_eq!(v["kind"], "ConfigMap");
                    }
                    WatchEvent::Bookmark {
                        initial_events_end, ..
                    } => assert!(!initial_events_end),
                    WatchEvent::Error(s) => {
                        assert_eq!((s.code, s.reason.as_str()), (410, "Expired"), "{name}");
                        assert!(s.message.starts_with("too old resource version"));
                    }
                }
            }
        }
    }

    #[test]
    fn every_chunk_boundary_of_a_stream_spec_6_3() {
        let raw = std::fs::read(format!("{DIR}/watch-stream.jsonl")).unwrap();
        let want = summary(&decode_all(&[&raw]).unwrap());
        assert!(want.len() >= 8);
        for cut in 0..=raw.len() {
            let got = decode_all(&[&raw[..cut], &raw[cut..]]).unwrap();
            assert_eq!(summary(&got), want, "split at {cut}");
        }
        for size in [1, 2, 3, 7, 64] {
            let chunks: Vec<&[u8]> = raw.chunks(size).collect();
            assert_eq!(
                summary(&decode_all(&chunks).unwrap()),
                want,
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn consecutive_values_without_newlines_and_braces_in_strings() {
        let a = br#"{"type":"ADDED","object":{"metadata":{"name":"a}{\"","resourceVersion":"1"}}}"#;
        let b =
            br#" {"object":{"metadata":{"name":"b\\","resourceVersion":"2"}},"type":"MODIFIED"}"#;
        let mut raw = a.to_vec();
        raw.extend_from_slice(b);
        for cut in 0..=raw.len() {
            let evs = decode_all(&[&raw[..cut], &raw[cut..]]).unwrap();
            let s = summary(&evs);
            assert_eq!(s[0].1, "a}{\"");
            assert_eq!(s[1], ("MODIFIED".into(), "b\\".into(), "2".into()));
        }
    }

    #[test]
    fn pretty_printed_events_and_blank_lines_take_the_general_path() {
        let raw = b"\n\n{\n  \"type\": \"ADDED\",\n  \"object\": {\"metadata\": {\"name\": \"a\"}}\n}\n\n  {\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"c\"}}}\n";
        for cut in 0..=raw.len() {
            let evs = decode_all(&[&raw[..cut], &raw[cut..]]).unwrap();
            let names: Vec<_> = summary(&evs).into_iter().map(|s| (s.0, s.1)).collect();
            assert_eq!(
                names,
                [
                    ("ADDED".to_owned(), "a".to_owned()),
                    ("DELETED".to_owned(), "b".to_owned()),
                    ("ADDED".to_owned(), "c".to_owned())
                ],
                "split at {cut}"
            );
        }
    }

    #[test]
    fn find_newline_agrees_with_a_plain_search() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..2000 {
            let n = rng.gen_range(0..40);
            let b: Vec<u8> = (0..n)
                .map(|_| if rng.gen_bool(0.05) { b'\n' } else { rng.gen() })
                .collect();
            assert_eq!(
                find_newline(&b),
                b.iter().position(|&c| c == b'\n'),
                "{b:?}"
            );
        }
    }

    #[test]
    fn bookmark_with_initial_events_end_spec_6_4() {
        let raw = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"99","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}
"#;
        match &decode_all(&[raw]).unwrap()[0] {
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                assert_eq!(resource_version, "99");
                assert!(initial_events_end);
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn malformed_or_truncated_events_end_with_decode_errors() {
        let good = br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}"#;
        let bad: &[&[u8]] = &[
            br#"{"type":"ADDED","object":{"metadata":{"name":"a""#,
            br#"{"type":"EXPLODED","object":{}}"#,
            br#"{"object":{}}"#,
            br#"{"type":"ADDED"}"#,
            br#"{"type":"ADDED","object":{"metadata":{"name":7}}}"#,
            br#"{"type":"ERROR","object":{"code":"x"}}"#,
            br#"{"type":"ADDED","object":{"metadata":{}}]"#,
            b"[1]",
            b"garbage",
            b"{\"type\":\"ADDED\",\"object\":{\"a\":\"\xff\"}}",
        ];
        for b in bad {
            let mut raw = good.to_vec();
            raw.push(b'\n');
            raw.extend_from_slice(b);
            let mut d = WatchDecoder::default();
            d.push(&raw);
            assert!(matches!(d.next_event(), Ok(Some(WatchEvent::Added(_)))));
            let r = d.next_event().and_then(|e| match e {
                Some(e) => Ok(Some(e)),
                None => d.finish().map(|_| None),
            });
            match r {
                Err(Error::Decode(m)) => assert!(m.contains("watch event #2"), "{m}"),
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(b)),
            }
        }
        let mut d = WatchDecoder::default().with_max_event_bytes(100);
        d.push(&[b'{'; 1]);
        d.push(&[b' '; 200]);
        assert!(matches!(d.next_event(), Err(Error::Decode(_))));
    }

    /// Found by the fuzz target `watch_stream`: an event over the size bound was refused when
    /// it arrived in pieces but decoded when one read brought its whole line (the line fast
    /// path never measured it). Either way it is refused now, and one within it decodes.
    #[test]
    fn the_event_size_bound_holds_however_the_bytes_arrive() {
        let event = |name: &str| {
            format!(
                r#"{{"type":"ADDED","object":{{"metadata":{{"name":"{name}","resourceVersion":"1"}}}}}}"#
            )
        };
        let (small, large) = (event("a"), event(&"b".repeat(100)));
        assert!(small.len() < 100 && large.len() > 150);
        for (text, fits) in [(&small, true), (&large, false)] {
            let line = format!("  {text}\n");
            for chunk in [1, 7, 64, line.len()] {
                let mut d = WatchDecoder::default().with_max_event_bytes(100);
                let mut got = Ok(Vec::new());
                for c in line.as_bytes().chunks(chunk) {
                    d.push(c);
                    match d.next_event() {
                        Ok(Some(ev)) => got.as_mut().map(|v| v.push(ev)).unwrap_or(()),
                        Ok(None) => {}
                        Err(e) => {
                            got = Err(e);
                            break;
                        }
                    }
                }
                match got {
                    Ok(evs) => assert!(fits && evs.len() == 1, "chunks of {chunk}: {evs:?}"),
                    Err(e) => {
                        assert!(!fits, "chunks of {chunk}: {e}");
                        assert!(e.to_string().contains("event larger than 100 bytes"), "{e}");
                    }
                }
            }
        }
    }

    /// Reported from outside: one bookmark at resourceVersion `zzz` left the informer
    /// relisting at `zzz` forever (a 1 MiB one failed every request locally). A bookmark or an
    /// object whose RV the API server could not take back ends the watch with a decode error,
    /// after the events before it; the error quotes the RV briefly.
    #[test]
    fn an_event_whose_resource_version_is_not_an_integer_is_a_decode_error() {
        let good = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"12"}}}"#;
        let huge = "1".repeat(1 << 20);
        for bad in [
            r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"zzz"}}}"#.to_owned(),
            format!(r#"{{"type":"BOOKMARK","object":{{"metadata":{{"resourceVersion":"{huge}"}}}}}}"#),
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"1 2"}}}"#.to_owned(),
        ] {
            let raw = [&good[..], b"\n", bad.as_bytes(), b"\n"].concat();
            let mut d = WatchDecoder::default();
            d.push(&raw);
            assert!(matches!(
                d.next_event(),
                Ok(Some(WatchEvent::Bookmark { ref resource_version, .. })) if resource_version == "12"
            ));
            let e = d.next_event().unwrap_err().to_string();
            assert!(
                e.contains("watch event #2") && e.contains("is not an unsigned 64-bit decimal integer"),
                "{e}"
            );
            assert!(e.len() < 600, "{} bytes of error", e.len());
        }
    }

    #[tokio::test]
    async fn stream_over_a_chunked_body() {
        use futures_util::StreamExt;
        use http_body_util::StreamBody;
        let raw = std::fs::read(format!("{DIR}/watch-from-rv-50475.jsonl")).unwrap();
        let want = expected(&raw);
        let frames: Vec<Result<hyper::body::Frame<Bytes>, std::io::Error>> = raw
            .chunks(37)
            .map(|c| Ok(hyper::body::Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let body = StreamBody::new(stream::iter(frames));
        let s = event_stream(body, IngestOptions::default(), Duration::from_secs(5));
        let evs: Vec<_> = s.collect().await;
        let evs: Vec<WatchEvent> = evs.into_iter().map(Result::unwrap).collect();
        assert_eq!(summary(&evs), want);

        let truncated = StreamBody::new(stream::iter(vec![Ok::<_, std::io::Error>(
            hyper::body::Frame::data(Bytes::from_static(b"{\"type\":\"ADD")),
        )]));
        let evs: Vec<_> = event_stream(truncated, IngestOptions::default(), Duration::from_secs(5))
            .collect()
            .await;
        assert_eq!(evs.len(), 1);
        assert!(matches!(&evs[0], Err(Error::Decode(m)) if m.contains("ended inside")));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_stream_ends_with_timeout() {
        use futures_util::StreamExt;
        let (_tx, rx) =
            tokio::sync::mpsc::channel::<Result<hyper::body::Frame<Bytes>, std::io::Error>>(1);
        let body = http_body_util::StreamBody::new(Box::pin(futures_util::stream::unfold(
            rx,
            |mut rx| async { rx.recv().await.map(|f| (f, rx)) },
        )));
        let mut s = event_stream(body, IngestOptions::default(), Duration::from_secs(30));
        let r = s.next().await.unwrap();
        assert!(matches!(r, Err(Error::Timeout(_))));
        assert!(s.next().await.is_none());
    }
}
