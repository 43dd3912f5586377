//! Deletions whose final state the informer could not observe.
//!
//! Why: after a relist, an object missing from the new list was deleted while the watch was
//! down; its last state is unknown, so the pipeline hands handlers a tombstone carrying the key
//! and the last state it knew (spec 2.5), and keys it by that key (spec 3.1).

use kwh_client::Object;

/// A deletion observed only by its absence from a relist (client-go's
/// `DeletedFinalStateUnknown`). `obj` is the last state the cache held, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletedFinalStateUnknown {
    pub key: String,
    pub obj: Option<Object>,
}

/// What a Deleted delta and an `on_delete` notification carry: the object's last state, or a
/// tombstone when that state is unknown. The rare tombstone is boxed so that every queued
/// delta stays two words (a relist queues one per object).
#[derive(Debug, Clone, PartialEq)]
pub enum ObjOrTombstone {
    Object(Object),
    Tombstone(Box<DeletedFinalStateUnknown>),
}

impl ObjOrTombstone {
    /// The store key; a tombstone's own key is used as is (spec 3.1,
    /// `DeletionHandlingMetaNamespaceKeyFunc`).
    pub fn key(&self) -> String {
        match self {
            ObjOrTombstone::Object(o) => o.key(),
            ObjOrTombstone::Tombstone(t) => t.key.clone(),
        }
    }

    /// [`key`](Self::key) lent to `f` without allocating ([`Object::with_key`]).
    pub fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            ObjOrTombstone::Object(o) => o.with_key(f),
            ObjOrTombstone::Tombstone(t) => f(&t.key),
        }
    }

    /// The object, or the last known state inside a tombstone.
    pub fn object(&self) -> Option<&Object> {
        match self {
            ObjOrTombstone::Object(o) => Some(o),
            ObjOrTombstone::Tombstone(t) => t.obj.as_ref(),
        }
    }

    pub fn is_tombstone(&self) -> bool {
        matches!(self, ObjOrTombstone::Tombstone(_))
    }
}

impl From<DeletedFinalStateUnknown> for ObjOrTombstone {
    fn from(t: DeletedFinalStateUnknown) -> Self {
        ObjOrTombstone::Tombstone(Box::new(t))
    }
}

impl From<Object> for ObjOrTombstone {
    fn from(o: Object) -> Self {
        ObjOrTombstone::Object(o)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use kwh_client::Object;

    /// A test object with the given namespace ("" = cluster-scoped), name, RV and labels.
    pub fn obj(ns: &str, name: &str, rv: &str) -> Object {
        obj_labels(ns, name, rv, &[])
    }

    pub fn obj_labels(ns: &str, name: &str, rv: &str, labels: &[(&str, &str)]) -> Object {
        let mut meta = serde_json::json!({"name": name, "resourceVersion": rv});
        if !ns.is_empty() {
            meta["namespace"] = ns.into();
        }
        if !labels.is_empty() {
            let m: serde_json::Map<String, serde_json::Value> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).into()))
                .collect();
            meta["labels"] = m.into();
        }
        Object::from_value(
            &serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta}),
        )
        .expect("test object")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::obj;
    use super::*;

    #[test]
    fn spec_3_1_key_unwraps_tombstone_and_uses_ns_slash_name() {
        assert_eq!(ObjOrTombstone::from(obj("ns", "a", "1")).key(), "ns/a");
        assert_eq!(ObjOrTombstone::from(obj("", "node1", "1")).key(), "node1");
        let t = ObjOrTombstone::from(DeletedFinalStateUnknown {
            key: "other/b".into(),
            obj: Some(obj("ns", "a", "1")),
        });
        assert_eq!(t.key(), "other/b");
        assert_eq!(t.object().map(|o| o.key()), Some("ns/a".to_owned()));
    }
}
