//! The watch-stream and LIST decoders (`watch`, `decode`), fed arbitrary bytes in arbitrary
//! chunks.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::object::{check_accessors, check_stored};
use super::{oracle_parse, serde_only_limit, OracleValue, SerdeLimit, Settings};
use crate::decode::{status_from_response, ListDecoder, ObjectPool};
use crate::object::{IngestOptions, Object};
use crate::watch::{WatchDecoder, WatchEvent};

/// Options from the flags: bit 0 keeps `managedFields`, bit 1 makes events and values small
/// enough (32 to 536 bytes) that the size bound is exercised.
fn options(s: &Settings<'_>) -> (IngestOptions, Option<usize>) {
    let opts = IngestOptions {
        keep_managed_fields: s.flags & 1 != 0,
        ..Default::default()
    };
    let max = (s.flags & 2 != 0).then(|| 32 + usize::from(s.flags >> 2 & 0x1f) * 16);
    (opts, max)
}

/// An event as compared between two decodings.
#[derive(Debug, PartialEq)]
enum Seen {
    Object(&'static str, Vec<u8>),
    Bookmark(String, bool),
    Error(String),
}

/// Decodes the body whole and in the settings' chunks, and checks:
/// - the events, and whether the stream ends in an error, do not depend on the chunking;
/// - every object decoded is stored as text that passes the full scan, with its metadata;
/// - with `managedFields` kept (everything checked), a stream decoded without error is a
///   sequence of JSON values serde_json reads, one per event.
pub fn watch_stream(input: &[u8]) {
    let s = Settings::read(input);
    let (opts, max) = options(&s);
    let whole = decode_watch(opts, max, &[s.body]);
    let pieces = decode_watch(opts, max, &s.chunks());
    assert_eq!(whole, pieces, "the chunking changed the events");
    let (events, failed) = whole;
    if opts.keep_managed_fields && !failed {
        let mut values = 0;
        for v in serde_json::Deserializer::from_slice(s.body).into_iter::<OracleValue>() {
            match v {
                Ok(_) => values += 1,
                Err(e) if serde_only_limit(&e) != SerdeLimit::None => return,
                Err(e) => panic!("decoded a stream serde_json refuses: {e}"),
            }
        }
        assert_eq!(values, events.len(), "one event per JSON value");
    }
}

fn decode_watch(opts: IngestOptions, max: Option<usize>, chunks: &[&[u8]]) -> (Vec<Seen>, bool) {
    let mut d = WatchDecoder::new(opts);
    if let Some(max) = max {
        d = d.with_max_event_bytes(max);
    }
    let mut out = Vec::new();
    for c in chunks {
        d.push(c);
        loop {
            match d.next_event() {
                Ok(Some(ev)) => out.push(seen(ev, opts.keep_managed_fields)),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, d.finish().is_err())
}

fn seen(ev: WatchEvent, kept: bool) -> Seen {
    let object = |t, o: Object| {
        check_accessors(&o);
        check_stored(&o, kept);
        Seen::Object(t, o.raw().to_vec())
    };
    match ev {
        WatchEvent::Added(o) => object("ADDED", o),
        WatchEvent::Modified(o) => object("MODIFIED", o),
        WatchEvent::Deleted(o) => object("DELETED", o),
        WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        } => Seen::Bookmark(resource_version, initial_events_end),
        WatchEvent::Error(st) => {
            Seen::Error(serde_json::to_string(&st).expect("a Status serialises"))
        }
    }
}

/// A LIST decoded, as compared between two decodings.
type Listed = Result<(String, Option<String>, Option<i64>, Vec<Vec<u8>>), ()>;

/// Objects of an earlier decoding, for the relist path.
struct Pool(HashMap<String, Object>);

impl ObjectPool for Pool {
    fn get(&self, key: &str) -> Option<Object> {
        self.0.get(key).cloned()
    }
}

/// Decodes the body as a LIST response whole, in the settings' chunks, and in chunks with a
/// pool of the objects the first decoding made (a relist), and checks:
/// - the list does not depend on the chunking, nor on the pool (whose objects stand in for
///   items of the same version);
/// - every item is stored as text that passes the full scan;
/// - with `managedFields` kept, a list decoded without error is JSON serde_json reads, with
///   the same items (type metadata added where the item has none) and resourceVersion;
/// - the same bytes as an error response's body become a `Status` without panicking.
pub fn list_body(input: &[u8]) {
    let s = Settings::read(input);
    let (opts, max) = options(&s);
    let whole = decode_list(opts, max, &[s.body], None);
    let pieces = decode_list(opts, max, &s.chunks(), None);
    assert_eq!(
        summary(&whole),
        summary(&pieces),
        "the chunking changed the list"
    );
    let _ = status_from_response(400 + u16::from(s.flags), None, s.body);
    let Ok(items) = whole else {
        return;
    };
    for o in &items.3 {
        check_accessors(o);
        check_stored(o, opts.keep_managed_fields);
    }
    // Keys that occur once: two items of one version but different bytes would (rightly)
    // both come back as the pool's one object.
    let mut count: HashMap<String, usize> = HashMap::new();
    for o in &items.3 {
        *count.entry(o.key()).or_default() += 1;
    }
    let pool: HashMap<String, Object> = items
        .3
        .iter()
        .filter(|o| count[&o.key()] == 1)
        .map(|o| (o.key(), o.clone()))
        .collect();
    let reused = decode_list(opts, max, &s.chunks(), Some(Arc::new(Pool(pool))));
    assert_eq!(
        summary(&Ok(items.clone())),
        summary(&reused),
        "the pool changed the list"
    );
    if opts.keep_managed_fields {
        compare_with_serde(s.body, &items);
    }
}

type Decoded = (String, Option<String>, Option<i64>, Vec<Object>);

fn decode_list(
    opts: IngestOptions,
    max: Option<usize>,
    chunks: &[&[u8]],
    pool: Option<Arc<dyn ObjectPool>>,
) -> Result<Decoded, ()> {
    let mut d = match pool {
        Some(p) => ListDecoder::with_pool(opts, p),
        None => ListDecoder::new(opts),
    };
    if let Some(max) = max {
        d = d.with_max_value_bytes(max);
    }
    for c in chunks {
        d.push(c).map_err(drop)?;
    }
    let l = d.finish().map_err(drop)?;
    Ok((
        l.resource_version,
        l.continue_token,
        l.remaining_item_count,
        l.items,
    ))
}

fn summary(d: &Result<Decoded, ()>) -> Listed {
    d.as_ref()
        .map(|(rv, c, n, items)| {
            (
                rv.clone(),
                c.clone(),
                *n,
                items.iter().map(|o| o.raw().to_vec()).collect(),
            )
        })
        .map_err(|_| ())
}

fn compare_with_serde(body: &[u8], list: &Decoded) {
    let v: Value = match oracle_parse(body) {
        Ok(v) => v,
        Err(e) if serde_only_limit(&e) != SerdeLimit::None => return,
        Err(e) => panic!("decoded a list serde_json refuses: {e}"),
    };
    let want_items: &[Value] = match v.get("items") {
        Some(Value::Array(a)) => a,
        _ => &[],
    };
    assert_eq!(list.3.len(), want_items.len(), "item count");
    let type_meta = v["kind"]
        .as_str()
        .and_then(|k| k.strip_suffix("List"))
        .filter(|k| !k.is_empty())
        .zip(v["apiVersion"].as_str());
    for (o, want) in list.3.iter().zip(want_items) {
        let mut want = want.clone();
        if let (Some((kind, api_version)), Some(m)) = (type_meta, want.as_object_mut()) {
            if !m.contains_key("kind") && !m.contains_key("apiVersion") {
                m.insert("kind".into(), kind.into());
                m.insert("apiVersion".into(), api_version.into());
            }
        }
        let got: Value = oracle_parse(o.raw()).expect("stored text is JSON");
        assert_eq!(got, want, "an item differs from serde_json's");
    }
    let rv = v["metadata"]["resourceVersion"].as_str().unwrap_or("");
    assert_eq!(list.0, rv, "the list's resourceVersion");
}
