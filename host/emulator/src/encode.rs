//! Objects as the API server writes them: `kind`, `apiVersion`, `metadata` first, and inside
//! `metadata` the fields in `ObjectMeta`'s order (name, namespace, uid, resourceVersion, …),
//! each `managedFields` entry in `ManagedFieldsEntry`'s order; Events of both groups (core
//! `v1` and `events.k8s.io/v1`) in their Go structs' order throughout.
//!
//! Why the order matters: kube-apiserver encodes Go structs, so every object it sends starts
//! with its type and identity (see the recorded samples). `serde_json::Value` keeps keys
//! sorted, which would put a ConfigMap's `data` before its `kind`; a client that reads type
//! metadata from the front of an object (as the host's reflector does) would then see the
//! emulator behave unlike any real server. Other kinds keep the sorted order below the top
//! level: no client depends on it, and a table of every built-in struct would be large. Events
//! have their table because their two views are compared member by member with the samples.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// The member order of one JSON object: `members` first, in this order (the rest after them,
/// sorted), and the layout of the members that are objects (or lists of objects) themselves.
pub(crate) struct Layout {
    pub members: &'static [&'static str],
    pub nested: &'static [(&'static str, &'static Layout)],
}

/// `ManagedFieldsEntry`'s field order.
const MANAGED_FIELDS_ENTRY: Layout = Layout {
    members: &[
        "manager",
        "operation",
        "apiVersion",
        "time",
        "fieldsType",
        "fieldsV1",
        "subresource",
    ],
    nested: &[],
};

/// `ObjectMeta`'s field order.
const META: Layout = Layout {
    members: &[
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ],
    nested: &[("managedFields", &MANAGED_FIELDS_ENTRY)],
};

/// Any object: type and identity first.
const OBJECT: Layout = Layout {
    members: &["kind", "apiVersion", "metadata"],
    nested: &[("metadata", &META)],
};

/// `ObjectReference` (an Event's `involvedObject`/`regarding` and `related`).
const OBJECT_REFERENCE: Layout = Layout {
    members: &[
        "kind",
        "namespace",
        "name",
        "uid",
        "apiVersion",
        "resourceVersion",
        "fieldPath",
    ],
    nested: &[],
};

/// `EventSource`.
const EVENT_SOURCE: Layout = Layout {
    members: &["component", "host"],
    nested: &[],
};

/// `EventSeries` (the same order in both groups).
const EVENT_SERIES: Layout = Layout {
    members: &["count", "lastObservedTime"],
    nested: &[],
};

/// A core `v1` Event (`k8s.io/api/core/v1.Event`).
pub(crate) const CORE_EVENT: Layout = Layout {
    members: &[
        "kind",
        "apiVersion",
        "metadata",
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "series",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    ],
    nested: &[
        ("metadata", &META),
        ("involvedObject", &OBJECT_REFERENCE),
        ("source", &EVENT_SOURCE),
        ("series", &EVENT_SERIES),
        ("related", &OBJECT_REFERENCE),
    ],
};

/// An `events.k8s.io/v1` Event (`k8s.io/api/events/v1.Event`).
pub(crate) const EVENTS_V1_EVENT: Layout = Layout {
    members: &[
        "kind",
        "apiVersion",
        "metadata",
        "eventTime",
        "series",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
        "regarding",
        "related",
        "note",
        "type",
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ],
    nested: &[
        ("metadata", &META),
        ("series", &EVENT_SERIES),
        ("regarding", &OBJECT_REFERENCE),
        ("related", &OBJECT_REFERENCE),
        ("deprecatedSource", &EVENT_SOURCE),
    ],
};

/// The layout of a whole object, from its type.
fn layout_of(v: &Value) -> &'static Layout {
    let kind = v.get("kind").and_then(Value::as_str);
    let api_version = v.get("apiVersion").and_then(Value::as_str);
    match (api_version, kind) {
        (Some("v1"), Some("Event")) => &CORE_EVENT,
        (Some("events.k8s.io/v1"), Some("Event")) => &EVENTS_V1_EVENT,
        _ => &OBJECT,
    }
}

/// `v` as JSON bytes in the API server's member order.
pub(crate) fn to_vec(v: &Value) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Ordered {
        v,
        layout: layout_of(v),
    })
}

/// A value serialized in `layout`'s member order.
struct Ordered<'a> {
    v: &'a Value,
    layout: &'static Layout,
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.v {
            // A list takes its member's layout for each item (managedFields entries).
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Ordered {
                        v: item,
                        layout: self.layout,
                    })?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let nested = |k: &str| self.layout.nested.iter().find(|(n, _)| *n == k);
                let mut m = s.serialize_map(Some(map.len()))?;
                for k in self.layout.members {
                    let Some(v) = map.get(*k) else { continue };
                    match nested(k) {
                        Some((_, layout)) => m.serialize_entry(k, &Ordered { v, layout })?,
                        None => m.serialize_entry(k, v)?,
                    }
                }
                for (k, v) in map {
                    if !self.layout.members.contains(&k.as_str()) {
                        m.serialize_entry(k, v)?;
                    }
                }
                m.end()
            }
            v => v.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_identity_come_first_as_in_the_samples() {
        let v = serde_json::json!({
            "data": {"b": "2", "a": "1"},
            "apiVersion": "v1",
            "metadata": {"uid": "u", "labels": {"x": "y"}, "name": "n", "namespace": "ns",
                         "resourceVersion": "5", "creationTimestamp": "t", "zzz": 1},
            "kind": "ConfigMap"
        });
        let out = String::from_utf8(to_vec(&v).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"n","namespace":"ns","uid":"u","resourceVersion":"5","creationTimestamp":"t","labels":{"x":"y"},"zzz":1},"data":{"a":"1","b":"2"}}"#
        );
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn managed_fields_entries_in_the_servers_order() {
        let v = serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
            "name": "n", "managedFields": [{"time": "t", "operation": "Update",
            "manager": "m", "fieldsV1": {"f:data": {}}, "fieldsType": "FieldsV1",
            "apiVersion": "v1"}]}});
        let out = String::from_utf8(to_vec(&v).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"n","managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","time":"t","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]}}"#
        );
    }

    #[test]
    fn both_event_views_in_their_structs_order() {
        let core = serde_json::json!({"type": "Normal", "reportingInstance": "i",
            "reportingComponent": "c", "message": "m", "kind": "Event", "apiVersion": "v1",
            "involvedObject": {"apiVersion": "v1", "uid": "u", "name": "n", "kind": "Pod"},
            "metadata": {"name": "e"}, "series": {"lastObservedTime": "t", "count": 2}});
        let out = String::from_utf8(to_vec(&core).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"e"},"involvedObject":{"kind":"Pod","name":"n","uid":"u","apiVersion":"v1"},"message":"m","type":"Normal","series":{"count":2,"lastObservedTime":"t"},"reportingComponent":"c","reportingInstance":"i"}"#
        );
        let v1 = serde_json::json!({"note": "m", "regarding": {"name": "n", "kind": "Pod"},
            "kind": "Event", "apiVersion": "events.k8s.io/v1", "eventTime": "t",
            "reportingController": "c", "deprecatedSource": {}});
        let out = String::from_utf8(to_vec(&v1).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"kind":"Event","apiVersion":"events.k8s.io/v1","eventTime":"t","reportingController":"c","regarding":{"kind":"Pod","name":"n"},"note":"m","deprecatedSource":{}}"#
        );
    }

    #[test]
    fn values_that_are_not_objects_encode_as_usual() {
        assert_eq!(to_vec(&serde_json::json!([1, "a"])).unwrap(), br#"[1,"a"]"#);
    }
}
