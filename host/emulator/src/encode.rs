//! Objects as the API server writes them: `kind`, `apiVersion`, `metadata` first, and inside
//! `metadata` the fields in `ObjectMeta`'s order (name, namespace, uid, resourceVersion, …).
//!
//! Why the order matters: kube-apiserver encodes Go structs, so every object it sends starts
//! with its type and identity (see the recorded samples). `serde_json::Value` keeps keys
//! sorted, which would put a ConfigMap's `data` before its `kind`; a client that reads type
//! metadata from the front of an object (as the host's reflector does) would then see the
//! emulator behave unlike any real server. Deeper levels keep the sorted order: no client
//! depends on them.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

/// Top-level members that come first, in this order.
const OBJECT_FIRST: &[&str] = &["kind", "apiVersion", "metadata"];

/// `ObjectMeta`'s field order.
const META_ORDER: &[&str] = &[
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
];

/// `v` as JSON bytes in the API server's member order.
pub(crate) fn to_vec(v: &Value) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Ordered {
        v,
        first: OBJECT_FIRST,
        top: true,
    })
}

struct Ordered<'a> {
    v: &'a Value,
    first: &'static [&'static str],
    top: bool,
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(map) = self.v else {
            return self.v.serialize(s);
        };
        let mut m = s.serialize_map(Some(map.len()))?;
        for k in self.first {
            if let Some(v) = map.get(*k) {
                if self.top && *k == "metadata" {
                    m.serialize_entry(
                        k,
                        &Ordered {
                            v,
                            first: META_ORDER,
                            top: false,
                        },
                    )?;
                } else {
                    m.serialize_entry(k, v)?;
                }
            }
        }
        for (k, v) in map {
            if !self.first.contains(&k.as_str()) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
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
    fn values_that_are_not_objects_encode_as_usual() {
        assert_eq!(to_vec(&serde_json::json!([1, "a"])).unwrap(), br#"[1,"a"]"#);
    }
}
