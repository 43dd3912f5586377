//! Events: one storage, two API views, as kube-apiserver serves them.
//!
//! An Event written through core `v1` (`/api/v1/…/events`) or through `events.k8s.io/v1`
//! (`/apis/events.k8s.io/v1/…/events`) is one object: readable (get, list, watch, field
//! selectors) through both, with one resourceVersion sequence, and every write through one view
//! is seen in the other. `kubectl events` and `kubectl describe` read the core view, while
//! client-go's newer recorder writes the `events.k8s.io/v1` one.
//!
//! # Design: one stored form, converted at the edge
//! Both definitions share one store key (the registry gives `events.k8s.io/v1` events the core
//! resource's), and the store holds every Event in its core `v1` form: that is what
//! kube-apiserver keeps in etcd for both groups. A request through `events.k8s.io/v1` converts
//! on the way in (its body becomes a core Event before it is validated and stored) and on the
//! way out (the objects it is answered with, list items and watch events included, become
//! `events.k8s.io/v1` Events again), with the server's field mapping (`RENAMED`). Why not
//! keep each object in the form it was written in: then every reader of the store (history,
//! Exact lists at an old resourceVersion, field selectors, garbage collection, namespace
//! cleanup) would need to know about two forms; this way only the `events.k8s.io/v1` answers
//! pay for a conversion, and the core view, which `kubectl` reads, is served from the shared
//! bytes as every other resource is.
//!
//! Both forms are kept in the Go encoding of their structs: members with `omitempty` and a zero
//! value are left out, the others are always there (`source: {}`, `firstTimestamp: null`,
//! `reportingComponent: ""` in core; `deprecatedSource: {}`, `eventTime: null` in
//! `events.k8s.io/v1`), times are normalized (seconds for `Time`, six fraction digits for
//! `MicroTime`) and fields outside the schema are dropped, as the recorded samples show.
//! The `encode` module writes both in their structs' member order.
//!
//! `managedFields` are recorded in the terms of the view that was written through (the sample's
//! entry has `apiVersion: events.k8s.io/v1` and `f:note`), and read unchanged through both, as
//! on the real server. The emulator does not translate one view's field sets into the other's
//! when a later write comes through the other view.
//!
//! # Validation
//! kube-apiserver's `ValidateEventCreate` and `ValidateEventUpdate`: every write passes the
//! legacy rules (an Event with an `eventTime` needs a reporting controller, instance, action
//! and reason, a note of at most 1024 bytes, …); creates through `events.k8s.io/v1` also need
//! an `eventTime`, a type of Normal or Warning, a valid series and none of the deprecated
//! fields; updates through it may change only the series (and metadata). Refusals are 422s in
//! the server's words, which name the fields by their core names (`message`,
//! `involvedObject.namespace`) whichever view was used, with `Event` as the kind.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::object_meta::qualified_name_errors;
use super::registry::ResourceDef;
use super::response::{self, FieldError};
use super::util::validate_dns_subdomain;
use kwh_client::object::Object;
use kwh_client::Status;

/// The store key both Event definitions share.
pub const STORE_KEY: &str = "/events";

/// The view of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// `v1`: the stored form.
    Core,
    /// `events.k8s.io/v1`.
    EventsV1,
}

impl View {
    fn api_version(self) -> &'static str {
        match self {
            View::Core => "v1",
            View::EventsV1 => "events.k8s.io/v1",
        }
    }
}

/// The Event view `def` serves, if it is one of the two Event resources.
pub(crate) fn view_of(def: &ResourceDef) -> Option<View> {
    if def.plural != "events" || def.kind != "Event" {
        return None;
    }
    match (def.group.as_str(), def.version.as_str()) {
        ("", "v1") => Some(View::Core),
        ("events.k8s.io", "v1") => Some(View::EventsV1),
        _ => None,
    }
}

/// How a member is encoded: its shape and whether its zero value is still written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Str,
    Int,
    /// `metav1.Time`: RFC 3339 in seconds, `null` when zero.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with six fraction digits, `null` when zero.
    MicroTime,
    /// `ObjectReference` (all members `omitempty` strings).
    Reference,
    /// `EventSource` (`component`, `host`).
    Source,
    /// `*EventSeries`.
    Series,
}

/// One member of an Event: its name in `events.k8s.io/v1` and in core `v1`, its shape, and
/// whether each view writes it when zero (Go's `omitempty` has no effect on structs, and core's
/// `reportingComponent`/`reportingInstance` have no `omitempty`).
struct Member {
    events_v1: &'static str,
    core: &'static str,
    shape: Shape,
    always_in_events_v1: bool,
    always_in_core: bool,
}

const fn member(
    events_v1: &'static str,
    core: &'static str,
    shape: Shape,
    always_in_events_v1: bool,
    always_in_core: bool,
) -> Member {
    Member {
        events_v1,
        core,
        shape,
        always_in_events_v1,
        always_in_core,
    }
}

/// Every member of an Event (besides type and metadata), as kube-apiserver converts them
/// between the two groups (`pkg/apis/events/v1/conversion.go`).
const RENAMED: &[Member] = &[
    member("eventTime", "eventTime", Shape::MicroTime, true, true),
    member("series", "series", Shape::Series, false, false),
    member(
        "reportingController",
        "reportingComponent",
        Shape::Str,
        false,
        true,
    ),
    member(
        "reportingInstance",
        "reportingInstance",
        Shape::Str,
        false,
        true,
    ),
    member("action", "action", Shape::Str, false, false),
    member("reason", "reason", Shape::Str, false, false),
    member("regarding", "involvedObject", Shape::Reference, true, true),
    member("related", "related", Shape::Reference, false, false),
    member("note", "message", Shape::Str, false, false),
    member("type", "type", Shape::Str, false, false),
    member("deprecatedSource", "source", Shape::Source, true, true),
    member(
        "deprecatedFirstTimestamp",
        "firstTimestamp",
        Shape::Time,
        true,
        true,
    ),
    member(
        "deprecatedLastTimestamp",
        "lastTimestamp",
        Shape::Time,
        true,
        true,
    ),
    member("deprecatedCount", "count", Shape::Int, false, false),
];

const REFERENCE_MEMBERS: &[&str] = &[
    "kind",
    "namespace",
    "name",
    "uid",
    "apiVersion",
    "resourceVersion",
    "fieldPath",
];

/// Which members a reshaped Event keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// The Go encoding: zero values of members without `omitempty` stay.
    Encoded,
    /// Only members with a value (what a writer sets, for its managedFields).
    Set,
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
    }
}

/// `s` in `metav1.Time`'s encoding (whole seconds, UTC), when it is an RFC 3339 time in UTC.
fn time_seconds(s: &str) -> Option<String> {
    let (date_time, _) = split_time(s)?;
    Some(format!("{date_time}Z"))
}

/// `s` in `metav1.MicroTime`'s encoding (six fraction digits, UTC).
fn time_micros(s: &str) -> Option<String> {
    let (date_time, frac) = split_time(s)?;
    let mut digits: String = frac.chars().take(6).collect();
    while digits.len() < 6 {
        digits.push('0');
    }
    Some(format!("{date_time}.{digits}Z"))
}

/// `YYYY-MM-DDTHH:MM:SS[.fff…]Z` → (`YYYY-MM-DDTHH:MM:SS`, fraction digits).
fn split_time(s: &str) -> Option<(&str, &str)> {
    let body = s.strip_suffix('Z')?;
    let (date_time, frac) = body.split_once('.').unwrap_or((body, ""));
    let b = date_time.as_bytes();
    let shape_ok = b.len() == 19
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        });
    (shape_ok && frac.bytes().all(|c| c.is_ascii_digit())).then_some((date_time, frac))
}

/// A member's value in its Go encoding; `None` for a zero value `keep` leaves out.
fn reshape_member(shape: Shape, v: Option<&Value>, always: bool, to: View) -> Option<Value> {
    let v = v.cloned().unwrap_or(Value::Null);
    let out = match (shape, v) {
        (Shape::Time, Value::String(s)) => Value::String(time_seconds(&s).unwrap_or(s)),
        (Shape::MicroTime, Value::String(s)) => Value::String(time_micros(&s).unwrap_or(s)),
        (Shape::Reference, Value::Object(m)) => Value::Object(
            m.into_iter()
                .filter(|(k, x)| REFERENCE_MEMBERS.contains(&k.as_str()) && !is_zero(x))
                .collect(),
        ),
        (Shape::Source, Value::Object(m)) => Value::Object(
            m.into_iter()
                .filter(|(k, x)| (k == "component" || k == "host") && !is_zero(x))
                .collect(),
        ),
        (Shape::Series, Value::Object(m)) => {
            // `events.k8s.io/v1`'s series members have no `omitempty`; core's count has.
            let mut s = Map::new();
            match m.get("count").filter(|c| !c.is_null()) {
                Some(c) if to == View::EventsV1 || !is_zero(c) => {
                    s.insert("count".into(), c.clone());
                }
                None if to == View::EventsV1 => {
                    s.insert("count".into(), 0.into());
                }
                _ => {}
            }
            let last = match m.get("lastObservedTime") {
                Some(Value::String(t)) => Value::String(time_micros(t).unwrap_or(t.clone())),
                _ => Value::Null,
            };
            s.insert("lastObservedTime".into(), last);
            Value::Object(s)
        }
        (Shape::Reference | Shape::Source, Value::Null) => Value::Object(Map::new()),
        (Shape::Str, Value::Null) => Value::String(String::new()),
        (_, v) => v,
    };
    if is_zero(&out) && !always {
        return None;
    }
    Some(out)
}

/// `v` (an Event in view `from`, as a client sent it or as stored) as an Event of view `to`:
/// members renamed, in their Go encoding, those outside the schema dropped. `kind` and
/// `apiVersion` are kept as given unless the view changes (the caller checks them first).
fn reshape(v: Value, from: View, to: View, keep: Keep) -> Value {
    let Value::Object(mut m) = v else { return v };
    let mut out = Map::new();
    if from == to {
        for k in ["kind", "apiVersion"] {
            if let Some(x) = m.remove(k) {
                out.insert(k.into(), x);
            }
        }
    } else {
        out.insert("kind".into(), "Event".into());
        out.insert("apiVersion".into(), to.api_version().into());
    }
    if let Some(meta) = m.remove("metadata") {
        out.insert("metadata".into(), meta);
    }
    for f in RENAMED {
        let (src, dst, always) = match (from, to) {
            (View::Core, View::Core) => (f.core, f.core, f.always_in_core),
            (View::Core, View::EventsV1) => (f.core, f.events_v1, f.always_in_events_v1),
            (View::EventsV1, View::Core) => (f.events_v1, f.core, f.always_in_core),
            (View::EventsV1, View::EventsV1) => (f.events_v1, f.events_v1, f.always_in_events_v1),
        };
        let always = always && keep == Keep::Encoded;
        if let Some(x) = reshape_member(f.shape, m.get(src), always, to) {
            out.insert(dst.into(), x);
        }
    }
    Value::Object(out)
}

/// A create's body as its writer set it, for its managedFields: members of the view's schema
/// with a value (the server records what differs from an empty object; `deprecatedSource: {}`
/// is not owned). Other kinds pass unchanged.
pub(crate) fn as_written(def: &ResourceDef, v: Value) -> Value {
    match view_of(def) {
        Some(view) => reshape(v, view, view, Keep::Set),
        None => v,
    }
}

/// A body of `def`'s view in that view's Go encoding (the new state of an update or patch,
/// before it is compared with the stored one). Other kinds pass unchanged.
pub(crate) fn encoded(def: &ResourceDef, v: Value) -> Value {
    match view_of(def) {
        Some(view) => reshape(v, view, view, Keep::Encoded),
        None => v,
    }
}

/// A body of `def`'s view in the stored (core) form. Other kinds pass unchanged.
pub(crate) fn to_stored(def: &ResourceDef, v: Value) -> Value {
    match view_of(def) {
        Some(view) => reshape(v, view, View::Core, Keep::Encoded),
        None => v,
    }
}

/// A stored object as `def` serves it. Other kinds, and core Events, pass unchanged.
pub(crate) fn to_served(def: &ResourceDef, v: Value) -> Value {
    match view_of(def) {
        Some(View::EventsV1) => reshape(v, View::Core, View::EventsV1, Keep::Encoded),
        _ => v,
    }
}

/// Whether `def` serves its objects in another form than the stored one.
pub fn converts(def: &ResourceDef) -> bool {
    view_of(def) == Some(View::EventsV1)
}

/// A stored object as `def` serves it: the same object unless `def` converts ([`converts`]).
pub fn serve(def: &ResourceDef, stored: Object) -> Object {
    if !converts(def) {
        return stored;
    }
    let converted = stored
        .to_value()
        .map(|v| to_served(def, v))
        .and_then(|v| super::encode::to_vec(&v))
        .map_err(|e| e.to_string())
        .and_then(|b| Object::from_bytes(Bytes::from(b)).map_err(|e| e.to_string()));
    match converted {
        Ok(o) => o,
        Err(e) => {
            // A stored Event is always valid JSON with metadata; keep serving if not.
            tracing::warn!(error = %e, "stored Event could not be converted");
            stored
        }
    }
}

/// [`serve`] for raw stored bytes (a watch event's object).
pub(crate) fn serve_raw(def: &ResourceDef, raw: &[u8]) -> Option<Bytes> {
    let o = Object::from_bytes(Bytes::copy_from_slice(raw)).ok()?;
    Some(serve(def, o).raw_bytes())
}

/// The field labels a field selector may use on `def`'s view, beyond `metadata.name` and
/// `metadata.namespace` (kube-apiserver's field label conversions for both groups).
pub(crate) fn field_labels(def: &ResourceDef) -> &'static [&'static str] {
    match view_of(def) {
        Some(View::Core) => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        Some(View::EventsV1) => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "source",
            "type",
        ],
        None => &[],
    }
}

/// Whether a stored object is an Event (its field labels are read by [`field_value`]).
pub(crate) fn is_stored_event(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("Event")
        && v.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// The value of a field label of either view on a stored (core) Event, as the server's
/// `EventToSelectableFields` computes it: `regarding.*` is `involvedObject.*`,
/// `reportingController` is `reportingComponent`, `source` is `source.component` or else the
/// reporting controller.
pub(crate) fn field_value(label: &str, stored: &Value) -> String {
    let str_at = |p: &str| {
        stored
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if let Some(rest) = label
        .strip_prefix("regarding.")
        .or_else(|| label.strip_prefix("involvedObject."))
    {
        return str_at(&format!("/involvedObject/{rest}"));
    }
    match label {
        "reportingController" | "reportingComponent" => str_at("/reportingComponent"),
        "source" => {
            let c = str_at("/source/component");
            if c.is_empty() {
                str_at("/reportingComponent")
            } else {
                c
            }
        }
        _ => str_at(&format!("/{}", label.replace('.', "/"))),
    }
}

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

fn str_of<'a>(v: &'a Value, member: &str) -> &'a str {
    v.get(member).and_then(Value::as_str).unwrap_or("")
}

fn is_set(v: &Value, member: &str) -> bool {
    v.get(member).is_some_and(|x| !is_zero(x))
}

/// `legacyValidateEvent`, on a stored-form Event in namespace `ns`.
fn legacy_errors(e: &Value, ns: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let io_ns = e
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            io_ns,
            "does not match event.namespace",
        )
    };
    if !is_set(e, "eventTime") {
        // Events without eventTime are the old kind: only the namespaces must agree.
        let agree = if io_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == io_ns
        };
        if !agree {
            errs.push(mismatch());
        }
    } else {
        if io_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(mismatch());
        }
        let controller = str_of(e, "reportingComponent");
        if controller.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        }
        for why in qualified_name_errors(controller) {
            errs.push(FieldError::invalid("reportingController", controller, &why));
        }
        let limited = [
            ("reportingInstance", REPORTING_INSTANCE_LIMIT),
            ("action", ACTION_LIMIT),
            ("reason", REASON_LIMIT),
        ];
        for (member, limit) in limited {
            let s = str_of(e, member);
            if s.is_empty() {
                errs.push(FieldError::required(member, ""));
            }
            if s.len() > limit {
                errs.push(FieldError::invalid(
                    member,
                    "",
                    &format!("can have at most {limit} characters"),
                ));
            }
        }
        if str_of(e, "message").len() > NOTE_LIMIT {
            errs.push(FieldError::invalid(
                "message",
                "",
                &format!("can have at most {NOTE_LIMIT} characters"),
            ));
        }
    }
    if let Err(why) = validate_dns_subdomain(ns) {
        errs.push(FieldError::invalid("namespace", ns, &why));
    }
    errs
}

/// `validateV1EventSeries`.
fn series_errors(e: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(series) = e.get("series").filter(|s| s.is_object()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                "",
                "should be at least 2",
            ));
        }
        if !is_set(series, "lastObservedTime") {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    errs
}

fn refuse(e: &Value, errs: Vec<FieldError>) -> Result<(), Status> {
    if errs.is_empty() {
        return Ok(());
    }
    let name = e
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(response::invalid("Event", "", name, &errs))
}

fn namespace_of(e: &Value) -> &str {
    e.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `ValidateEventCreate` for a create through `def`'s view, on the stored form of the new
/// Event. Other kinds pass.
pub(crate) fn validate_create(def: &ResourceDef, stored: &Value) -> Result<(), Status> {
    let Some(view) = view_of(def) else {
        return Ok(());
    };
    let mut errs = legacy_errors(stored, namespace_of(stored));
    if view == View::EventsV1 {
        errs.extend(series_errors(stored));
        if !is_set(stored, "eventTime") {
            errs.push(FieldError::required("eventTime", ""));
        }
        let ty = str_of(stored, "type");
        if ty != "Normal" && ty != "Warning" {
            errs.push(FieldError::invalid(
                "type",
                "",
                &format!("has invalid value: {ty}"),
            ));
        }
        for member in ["firstTimestamp", "lastTimestamp", "count", "source"] {
            if is_set(stored, member) {
                errs.push(FieldError::invalid(member, "", "needs to be unset"));
            }
        }
    }
    refuse(stored, errs)
}

/// Go's `%#v` of a core `ObjectReference`; a nil `related` pointer reads `"null"`, as the
/// server's field errors print it.
fn go_reference(v: Option<&Value>) -> String {
    let Some(v) = v.filter(|v| v.is_object()) else {
        return "\"null\"".into();
    };
    let fields = [
        ("Kind", "kind"),
        ("Namespace", "namespace"),
        ("Name", "name"),
        ("UID", "uid"),
        ("APIVersion", "apiVersion"),
        ("ResourceVersion", "resourceVersion"),
        ("FieldPath", "fieldPath"),
    ];
    let inner: Vec<String> = fields
        .iter()
        .map(|(go, json)| format!("{go}:{:?}", str_of(v, json)))
        .collect();
    format!("core.ObjectReference{{{}}}", inner.join(", "))
}

/// Go's `time.Time.String()` of a stored `Time`/`MicroTime` (UTC), the zero time for `null`.
fn go_time(v: Option<&Value>) -> String {
    let Some((date_time, frac)) = v.and_then(Value::as_str).and_then(split_time) else {
        return "0001-01-01 00:00:00 +0000 UTC".into();
    };
    let frac = frac.trim_end_matches('0');
    let dot = if frac.is_empty() { "" } else { "." };
    format!("{}{dot}{frac} +0000 UTC", date_time.replacen('T', " ", 1))
}

/// A member of a stored Event as the server's field errors print its value.
fn go_value(e: &Value, member: &str) -> String {
    match member {
        "involvedObject" | "related" => go_reference(e.get(member)),
        "source" => format!(
            "core.EventSource{{Component:{:?}, Host:{:?}}}",
            e.pointer("/source/component")
                .and_then(Value::as_str)
                .unwrap_or(""),
            e.pointer("/source/host")
                .and_then(Value::as_str)
                .unwrap_or("")
        ),
        "firstTimestamp" | "lastTimestamp" | "eventTime" => go_time(e.get(member)),
        "count" => e
            .get(member)
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .to_string(),
        _ => format!("{:?}", str_of(e, member)),
    }
}

/// What an update through `events.k8s.io/v1` may not change: (stored member, field name in the
/// error), in the server's order (it checks `reason` twice).
const IMMUTABLE: &[(&str, &str)] = &[
    ("involvedObject", "involvedObject"),
    ("reason", "reason"),
    ("message", "message"),
    ("source", "source"),
    ("firstTimestamp", "firstTimestamp"),
    ("lastTimestamp", "lastTimestamp"),
    ("count", "count"),
    ("reason", "reason"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("action", "action"),
    ("related", "related"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
];

/// `ValidateEventUpdate` for an update through `def`'s view, on the stored forms of the old
/// and the new Event. Other kinds pass.
pub(crate) fn validate_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), Status> {
    let Some(view) = view_of(def) else {
        return Ok(());
    };
    let mut errs = legacy_errors(new, namespace_of(new));
    if view == View::EventsV1 {
        if old.get("series") != new.get("series") {
            errs.extend(series_errors(new));
        }
        for (member, field) in IMMUTABLE {
            if old.get(*member) != new.get(*member) {
                errs.push(FieldError {
                    reason: "FieldValueInvalid",
                    field: (*field).to_owned(),
                    detail: format!(
                        "Invalid value: {}: field is immutable",
                        go_value(new, member)
                    ),
                });
            }
        }
    }
    refuse(new, errs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recorded_create() -> Value {
        json!({"apiVersion":"events.k8s.io/v1","kind":"Event",
            "metadata":{"name":"exists.17b0c0ffee000001","namespace":"rbac-samples"},
            "eventTime":"2026-11-24T22:59:48.085870Z","reportingController":"janitor",
            "reportingInstance":"host-a_1f2e","action":"Delete","reason":"Expired","type":"Normal",
            "note":"deleted ConfigMap rbac-samples/exists: ttl 20s expired",
            "regarding":{"apiVersion":"v1","kind":"ConfigMap","namespace":"rbac-samples",
                "name":"exists","uid":"00000000-0000-0000-0000-000000000000"}})
    }

    #[test]
    fn the_two_views_convert_into_each_other_as_the_samples_show() {
        let stored = reshape(recorded_create(), View::EventsV1, View::Core, Keep::Encoded);
        assert_eq!(
            stored,
            json!({"apiVersion":"v1","kind":"Event",
                "metadata":{"name":"exists.17b0c0ffee000001","namespace":"rbac-samples"},
                "involvedObject":{"apiVersion":"v1","kind":"ConfigMap","namespace":"rbac-samples",
                    "name":"exists","uid":"00000000-0000-0000-0000-000000000000"},
                "reason":"Expired","message":"deleted ConfigMap rbac-samples/exists: ttl 20s expired",
                "source":{},"firstTimestamp":null,"lastTimestamp":null,"type":"Normal",
                "eventTime":"2026-11-24T22:59:48.085870Z","action":"Delete",
                "reportingComponent":"janitor","reportingInstance":"host-a_1f2e"})
        );
        let back = reshape(stored, View::Core, View::EventsV1, Keep::Encoded);
        let mut want = recorded_create();
        want["deprecatedSource"] = json!({});
        want["deprecatedFirstTimestamp"] = Value::Null;
        want["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(back, want);
        let encoded = String::from_utf8(super::super::encode::to_vec(&back).unwrap()).unwrap();
        assert!(
            encoded.ends_with(r#""type":"Normal","deprecatedSource":{},"deprecatedFirstTimestamp":null,"deprecatedLastTimestamp":null}"#),
            "{encoded}"
        );
    }

    #[test]
    fn go_encoding_of_an_old_style_core_event() {
        let e = json!({"kind":"Event","apiVersion":"v1","metadata":{"name":"x"},
            "involvedObject":{"kind":"Pod","name":"p","fieldPath":""},"count":3,"reason":"",
            "firstTimestamp":"2024-01-02T03:04:05.678Z","source":{"component":"kubelet"},
            "unknown":"dropped"});
        let v = reshape(e, View::Core, View::Core, Keep::Encoded);
        assert_eq!(
            v,
            json!({"kind":"Event","apiVersion":"v1","metadata":{"name":"x"},
                "involvedObject":{"kind":"Pod","name":"p"},"source":{"component":"kubelet"},
                "firstTimestamp":"2024-01-02T03:04:05Z","lastTimestamp":null,"count":3,
                "eventTime":null,"reportingComponent":"","reportingInstance":""})
        );
        let as_events = reshape(v, View::Core, View::EventsV1, Keep::Encoded);
        assert_eq!(as_events["deprecatedCount"], 3);
        assert_eq!(
            as_events["deprecatedSource"],
            json!({"component":"kubelet"})
        );
        assert_eq!(as_events["eventTime"], Value::Null);
        assert!(as_events.get("reportingController").is_none());
    }

    #[test]
    fn series_and_times_in_each_views_encoding() {
        let e = json!({"series":{"count":2,"lastObservedTime":"2026-11-24T22:59:48.4Z"},
            "eventTime":"2026-11-24T22:59:48Z"});
        let v = reshape(e, View::EventsV1, View::Core, Keep::Encoded);
        assert_eq!(
            v["series"],
            json!({"count":2,"lastObservedTime":"2026-11-24T22:59:48.400000Z"})
        );
        assert_eq!(v["eventTime"], "2026-11-24T22:59:48.000000Z");
        let empty = reshape(
            json!({"series":{}}),
            View::EventsV1,
            View::EventsV1,
            Keep::Encoded,
        );
        assert_eq!(empty["series"], json!({"count":0,"lastObservedTime":null}));
        let written = reshape(recorded_create(), View::EventsV1, View::EventsV1, Keep::Set);
        assert!(written.get("deprecatedSource").is_none());
    }

    #[test]
    fn selectable_fields_of_both_views_read_the_stored_form() {
        let stored = reshape(recorded_create(), View::EventsV1, View::Core, Keep::Encoded);
        assert_eq!(field_value("regarding.kind", &stored), "ConfigMap");
        assert_eq!(field_value("involvedObject.name", &stored), "exists");
        assert_eq!(field_value("reportingController", &stored), "janitor");
        assert_eq!(field_value("reportingComponent", &stored), "janitor");
        assert_eq!(field_value("source", &stored), "janitor", "falls back");
        assert_eq!(field_value("type", &stored), "Normal");
        assert_eq!(field_value("involvedObject.fieldPath", &stored), "");
    }

    #[test]
    fn go_renderings_of_immutable_values() {
        assert_eq!(
            go_time(Some(&json!("2026-11-24T22:59:48.085870Z"))),
            "2026-11-24 22:59:48.08587 +0000 UTC"
        );
        assert_eq!(go_time(None), "0001-01-01 00:00:00 +0000 UTC");
        assert_eq!(
            go_reference(Some(&json!({"kind":"Pod","name":"p"}))),
            r#"core.ObjectReference{Kind:"Pod", Namespace:"", Name:"p", UID:"", APIVersion:"", ResourceVersion:"", FieldPath:""}"#
        );
        assert_eq!(go_reference(None), "\"null\"");
    }
}
