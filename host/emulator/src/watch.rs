//! WATCH: a chunked stream of newline-delimited JSON events (spec 6.3) fed from the store's
//! history.
//!
//! Why a cursor over shared history: each event is serialized once at write time; a watcher
//! without selectors copies ready lines into one chunk per batch, so one watcher can take
//! millions of events per second and many watchers share the same bytes. A cursor that falls
//! behind the history window gets the same 410 ERROR event a late starter gets.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{Response, StatusCode};
use rand::Rng;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tracing::{debug, Instrument};

use super::accept::{self, Representation};
use super::list::{metadata_json, table_json, Selectors};
use super::printers::Printer;
use super::registry::ResourceDef;
use super::request::{Query, ResourceRequest};
use super::response::{self, Body, FieldError};
use super::store::{event_line, put_event, Event, EventType};
use super::{events, Shared};
use kwh_client::object::Object;
use kwh_client::Status;

/// Events taken from the history per lock.
const BATCH: usize = 2048;
/// Bytes per chunk above which a batch is flushed early.
const CHUNK: usize = 256 * 1024;

/// Where the stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// RV unset or "0": synthetic ADDED for the current state, then changes.
    Now,
    /// Changes after this RV.
    After(u64),
}

/// Options of one watch, validated.
struct Options {
    start: Start,
    initial_events: bool,
    /// `sendInitialEvents` was given (true or false).
    send_initial_given: bool,
    bookmarks: bool,
    /// The client asked for Tables (each event's object is a one-row Table) or metadata only
    /// (each is `PartialObjectMetadata`, bookmarks too).
    form: Representation,
    /// Events framed in protobuf (the client prefers it, the kind has messages, and it asked
    /// for whole objects; Tables and metadata stay JSON).
    protobuf: bool,
    timeout: Duration,
    sel: Selectors,
}

fn validate(def: &ResourceDef, q: &Query, accept: &str) -> Result<Options, Status> {
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let start = match rv {
        None | Some("0") => Start::Now,
        Some(s) => Start::After(s.parse::<u64>().map_err(|_| {
            response::internal(&format!(
                "resourceVersion: Invalid value: \"{s}\": strconv.ParseUint: parsing \"{s}\": invalid syntax"
            ))
        })?),
    };
    let rv_match = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let send_initial = q.get("sendInitialEvents");
    let mut errs = Vec::new();
    if send_initial.is_some() && rv_match != Some("NotOlderThan") {
        errs.push(FieldError::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if matches!(send_initial, Some("true" | "1")) && !q.flag("allowWatchBookmarks") {
        errs.push(FieldError::forbidden(
            "allowWatchBookmarks",
            "sendInitialEvents requires setting allowWatchBookmarks=true",
        ));
    }
    if let Some(m) = rv_match {
        if send_initial.is_none() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if m != "NotOlderThan" {
            errs.push(FieldError {
                reason: "FieldValueNotSupported",
                field: "resourceVersionMatch".into(),
                detail: format!("Unsupported value: \"{m}\": supported values: \"NotOlderThan\""),
            });
        }
    }
    if !errs.is_empty() {
        return Err(response::invalid("ListOptions", "meta.k8s.io", "", &errs));
    }
    let timeout = match q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()) {
        Some(t) if t > 0 => Duration::from_secs(t),
        // spec 6.9: 1800 s × [1, 2).
        _ => Duration::from_secs_f64(1800.0 * rand::thread_rng().gen_range(1.0..2.0)),
    };
    let form = accept::negotiate(accept, accept::Read::Single);
    Ok(Options {
        start,
        initial_events: q.flag("sendInitialEvents"),
        send_initial_given: send_initial.is_some(),
        bookmarks: q.flag("allowWatchBookmarks"),
        form,
        protobuf: form == Representation::Object && def.builtin && accept::prefers_protobuf(accept),
        timeout,
        sel: Selectors::from_query(def, q)?,
    })
}

/// Start a watch: errors in the options answer with their Status; everything after the
/// options are accepted (including 410) travels inside the 200 stream.
pub(crate) fn watch(
    shared: &Arc<Shared>,
    r: &ResourceRequest,
    q: &Query,
    accept: &str,
) -> Response<Body> {
    let opts = match validate(&r.def, q, accept) {
        Ok(o) => o,
        Err(s) => return response::status(&s),
    };
    if opts.send_initial_given && shared.faults.refuses_watch_list() {
        let e = FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        );
        return response::status(&response::invalid("ListOptions", "meta.k8s.io", "", &[e]));
    }
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let content_type = if opts.protobuf {
        "application/vnd.kubernetes.protobuf;stream=watch"
    } else {
        "application/json"
    };
    let task = Watcher {
        shared: shared.clone(),
        converts: events::converts(&r.def),
        def: r.def.clone(),
        prefix: r.prefix(),
        opts,
        tx,
        buf: BytesMut::new(),
        sent: 0,
    };
    let span = tracing::debug_span!("watch", resource = %r.def.store_key, ns = ?r.namespace);
    tokio::spawn(task.run().instrument(span));
    response::base(StatusCode::OK, content_type, Body::Stream(rx))
}

struct Watcher {
    shared: Arc<Shared>,
    def: Arc<ResourceDef>,
    /// The resource serves another form than the stored one (`events.k8s.io/v1` Events): each
    /// object is converted as it is sent, so the shared lines cannot be copied as they are.
    converts: bool,
    prefix: String,
    opts: Options,
    tx: mpsc::Sender<Bytes>,
    buf: BytesMut,
    sent: u64,
}

/// Why a watch loop stopped.
enum End {
    Closed,
    Done,
}

impl Watcher {
    async fn run(mut self) {
        let _guard = self.shared.counters.watch_opened(&self.def.store_key);
        let store = self.shared.store.clone();
        let res = self.def.store_key.clone();
        let mut changes = store.subscribe(&res);
        let mut kicks = self.shared.faults.kicks();
        let expire_gen = kicks.borrow_and_update().expire;
        let deadline = Instant::now() + self.opts.timeout;
        let Some(mut cursor) = self.initial(&res).await else {
            return;
        };
        let interval = self.shared.bookmark_interval;
        let final_bookmark = deadline.checked_sub(Duration::from_secs(2));
        let mut next_bookmark = Instant::now() + interval;
        let mut events: Vec<Arc<Event>> = Vec::with_capacity(BATCH);
        loop {
            // A stalled stream sends nothing until the stall ends (events wait in the history).
            if let Some(until) = self.shared.faults.stalled_until() {
                self.shared.faults.count_stalled();
                // A cleared stall or an expiry kick ends the wait early.
                tokio::select! {
                    _ = sleep_until(until) => {}
                    r = kicks.changed() => {
                        if r.is_err() { return; }
                        if kicks.borrow_and_update().expire != expire_gen {
                            self.expire(cursor).await;
                            return;
                        }
                    }
                    _ = self.tx.closed() => return,
                }
                continue;
            }
            let Some(c) = self.drain(&res, cursor, &mut events).await else {
                return;
            };
            cursor = c;
            let bookmark_at = match (self.opts.bookmarks, final_bookmark) {
                (true, Some(f)) if f > Instant::now() => next_bookmark.min(f),
                (true, _) => next_bookmark,
                (false, _) => deadline + Duration::from_secs(3600),
            };
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                _ = sleep_until(bookmark_at), if bookmark_at < deadline => {
                    // Catch up first so the bookmark's RV covers everything sent.
                    events.clear();
                    if let Ok(upto) = store.events_after(&res, cursor, BATCH, &mut events) {
                        if events.is_empty() {
                            cursor = upto;
                            let line = self.bookmark(cursor, false);
                            self.buf.put_slice(&line);
                            if self.flush().await.is_err() { return; }
                            if final_bookmark.is_some_and(|f| bookmark_at >= f) {
                                next_bookmark = deadline + Duration::from_secs(3600);
                            } else {
                                next_bookmark = Instant::now() + interval;
                            }
                        }
                    }
                }
                _ = sleep_until(deadline) => {
                    debug!("watch timeout reached");
                    return;
                }
                r = kicks.changed() => {
                    if r.is_err() { return; }
                    if kicks.borrow_and_update().expire != expire_gen {
                        self.expire(cursor).await;
                        return;
                    }
                }
                _ = self.tx.closed() => return,
            }
        }
    }

    /// The initial events and the initial-events-end bookmark, as asked (spec 1.12: with
    /// sendInitialEvents=true the current state is sent whatever the RV, NotOlderThan; with
    /// sendInitialEvents=false and no RV, only changes from now); the cursor after them,
    /// `None` once the client is gone.
    async fn initial(&mut self, res: &str) -> Option<u64> {
        let store = self.shared.store.clone();
        let start = match (
            self.opts.initial_events,
            self.opts.send_initial_given,
            self.opts.start,
        ) {
            (true, _, _) => Start::Now,
            (false, true, Start::Now) => Start::After(store.current_rv()),
            (_, _, s) => s,
        };
        let cursor = match start {
            Start::Now => {
                let (rv, items) = store.snapshot(res, &self.prefix);
                for o in &items {
                    if self.opts.sel.matches(o) {
                        self.put("ADDED", o.raw(), rv_of(o));
                        if self.buf.len() >= CHUNK && self.flush().await.is_err() {
                            return None;
                        }
                    }
                }
                rv
            }
            Start::After(rv) => rv,
        };
        if self.opts.initial_events && !self.shared.faults.omits_initial_events_end() {
            let line = self.bookmark(cursor, true);
            self.buf.put_slice(&line);
        }
        self.flush().await.ok()?;
        Some(cursor)
    }

    /// Every event after `cursor` available now, written and flushed in batches; the cursor
    /// after them, `None` when the watch ended (the client gone, the history expired, the
    /// close-after fault).
    async fn drain(
        &mut self,
        res: &str,
        mut cursor: u64,
        events: &mut Vec<Arc<Event>>,
    ) -> Option<u64> {
        let store = self.shared.store.clone();
        loop {
            events.clear();
            let upto = match store.events_after(res, cursor, BATCH, events) {
                Ok(u) => u,
                Err(e) => {
                    let s = response::expired(e.to_string());
                    self.error_and_close(&s).await;
                    self.shared.faults.count_watch_too_old();
                    return None;
                }
            };
            let full = events.len() == BATCH;
            match self.write_events(events).await {
                Ok(()) => {}
                Err(End::Closed) => return None,
                Err(End::Done) => {
                    let _ = self.flush().await;
                    self.shared.faults.count_closed_after();
                    return None;
                }
            }
            cursor = if full {
                events.last().map_or(cursor, |e| e.rv)
            } else {
                upto
            };
            self.flush().await.ok()?;
            if !full {
                return Some(cursor);
            }
        }
    }

    /// The 410 an expiry kick (`injectExpired`) ends the stream with.
    async fn expire(&mut self, cursor: u64) {
        let s = response::expired(format!(
            "too old resource version: {cursor} ({})",
            self.shared.store.current_rv()
        ));
        self.error_and_close(&s).await;
        self.shared.faults.count_expiry_delivered();
    }

    /// Append the events that pass this watch's filters; `Err(Done)` when the close-after fault
    /// is reached.
    async fn write_events(&mut self, events: &[Arc<Event>]) -> Result<(), End> {
        let plain = self.prefix.is_empty() && self.opts.sel.is_empty();
        for e in events {
            let limit = self.shared.faults.close_after();
            if limit > 0 && self.sent >= limit {
                return Err(End::Done);
            }
            if plain
                && self.opts.form == Representation::Object
                && !self.converts
                && !self.opts.protobuf
            {
                put_event(&mut self.buf, e.ty.as_str(), e.obj.raw());
            } else if plain {
                self.put(e.ty.as_str(), e.obj.raw(), e.rv);
            } else if let Some((ty, raw)) = self.filtered(e) {
                self.put(ty, &raw, e.rv);
            } else {
                continue;
            }
            self.sent += 1;
            if self.buf.len() >= CHUNK {
                self.flush().await.map_err(|_| End::Closed)?;
            }
        }
        let limit = self.shared.faults.close_after();
        if limit > 0 && self.sent >= limit {
            return Err(End::Done);
        }
        Ok(())
    }

    /// Append one event in the form the client asked for: the object as the resource serves
    /// it, a one-row Table, or its metadata.
    fn put(&mut self, ty: &str, raw: &[u8], rv: u64) {
        match self.opts.form {
            Representation::Object => {
                let served = if self.converts {
                    events::serve_raw(&self.def, raw)
                } else {
                    None
                };
                let raw = served.as_deref().unwrap_or(raw);
                if self.opts.protobuf {
                    self.put_frame(ty, raw);
                } else {
                    put_event(&mut self.buf, ty, raw);
                }
            }
            Representation::Metadata(v) => put_event(&mut self.buf, ty, &metadata_json(raw, v)),
            Representation::Table => self.put_table_row(ty, raw, rv),
        }
    }

    /// One protobuf-framed event; an object without a message (none of a built-in kind lacks
    /// one) is left out rather than break the framing.
    fn put_frame(&mut self, ty: &str, raw: &[u8]) {
        match super::protobuf::watch_frame(ty, raw) {
            Some(f) => self.buf.put_slice(&f),
            None => debug!("an event without a protobuf message left out of the stream"),
        }
    }

    fn put_table_row(&mut self, ty: &str, raw: &[u8], rv: u64) {
        match Object::from_bytes(Bytes::copy_from_slice(raw)) {
            Ok(o) => {
                let printer = Printer::of(&self.shared, &self.def);
                let t = table_json(std::slice::from_ref(&o), rv, None, None, &printer);
                put_event(&mut self.buf, ty, &t);
            }
            Err(_) => put_event(&mut self.buf, ty, raw),
        }
    }

    fn passes(&self, o: &Object) -> bool {
        (self.prefix.is_empty()
            || o.namespace().unwrap_or("") == &self.prefix[..self.prefix.len() - 1])
            && self.opts.sel.matches(o)
    }

    /// The line this watcher sees for `e`: objects entering the selector are ADDED, those
    /// leaving it are DELETED (carrying their previous state at the event's RV), as the
    /// server's watch cache does.
    fn filtered<'e>(&self, e: &'e Event) -> Option<(&'static str, Cow<'e, [u8]>)> {
        let cur = self.passes(&e.obj);
        let old = e.prev.as_ref().is_some_and(|p| self.passes(p));
        let same = || Some((e.ty.as_str(), Cow::Borrowed(e.obj.raw())));
        match (e.ty, old, cur) {
            (EventType::Added | EventType::Deleted, _, true) => same(),
            (EventType::Modified, true, true) => same(),
            (EventType::Modified, false, true) => Some(("ADDED", Cow::Borrowed(e.obj.raw()))),
            (EventType::Modified, true, false) => {
                let prev = e.prev.as_ref()?;
                let mut v = prev.to_value().ok()?;
                if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("resourceVersion".into(), Value::String(e.rv.to_string()));
                }
                Some(("DELETED", Cow::Owned(super::encode::to_vec(&v).ok()?)))
            }
            _ => None,
        }
    }

    /// A BOOKMARK: an empty object of the watched kind with only the RV (spec 6.4).
    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let annotations = if initial_end {
            ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
        } else {
            ""
        };
        let obj = format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"creationTimestamp\":null{annotations}}}}}",
            self.def.kind,
            self.def.api_version()
        );
        match self.opts.form {
            Representation::Metadata(v) => {
                event_line("BOOKMARK", &metadata_json(obj.as_bytes(), v))
            }
            _ if self.opts.protobuf => super::protobuf::watch_frame("BOOKMARK", obj.as_bytes())
                .map(Bytes::from)
                .unwrap_or_default(),
            _ => event_line("BOOKMARK", obj.as_bytes()),
        }
    }

    async fn error_and_close(&mut self, s: &Status) {
        let raw = serde_json::to_vec(s).unwrap_or_default();
        if self.opts.protobuf {
            self.put_frame("ERROR", &raw);
        } else {
            self.buf.put_slice(&event_line("ERROR", &raw));
        }
        let _ = self.flush().await;
    }

    async fn flush(&mut self) -> Result<(), ()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.tx.send(chunk).await.map_err(|_| ())
    }
}

fn rv_of(o: &Object) -> u64 {
    o.resource_version().parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn def() -> Arc<ResourceDef> {
        Registry::new().find("", "v1", "configmaps").unwrap()
    }

    #[test]
    fn spec_6_7_invalid_watch_list_options_are_422() {
        for bad in [
            "resourceVersionMatch=NotOlderThan",
            "sendInitialEvents=true",
            "sendInitialEvents=true&resourceVersionMatch=Exact",
        ] {
            let e = validate(&def(), &Query::parse(Some(bad)), "")
                .err()
                .unwrap();
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{bad}");
            assert!(
                e.message
                    .starts_with("ListOptions.meta.k8s.io \"\" is invalid"),
                "{}",
                e.message
            );
        }
        assert!(validate(
            &def(),
            &Query::parse(Some(
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
            )),
            "",
        )
        .is_ok());
        let e = validate(
            &def(),
            &Query::parse(Some(
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            )),
            "",
        )
        .err()
        .unwrap();
        assert!(e.message.contains("allowWatchBookmarks"), "{}", e.message);
    }

    #[test]
    fn non_numeric_rv_is_500_like_the_sample() {
        let e = validate(
            &def(),
            &Query::parse(Some("resourceVersion=notanumber")),
            "",
        )
        .err()
        .unwrap();
        assert_eq!(e.code, 500);
        assert_eq!(e.message, "resourceVersion: Invalid value: \"notanumber\": strconv.ParseUint: parsing \"notanumber\": invalid syntax");
        assert!(e.reason.is_empty());
    }

    #[test]
    fn default_timeout_is_between_30_and_60_minutes() {
        let o = validate(&def(), &Query::parse(None), "").ok().unwrap();
        assert!(o.timeout >= Duration::from_secs(1800) && o.timeout < Duration::from_secs(3600));
        assert_eq!(o.start, Start::Now);
    }
}
