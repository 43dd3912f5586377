//! Decoding of response bodies: LIST pages (spec 6.2) and `Status` errors (spec 6.5).
//!
//! Why a streaming LIST decoder: a LIST body is the initial sync's (and a relist's) bulk.
//! Reading it whole before decoding made the old cache, the entire body (`managedFields`
//! included) and the new objects coexist. [`ListDecoder`] instead takes each item in as soon
//! as its last byte arrives, copying it into its own allocation with `managedFields` cut, and
//! drops the consumed bytes, so only the unfinished tail of the body is buffered.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

use super::error::{Error, Status, StatusDetails};
use super::json::{self, Scanner, ValueEnd};
use super::object::{IngestOptions, Meta, Object};
use super::resource_version;
use super::watch::ObjectList;

/// Objects a caller already holds, by store key (`namespace/name` or `name`, spec 3.1).
///
/// Why: a relist after an expired watch mostly returns objects the informer already caches,
/// byte for byte. A decoder given a pool hands back the held object for every item of the
/// same version ([`Object::is_version`]) instead of a second copy, so a relist does not
/// double the cache's memory for objects that did not change.
pub trait ObjectPool: Send + Sync {
    fn get(&self, key: &str) -> Option<Object>;
}

/// Decode a complete LIST response held in memory (the streaming decoder fed one chunk).
pub fn decode_list(body: &[u8], opts: &IngestOptions) -> Result<ObjectList, Error> {
    let mut d = ListDecoder::new(*opts);
    d.push(body)?;
    d.finish()
}

/// Which top-level member of the list the decoder is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Kind,
    ApiVersion,
    Metadata,
    Items,
    Other,
}

/// What one step of the list decoder did.
enum Step {
    /// Moved on: step again.
    Again,
    /// Needs more bytes (or the list is done).
    NeedMore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `{`.
    Start,
    /// After `{`: a key or `}`.
    FirstKey,
    /// After `,`: a key.
    Key,
    /// Inside a key's string.
    InKey,
    /// After a key: `:`.
    Colon(Member),
    /// Before a member's value.
    Value(Member),
    /// Inside a member's value (not `items`).
    InValue(Member),
    /// After a member: `,` or `}`.
    AfterMember,
    /// After `[` of `items`: an item or `]`.
    FirstItem,
    /// After `,` in `items`: an item.
    Item,
    /// Inside an item.
    InItem,
    /// After an item: `,` or `]`.
    AfterItem,
    /// After the closing `}`: only whitespace may follow.
    Done,
}

/// Incremental decoder of a LIST body: feed chunks with [`push`](Self::push) as they arrive
/// and call [`finish`](Self::finish) at the end of the body. Items get the `kind` and
/// `apiVersion` that the server leaves out of list items (the list's kind without `List`), as
/// client-go's dynamic client does, so that objects from a LIST and from a WATCH look alike.
/// Members may come in any order; items that arrive before `kind` are kept raw and taken in
/// at the end, once the kind is known.
#[derive(Debug)]
pub struct ListDecoder {
    /// The start of a value that the last chunk left unfinished (empty between values).
    buf: BytesMut,
    opts: IngestOptions,
    state: State,
    /// End-of-value search for the key, value or item at the start of the undecoded bytes.
    value: ValueEnd,
    /// How far that search has got, from that value's start.
    scanned: usize,
    list: ObjectList,
    kind: Option<String>,
    api_version: Option<String>,
    deferred: Vec<Bytes>,
    /// Bytes decoded so far, for error messages.
    consumed: u64,
    /// Held objects that items of the same version are replaced with.
    pool: Option<Arc<dyn ObjectPool>>,
    /// Scratch for pool keys (no allocation per item).
    key: String,
    /// The largest key, item or member value buffered or taken in.
    max_value: usize,
}

impl std::fmt::Debug for dyn ObjectPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectPool")
    }
}

impl ListDecoder {
    pub fn new(opts: IngestOptions) -> Self {
        ListDecoder {
            buf: BytesMut::new(),
            opts,
            state: State::Start,
            value: ValueEnd::default(),
            scanned: 0,
            list: ObjectList::default(),
            kind: None,
            api_version: None,
            deferred: Vec::new(),
            consumed: 0,
            pool: None,
            key: String::new(),
            max_value: opts.max_object_bytes,
        }
    }

    /// Limit the size of one item, key or member value (default: the ingest options'
    /// `max_object_bytes`). Why: the body is decoded as it arrives, but a value still arriving
    /// is buffered whole; without a bound a server could make it any size.
    pub fn with_max_value_bytes(mut self, max: usize) -> Self {
        self.max_value = max;
        self
    }

    /// A decoder that returns `pool`'s object for every item of the same version.
    pub fn with_pool(opts: IngestOptions, pool: Arc<dyn ObjectPool>) -> Self {
        ListDecoder {
            pool: Some(pool),
            ..Self::new(opts)
        }
    }

    /// Append bytes read from the body and take in every item they complete. After an error
    /// the decoder is unusable.
    ///
    /// Why not simply append and decode the buffer: that copied every byte of the body once
    /// more before each item's own copy (a LIST body is the sync's bulk). The chunk is decoded
    /// where it lies; only a value it leaves unfinished is copied, to be completed by the
    /// next chunk.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<(), Error> {
        if !self.buf.is_empty() {
            // The buffer holds the start of an unfinished value (a run stops with bytes left
            // only inside one): copy just the rest of that value, when this chunk ends it.
            let take = match self.state {
                State::InKey | State::InValue(_) | State::InItem => {
                    let mut probe = self.value.clone();
                    probe.resume(chunk, 0).unwrap_or(chunk.len())
                }
                _ => chunk.len(),
            };
            self.buf.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            self.run_buffered()?;
            if !self.buf.is_empty() {
                // This chunk did not end it either.
                self.buf.extend_from_slice(chunk);
                return self.run_buffered();
            }
        }
        let used = self.run(chunk)?;
        self.buf.extend_from_slice(&chunk[used..]);
        Ok(())
    }

    /// Decode what the buffer completes, keeping the rest.
    fn run_buffered(&mut self) -> Result<(), Error> {
        let mut buf = std::mem::take(&mut self.buf);
        let used = self.run(&buf)?;
        buf.advance(used);
        self.buf = buf;
        Ok(())
    }

    /// End of the body: the list, or an error if the body was truncated.
    pub fn finish(mut self) -> Result<ObjectList, Error> {
        if self.state != State::Done {
            return Err(self.error(format!(
                "body ended inside the list ({} bytes unconsumed)",
                self.buf.len()
            )));
        }
        // Something else answered in a list's place (a Table, a Status): decoding it as a
        // list without items would make a relist delete every cached object.
        if let Some(kind) = self.kind.as_deref().filter(|k| !k.ends_with("List")) {
            return Err(self.error(format!("expected a list, got kind {kind:?}")));
        }
        let (kind, api_version) = (self.kind.clone(), self.api_version.clone());
        let type_meta = item_type(kind.as_deref(), api_version.as_deref());
        for raw in std::mem::take(&mut self.deferred) {
            let mut sc = Scanner::new(&raw);
            let o = Object::ingest_from_reusing(&mut sc, &self.opts, type_meta, &mut |m| {
                held(self.pool.as_deref(), &mut self.key, m)
            })
            .map_err(|e| self.error(format!("item {}: {e}", self.list.items.len())))?;
            self.push_item(o)?;
        }
        Ok(self.list)
    }

    fn error(&self, message: String) -> Error {
        Error::Decode(format!(
            "list response (body byte {}): {message}",
            self.consumed
        ))
    }

    /// Drop `n` decoded bytes from the front of `data` (the bytes not yet decoded).
    fn advance(&mut self, data: &mut &[u8], n: usize) {
        self.consumed += n as u64;
        *data = &data[n..];
        self.scanned = 0;
    }

    /// The next non-whitespace byte, dropping the whitespace before it.
    fn next_byte(&mut self, data: &mut &[u8]) -> Option<u8> {
        let i = json::skip_ws(data, 0);
        self.advance(data, i);
        data.first().copied()
    }

    /// Resume the end-of-value search for the value at the start of `data`. A value longer
    /// than the bound is an error whether it ended or is still arriving, so that the outcome
    /// does not depend on how the body is cut into reads.
    fn value_end(&mut self, data: &[u8]) -> Result<Option<usize>, Error> {
        match self.value.resume(data, self.scanned.max(1)) {
            Ok(end) if end > self.max_value => Err(self.too_large()),
            Ok(end) => Ok(Some(end)),
            Err(_) if data.len() > self.max_value => Err(self.too_large()),
            Err(scanned) => {
                self.scanned = scanned;
                Ok(None)
            }
        }
    }

    fn too_large(&self) -> Error {
        let what = match self.state {
            State::InItem | State::FirstItem | State::Item => "an item",
            State::InKey => "a key",
            _ => "a member's value",
        };
        self.error(format!("{what} larger than {} bytes", self.max_value))
    }

    /// An item taken in: its resourceVersion checked as a watch event's is (the same rules
    /// on both paths).
    fn push_item(&mut self, o: Object) -> Result<(), Error> {
        resource_version::check(o.resource_version())
            .map_err(|e| self.error(format!("item {}: {e}", self.list.items.len())))?;
        self.list.items.push(o);
        Ok(())
    }

    fn expect<T>(&self, c: u8, what: &str) -> Result<T, Error> {
        Err(self.error(format!("expected {what}, found {:?}", char::from(c))))
    }

    /// Decode what `data` completes; how many of its bytes were used (the rest, if any, is the
    /// start of an unfinished value).
    fn run(&mut self, whole: &[u8]) -> Result<usize, Error> {
        let mut data = whole;
        loop {
            let step = match self.state {
                State::FirstItem | State::Item | State::InItem | State::AfterItem => {
                    self.item_step(&mut data)?
                }
                _ => self.list_step(&mut data)?,
            };
            if let Step::NeedMore = step {
                return Ok(whole.len() - data.len());
            }
        }
    }

    /// One step through the list object's own members (all but the items).
    #[inline]
    fn list_step(&mut self, data: &mut &[u8]) -> Result<Step, Error> {
        match self.state {
            State::Start => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                if c != b'{' {
                    return self.expect(c, "'{' at the start of the list");
                }
                self.advance(data, 1);
                self.state = State::FirstKey;
            }
            State::FirstKey | State::Key => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                match c {
                    b'}' if self.state == State::FirstKey => {
                        self.advance(data, 1);
                        self.state = State::Done;
                    }
                    b'"' => {
                        self.value = ValueEnd::begin(c);
                        self.state = State::InKey;
                    }
                    _ => return self.expect(c, "a key"),
                }
            }
            State::InKey => {
                let Some(end) = self.value_end(data)? else {
                    return Ok(Step::NeedMore);
                };
                let mut sc = Scanner::new(&data[..end]);
                let (a, b, _) = sc.string().map_err(|e| self.error(format!("key: {e}")))?;
                let member = match &data[a..b] {
                    b"kind" => Member::Kind,
                    b"apiVersion" => Member::ApiVersion,
                    b"metadata" => Member::Metadata,
                    b"items" => Member::Items,
                    _ => Member::Other,
                };
                self.advance(data, end);
                self.state = State::Colon(member);
            }
            State::Colon(m) => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                if c != b':' {
                    return self.expect(c, "':' after a key");
                }
                self.advance(data, 1);
                self.state = State::Value(m);
            }
            State::Value(m) => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                if m == Member::Items && c == b'[' {
                    self.advance(data, 1);
                    self.state = State::FirstItem;
                    return Ok(Step::Again);
                }
                if m == Member::Items && c != b'n' {
                    return self.expect(c, "an array of items");
                }
                self.value = ValueEnd::begin(c);
                self.state = State::InValue(m);
            }
            State::InValue(m) => {
                let Some(end) = self.value_end(data)? else {
                    return Ok(Step::NeedMore);
                };
                self.member(&data[..end], m)?;
                self.advance(data, end);
                self.state = State::AfterMember;
            }
            State::AfterMember => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                self.state = match c {
                    b',' => State::Key,
                    b'}' => State::Done,
                    _ => return self.expect(c, "',' or '}' after a member"),
                };
                self.advance(data, 1);
            }
            State::Done => {
                let i = json::skip_ws(data, 0);
                if i < data.len() {
                    let c = data[i];
                    return self.expect(c, "nothing after the list");
                }
                self.advance(data, i);
                return Ok(Step::NeedMore);
            }
            _ => unreachable!("list_step is called outside the items only"),
        }
        Ok(Step::Again)
    }

    /// One step through the items array.
    #[inline]
    fn item_step(&mut self, data: &mut &[u8]) -> Result<Step, Error> {
        match self.state {
            State::FirstItem | State::Item => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                if c == b']' && self.state == State::FirstItem {
                    self.advance(data, 1);
                    self.state = State::AfterMember;
                    return Ok(Step::Again);
                }
                if c != b'{' {
                    return self.expect(c, "an object in items");
                }
                if let Some(end) = self.item_in_place(data)? {
                    self.advance(data, end);
                    self.state = State::AfterItem;
                    return Ok(Step::Again);
                }
                self.value = ValueEnd::begin(c);
                self.state = State::InItem;
            }
            State::InItem => {
                let Some(end) = self.value_end(data)? else {
                    return Ok(Step::NeedMore);
                };
                self.item(&data[..end])?;
                self.advance(data, end);
                self.state = State::AfterItem;
            }
            State::AfterItem => {
                let Some(c) = self.next_byte(data) else {
                    return Ok(Step::NeedMore);
                };
                self.state = match c {
                    b',' => State::Item,
                    b']' => State::AfterMember,
                    _ => return self.expect(c, "',' or ']' after an item"),
                };
                self.advance(data, 1);
            }
            _ => unreachable!("item_step is called inside the items only"),
        }
        Ok(Step::Again)
    }

    /// The complete value `raw` of a member other than `items` (or `items: null`).
    fn member(&mut self, raw: &[u8], m: Member) -> Result<(), Error> {
        let text = std::str::from_utf8(raw)
            .map_err(|e| self.error(format!("not UTF-8 at byte {}", e.valid_up_to())))?;
        match m {
            Member::Kind | Member::ApiVersion => {
                let mut sc = Scanner::new(raw);
                let (a, b, escaped) = sc
                    .string()
                    .map_err(|e| self.error(format!("kind or apiVersion: {e}")))?;
                if escaped {
                    return Err(self.error("unexpected escape in kind or apiVersion".into()));
                }
                let v = Some(text[a..b].to_owned());
                if m == Member::Kind {
                    self.kind = v;
                } else {
                    self.api_version = v;
                }
            }
            Member::Metadata => {
                let meta = serde_json::from_str::<ListMeta>(text)
                    .map_err(|e| self.error(format!("list metadata: {e}")))?;
                // The list's RV becomes the reflector's, sent back with the next watch.
                resource_version::check(meta.resource_version.as_deref().unwrap_or(""))
                    .map_err(|e| self.error(format!("list metadata: {e}")))?;
                self.list.resource_version = meta.resource_version.unwrap_or_default();
                self.list.continue_token = meta.continue_.filter(|c| !c.is_empty());
                self.list.remaining_item_count = meta.remaining_item_count;
            }
            Member::Items | Member::Other => {
                let mut sc = Scanner::new(raw);
                let r = sc.skip_value().and_then(|_| sc.end());
                if let Err(e) = r {
                    return Err(self.error(format!("{e}")));
                }
                if m == Member::Items && raw != b"null" {
                    return Err(self.error("items is neither an array nor null".into()));
                }
            }
        }
        Ok(())
    }

    /// The item at the start of `data` taken in with one scan, when `data` already holds all of
    /// it (the usual case: a read brings many items); its end. `None` when it does not, when
    /// the kind is not known yet, or when the scan fails: then the end search runs first and the
    /// item is scanned once it is complete ([`item`](Self::item)), so a malformed item is
    /// reported as before. Why: the end search walks every byte of the item a second time (a
    /// third of a 1 KB item's decoding), and an item the buffer holds needs no search.
    fn item_in_place(&mut self, data: &[u8]) -> Result<Option<usize>, Error> {
        let type_meta = item_type(self.kind.as_deref(), self.api_version.as_deref());
        if self.kind.is_none() {
            return Ok(None);
        }
        let mut sc = Scanner::new(data);
        let (pool, key) = (self.pool.as_deref(), &mut self.key);
        let Ok(o) = Object::ingest_from_reusing(&mut sc, &self.opts, type_meta, &mut |m| {
            held(pool, key, m)
        }) else {
            return Ok(None);
        };
        if sc.pos() > self.max_value {
            return Err(self.too_large());
        }
        self.push_item(o)?;
        Ok(Some(sc.pos()))
    }

    /// The complete item `raw`: taken in now, or kept raw until `kind` is known.
    fn item(&mut self, raw: &[u8]) -> Result<(), Error> {
        // Not checked as UTF-8 here: the scan that takes it in checks it on the way.
        if self.kind.is_none() {
            self.deferred.push(Bytes::copy_from_slice(raw));
            return Ok(());
        }
        let type_meta = item_type(self.kind.as_deref(), self.api_version.as_deref());
        let mut sc = Scanner::new(raw);
        let (pool, key) = (self.pool.as_deref(), &mut self.key);
        let o = Object::ingest_from_reusing(&mut sc, &self.opts, type_meta, &mut |m| {
            held(pool, key, m)
        })
        .and_then(|o| sc.end().map(|_| o).map_err(Into::into))
        .map_err(|e| self.error(format!("item {}: {e}", self.list.items.len())))?;
        self.push_item(o)
    }
}

/// The pool's object for the item `m` describes, if it is the same version.
fn held(pool: Option<&dyn ObjectPool>, key: &mut String, m: &Meta<'_>) -> Option<Object> {
    let pool = pool?;
    key.clear();
    if let Some(ns) = m.namespace {
        key.push_str(ns);
        key.push('/');
    }
    key.push_str(m.name);
    pool.get(key).filter(|o| o.is_version(m))
}

fn item_type<'a>(
    kind: Option<&'a str>,
    api_version: Option<&'a str>,
) -> Option<(&'a str, &'a str)> {
    let item_kind = kind?.strip_suffix("List").filter(|k| !k.is_empty())?;
    Some((item_kind, api_version?))
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
    #[serde(default)]
    remaining_item_count: Option<i64>,
}

/// Turn a non-2xx response into the error callers branch on: the server's own Status when the
/// body is one, otherwise a Status synthesised from the HTTP code (as client-go does for
/// proxies and load balancers that answer with HTML or plain text).
pub fn error_from_response(code: u16, retry_after: Option<&str>, body: &[u8]) -> Error {
    Error::Api(Box::new(status_from_response(code, retry_after, body)))
}

/// See [`error_from_response`].
pub fn status_from_response(code: u16, retry_after: Option<&str>, body: &[u8]) -> Status {
    if let Ok(mut s) = serde_json::from_slice::<Status>(body) {
        if s.kind == "Status" {
            if s.code == 0 {
                s.code = code;
            }
            return s;
        }
    }
    let reason = reason_for_code(code);
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!(
            "the server responded with the status code {code} but did not return more information"
        )
    } else {
        let mut t: String = text.chars().take(512).collect();
        if t.len() < text.len() {
            t.push('…');
        }
        format!("the server responded with the status code {code}: {t}")
    };
    let mut s = Status::failure(code, reason, message);
    let retry = retry_after.and_then(|r| r.trim().parse::<u32>().ok());
    if retry.is_some() && matches!(code, 429 | 503 | 504) {
        s.details = Some(StatusDetails {
            retry_after_seconds: retry,
            ..Default::default()
        });
    }
    s
}

/// The `reason` the API server would use for an HTTP code.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/apiserver-samples"
    );

    fn read(name: &str) -> Vec<u8> {
        std::fs::read(format!("{DIR}/{name}")).unwrap()
    }

    #[test]
    fn decodes_paginated_list_samples_spec_6_2() {
        let p1 = decode_list(&read("list-page1.json"), &IngestOptions::default()).unwrap();
        assert_eq!(p1.resource_version, "50478");
        assert_eq!(p1.remaining_item_count, Some(3));
        assert!(p1
            .continue_token
            .as_deref()
            .unwrap()
            .starts_with("eyJ2Ijoi"));
        let names: Vec<_> = p1.items.iter().map(|o| o.name().to_owned()).collect();
        assert_eq!(names, ["pre-1", "pre-2"]);
        let first = p1.items[0].to_value().unwrap();
        assert_eq!(first["kind"], "ConfigMap");
        assert_eq!(first["apiVersion"], "v1");
        assert!(first["metadata"].get("managedFields").is_none());
        assert_eq!(first["data"]["k"], "v1");
        assert_eq!(p1.items[0].namespace(), Some("samples"));

        let p3 = decode_list(&read("list-page3.json"), &IngestOptions::default()).unwrap();
        assert_eq!(p3.continue_token, None);
        assert_eq!(p3.remaining_item_count, None);
        assert_eq!(p3.items.len(), 1);
        let all = decode_list(
            &read("list-rv0-from-watch-cache.json"),
            &IngestOptions::default(),
        )
        .unwrap();
        assert_eq!(all.items.len(), 5);
    }

    #[test]
    fn every_list_sample_decodes_like_serde() {
        for name in LIST_SAMPLES {
            let raw = read(name);
            let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
            let keep = IngestOptions {
                keep_managed_fields: true,
                ..Default::default()
            };
            let list = decode_list(&raw, &keep).unwrap();
            let items = v["items"].as_array().unwrap();
            assert_eq!(list.items.len(), items.len(), "{name}");
            for (o, want) in list.items.iter().zip(items) {
                let mut got = o.to_value().unwrap();
                let obj = got.as_object_mut().unwrap();
                assert_eq!(obj.remove("kind").unwrap(), "ConfigMap");
                assert_eq!(obj.remove("apiVersion").unwrap(), "v1");
                assert_eq!(&got, want, "{name}");
            }
        }
    }

    #[test]
    fn items_before_kind_and_bad_items() {
        let body = br#"{"items":[{"metadata":{"name":"a"}}],"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"}}"#;
        let l = decode_list(body, &IngestOptions::default()).unwrap();
        assert_eq!(l.resource_version, "7");
        assert_eq!(l.items[0].to_value().unwrap()["kind"], "Pod");
        for bad in [
            &br#"{"kind":"PodList","items":[{"metadata":{"name":1}}]}"#[..],
            br#"{"kind":"PodList","items":[{"metadata":{"name":"a"}}"#,
            br#"{"kind":"PodList","items":[1]}"#,
            b"<html>",
        ] {
            let e = decode_list(bad, &IngestOptions::default()).unwrap_err();
            assert!(matches!(e, Error::Decode(_)), "{e}");
        }
    }

    const LIST_SAMPLES: [&str; 5] = [
        "list-page1.json",
        "list-page2.json",
        "list-page3.json",
        "list-before-compaction-page1.json",
        "list-rv0-from-watch-cache.json",
    ];

    /// Everything an `ObjectList` carries, comparable.
    fn summary(l: &ObjectList) -> (String, Option<String>, Option<i64>, Vec<Bytes>) {
        (
            l.resource_version.clone(),
            l.continue_token.clone(),
            l.remaining_item_count,
            l.items.iter().map(|o| o.raw_bytes()).collect(),
        )
    }

    fn decode_chunks(chunks: &[&[u8]], opts: &IngestOptions) -> Result<ObjectList, Error> {
        let mut d = ListDecoder::new(*opts);
        for c in chunks {
            d.push(c)?;
        }
        d.finish()
    }

    #[test]
    fn every_chunk_boundary_of_every_list_sample_spec_6_2() {
        for keep in [false, true] {
            let opts = IngestOptions {
                keep_managed_fields: keep,
                ..Default::default()
            };
            for name in LIST_SAMPLES {
                let raw = read(name);
                let want = summary(&decode_list(&raw, &opts).unwrap());
                assert!(!want.3.is_empty(), "{name}");
                for cut in 0..=raw.len() {
                    let (a, b) = raw.split_at(cut);
                    let got = decode_chunks(&[a, b], &opts).unwrap();
                    assert_eq!(summary(&got), want, "{name} split at {cut}");
                }
                let bytes: Vec<&[u8]> = raw.chunks(1).collect();
                assert_eq!(summary(&decode_chunks(&bytes, &opts).unwrap()), want);
            }
        }
    }

    /// Bodies arrive in chunks of any size: an item, key or member value may begin in one chunk
    /// and end several chunks later, or a chunk may end right after one. Each chunk is decoded
    /// where it lies and only an unfinished value is buffered, which must not change the list.
    #[test]
    fn chunks_of_every_size_decode_alike_spec_6_2() {
        let opts = IngestOptions::default();
        for name in LIST_SAMPLES {
            let raw = read(name);
            let want = summary(&decode_list(&raw, &opts).unwrap());
            for size in (2..=97).chain([128, 500, 1000, 4096]) {
                // And with the first chunk shorter, so that boundaries fall elsewhere.
                for skew in [0, size / 2] {
                    let (head, rest) = raw.split_at(skew.min(raw.len()));
                    let mut chunks = vec![head];
                    chunks.extend(rest.chunks(size));
                    let got = decode_chunks(&chunks, &opts).unwrap_or_else(|e| {
                        panic!("{name} in chunks of {size} (skew {skew}): {e}")
                    });
                    assert_eq!(
                        summary(&got),
                        want,
                        "{name} in chunks of {size} (skew {skew})"
                    );
                }
            }
        }
    }

    #[test]
    fn truncated_list_bodies_are_decode_errors_spec_6_2() {
        for name in LIST_SAMPLES {
            let raw = read(name);
            // Every prefix that stops before the closing brace is incomplete.
            let close = raw.iter().rposition(|&c| c == b'}').unwrap();
            for cut in 0..=close {
                let e = decode_chunks(&[&raw[..cut]], &IngestOptions::default()).unwrap_err();
                assert!(matches!(e, Error::Decode(_)), "{name} cut at {cut}: {e}");
            }
        }
    }

    struct Pool(std::collections::HashMap<String, Object>);

    impl ObjectPool for Pool {
        fn get(&self, key: &str) -> Option<Object> {
            self.0.get(key).cloned()
        }
    }

    /// A relist decoded with a pool gets the held object for items of the same namespace,
    /// name, uid and resourceVersion, and a new object for anything else; items that come
    /// before `kind` (taken in at the end) too.
    #[test]
    fn items_of_the_same_version_come_back_as_the_held_objects() {
        let item = |name: &str, uid: &str, rv: &str| {
            format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"{uid}","resourceVersion":"{rv}"}},"data":{{"k":"v"}}}}"#
            )
        };
        let first = format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{},{},{},{}]}}"#,
            item("same", "u1", "5"),
            item("newer", "u2", "6"),
            item("recreated", "u9", "7"),
            item("unknown", "u4", "8"),
        );
        let held = decode_list(first.as_bytes(), &IngestOptions::default()).unwrap();
        let mut pool: std::collections::HashMap<String, Object> =
            held.items.iter().map(|o| (o.key(), o.clone())).collect();
        pool.remove("ns/unknown");
        let pool: Arc<dyn ObjectPool> = Arc::new(Pool(pool));
        let relist_items = [
            item("same", "u1", "5"),
            item("newer", "u2", "60"),
            item("recreated", "u3", "7"),
            item("unknown", "u4", "8"),
        ]
        .join(",");
        for body in [
            format!(
                r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"90"}},"items":[{relist_items}]}}"#
            ),
            format!(
                r#"{{"items":[{relist_items}],"metadata":{{"resourceVersion":"90"}},"apiVersion":"v1","kind":"ConfigMapList"}}"#
            ),
        ] {
            for chunk in [1, 7, body.len()] {
                let mut d = ListDecoder::with_pool(IngestOptions::default(), pool.clone());
                for c in body.as_bytes().chunks(chunk) {
                    d.push(c).unwrap();
                }
                let l = d.finish().unwrap();
                let same: Vec<bool> = l
                    .items
                    .iter()
                    .zip(&held.items)
                    .map(|(a, b)| Object::ptr_eq(a, b))
                    .collect();
                assert_eq!(same, [true, false, false, false], "{body}");
                assert_eq!(l.items[1].resource_version(), "60");
                assert_eq!(l.items[2].uid(), "u3");
                assert_eq!(l.items[0].as_str(), held.items[0].as_str());
            }
        }
        // A malformed item is still an error, even when its metadata matches a held object.
        let bad = format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{}},"items":[{}]}}"#,
            item("same", "u1", "5").replace(r#""k":"v""#, r#""k":v"#)
        );
        let mut d = ListDecoder::with_pool(IngestOptions::default(), pool);
        assert!(d
            .push(bad.as_bytes())
            .and_then(|_| d.finish().map(|_| ()))
            .is_err());
    }

    #[test]
    fn metadata_after_items_escapes_and_scalars_in_any_order() {
        let body = br#" { "items" : [ { "metadata" : { "name" : "a\"}{]" , "namespace":"n"} , "n": -1.5e3, "t":true } ,
            {"metadata":{"name":"b"}} ] , "extra":[1,{"x":"]"}], "num": 42 , "kind" : "ConfigMapList",
            "apiVersion":"v1", "metadata": {"resourceVersion":"9","continue":"","remainingItemCount":0} }
        "#;
        let want = decode_list(body, &IngestOptions::default()).unwrap();
        assert_eq!(want.resource_version, "9");
        assert_eq!(want.continue_token, None);
        assert_eq!(want.remaining_item_count, Some(0));
        assert_eq!(want.items.len(), 2);
        assert_eq!(want.items[0].name(), "a\"}{]");
        let v = want.items[0].to_value().unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["apiVersion"].as_str()),
            (Some("ConfigMap"), Some("v1"))
        );
        assert_eq!(v["n"], -1500.0);
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            let got = decode_chunks(&[a, b], &IngestOptions::default()).unwrap();
            assert_eq!(summary(&got), summary(&want), "split at {cut}");
        }
        let empty = decode_list(
            br#"{"kind":"PodList","items":null,"metadata":{}}"#,
            &IngestOptions::default(),
        )
        .unwrap();
        assert!(empty.items.is_empty());
        let empty = decode_list(b"{}", &IngestOptions::default()).unwrap();
        assert!(empty.items.is_empty());
    }

    #[test]
    fn malformed_list_bodies_are_decode_errors() {
        for bad in [
            &b""[..],
            b"   ",
            br#"{"kind":"PodList","items":{}}"#,
            br#"{"kind":"PodList","items":[{}]"#,
            br#"{"kind":"PodList","items":[{"metadata":{}}],}"#,
            br#"{"kind":"PodList","items":[{"metadata":{}},]}"#,
            br#"{"kind":"PodList" "items":[]}"#,
            br#"{"kind":"PodList","items":[]} {}"#,
            br#"{"kind":"PodList","items":[{"metadata":{"name":"a"}}]]}"#,
            br#"{"kind":"PodList","metadata":{"resourceVersion":5}}"#,
            br#"{"kind":"PodList","x":tru}"#,
            b"{\"kind\":\"PodList\",\"items\":[{\"metadata\":{\"name\":\"\xff\"}}]}",
        ] {
            for cut in 0..=bad.len() {
                let (a, b) = bad.split_at(cut);
                let e = decode_chunks(&[a, b], &IngestOptions::default()).unwrap_err();
                assert!(matches!(e, Error::Decode(_)), "{e}");
            }
        }
    }

    /// Reported from outside: LIST bodies had no size bound (watch events had 64 MiB). A key,
    /// item or member value longer than the bound is refused whether one read completes it or
    /// it is still arriving, and what is buffered never exceeds the bound plus one read.
    #[test]
    fn values_over_the_bound_are_refused_and_never_buffered_past_it() {
        let head = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":["#;
        let item = |n: usize| format!(r#"{{"metadata":{{"name":"{}"}}}}"#, "a".repeat(n));
        let cases = [
            (item(50), true),
            (item(200), false),
            (
                format!(r#"{{"metadata":{{"name":"{}"#, "a".repeat(5000)),
                false,
            ),
        ];
        for (it, fits) in &cases {
            let body = [&head[..], it.as_bytes(), b"]}"].concat();
            for chunk in [1, 10, 64, body.len()] {
                let mut d = ListDecoder::new(IngestOptions::default()).with_max_value_bytes(100);
                let mut r = Ok(());
                for c in body.chunks(chunk) {
                    r = d.push(c);
                    assert!(d.buf.len() <= 100 + chunk, "buffered {}", d.buf.len());
                    if r.is_err() {
                        break;
                    }
                }
                let r = r.and_then(|_| d.finish().map(|l| l.items.len()));
                match r {
                    Ok(n) => assert!(*fits && n == 1, "chunks of {chunk}"),
                    Err(e) => {
                        assert!(!fits, "chunks of {chunk}: {e}");
                        assert!(
                            e.to_string().contains("an item larger than 100 bytes"),
                            "{e}"
                        );
                    }
                }
            }
        }
        // A member other than the items, and a key, are bounded alike.
        for body in [
            format!(
                r#"{{"kind":"ConfigMapList","extra":"{}"}}"#,
                "x".repeat(300)
            ),
            format!(r#"{{"{}":1}}"#, "k".repeat(300)),
        ] {
            let mut d = ListDecoder::new(IngestOptions::default()).with_max_value_bytes(100);
            let e = d.push(body.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("larger than 100 bytes"), "{e}");
        }
    }

    /// Reported from outside: a list (or bookmark) whose resourceVersion was not an integer
    /// was adopted and sent back forever. The list's RV and each item's are checked where
    /// they arrive, as a watch event's are; the error quotes a long one briefly.
    #[test]
    fn a_resource_version_that_is_not_an_integer_fails_the_list() {
        let list = |rv: &str, item_rv: &str| {
            format!(
                r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{{"metadata":{{"name":"a","resourceVersion":"{item_rv}"}}}}]}}"#
            )
        };
        assert!(decode_list(list("9", "5").as_bytes(), &IngestOptions::default()).is_ok());
        let huge = "9".repeat(1 << 20);
        for (rv, item_rv) in [
            ("zzz", "5"),
            ("9", "zzz"),
            (huge.as_str(), "5"),
            ("9", "-1"),
        ] {
            let body = list(rv, item_rv);
            for chunk in [7, body.len()] {
                let mut d = ListDecoder::new(IngestOptions::default());
                let e = body
                    .as_bytes()
                    .chunks(chunk)
                    .try_for_each(|c| d.push(c))
                    .and_then(|_| d.finish().map(drop))
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.contains("is not an unsigned 64-bit decimal integer"),
                    "{e}"
                );
                assert!(e.len() < 600, "{} bytes of error", e.len());
            }
        }
    }

    /// Found by the fuzz target `list_body` (twice): an item a read held whole was scanned in
    /// place, the dropped `managedFields` only delimited; one split across reads was delimited
    /// by `ValueEnd` first. In text that is not JSON the two ended it in different places (a
    /// scalar `managedFields` taken to its first delimiter, a backslash outside a string
    /// escaping a quote), so the list depended on how the body was cut. Now it does not.
    #[test]
    fn an_item_ends_in_one_place_however_the_body_is_cut() {
        for (body, ok) in [
            (
                "{\n  \"kind\":\"ConfpList\",\"apdata\": {\n\"r\": 1},\n  \"items\": [\n  {  \"metadata\": {\"managedFields\":v4\"  } }]\n}",
                false,
            ),
            (
                r#"{"kind":"CList","apiVersion":"v1","items":[{"metadata":{"managedFields":[\"],"x":"]}}]}"#,
                true,
            ),
        ] {
            let whole = decode_list(body.as_bytes(), &IngestOptions::default());
            assert_eq!(whole.is_ok(), ok, "{body}: {whole:?}");
            let want = whole.as_ref().map(summary).ok();
            for cut in 0..=body.len() {
                let (a, b) = body.as_bytes().split_at(cut);
                let got = decode_chunks(&[a, b], &IngestOptions::default());
                assert_eq!(got.as_ref().map(summary).ok(), want, "{body} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_table_is_not_decoded_as_an_empty_list_spec_1_7() {
        // A relist that read this as a list without items would delete the whole cache.
        let e = decode_list(&read("list-as-table.json"), &IngestOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Decode(_)), "{e}");
        assert!(
            e.to_string()
                .contains("expected a list, got kind \"Table\""),
            "{e}"
        );
        let empty = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}"#;
        let l = decode_list(empty, &IngestOptions::default()).unwrap();
        assert!(l.items.is_empty());
        assert_eq!(l.resource_version, "7");
    }

    #[test]
    fn every_error_sample_becomes_a_status_spec_6_5() {
        let cases: &[(&str, u16, &str)] = &[
            ("error-401-unauthorized.json", 401, "Unauthorized"),
            ("error-403-forbidden.json", 403, "Forbidden"),
            ("error-404-no-namespace.json", 404, "NotFound"),
            ("error-404-notfound.json", 404, "NotFound"),
            ("error-409-alreadyexists.json", 409, "AlreadyExists"),
            ("error-409-conflict-stale-rv.json", 409, "Conflict"),
            ("error-422-invalid.json", 422, "Invalid"),
            ("error-500-bad-rv-watch.json", 500, ""),
            ("list-410-exact-rv.json", 410, "Expired"),
            ("list-410-expired-continue.json", 410, "Expired"),
        ];
        let mut seen = 0;
        for entry in std::fs::read_dir(DIR).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if (name.starts_with("error-") || name.starts_with("list-410-"))
                && name.ends_with(".json")
            {
                assert!(
                    cases.iter().any(|c| c.0 == name),
                    "no golden case for {name}"
                );
            }
        }
        for (name, code, reason) in cases {
            let raw = read(name);
            let want: serde_json::Value = serde_json::from_slice(&raw).unwrap();
            // The recorded response head: its status code is what the client decodes with,
            // its Retry-After (if any) what it passes along.
            let head = String::from_utf8(read(&name.replace(".json", ".headers.txt"))).unwrap();
            let status_line = head.lines().next().unwrap();
            let recorded: u16 = status_line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(recorded, *code, "{name}: {status_line}");
            let retry_after = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("retry-after")
                    .then(|| v.trim().to_owned())
            });
            let e = error_from_response(recorded, retry_after.as_deref(), &raw);
            let s = e.status().unwrap();
            assert_eq!(s.code, *code, "{name}");
            assert_eq!(s.reason, *reason, "{name}");
            assert_eq!(s.message, want["message"].as_str().unwrap(), "{name}");
            assert_eq!(s.status, "Failure");
            // Serialising the decoded Status reproduces the sample exactly.
            assert_eq!(serde_json::to_value(s).unwrap(), want, "{name}");
            seen += 1;
        }
        assert_eq!(seen, cases.len());

        let invalid = error_from_response(422, None, &read("error-422-invalid.json"));
        let d = invalid.status().unwrap().details.as_ref().unwrap();
        assert_eq!(d.causes[0].reason, "FieldValueInvalid");
        assert_eq!(d.causes[0].field, "metadata.name");
        let cont = error_from_response(410, None, &read("list-410-expired-continue.json"));
        assert!(cont.is_expired());
        assert!(cont
            .status()
            .unwrap()
            .metadata
            .continue_
            .as_deref()
            .unwrap()
            .starts_with("eyJ2"));
    }

    #[test]
    fn too_large_rv_with_retry_after_spec_6_5() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too large resource version: 99, current: 5","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#;
        let e = error_from_response(504, None, body);
        assert!(e.is_too_large_rv());
        assert_eq!(
            e.status()
                .unwrap()
                .details
                .as_ref()
                .unwrap()
                .retry_after_seconds,
            Some(1)
        );
    }

    #[test]
    fn non_status_bodies_get_a_synthesised_status() {
        let e = error_from_response(503, Some("7"), b"<html>upstream down</html>");
        let s = e.status().unwrap();
        assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
        assert!(s.message.contains("upstream down"));
        assert_eq!(s.details.as_ref().unwrap().retry_after_seconds, Some(7));
        let e = error_from_response(429, None, b"");
        assert!(e.is_too_many_requests());
        assert!(e.to_string().contains("TooManyRequests"));
        let e = error_from_response(418, None, br#"{"kind":"Pod"}"#);
        assert_eq!(e.status().unwrap().reason, "Unknown");
    }
}
