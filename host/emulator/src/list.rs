//! LIST: pagination with opaque continue tokens, the resourceVersion table of spec 6.8,
//! selectors, `remainingItemCount`, and the server-side Table kubectl asks for.
//!
//! Why items are written as raw bytes: a 100,000-object list is a concatenation of stored JSON,
//! never a re-serialization.

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use http::{Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::accept::{self, MetaVersion, Representation};
use super::printers::Printer;
use super::registry::ResourceDef;
use super::request::{Query, ResourceRequest};
use super::response::{self, Body, FieldError};
use super::{events, Shared};
use kwh_client::object::Object;
use kwh_client::selector::{FieldSelector, LabelSelector, GENERIC_FIELDS};
use kwh_client::Status;

/// The continue token's content (base64url of this JSON, as kube-apiserver encodes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    pub v: String,
    /// The snapshot RV; -1 = inconsistent (continue at the latest state).
    pub rv: i64,
    /// The key to resume at, relative to the collection's prefix (`last\u0000`).
    pub start: String,
}

impl ContinueToken {
    /// Encode as the opaque string clients send back.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decode a client's token; a 400 message on garbage.
    pub fn decode(s: &str) -> Result<Self, String> {
        let raw = URL_SAFE_NO_PAD
            .decode(s)
            .or_else(|_| URL_SAFE.decode(s))
            .map_err(|e| format!("continue key is not valid: {e}"))?;
        let t: ContinueToken =
            serde_json::from_slice(&raw).map_err(|e| format!("continue key is not valid: {e}"))?;
        if t.v != "meta.k8s.io/v1" {
            return Err("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into());
        }
        if t.start.contains("..") || t.start.starts_with('/') {
            return Err(
                "continue key is not valid: start key may not contain relative path components"
                    .into(),
            );
        }
        Ok(t)
    }
}

/// Selectors of a request, parsed and validated (400 on error).
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn from_query(def: &ResourceDef, q: &Query) -> Result<Self, Status> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
            .map_err(|e| response::bad_request(e.to_string()))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
            .map_err(|e| response::bad_request(e.to_string()))?;
        let mut supported: Vec<&str> = GENERIC_FIELDS.to_vec();
        supported.extend_from_slice(extra_fields(def));
        supported.extend_from_slice(events::field_labels(def));
        fields
            .validate(&supported)
            .map_err(|e| response::bad_request(e.to_string()))?;
        Ok(Selectors { labels, fields })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether an object passes both selectors. Resource-specific fields decode the object,
    /// which is off the common path (generic fields use the parsed metadata only).
    pub fn matches(&self, o: &Object) -> bool {
        if !self.labels.matches_meta(&o.meta()) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let generic = self
            .fields
            .requirements()
            .iter()
            .all(|r| GENERIC_FIELDS.contains(&&*r.field));
        if generic {
            return self.fields.matches_meta(&o.meta());
        }
        let v = o.to_value().unwrap_or_default();
        let values: Vec<(String, String)> = self
            .fields
            .requirements()
            .iter()
            .map(|r| {
                let ptr = format!("/{}", r.field.replace('.', "/"));
                let s = match &*r.field {
                    "metadata.namespace" => o.namespace().unwrap_or("").to_owned(),
                    // Both Event views' labels, read from the stored (core) form.
                    f if events::is_stored_event(&v) => events::field_value(f, &v),
                    _ => match v.pointer(&ptr) {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(serde_json::Value::Null) | None => String::new(),
                        Some(x) => x.to_string(),
                    },
                };
                (r.field.to_string(), s)
            })
            .collect();
        self.fields
            .matches_with(|f| values.iter().find(|(k, _)| k == f).map(|(_, v)| v.as_str()))
    }
}

/// Field selectors beyond the generic ones, per resource (a subset of the server's; Events have
/// theirs in [`events::field_labels`]).
fn extra_fields(def: &ResourceDef) -> &'static [&'static str] {
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        // Events' labels come from `events::field_labels`.
        _ => &[],
    }
}

fn parse_rv(s: &str) -> Result<u64, Status> {
    s.parse::<u64>().map_err(|_| {
        response::internal(&format!(
            "resourceVersion: Invalid value: \"{s}\": strconv.ParseUint: parsing \"{s}\": invalid syntax"
        ))
    })
}

fn invalid_options(errors: &[FieldError]) -> Status {
    response::invalid("ListOptions", "meta.k8s.io", "", errors)
}

/// What a LIST request asks for, after applying the table of spec 6.8.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Serve the current state, all of it (RV=0 from the "watch cache", or RV=N not-older-than).
    Whole { min_rv: Option<u64> },
    /// A page from a snapshot: `at` None = latest.
    Page {
        at: Option<u64>,
        start: String,
        limit: Option<usize>,
        inconsistent: bool,
        /// The latest state must be at least this new (RV=N, NotOlderThan, with a limit).
        min_rv: Option<u64>,
    },
}

fn plan(q: &Query) -> Result<Plan, Status> {
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let rv_match = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let cont = q.get("continue").filter(|s| !s.is_empty());
    let limit = match q.get("limit").filter(|s| !s.is_empty()) {
        Some(l) => match l.parse::<i64>() {
            Ok(n) if n > 0 => Some(n as usize),
            Ok(_) => None,
            Err(_) => return Err(response::bad_request(format!("invalid limit: {l:?}"))),
        },
        None => None,
    };
    if let Some(m) = rv_match {
        if cont.is_some() {
            return Err(invalid_options(&[FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            )]));
        }
        if rv.is_none() {
            return Err(invalid_options(&[FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )]));
        }
        if m != "Exact" && m != "NotOlderThan" {
            return Err(invalid_options(&[FieldError {
                reason: "FieldValueNotSupported",
                field: "resourceVersionMatch".into(),
                detail: format!(
                    "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
                ),
            }]));
        }
    }
    if let Some(c) = cont {
        if rv.is_some_and(|r| r != "0") {
            return Err(response::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let t = ContinueToken::decode(c).map_err(response::bad_request)?;
        return Ok(Plan::Page {
            at: (t.rv > 0).then_some(t.rv as u64),
            start: t.start,
            limit,
            inconsistent: t.rv <= 0,
            min_rv: None,
        });
    }
    match rv {
        None => Ok(Plan::Page {
            at: None,
            start: String::new(),
            limit,
            inconsistent: false,
            min_rv: None,
        }),
        Some(r) => {
            let n = parse_rv(r)?;
            let exact =
                rv_match == Some("Exact") || (limit.is_some() && rv_match.is_none() && n != 0);
            if exact {
                if n == 0 {
                    return Err(invalid_options(&[FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    )]));
                }
                Ok(Plan::Page {
                    at: Some(n),
                    start: String::new(),
                    limit,
                    inconsistent: false,
                    min_rv: None,
                })
            } else if limit.is_some() && n != 0 {
                // NotOlderThan with a limit is paginated from the latest state (kube-apiserver
                // sends it to etcd rather than the watch cache).
                Ok(Plan::Page {
                    at: None,
                    start: String::new(),
                    limit,
                    inconsistent: false,
                    min_rv: Some(n),
                })
            } else {
                Ok(Plan::Whole {
                    min_rv: (n > 0).then_some(n),
                })
            }
        }
    }
}

/// The message of a 410 for an expired continue token (spec 6.6).
pub const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Serve a LIST.
pub(crate) fn list(
    shared: &Shared,
    r: &ResourceRequest,
    q: &Query,
    accept: &str,
) -> Result<Response<Body>, Status> {
    let sel = Selectors::from_query(&r.def, q)?;
    let plan = plan(q)?;
    let prefix = r.prefix();
    let filter = |o: &Object| sel.matches(o);
    let count = sel.is_empty();
    let store = &shared.store;
    let res = &*r.def.store_key;
    let page = match plan {
        Plan::Whole { min_rv } => {
            let now = store.current_rv();
            if let Some(n) = min_rv.filter(|n| *n > now) {
                return Err(response::too_large_rv(n, now));
            }
            store
                .list(res, None, &prefix, "", None, &filter, false)
                .map_err(|e| response::internal(&e.to_string()))?
        }
        Plan::Page {
            at,
            start,
            limit,
            inconsistent,
            min_rv,
        } => {
            let now = store.current_rv();
            if let Some(n) = at.or(min_rv).filter(|n| *n > now) {
                return Err(response::too_large_rv(n, now));
            }
            let from_token = !start.is_empty() || inconsistent;
            if from_token && shared.faults.take_compact_before_continue() {
                shared.faults.compact_history();
            }
            let full_start = format!("{prefix}{start}");
            let listed = store.list(res, at, &prefix, &full_start, limit, &filter, count);
            if let Err(e) = &listed {
                shared.faults.count_list_expired(e.compacted);
            }
            match listed {
                Ok(p) => p,
                Err(_) if from_token => {
                    let mut s = response::expired(EXPIRED_CONTINUE);
                    s.metadata.continue_ = Some(
                        ContinueToken {
                            v: "meta.k8s.io/v1".into(),
                            rv: -1,
                            start,
                        }
                        .encode(),
                    );
                    return Err(s);
                }
                Err(_) => {
                    return Err(response::expired(
                        "The resourceVersion for the provided list is too old.",
                    ))
                }
            }
        }
    };
    let token = page.next_after.as_ref().map(|k| {
        let rel = k.strip_prefix(prefix.as_str()).unwrap_or(k);
        ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: page.rv as i64,
            start: format!("{rel}\u{0}"),
        }
        .encode()
    });
    let remaining = if count { page.remaining } else { None };
    match accept::negotiate(accept, accept::Read::List) {
        Representation::Table => {
            let printer = Printer::of(shared, &r.def);
            return Ok(table(&page.items, page.rv, token, remaining, &printer));
        }
        Representation::Metadata(v) => {
            let body = metadata_list_json(&page.items, v, page.rv, token, remaining);
            return Ok(response::json(StatusCode::OK, body));
        }
        Representation::Object => {}
    }
    let items = if events::converts(&r.def) {
        page.items
            .into_iter()
            .map(|o| events::serve(&r.def, o))
            .collect()
    } else {
        page.items
    };
    if accept::prefers_protobuf(accept) && r.def.builtin {
        // The list in protobuf (`<Kind>List`), for a client that asks for it first.
        let json = list_json(&r.def, &items, page.rv, token.clone(), remaining);
        let proto = serde_json::from_slice::<Value>(&json)
            .ok()
            .and_then(|v| super::protobuf::encode(&v));
        if let Some(b) = proto {
            let body = Body::Full(Some(Bytes::from(b)));
            return Ok(response::base(StatusCode::OK, PROTOBUF, body));
        }
    }
    Ok(list_body(&r.def, &items, page.rv, token, remaining))
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn list_meta(b: &mut BytesMut, rv: u64, token: Option<String>, remaining: Option<usize>) {
    b.put_slice(b"{\"resourceVersion\":\"");
    b.put_slice(rv.to_string().as_bytes());
    b.put_u8(b'"');
    if let Some(t) = token {
        b.put_slice(b",\"continue\":\"");
        b.put_slice(t.as_bytes());
        b.put_u8(b'"');
        if let Some(n) = remaining {
            b.put_slice(b",\"remainingItemCount\":");
            b.put_slice(n.to_string().as_bytes());
        }
    }
    b.put_u8(b'}');
}

/// `{"kind":"XList","apiVersion":…,"metadata":{…},"items":[…]}` from raw items (spec 6.2).
pub fn list_body(
    def: &ResourceDef,
    items: &[Object],
    rv: u64,
    token: Option<String>,
    remaining: Option<usize>,
) -> Response<Body> {
    response::json(StatusCode::OK, list_json(def, items, rv, token, remaining))
}

/// The list document of `items`.
fn list_json(
    def: &ResourceDef,
    items: &[Object],
    rv: u64,
    token: Option<String>,
    remaining: Option<usize>,
) -> Bytes {
    let size: usize = items.iter().map(|o| o.raw().len() + 1).sum();
    let mut b = BytesMut::with_capacity(size + 256);
    let kind = format!("{}List", def.kind);
    let api_version = def.api_version();
    // A built-in kind's items come without `kind` and `apiVersion`, as kube-apiserver encodes
    // its typed lists (custom resources' keep theirs): clients take them from the list. The
    // stored form starts with both (see `encode`), so they come off as one prefix.
    let type_meta = format!(
        "{{\"kind\":\"{}\",\"apiVersion\":\"{api_version}\",",
        def.kind
    );
    put_list(
        &mut b,
        &kind,
        &api_version,
        (rv, token, remaining),
        items,
        |b, o| match o.raw().strip_prefix(type_meta.as_bytes()) {
            Some(rest) if def.builtin => {
                b.put_u8(b'{');
                b.put_slice(rest);
            }
            _ => b.put_slice(o.raw()),
        },
    );
    b.freeze()
}

/// `{"kind":…,"apiVersion":…,"metadata":{…},"items":[…]}`, each item written by `put`.
fn put_list(
    b: &mut BytesMut,
    kind: &str,
    api_version: &str,
    (rv, token, remaining): (u64, Option<String>, Option<usize>),
    items: &[Object],
    put: impl Fn(&mut BytesMut, &Object),
) {
    b.put_slice(b"{\"kind\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"\",\"apiVersion\":\"");
    b.put_slice(api_version.as_bytes());
    b.put_slice(b"\",\"metadata\":");
    list_meta(b, rv, token, remaining);
    b.put_slice(b",\"items\":[");
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            b.put_u8(b',');
        }
        put(b, o);
    }
    b.put_slice(b"]}");
}

#[derive(Deserialize)]
struct Created {
    #[serde(rename = "creationTimestamp")]
    ts: Option<String>,
}

#[derive(Deserialize)]
struct MetaOnly<'a> {
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
}

/// The `metadata` of a stored object, verbatim (`{}` should it have none).
fn raw_metadata(raw: &[u8]) -> &str {
    serde_json::from_slice::<MetaOnly>(raw)
        .ok()
        .and_then(|m| m.metadata)
        .map(|m| m.get())
        .unwrap_or("{}")
}

fn put_partial(b: &mut BytesMut, raw: &[u8], v: MetaVersion) {
    b.put_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"");
    b.put_slice(v.api_version().as_bytes());
    b.put_slice(b"\",\"metadata\":");
    b.put_slice(raw_metadata(raw).as_bytes());
    b.put_u8(b'}');
}

/// One object as `PartialObjectMetadata`: what a metadata-only GET answers and each event of a
/// metadata-only WATCH carries (bookmarks included), as the server converts them.
pub(crate) fn metadata_json(raw: &[u8], v: MetaVersion) -> Bytes {
    let mut b = BytesMut::with_capacity(raw.len().min(4096) + 64);
    put_partial(&mut b, raw, v);
    b.freeze()
}

/// A `PartialObjectMetadataList`: the list's own metadata as for objects, each item's whole
/// `metadata` (managedFields included) and nothing else.
fn metadata_list_json(
    items: &[Object],
    v: MetaVersion,
    rv: u64,
    token: Option<String>,
    remaining: Option<usize>,
) -> Bytes {
    let mut b = BytesMut::with_capacity(256 + items.len() * 512);
    put_list(
        &mut b,
        "PartialObjectMetadataList",
        v.api_version(),
        (rv, token, remaining),
        items,
        |b, o| put_partial(b, o.raw(), v),
    );
    b.freeze()
}

/// A `meta.k8s.io/v1` Table with Name and Age columns; rows carry PartialObjectMetadata, as
/// the server's default table convertor does.
fn table(
    items: &[Object],
    rv: u64,
    token: Option<String>,
    remaining: Option<usize>,
    printer: &Printer,
) -> Response<Body> {
    response::json(
        StatusCode::OK,
        table_json(items, rv, token, remaining, printer),
    )
}

/// The Table document for `items` (also the object of each watch event when a watch asks for
/// Tables).
pub(crate) fn table_json(
    items: &[Object],
    rv: u64,
    token: Option<String>,
    remaining: Option<usize>,
    printer: &Printer,
) -> bytes::Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut b = BytesMut::with_capacity(256 + items.len() * 256);
    b.put_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
    list_meta(&mut b, rv, token, remaining);
    b.put_slice(br#","columnDefinitions":["#);
    let named = printer.named();
    if named {
        b.put_slice(br#"{"name":"Name","type":"string","format":"name","description":"Name must be unique within a namespace.","priority":0}"#);
    }
    for (i, (name, kind)) in printer.definitions().into_iter().enumerate() {
        let def =
            json!({"name": name, "type": kind, "format": "", "description": "", "priority": 0});
        if named || i > 0 {
            b.put_u8(b',');
        }
        b.put_slice(def.to_string().as_bytes());
    }
    if named {
        b.put_slice(br#",{"name":"Age","type":"string","format":"","description":"CreationTimestamp is a timestamp representing the server time when this object was created.","priority":0}"#);
    }
    b.put_slice(br#"],"rows":["#);
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            b.put_u8(b',');
        }
        let meta = raw_metadata(o.raw());
        let created = serde_json::from_str::<Created>(meta)
            .ok()
            .and_then(|c| c.ts)
            .and_then(|t| super::util::parse_rfc3339(&t))
            .unwrap_or(now);
        let mut cells = Vec::new();
        if named {
            cells.push(Value::from(o.name()));
        }
        if !printer.is_empty() {
            let v = o.to_value().unwrap_or(Value::Null);
            cells.extend(printer.cells(&v));
        }
        if named {
            cells.push(age(now.saturating_sub(created)).into());
        }
        let cells = serde_json::to_string(&cells).unwrap_or_else(|_| "[]".into());
        b.put_slice(b"{\"cells\":");
        b.put_slice(cells.as_bytes());
        b.put_slice(b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
        b.put_slice(meta.as_bytes());
        b.put_slice(b"}}");
    }
    b.put_slice(b"]}");
    b.freeze()
}

/// kubectl's short age format: `45s`, `3m12s`, `5h`, `2d`.
pub(crate) fn age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(Some(s))
    }

    #[test]
    fn continue_token_matches_the_sample_encoding() {
        // list-page1.json's token.
        let t = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: 50478,
            start: "pre-2\u{0}".into(),
        };
        assert_eq!(
            t.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NTA0NzgsInN0YXJ0IjoicHJlLTJcdTAwMDAifQ"
        );
        assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
        assert!(ContinueToken::decode("not base64!").is_err());
    }

    #[test]
    fn spec_6_8_rv_table() {
        use Plan::*;
        let page = |at, limit| Page {
            at,
            start: String::new(),
            limit,
            inconsistent: false,
            min_rv: None,
        };
        assert_eq!(plan(&q("")).unwrap(), page(None, None));
        assert_eq!(plan(&q("limit=2")).unwrap(), page(None, Some(2)));
        assert_eq!(
            plan(&q("resourceVersion=0")).unwrap(),
            Whole { min_rv: None }
        );
        assert_eq!(
            plan(&q("resourceVersion=0&limit=2")).unwrap(),
            Whole { min_rv: None },
            "RV=0 is served whole, ignoring limit"
        );
        assert_eq!(
            plan(&q("resourceVersion=7")).unwrap(),
            Whole { min_rv: Some(7) }
        );
        assert_eq!(
            plan(&q("resourceVersion=7&limit=2")).unwrap(),
            page(Some(7), Some(2)),
            "RV=N with limit is Exact"
        );
        assert_eq!(
            plan(&q("resourceVersion=7&resourceVersionMatch=Exact")).unwrap(),
            page(Some(7), None)
        );
        assert_eq!(
            plan(&q(
                "resourceVersion=7&resourceVersionMatch=NotOlderThan&limit=2"
            ))
            .unwrap(),
            Page {
                at: None,
                start: String::new(),
                limit: Some(2),
                inconsistent: false,
                min_rv: Some(7)
            },
            "NotOlderThan with a limit pages the latest state"
        );
        assert_eq!(
            plan(&q(
                "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=2"
            ))
            .unwrap(),
            Whole { min_rv: None }
        );
        let tok = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: 9,
            start: "b\u{0}".into(),
        }
        .encode();
        assert_eq!(
            plan(&q(&format!("continue={tok}&limit=1"))).unwrap(),
            Page {
                at: Some(9),
                start: "b\u{0}".into(),
                limit: Some(1),
                inconsistent: false,
                min_rv: None
            }
        );
        assert_eq!(
            plan(&q(&format!("continue={tok}&resourceVersion=3")))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            plan(&q("resourceVersionMatch=Exact")).unwrap_err().code,
            422
        );
        assert_eq!(plan(&q("resourceVersion=x")).unwrap_err().code, 500);
        assert_eq!(plan(&q("limit=abc")).unwrap_err().code, 400);
    }

    #[test]
    fn age_format() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(200), "3m20s");
        assert_eq!(age(3600), "60m");
        assert_eq!(age(3 * 86_400), "3d");
    }
}
