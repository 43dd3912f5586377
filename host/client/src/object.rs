//! The object representation shared by the whole pipeline: raw JSON bytes plus parsed metadata.
//!
//! Why: the host never needs a typed view of an object, only its identity and the fields that
//! drive indexing and dispatch. Parsing metadata once at ingest and sharing the bytes (cheap
//! `Clone`) keeps the store small and the hot path free of full decodes.
//!
//! Memory: the parsed metadata does not copy strings. It records `(offset, length)` spans into
//! the object's own bytes; only strings that contain JSON escapes (rare in metadata) are decoded
//! into a small side buffer. The bytes and the parsed metadata live in one exact-size
//! allocation (see the `thin` module), so a cached 1 KB ConfigMap costs its bytes plus about 110 bytes
//! of bookkeeping, and never pins the (much larger) read buffer it came from.

mod span;
mod thin;
mod views;

use std::borrow::Cow;

use bytes::Bytes;

use super::json::{self, Scanner};
use span::{OwnerSpans, Span, Src, DECODED};
use thin::ThinArc;
pub use views::{OwnerRef, OwnerRefs, PairsIter, StrPairs, Strs};

/// Error parsing an object's metadata.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Malformed or truncated JSON; the message names the byte offset and what was expected.
    #[error("object is not valid JSON: {0}")]
    Json(String),
    #[error("object is not valid JSON: {0}")]
    Serde(#[from] serde_json::Error),
    #[error("object is not valid UTF-8 at byte {0}")]
    Utf8(usize),
    #[error("object is larger than 2 GiB")]
    TooLarge,
}

impl From<json::SyntaxError> for ObjectError {
    fn from(e: json::SyntaxError) -> Self {
        ObjectError::Json(e.to_string())
    }
}

/// How objects are taken in from the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestOptions {
    /// Keep `metadata.managedFields`. Off by default: it is often half of an object's size and
    /// controllers rarely read it.
    pub keep_managed_fields: bool,
    /// The largest single value taken in from the wire: a watch event, a LIST item or any
    /// other member of a LIST body, a response body to any other request. Larger ones end the
    /// watch or fail the request with one error, instead of growing a buffer without bound (a
    /// 300 MiB unterminated string in a LIST cost 1.2 GB before its error). Default
    /// [`DEFAULT_MAX_OBJECT_BYTES`].
    pub max_object_bytes: usize,
}

/// 64 MiB: kube-apiserver's own request limit is 3 MiB and etcd's default value limit 1.5 MiB,
/// so no object it serves comes near; a watch event or LIST item this large is a broken server.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 64 << 20;

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            keep_managed_fields: false,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
        }
    }
}

/// Metadata that most objects lack; boxed so that the common object pays one pointer for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Extra {
    /// Strings that had escapes, decoded (spans with [`DECODED`] point here).
    text: Box<str>,
    annotations: Box<[(Span, Span)]>,
    owner_references: Box<[OwnerSpans]>,
    deletion_timestamp: Option<Span>,
    finalizers: Box<[Span]>,
}

/// Parsed metadata as spans into the object's bytes. Read it through [`Meta`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ParsedMeta {
    name: Span,
    namespace: Span,
    uid: Span,
    resource_version: Span,
    generation: i64,
    labels: Box<[(Span, Span)]>,
    extra: Option<Box<Extra>>,
}

/// What a top-level scan found besides metadata.
#[derive(Debug, Default)]
pub(crate) struct ScanInfo {
    pub(crate) has_kind: bool,
    pub(crate) has_api_version: bool,
    /// Byte range to cut to drop `managedFields` (with its separating comma).
    pub(crate) managed_fields_cut: Option<(usize, usize)>,
}

/// A byte range of an object's JSON ([`Object::verbatim_meta`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawSpan {
    /// Byte offset into [`Object::raw`].
    pub start: u32,
    /// Length in bytes (0 for an absent string, e.g. a cluster-scoped object's namespace).
    pub len: u32,
}

/// An object's metadata as byte ranges of its JSON ([`Object::verbatim_meta`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbatimMeta {
    /// `metadata.namespace` (empty when cluster-scoped).
    pub namespace: RawSpan,
    /// `metadata.name`.
    pub name: RawSpan,
    /// `metadata.uid`.
    pub uid: RawSpan,
    /// `metadata.resourceVersion`.
    pub resource_version: RawSpan,
    /// `metadata.generation` (0 when unset).
    pub generation: i64,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// A borrowed view of an object's metadata, built on each [`Object::meta`] call (a few span
/// lookups, no allocation). Labels and annotations keep document order. Construct one by hand
/// (`Meta { name: "a", ..Default::default() }`) to test code that reads metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Meta<'a> {
    /// `None` for cluster-scoped objects (and for an empty namespace).
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub uid: &'a str,
    pub resource_version: &'a str,
    pub generation: i64,
    pub labels: StrPairs<'a>,
    pub annotations: StrPairs<'a>,
    pub owner_references: OwnerRefs<'a>,
    pub deletion_timestamp: Option<&'a str>,
    pub finalizers: Strs<'a>,
}

impl<'a> Meta<'a> {
    fn new(raw: &'a [u8], p: &'a ParsedMeta) -> Self {
        let src = p.src(raw);
        let extra = p.extra.as_deref();
        Meta {
            namespace: Some(src.s(p.namespace)).filter(|n| !n.is_empty()),
            name: src.s(p.name),
            uid: src.s(p.uid),
            resource_version: src.s(p.resource_version),
            generation: p.generation,
            labels: StrPairs::from_spans(&p.labels, src),
            annotations: extra.map_or_else(StrPairs::default, |e| {
                StrPairs::from_spans(&e.annotations, src)
            }),
            owner_references: extra.map_or_else(OwnerRefs::default, |e| {
                OwnerRefs::from_spans(&e.owner_references, src)
            }),
            deletion_timestamp: extra.and_then(|e| e.deletion_timestamp).map(|d| src.s(d)),
            finalizers: extra.map_or_else(Strs::default, |e| Strs::from_spans(&e.finalizers, src)),
        }
    }

    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels.get(key)
    }
    /// The value of annotation `key`, if present.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations.get(key)
    }
    /// The owner reference with `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<OwnerRef<'a>> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }
}

/// An immutable object: raw JSON and its parsed metadata, shared by reference count. One
/// pointer wide; cloning it bumps a count.
#[derive(Clone)]
pub struct Object(ThinArc<ParsedMeta>);

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("key", &self.key())
            .field("rv", &self.resource_version())
            .finish()
    }
}

impl PartialEq for Object {
    fn eq(&self, other: &Self) -> bool {
        ThinArc::ptr_eq(&self.0, &other.0) || (self.raw() == other.raw())
    }
}

impl Object {
    /// Parse metadata from `raw` (a JSON object) and keep the bytes exactly as they are
    /// (`managedFields` included). For data from the wire prefer [`Object::ingest`].
    pub fn from_bytes(raw: Bytes) -> Result<Self, ObjectError> {
        if raw.len() > (u32::MAX >> 1) as usize {
            return Err(ObjectError::TooLarge);
        }
        check_utf8(&raw)?;
        let mut sc = Scanner::new(&raw);
        let (meta, _) = scan_object(&mut sc, ManagedFields::Kept)?;
        sc.end()?;
        ThinArc::new(meta, raw.len(), |b| b.copy_from_slice(&raw))
            .map(Object)
            .ok_or(ObjectError::TooLarge)
    }

    /// Take an object in from the wire: parse its metadata, drop `managedFields` unless
    /// `opts` keep it, and copy the result into an allocation of its own.
    /// The scan checks the text as UTF-8 on the way (see `json::Scanner`).
    pub fn ingest(raw: &[u8], opts: &IngestOptions) -> Result<Self, ObjectError> {
        Self::ingest_typed(raw, opts, None)
    }

    /// `ingest`, with `type_meta` (`kind`, `apiVersion`) added when the object lacks both, as
    /// list items do (spec 6.2).
    pub(crate) fn ingest_typed(
        raw: &[u8],
        opts: &IngestOptions,
        type_meta: Option<(&str, &str)>,
    ) -> Result<Self, ObjectError> {
        if raw.len() > (u32::MAX >> 1) as usize {
            return Err(ObjectError::TooLarge);
        }
        let mut sc = Scanner::new(raw);
        let (meta, info) = scan_object(&mut sc, ManagedFields::of(opts))?;
        sc.end()?;
        Self::build(raw, meta, info, opts, type_meta)
    }

    /// Ingest the object value at the scanner's position (a watch event's `object`, a list
    /// item) without scanning it twice.
    pub(crate) fn ingest_from(
        sc: &mut Scanner<'_>,
        opts: &IngestOptions,
        type_meta: Option<(&str, &str)>,
    ) -> Result<Self, ObjectError> {
        Self::ingest_from_reusing(sc, opts, type_meta, &mut |_| None)
    }

    /// [`ingest_from`](Self::ingest_from), but once the metadata is parsed `reuse` may return
    /// an object to use instead of a new copy (a held object of the same version, see
    /// [`Object::is_version`]); the value is still scanned and validated in full.
    pub(crate) fn ingest_from_reusing(
        sc: &mut Scanner<'_>,
        opts: &IngestOptions,
        type_meta: Option<(&str, &str)>,
        reuse: &mut dyn FnMut(&Meta<'_>) -> Option<Object>,
    ) -> Result<Self, ObjectError> {
        let start = json::skip_ws(sc.bytes(), sc.pos());
        let (mut meta, mut info) = scan_object(sc, ManagedFields::of(opts))?;
        let end = sc.pos();
        if end - start > (u32::MAX >> 1) as usize {
            return Err(ObjectError::TooLarge);
        }
        // Spans are still positions in the scanner's bytes here.
        if let Some(held) = reuse(&Meta::new(sc.bytes(), &meta)) {
            return Ok(held);
        }
        if start > 0 {
            // Only the strings found, which lie at or after `start`: an absent one keeps its
            // empty span at 0 (shifted, it would point 4 GiB past the object's end).
            meta.shift(start as u32, -(start as i64));
            info.managed_fields_cut = info.managed_fields_cut.map(|(a, b)| (a - start, b - start));
        }
        Self::build(&sc.bytes()[start..end], meta, info, opts, type_meta)
    }

    fn build(
        raw: &[u8],
        mut meta: ParsedMeta,
        info: ScanInfo,
        opts: &IngestOptions,
        type_meta: Option<(&str, &str)>,
    ) -> Result<Self, ObjectError> {
        let cut = info
            .managed_fields_cut
            .filter(|_| !opts.keep_managed_fields);
        let prefix = match type_meta {
            Some((kind, api_version)) if !info.has_kind && !info.has_api_version => {
                let mut p = String::with_capacity(kind.len() + api_version.len() + 30);
                p.push_str("\"kind\":");
                json::push_quoted(&mut p, kind);
                p.push_str(",\"apiVersion\":");
                json::push_quoted(&mut p, api_version);
                Some(p)
            }
            _ => None,
        };
        // The output as pieces: the type prefix goes right after the opening brace (with a
        // comma unless the object is `{}`), the cut drops `managedFields`. A successful scan
        // found the brace at `start` and the cut inside the object, after it.
        let start = json::skip_ws(raw, 0);
        let body_from = (start + 1).min(raw.len());
        let comma = prefix.is_some() && raw.get(json::skip_ws(raw, body_from)) != Some(&b'}');
        let (head, body): (&[u8], &[u8]) = match &prefix {
            Some(_) => (&raw[..body_from], &raw[body_from..]),
            None => (&[], raw),
        };
        let body_off = head.len();
        let cut = cut.filter(|&(a, b)| a >= body_off && a <= b && b <= raw.len());
        let (body_a, body_b): (&[u8], &[u8]) = match cut {
            Some((a, b)) => (&raw[body_off..a], &raw[b..]),
            None => (body, &[]),
        };
        let pieces: [&[u8]; 5] = [
            head,
            prefix.as_deref().map_or(&[][..], str::as_bytes),
            if comma { b"," } else { &[] },
            body_a,
            body_b,
        ];
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        let added = pieces[1].len() + pieces[2].len();
        if added != 0 {
            meta.shift(body_from as u32, added as i64);
        }
        if let Some((a, b)) = cut {
            let at = (b + added) as u32;
            meta.shift(at, -((b - a) as i64));
        }
        ThinArc::new(meta, len, |out| {
            let mut at = 0;
            for p in pieces {
                out[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
        })
        .map(Object)
        .ok_or(ObjectError::TooLarge)
    }

    /// The object's own `(apiVersion, kind)`, empty where absent. Why read from the bytes
    /// rather than kept with the metadata: only the reflector's type check needs them (spec
    /// 1.7), and the API server writes them first, so this scans a few dozen bytes instead of
    /// every cached object carrying two more spans. Escaped values (never seen in practice)
    /// are decoded.
    pub fn type_meta(&self) -> (Cow<'_, str>, Cow<'_, str>) {
        let raw = self.raw();
        let mut sc = Scanner::new(raw);
        let mut api_version = None;
        let mut kind = None;
        let read = |sc: &mut Scanner<'_>| -> Result<Cow<'_, str>, json::SyntaxError> {
            if sc.peek_null() {
                sc.skip_value()?;
                return Ok(Cow::Borrowed(""));
            }
            let (a, b, escaped) = sc.string()?;
            let text = std::str::from_utf8(&raw[a..b]).unwrap_or_default();
            if !escaped {
                return Ok(Cow::Borrowed(text));
            }
            let mut out = String::new();
            json::unescape_into(&raw[a..b], &mut out).map_err(|m| sc.error_at(a, m))?;
            Ok(Cow::Owned(out))
        };
        // Stops at the first malformed byte or once both are found: the walk's error is the
        // way out of the member loop, so it is not an error of the object.
        let _ = sc.object(|sc, key, _| {
            match key {
                b"apiVersion" => api_version = Some(read(sc)?),
                b"kind" => kind = Some(read(sc)?),
                _ => {
                    sc.skip_value()?;
                }
            }
            if api_version.is_some() && kind.is_some() {
                return Err(sc.error_at(sc.pos(), "found"));
            }
            Ok(())
        });
        (api_version.unwrap_or_default(), kind.unwrap_or_default())
    }

    /// Build from a JSON value (tests and tools; not the hot path). Keeps `managedFields`.
    pub fn from_value(v: &serde_json::Value) -> Result<Self, ObjectError> {
        Self::from_bytes(Bytes::from(serde_json::to_vec(v)?))
    }

    /// The JSON bytes.
    pub fn raw(&self) -> &[u8] {
        self.0.bytes()
    }
    /// The JSON bytes as a [`Bytes`] that shares this object's allocation (no copy), for
    /// response bodies and other `Bytes` consumers.
    pub fn raw_bytes(&self) -> Bytes {
        Bytes::from_owner(RawJson(self.clone()))
    }
    /// The raw JSON as text (validated UTF-8 at construction).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.raw()).unwrap_or_default()
    }
    pub fn meta(&self) -> Meta<'_> {
        Meta::new(self.raw(), self.0.header())
    }

    /// The metadata as byte ranges of [`Object::raw`], for code that holds the bytes anyway (a
    /// Wasm guest receives them with each notification): no string is copied. Each label
    /// appends four numbers to `labels` (key start, key length, value start, value length).
    /// `None` when one of these strings had JSON escapes, so is not verbatim in the bytes
    /// (never for metadata the API server wrote: its names, UIDs and labels have none); some
    /// labels may have been appended then.
    pub fn verbatim_meta(&self, labels: &mut Vec<u32>) -> Option<VerbatimMeta> {
        let h = self.0.header();
        let plain = |s: Span| {
            (s.len & DECODED == 0).then_some(RawSpan {
                start: s.off,
                len: s.len,
            })
        };
        for (k, v) in h.labels.iter() {
            let (k, v) = (plain(*k)?, plain(*v)?);
            labels.extend([k.start, k.len, v.start, v.len]);
        }
        Some(VerbatimMeta {
            namespace: plain(h.namespace)?,
            name: plain(h.name)?,
            uid: plain(h.uid)?,
            resource_version: plain(h.resource_version)?,
            generation: h.generation,
            deleting: h
                .extra
                .as_deref()
                .is_some_and(|e| e.deletion_timestamp.is_some()),
        })
    }
    fn src(&self) -> Src<'_> {
        self.0.header().src(self.raw())
    }
    pub fn name(&self) -> &str {
        self.src().s(self.0.header().name)
    }
    /// `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        Some(self.src().s(self.0.header().namespace)).filter(|n| !n.is_empty())
    }
    pub fn resource_version(&self) -> &str {
        self.src().s(self.0.header().resource_version)
    }
    pub fn uid(&self) -> &str {
        self.src().s(self.0.header().uid)
    }

    /// Both handles share one allocation (as `Arc::ptr_eq`).
    pub fn ptr_eq(a: &Object, b: &Object) -> bool {
        ThinArc::ptr_eq(&a.0, &b.0)
    }

    /// This object is the version `m` describes: same namespace, name, uid and (non-empty)
    /// resourceVersion. An API server gives every write a new resourceVersion, so an item
    /// that matches a held object this way has the same content, and the held copy can
    /// stand for it.
    pub fn is_version(&self, m: &Meta<'_>) -> bool {
        !m.resource_version.is_empty()
            && self.resource_version() == m.resource_version
            && self.uid() == m.uid
            && self.name() == m.name
            && self.namespace() == m.namespace
    }

    /// [`is_version`](Self::is_version) for an object already decoded (a watch-list's
    /// initial event): the two hold the same content.
    pub fn is_same_version(&self, other: &Object) -> bool {
        !other.resource_version().is_empty()
            && self.resource_version() == other.resource_version()
            && self.uid() == other.uid()
            && self.name() == other.name()
            && self.namespace() == other.namespace()
    }

    /// The store key, `namespace/name` or `name` (spec 3.1).
    pub fn key(&self) -> String {
        object_key(self.namespace(), self.name())
    }

    /// [`key`](Self::key) lent to `f` without allocating (on the stack, or the name itself
    /// for cluster-scoped objects): for maps that look a key up on every event and allocate
    /// only to insert a new one.
    pub fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        with_object_key(self.namespace(), self.name(), f)
    }

    /// Decode the whole object (off the hot path only).
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(self.raw())
    }

    /// Approximate bytes this object holds in memory (its JSON, the shared header and the
    /// parsed metadata), for capacity planning and benchmarks.
    pub fn heap_size(&self) -> usize {
        let p = self.0.header();
        let mut n = self.0.block_size();
        n += std::mem::size_of_val(&*p.labels);
        if let Some(e) = &p.extra {
            n += std::mem::size_of::<Extra>()
                + e.text.len()
                + std::mem::size_of_val(&*e.annotations)
                + std::mem::size_of_val(&*e.owner_references)
                + std::mem::size_of_val(&*e.finalizers);
        }
        n
    }
}

/// An object as the owner of a [`Bytes`] view of its JSON.
struct RawJson(Object);

impl AsRef<[u8]> for RawJson {
    fn as_ref(&self) -> &[u8] {
        self.0.raw()
    }
}

fn check_utf8(raw: &[u8]) -> Result<(), ObjectError> {
    std::str::from_utf8(raw)
        .map(|_| ())
        .map_err(|e| ObjectError::Utf8(e.valid_up_to()))
}

impl ParsedMeta {
    fn src<'a>(&'a self, raw: &'a [u8]) -> Src<'a> {
        Src {
            raw,
            text: self.extra.as_deref().map_or("", |e| &e.text),
        }
    }

    fn shift(&mut self, at: u32, delta: i64) {
        let all = |s: &mut Span| s.shift(at, delta);
        all(&mut self.name);
        all(&mut self.namespace);
        all(&mut self.uid);
        all(&mut self.resource_version);
        for (k, v) in self.labels.iter_mut() {
            all(k);
            all(v);
        }
        if let Some(e) = self.extra.as_deref_mut() {
            for (k, v) in e.annotations.iter_mut() {
                all(k);
                all(v);
            }
            for o in e.owner_references.iter_mut() {
                all(&mut o.api_version);
                all(&mut o.kind);
                all(&mut o.name);
                all(&mut o.uid);
            }
            if let Some(d) = e.deletion_timestamp.as_mut() {
                all(d);
            }
            for f in e.finalizers.iter_mut() {
                all(f);
            }
        }
    }
}

/// `namespace/name`, or `name` when there is no namespace (spec 3.1).
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => {
            let mut k = String::with_capacity(ns.len() + 1 + name.len());
            k.push_str(ns);
            k.push('/');
            k.push_str(name);
            k
        }
        _ => name.to_owned(),
    }
}

/// [`object_key`] lent to `f` without allocating: on the stack, or the name itself when there
/// is no namespace. For lookups by a key that is asked for often and kept rarely.
pub fn with_object_key<R>(namespace: Option<&str>, name: &str, f: impl FnOnce(&str) -> R) -> R {
    let Some(ns) = namespace.filter(|ns| !ns.is_empty()) else {
        return f(name);
    };
    // A namespace is at most 63 bytes and most names at most 253: every key of objects an API
    // server validated fits.
    let mut buf = [0u8; 320];
    let n = ns.len() + 1 + name.len();
    let Some(out) = buf.get_mut(..n) else {
        return f(&object_key(Some(ns), name));
    };
    out[..ns.len()].copy_from_slice(ns.as_bytes());
    out[ns.len()] = b'/';
    out[ns.len() + 1..].copy_from_slice(name.as_bytes());
    // SAFETY: two `str`s joined by an ASCII byte are UTF-8.
    f(unsafe { std::str::from_utf8_unchecked(out) })
}

/// Split a key into (namespace, name); one or two parts, anything else is an error (spec 3.1).
pub fn split_key(key: &str) -> Result<(Option<&str>, &str), InvalidKey> {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => Ok((None, name)),
        (Some(ns), Some(name), None) => Ok((Some(ns), name)),
        _ => Err(InvalidKey(key.to_owned())),
    }
}

/// A key with more than two `/`-separated parts.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unexpected key format: {0:?}")]
pub struct InvalidKey(pub String);

/// Builds a [`ParsedMeta`], decoding escaped strings into a side buffer.
struct Builder {
    text: String,
}

/// Up to this many pairs [`Builder::keep_last`] compares keys pairwise (at most 120
/// comparisons, most of them of lengths), beyond it through a set.
const SMALL_MAP: usize = 16;

impl Builder {
    fn string(&mut self, sc: &mut Scanner<'_>) -> Result<Span, json::SyntaxError> {
        let (a, b, escaped) = sc.string()?;
        if !escaped {
            return Ok(Span {
                off: a as u32,
                len: (b - a) as u32,
            });
        }
        let off = self.text.len() as u32;
        json::unescape_into(&sc.bytes()[a..b], &mut self.text).map_err(|m| sc.error_at(a, m))?;
        Ok(Span {
            off,
            len: (self.text.len() as u32 - off) | DECODED,
        })
    }
    fn opt_string(&mut self, sc: &mut Scanner<'_>) -> Result<Option<Span>, json::SyntaxError> {
        if sc.null()? {
            Ok(None)
        } else {
            self.string(sc).map(Some)
        }
    }
    fn string_map(
        &mut self,
        sc: &mut Scanner<'_>,
    ) -> Result<Box<[(Span, Span)]>, json::SyntaxError> {
        if sc.null()? {
            return Ok(Box::default());
        }
        // Collected on the stack, then copied into one allocation of the exact size: a `Vec`
        // grown pair by pair and shrunk into a box allocates two or three times per object.
        let mut few = [(Span::default(), Span::default()); 16];
        let mut n = 0;
        let mut more = Vec::new();
        sc.object(|sc, _, _| {
            let k = self.last_key(sc)?;
            let v = self.string(sc)?;
            match few.get_mut(n) {
                Some(slot) => *slot = (k, v),
                None => more.push((k, v)),
            }
            n += 1;
            Ok(())
        })?;
        if more.is_empty() {
            let n = self.keep_last(sc.bytes(), &mut few[..n]);
            return Ok(few[..n].into());
        }
        let mut all = Vec::with_capacity(n);
        all.extend_from_slice(&few);
        all.append(&mut more);
        let n = self.keep_last(sc.bytes(), &mut all);
        all.truncate(n);
        Ok(all.into_boxed_slice())
    }
    /// Drops every pair whose key comes again later, keeping the order of the rest; returns
    /// how many are left at the front. Why: the API server reads a key given twice as Go's
    /// encoding/json reads it into a map, the last value winning; lookups, iteration and the
    /// guests' metadata blocks then all see that one (found by the fuzz target `selectors`:
    /// a lookup took the first). Keys of a few labels compare by length first: the check
    /// costs a few nanoseconds an object.
    fn keep_last(&self, raw: &[u8], pairs: &mut [(Span, Span)]) -> usize {
        let key = |sp: Span| -> &[u8] {
            let (bytes, len) = if sp.len & DECODED != 0 {
                (self.text.as_bytes(), sp.len & !DECODED)
            } else {
                (raw, sp.len)
            };
            let off = sp.off as usize;
            bytes.get(off..off + len as usize).unwrap_or_default()
        };
        let len = |sp: Span| sp.len & !DECODED;
        // Past a few pairs, a set of the keys seen from the end: a map of thousands of keys
        // (no API server sends one, anything else may) must not cost the square of them.
        let mut later = (pairs.len() > SMALL_MAP).then(|| {
            let mut seen = std::collections::HashSet::with_capacity(pairs.len());
            let mut again = vec![false; pairs.len()];
            for i in (0..pairs.len()).rev() {
                again[i] = !seen.insert(key(pairs[i].0));
            }
            again.into_iter()
        });
        let mut kept = 0;
        for i in 0..pairs.len() {
            let k = pairs[i].0;
            let again = match &mut later {
                Some(flags) => flags.next().unwrap_or(false),
                None => pairs[i + 1..]
                    .iter()
                    .any(|(o, _)| len(*o) == len(k) && key(*o) == key(k)),
            };
            if !again {
                pairs[kept] = pairs[i];
                kept += 1;
            }
        }
        kept
    }
    /// The key the scanner just read, as a span.
    fn last_key(&mut self, sc: &mut Scanner<'_>) -> Result<Span, json::SyntaxError> {
        let (a, b, escaped) = sc.last_key();
        if !escaped {
            return Ok(Span {
                off: a as u32,
                len: (b - a) as u32,
            });
        }
        let off = self.text.len() as u32;
        json::unescape_into(&sc.bytes()[a..b], &mut self.text).map_err(|m| sc.error_at(a, m))?;
        Ok(Span {
            off,
            len: (self.text.len() as u32 - off) | DECODED,
        })
    }
}

/// Scan one JSON object: parse `metadata`, validate and skip everything else.
/// What becomes of `metadata.managedFields`, which decides how closely it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagedFields {
    /// Kept in the stored bytes: checked like the rest of the object.
    Kept,
    /// Cut out: only its end is found (brackets and strings), its grammar and text unchecked,
    /// since none of its bytes is stored. It is often a third to a half of an object and as
    /// dense in structure as JSON gets, so checking it costs more than the rest of the scan.
    Dropped,
}

impl ManagedFields {
    fn of(opts: &IngestOptions) -> Self {
        if opts.keep_managed_fields {
            ManagedFields::Kept
        } else {
            ManagedFields::Dropped
        }
    }
}

pub(crate) fn scan_object(
    sc: &mut Scanner<'_>,
    managed_fields: ManagedFields,
) -> Result<(ParsedMeta, ScanInfo), ObjectError> {
    let mut meta = ParsedMeta::default();
    let mut info = ScanInfo::default();
    sc.object(|sc, key, _| {
        match key {
            b"metadata" if !sc.peek_null() => {
                if managed_fields == ManagedFields::Dropped && info.managed_fields_cut.is_some() {
                    return Err(duplicate_managed_fields(sc));
                }
                let (m, cut) = scan_metadata(sc, managed_fields)?;
                meta = m;
                info.managed_fields_cut = cut;
            }
            b"metadata" => {
                // `null`: no metadata, as JSON decoders read a later duplicate key.
                sc.skip_value()?;
                meta = ParsedMeta::default();
                if info.managed_fields_cut.take().is_some()
                    && managed_fields == ManagedFields::Dropped
                {
                    return Err(duplicate_managed_fields(sc));
                }
            }
            b"kind" => {
                info.has_kind = true;
                sc.skip_value()?;
            }
            b"apiVersion" => {
                info.has_api_version = true;
                sc.skip_value()?;
            }
            _ => {
                sc.skip_value()?;
            }
        }
        Ok(())
    })?;
    Ok((meta, info))
}

type MetaScan = (ParsedMeta, Option<(usize, usize)>);

/// A second `managedFields` where the first is cut unchecked: one cut is made, so the other
/// would be stored unchecked. Found by the fuzz target `watch_stream`. No API server writes a
/// key twice; refusing the object keeps "nothing unchecked is stored" true.
fn duplicate_managed_fields(sc: &Scanner<'_>) -> json::SyntaxError {
    sc.error_at(sc.pos(), "metadata.managedFields given twice")
}

fn scan_metadata(
    sc: &mut Scanner<'_>,
    managed_fields: ManagedFields,
) -> Result<MetaScan, json::SyntaxError> {
    let mut b = Builder {
        text: String::new(),
    };
    let mut m = ParsedMeta::default();
    let mut extra = Extra::default();
    let mut has_extra = false;
    let mut cut = None;
    // Position just after the previous member's value, to cut `managedFields` with its comma.
    let mut prev_end: Option<usize> = None;
    sc.object(|sc, key, key_start| {
        match key {
            b"name" => m.name = b.opt_string(sc)?.unwrap_or_default(),
            b"namespace" => m.namespace = b.opt_string(sc)?.unwrap_or_default(),
            b"uid" => m.uid = b.opt_string(sc)?.unwrap_or_default(),
            b"resourceVersion" => m.resource_version = b.opt_string(sc)?.unwrap_or_default(),
            b"generation" => m.generation = sc.opt_i64()?.unwrap_or(0),
            b"labels" => m.labels = b.string_map(sc)?,
            b"annotations" => {
                extra.annotations = b.string_map(sc)?;
                has_extra |= !extra.annotations.is_empty();
            }
            b"deletionTimestamp" => {
                extra.deletion_timestamp = b.opt_string(sc)?;
                has_extra |= extra.deletion_timestamp.is_some();
            }
            b"finalizers" => {
                let mut out = Vec::new();
                if !sc.null()? {
                    sc.array(|sc| {
                        out.push(b.string(sc)?);
                        Ok(())
                    })?;
                }
                has_extra |= !out.is_empty();
                extra.finalizers = out.into();
            }
            b"ownerReferences" => {
                let mut out = Vec::new();
                if !sc.null()? {
                    sc.array(|sc| {
                        let mut o = OwnerSpans::default();
                        sc.object(|sc, k, _| {
                            match k {
                                b"apiVersion" => o.api_version = b.string(sc)?,
                                b"kind" => o.kind = b.string(sc)?,
                                b"name" => o.name = b.string(sc)?,
                                b"uid" => o.uid = b.string(sc)?,
                                b"controller" => o.controller = sc.opt_bool()?,
                                b"blockOwnerDeletion" => o.block_owner_deletion = sc.opt_bool()?,
                                _ => {
                                    sc.skip_value()?;
                                }
                            }
                            Ok(())
                        })?;
                        out.push(o);
                        Ok(())
                    })?;
                }
                has_extra |= !out.is_empty();
                extra.owner_references = out.into();
            }
            b"managedFields" => {
                if managed_fields == ManagedFields::Dropped && cut.is_some() {
                    return Err(duplicate_managed_fields(sc));
                }
                match managed_fields {
                    ManagedFields::Kept => sc.skip_value()?,
                    ManagedFields::Dropped => sc.skip_dropped_value()?,
                };
                let end = sc.pos();
                cut = Some(match prev_end {
                    // Not the first member: drop `, "managedFields": [...]`.
                    Some(p) => (p, end),
                    // First member: drop `"managedFields": [...],` (and the space after).
                    None => {
                        let after = json::skip_ws(sc.bytes(), end);
                        if sc.bytes().get(after) == Some(&b',') {
                            (key_start, json::skip_ws(sc.bytes(), after + 1))
                        } else {
                            (key_start, end)
                        }
                    }
                });
            }
            _ => {
                sc.skip_value()?;
            }
        }
        prev_end = Some(sc.pos());
        Ok(())
    })?;
    extra.text = b.text.into_boxed_str();
    has_extra |= !extra.text.is_empty();
    if has_extra {
        m.extra = Some(Box::new(extra));
    }
    Ok((m, cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CM: &[u8] = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"pre-5","namespace":"samples","uid":"u1","resourceVersion":"50470","labels":{"sample":"yes"},"finalizers":["a/b"]},"data":{"k":"v5"}}"#;

    #[test]
    fn verbatim_meta_points_at_the_strings_in_the_bytes_unless_they_had_escapes() {
        let o = Object::from_bytes(Bytes::from_static(
            br#"{"metadata":{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"7","generation":3,"labels":{"app":"web","t":""},"deletionTimestamp":"2024-01-01T00:00:00Z"}}"#,
        ))
        .unwrap();
        let mut labels = Vec::new();
        let m = o.verbatim_meta(&mut labels).expect("verbatim");
        let at = |s: RawSpan| {
            std::str::from_utf8(&o.raw()[s.start as usize..(s.start + s.len) as usize]).unwrap()
        };
        assert_eq!(
            (
                at(m.namespace),
                at(m.name),
                at(m.uid),
                at(m.resource_version)
            ),
            ("ns", "a", "u-1", "7")
        );
        assert_eq!((m.generation, m.deleting), (3, true));
        let pairs: Vec<(&str, &str)> = labels
            .chunks(4)
            .map(|q| {
                let span = |i: usize| RawSpan {
                    start: q[i],
                    len: q[i + 1],
                };
                (at(span(0)), at(span(2)))
            })
            .collect();
        assert_eq!(pairs, [("app", "web"), ("t", "")]);
        // A cluster-scoped object: an empty namespace span; no deletion.
        let c = Object::from_bytes(Bytes::from_static(br#"{"metadata":{"name":"n"}}"#)).unwrap();
        labels.clear();
        let m = c.verbatim_meta(&mut labels).expect("verbatim");
        assert_eq!((m.namespace.len, m.deleting, labels.len()), (0, false, 0));
        // A name written with an escape is not in the bytes as it reads.
        let e =
            Object::from_bytes(Bytes::from_static(br#"{"metadata":{"name":"\u0061"}}"#)).unwrap();
        assert_eq!(e.name(), "a");
        assert!(e.verbatim_meta(&mut labels).is_none());
    }

    /// Found by the fuzz target `watch_stream`: an object read out of a larger text (a watch
    /// event's `object`, a list item) had the empty spans of the strings it lacks shifted below
    /// zero, so a cluster-scoped object told guests its namespace starts 4 GiB in.
    #[test]
    fn spans_of_absent_strings_stay_inside_an_object_read_out_of_an_event() {
        let event = br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#;
        let mut sc = Scanner::new(event);
        sc.seek(
            event
                .windows(11)
                .position(|w| w == br#"{"metadata""#)
                .unwrap(),
        );
        let o = Object::ingest_from(&mut sc, &IngestOptions::default(), None).unwrap();
        assert_eq!(o.as_str(), r#"{"metadata":{"name":"a"}}"#);
        let m = o.verbatim_meta(&mut Vec::new()).expect("verbatim");
        for s in [m.namespace, m.name, m.uid, m.resource_version] {
            assert!(
                (s.start + s.len) as usize <= o.raw().len(),
                "{s:?} outside {}",
                o.as_str()
            );
        }
        assert_eq!((m.name.start, m.name.len), (21, 1));
    }

    /// Found by the fuzz target `watch_stream`: with `managedFields` given twice, the first was
    /// skipped unchecked and only the second cut, so the stored text held unchecked bytes (not
    /// JSON, here). Also a later `metadata` (or `metadata: null`) after one with a cut. Such an
    /// object is refused when the field is cut, and read as JSON decoders read it when kept:
    /// the last `metadata` wins (before, a later `null` left the earlier one's name in place;
    /// the differential target `json_object` fails on that input without the fix).
    #[test]
    fn a_second_managed_fields_or_metadata_is_refused_when_cut_and_the_last_wins() {
        for twice in [
            br#"{"metadata":{"managedFields":[},"managedFields":""}}"#.as_slice(),
            br#"{"metadata":{"managedFields":["\xff"]},"metadata":{"name":"a"}}"#,
            br#"{"metadata":{"managedFields":[]},"metadata":null}"#,
        ] {
            let e = Object::ingest(twice, &IngestOptions::default()).unwrap_err();
            assert!(e.to_string().contains("managedFields given twice"), "{e}");
        }
        let kept = IngestOptions {
            keep_managed_fields: true,
            ..Default::default()
        };
        let o = Object::ingest(br#"{"metadata":{"name":"a"},"metadata":null}"#, &kept).unwrap();
        assert_eq!(o.name(), "");
        crate::fuzzing::json_object(br#"{"metadata":{"name":"a"},"metadata":null}"#);
        let o = Object::ingest(br#"{"metadata":null,"metadata":{"name":"b"}}"#, &kept).unwrap();
        assert_eq!(o.name(), "b");
    }

    /// Found by the json_object fuzz target: a metadata key given twice, the first time with a
    /// type the scanner refuses. The scanner refuses the object, as Go's encoding/json does;
    /// serde_json keeps the last value and reads it fine, so it is no oracle here.
    #[test]
    fn a_repeated_metadata_key_first_mistyped_is_refused() {
        let twice = br#"{"metadata":{"name":"rs","labels":"","labels":null}}"#;
        let e = Object::ingest(twice, &IngestOptions::default()).unwrap_err();
        assert!(e.to_string().contains("expected an object"), "{e}");
        crate::fuzzing::json_object(twice);
        crate::fuzzing::json_object(include_bytes!(
            "../../../fuzz/seeds/json_object/repeated-mistyped-labels.json"
        ));
    }

    /// Found by the fuzz target `selectors`: a label (or annotation) key given twice was looked
    /// up as its first value, where the API server reads the last. Broken by hand once (no
    /// `keep_last`): the lookup read `1`.
    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        let o = Object::ingest(
            br#"{"metadata":{"name":"a","labels":{"a":"1","b":"x","a":"2","\u0061":"3"},
                "annotations":{"n":"1","n":"2"}}}"#,
            &IngestOptions::default(),
        )
        .unwrap();
        let m = o.meta();
        assert_eq!(m.label("a"), Some("3"));
        assert_eq!(
            m.labels.iter().collect::<Vec<_>>(),
            [("b", "x"), ("a", "3")]
        );
        assert_eq!(m.annotation("n"), Some("2"));
        assert_eq!(m.annotations.len(), 1);
        // Past 16 pairs the same through a set of the keys.
        let many: Vec<String> = (0..40)
            .map(|i| format!("\"k{}\":\"{i}\"", i % 25))
            .collect();
        let text = format!(
            r#"{{"metadata":{{"name":"a","labels":{{{}}}}}}}"#,
            many.join(",")
        );
        let o = Object::ingest(text.as_bytes(), &IngestOptions::default()).unwrap();
        let labels: Vec<_> = o.meta().labels.iter().collect();
        assert_eq!(labels.len(), 25);
        assert_eq!(labels[0], ("k15", "15"));
        assert_eq!(o.meta().label("k3"), Some("28"));
        assert_eq!(o.meta().label("k20"), Some("20"));
        let by_hand = [("k", "1"), ("k", "2")];
        assert_eq!(StrPairs::from(&by_hand[..]).get("k"), Some("2"));
        crate::fuzzing::selectors(include_bytes!(
            "../../../fuzz/seeds/selectors/label-given-twice.txt"
        ));
    }

    /// Found by the fuzz target `json_object` (an oracle defect): serde_json's `Value` takes a
    /// first key `$serde_json::private::RawValue` for its raw-value marker; Go, the API server
    /// and the scanner read it as any key. Broken by hand once (the oracle back on `Value`):
    /// both inputs then panicked.
    #[test]
    fn the_serde_raw_value_marker_is_an_ordinary_key() {
        let labels =
            br#"{"metadata":{"name":"a","labels":{"$serde_json::private::RawValue":"1"}}}"#;
        let o = Object::ingest(labels, &IngestOptions::default()).unwrap();
        assert_eq!(o.meta().label("$serde_json::private::RawValue"), Some("1"));
        crate::fuzzing::json_object(labels);
        crate::fuzzing::json_object(include_bytes!(
            "../../../fuzz/seeds/json_object/serde-raw-value-marker-key.json"
        ));
    }

    #[test]
    fn type_meta_is_read_in_any_order_and_decoded() {
        let tm = |j: &str| {
            let o = Object::from_bytes(Bytes::from(j.to_owned())).unwrap();
            let (a, k) = o.type_meta();
            (a.into_owned(), k.into_owned())
        };
        let pair = |a: &str, k: &str| (a.to_owned(), k.to_owned());
        assert_eq!(
            tm(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#),
            pair("v1", "ConfigMap")
        );
        assert_eq!(
            tm(
                r#"{"metadata":{"name":"a","labels":{"kind":"x"}},"data":{"apiVersion":"y"},"apiVersion":"apps/v1","kind":"Deployment"}"#
            ),
            pair("apps/v1", "Deployment")
        );
        assert_eq!(
            tm(r#"{"apiVersion":"v1","kind":"Config\u004dap","metadata":{}}"#),
            pair("v1", "ConfigMap")
        );
        assert_eq!(tm(r#"{"metadata":{"name":"a"}}"#), pair("", ""));
        assert_eq!(tm(r#"{"kind":null,"metadata":{}}"#), pair("", ""));
    }

    #[test]
    fn parses_metadata_of_a_sample_configmap() {
        let o = Object::from_bytes(Bytes::from_static(CM)).unwrap();
        assert_eq!(o.key(), "samples/pre-5");
        assert_eq!(o.resource_version(), "50470");
        assert_eq!(o.uid(), "u1");
        assert_eq!(o.meta().label("sample"), Some("yes"));
        assert_eq!(o.meta().label("other"), None);
        assert_eq!(o.meta().finalizers.iter().collect::<Vec<_>>(), ["a/b"]);
        assert_eq!(o.meta().generation, 0);
        assert_eq!(o.meta().deletion_timestamp, None);
    }

    #[test]
    fn split_key_accepts_one_or_two_parts_only() {
        // spec 3.1
        assert_eq!(split_key("a").unwrap(), (None, "a"));
        assert_eq!(split_key("ns/a").unwrap(), (Some("ns"), "a"));
        assert!(split_key("a/b/c").is_err());
    }

    fn ingest(s: &str) -> Object {
        Object::ingest(s.as_bytes(), &IngestOptions::default()).unwrap()
    }

    #[test]
    fn with_key_lends_the_key_key_returns() {
        // spec 3.1: `namespace/name`, or the name alone; a key longer than the stack buffer
        // (no API server allows one) still comes out whole.
        let long = "n".repeat(400);
        for (ns, name) in [("ns", "a"), ("", "node-1"), ("ns", long.as_str())] {
            let o = ingest(&format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#
            ));
            let lent = o.with_key(str::to_owned);
            assert_eq!(lent, o.key());
            assert_eq!(lent, object_key(Some(ns), name));
            assert_eq!(with_object_key(Some(ns), name, str::to_owned), lent);
        }
        assert_eq!(with_object_key(None, "node-1", str::to_owned), "node-1");
    }

    #[test]
    fn any_number_of_labels_keeps_its_order() {
        // Up to 16 pairs are collected on the stack, more spill over: both read alike.
        for n in [0, 1, 16, 17, 40] {
            let labels: Vec<String> = (0..n).map(|i| format!(r#""k{i}":"v{i}""#)).collect();
            let o = ingest(&format!(
                r#"{{"metadata":{{"name":"a","labels":{{{}}}}}}}"#,
                labels.join(",")
            ));
            let m = o.meta();
            let got: Vec<(String, String)> = m
                .labels
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let want: Vec<(String, String)> =
                (0..n).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
            assert_eq!(got, want, "{n} labels");
        }
    }

    #[test]
    fn managed_fields_are_cut_in_every_position() {
        let mf = r#""managedFields":[{"manager":"x","fieldsV1":{"f:a":{}}}]"#;
        let cases = [
            (
                format!(r#"{{"metadata":{{{mf},"name":"a","resourceVersion":"1"}},"x":1}}"#),
                r#"{"metadata":{"name":"a","resourceVersion":"1"},"x":1}"#,
            ),
            (
                format!(r#"{{"metadata":{{"name":"a",{mf},"resourceVersion":"1"}},"x":1}}"#),
                r#"{"metadata":{"name":"a","resourceVersion":"1"},"x":1}"#,
            ),
            (
                format!(r#"{{"metadata":{{"name":"a","resourceVersion":"1",{mf}}},"x":1}}"#),
                r#"{"metadata":{"name":"a","resourceVersion":"1"},"x":1}"#,
            ),
            (
                format!(r#"{{"metadata":{{{mf}}},"x":1}}"#),
                r#"{"metadata":{},"x":1}"#,
            ),
            (
                format!("{{\"metadata\": {{\n  \"name\": \"a\",\n  {mf},\n  \"resourceVersion\": \"1\"\n}}}}"),
                "{\"metadata\": {\n  \"name\": \"a\",\n  \"resourceVersion\": \"1\"\n}}",
            ),
        ];
        for (input, want) in cases {
            let o = ingest(&input);
            assert_eq!(o.as_str(), want, "input {input}");
            serde_json::from_slice::<serde_json::Value>(o.raw()).unwrap();
            if !want.contains("{}") {
                assert_eq!(o.name(), "a");
                assert_eq!(o.resource_version(), "1");
            }
            let kept = Object::ingest(
                input.as_bytes(),
                &IngestOptions {
                    keep_managed_fields: true,
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(kept.as_str(), input);
        }
    }

    /// Dropped `managedFields` are found by their brackets and strings only (none of their bytes
    /// is stored); kept ones are checked like the rest. Either way the stored text is valid.
    #[test]
    fn dropped_managed_fields_are_skipped_unchecked_and_kept_ones_checked() {
        let kept = IngestOptions {
            keep_managed_fields: true,
            ..Default::default()
        };
        // Brackets and quotes inside strings, escapes, and text no scan of the rest accepts.
        let odd = [
            br#"[{"f:]}":"\"]\\","x":[{}]}]"#.to_vec(),
            b"[{\"m\":\"\xff\xfe\",\"t\":01}]".to_vec(),
            br#"[{"m" "no colon"}]"#.to_vec(),
        ];
        for mf in &odd {
            let mut input = br#"{"metadata":{"name":"a","managedFields":"#.to_vec();
            input.extend_from_slice(mf);
            input.extend_from_slice(br#","resourceVersion":"7"},"x":[1]}"#);
            let o = Object::ingest(&input, &IngestOptions::default()).unwrap();
            assert_eq!(
                o.as_str(),
                r#"{"metadata":{"name":"a","resourceVersion":"7"},"x":[1]}"#
            );
            assert_eq!(o.resource_version(), "7");
            let checked = Object::ingest(&input, &kept);
            assert_eq!(
                checked.is_ok(),
                mf == &odd[0],
                "{:?}",
                String::from_utf8_lossy(mf)
            );
        }
        // Unterminated: an error whether dropped or kept.
        let cut = br#"{"metadata":{"name":"a","managedFields":[{"m":"x"}"#;
        assert!(Object::ingest(cut, &IngestOptions::default()).is_err());
        assert!(Object::ingest(cut, &kept).is_err());
        // What follows the skipped value is checked as before.
        let after = br#"{"metadata":{"managedFields":[],"name":"a" "x"}}"#;
        assert!(Object::ingest(after, &IngestOptions::default()).is_err());
    }

    #[test]
    fn type_meta_is_added_to_list_items_and_spans_follow() {
        let item = br#"{ "metadata":{"name":"a","managedFields":[],"labels":{"k":"v"}},"data":{}}"#;
        let o = Object::ingest_typed(item, &IngestOptions::default(), Some(("ConfigMap", "v1")))
            .unwrap();
        assert_eq!(
            o.as_str(),
            r#"{"kind":"ConfigMap","apiVersion":"v1", "metadata":{"name":"a","labels":{"k":"v"}},"data":{}}"#
        );
        assert_eq!(o.name(), "a");
        assert_eq!(o.meta().label("k"), Some("v"));
        let empty =
            Object::ingest_typed(b"{}", &IngestOptions::default(), Some(("A", "v1"))).unwrap();
        assert_eq!(empty.as_str(), r#"{"kind":"A","apiVersion":"v1"}"#);
    }

    #[test]
    fn hand_built_meta_for_tests_of_metadata_readers() {
        let labels = [("app", "web"), ("tier", "x")];
        let m = Meta {
            name: "a",
            namespace: Some("ns"),
            labels: StrPairs::from(&labels[..]),
            ..Default::default()
        };
        assert_eq!(m.label("tier"), Some("x"));
        assert_eq!(m.labels.iter().len(), 2);
        let parsed = ingest(
            r#"{"metadata":{"name":"a","namespace":"ns","labels":{"app":"web","tier":"x"}}}"#,
        );
        assert_eq!(parsed.meta(), m);
    }

    #[test]
    fn escaped_strings_are_decoded() {
        let o = ingest(
            r#"{"metadata":{"name":"a","annotations":{"last-applied":"{\"a\":\"\u00e9\\n\"}","b":"c"}}}"#,
        );
        assert_eq!(
            o.meta().annotation("last-applied"),
            Some("{\"a\":\"é\\n\"}")
        );
        assert_eq!(o.meta().annotation("b"), Some("c"));
    }

    #[test]
    fn reads_every_metadata_field() {
        let o = ingest(
            r#"{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"rs","namespace":"",
            "generation":7,"deletionTimestamp":"2026-01-01T00:00:00Z","labels":null,
            "annotations":{"a":"1","b":"2"},"finalizers":["f1","f2"],
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"u",
              "controller":true,"blockOwnerDeletion":true,"extra":[1,2]}]},"spec":{"replicas":3}}"#,
        );
        let m = o.meta();
        assert_eq!(m.namespace, None);
        assert_eq!(o.key(), "rs");
        assert_eq!(m.generation, 7);
        assert_eq!(m.deletion_timestamp, Some("2026-01-01T00:00:00Z"));
        assert_eq!(m.labels.len(), 0);
        assert!(m.labels.is_empty());
        assert_eq!(
            m.annotations.iter().collect::<Vec<_>>(),
            [("a", "1"), ("b", "2")]
        );
        assert_eq!(m.finalizers.iter().collect::<Vec<_>>(), ["f1", "f2"]);
        assert!(m.finalizers.contains("f2"));
        assert_eq!(m.owner_references.len(), 1);
        for o in &m.owner_references {
            assert_eq!(o.api_version, "apps/v1");
        }
        let c = m.controller_ref().unwrap();
        assert_eq!((c.kind, c.name, c.uid), ("Deployment", "d", "u"));
        assert_eq!(c.block_owner_deletion, Some(true));
    }

    #[test]
    fn malformed_objects_are_errors_not_panics() {
        let bad: &[&[u8]] = &[
            b"",
            b"{",
            b"[]",
            b"{\"metadata\":{\"name\":\"a\"}",
            b"{\"metadata\":{\"name\":1}}",
            b"{\"metadata\":{\"labels\":{\"a\":2}}}",
            b"{\"a\":tru}",
            b"{\"a\":\"\\x\"}",
            b"{\"a\":1,}",
            b"{\"a\" 1}",
            b"{\"a\":1} x",
            b"{\"a\":\"\xff\"}",
            b"{\"a\":[1,2}",
            b"{\"a\":\"ctrl\x01\"}",
        ];
        for b in bad {
            assert!(
                Object::ingest(b, &IngestOptions::default()).is_err(),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
        let deep = "[".repeat(100_000);
        let s = format!("{{\"a\":{deep}}}");
        assert!(Object::ingest(s.as_bytes(), &IngestOptions::default()).is_err());
    }

    #[test]
    fn agrees_with_serde_on_samples() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/apiserver-samples"
        );
        let raw = std::fs::read(format!("{dir}/list-rv0-from-watch-cache.json")).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        for item in v["items"].as_array().unwrap() {
            let text = serde_json::to_vec(item).unwrap();
            let o = Object::ingest(&text, &IngestOptions::default()).unwrap();
            assert_eq!(o.name(), item["metadata"]["name"].as_str().unwrap());
            assert_eq!(o.uid(), item["metadata"]["uid"].as_str().unwrap());
            let mut want = item.clone();
            want["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            assert_eq!(o.to_value().unwrap(), want);
        }
    }

    #[test]
    fn a_cached_1kb_configmap_costs_at_most_1_3x_its_json() {
        let data = "x".repeat(700);
        let s = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-00001","namespace":"default","uid":"2a6dfd23-2d8f-4131-b9ff-d69724746289","resourceVersion":"123456","creationTimestamp":"2026-11-22T03:04:17Z","labels":{{"app":"bench","tier":"x"}}}},"data":{{"k":"{data}"}}}}"#
        );
        assert!(s.len() > 900 && s.len() < 1100, "{}", s.len());
        let o = ingest(&s);
        let ratio = o.heap_size() as f64 / s.len() as f64;
        assert!(ratio <= 1.3, "ratio {ratio}");
        assert!(std::mem::size_of::<ParsedMeta>() <= 64);
        assert_eq!(std::mem::size_of::<Object>(), 8);
    }

    /// Random objects (seeded): metadata read by the scanner agrees with serde, the cut
    /// output is the same document minus managedFields, and every truncation is an error.
    #[test]
    fn randomised_objects_agree_with_serde() {
        use rand::{Rng, SeedableRng};
        use serde_json::{json, Value};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let words = [
            "a",
            "b/c",
            "é",
            "q\"uote",
            "back\\slash",
            "tab\t",
            "{x}",
            "😀",
            "\u{1}",
        ];
        fn value(rng: &mut rand::rngs::StdRng, depth: u32, words: &[&str]) -> Value {
            match rng.gen_range(0..if depth > 3 { 4 } else { 6 }) {
                0 => Value::Null,
                1 => json!(rng.gen::<bool>()),
                2 => json!(rng.gen_range(-1e6..1e6)),
                3 => json!(words[rng.gen_range(0..words.len())]),
                4 => Value::Array(
                    (0..rng.gen_range(0..4))
                        .map(|_| value(rng, depth + 1, words))
                        .collect(),
                ),
                _ => Value::Object(
                    (0..rng.gen_range(0..4))
                        .map(|i| (format!("k{i}"), value(rng, depth + 1, words)))
                        .collect(),
                ),
            }
        }
        for round in 0..crate::test_rounds(300) {
            let w = |rng: &mut rand::rngs::StdRng| words[rng.gen_range(0..words.len())].to_owned();
            let mut fields: Vec<(&str, Value)> = vec![
                ("name", json!(format!("n{round}{}", w(&mut rng)))),
                ("namespace", json!(w(&mut rng))),
                ("resourceVersion", json!(round.to_string())),
                ("generation", json!(rng.gen_range(0..100))),
                ("labels", json!({ w(&mut rng): w(&mut rng), "fixed": "v" })),
                ("annotations", json!({ "a": w(&mut rng) })),
                (
                    "managedFields",
                    json!([{"manager": w(&mut rng), "fieldsV1": value(&mut rng, 0, &words)}]),
                ),
                ("other", value(&mut rng, 0, &words)),
            ];
            // Shuffle member order so managedFields lands first, in the middle and last
            // (serde_json's map would sort the keys, so the text is assembled by hand).
            for i in (1..fields.len()).rev() {
                fields.swap(i, rng.gen_range(0..=i));
            }
            let pretty = round % 2 == 1;
            let members: Vec<String> = fields
                .iter()
                .map(|(k, v)| {
                    let v = if pretty {
                        serde_json::to_string_pretty(v).unwrap()
                    } else {
                        v.to_string()
                    };
                    if pretty {
                        format!("\n    {k:?}: {v}")
                    } else {
                        format!("{k:?}:{v}")
                    }
                })
                .collect();
            let spec = value(&mut rng, 0, &words);
            let text = format!(
                "{{\"kind\":\"X\",\"metadata\":{{{}}},\"spec\":{spec}}}",
                members.join(",")
            );
            let doc: Value = serde_json::from_str(&text).unwrap();
            let o = ingest(&text);
            let m = o.meta();
            let dm = &doc["metadata"];
            assert_eq!(o.name(), dm["name"].as_str().unwrap());
            assert_eq!(
                m.namespace,
                dm["namespace"].as_str().filter(|n| !n.is_empty())
            );
            assert_eq!(
                o.resource_version(),
                dm["resourceVersion"].as_str().unwrap()
            );
            assert_eq!(m.generation, dm["generation"].as_i64().unwrap());
            let (lk, lv) = dm["labels"].as_object().unwrap().iter().next().unwrap();
            assert_eq!(m.label(lk), lv.as_str());
            assert_eq!(m.annotation("a"), dm["annotations"]["a"].as_str());
            let mut want = doc.clone();
            want["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            assert_eq!(o.to_value().unwrap(), want, "round {round}: {}", o.as_str());
            if round % 10 == 0 {
                let bytes = text.as_bytes();
                for cut in 0..bytes.len() {
                    assert!(
                        Object::ingest(&bytes[..cut], &IngestOptions::default()).is_err(),
                        "truncated at {cut} accepted"
                    );
                }
            }
        }
    }
}
