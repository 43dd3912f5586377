//! The object representation shared by the whole pipeline: raw JSON bytes plus parsed metadata.
//!
//! Why: the host never needs a typed view of an object, only its identity and the fields that
//! drive indexing and dispatch. Parsing metadata once at ingest and sharing the bytes (cheap
//! `Clone`) keeps the store small and the hot path free of full decodes.

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;

/// Error parsing an object's metadata.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object is not valid JSON with metadata: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no metadata.name")]
    MissingName,
}

/// An owner reference, as the pipeline needs it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    pub api_version: Box<str>,
    pub kind: Box<str>,
    pub name: Box<str>,
    pub uid: Box<str>,
    #[serde(default)]
    pub controller: Option<bool>,
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

/// The metadata the pipeline reads. Labels and annotations keep insertion order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub namespace: Option<Box<str>>,
    pub name: Box<str>,
    pub uid: Box<str>,
    pub resource_version: Box<str>,
    pub generation: i64,
    pub labels: Vec<(Box<str>, Box<str>)>,
    pub annotations: Vec<(Box<str>, Box<str>)>,
    pub owner_references: Vec<OwnerRef>,
    pub deletion_timestamp: Option<Box<str>>,
    pub finalizers: Vec<Box<str>>,
}

impl Meta {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
    /// The value of annotation `key`, if present.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// An immutable object: raw JSON and its parsed metadata, shared by reference count.
#[derive(Clone)]
pub struct Object(Arc<Inner>);

struct Inner {
    raw: Bytes,
    meta: Meta,
}

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
        Arc::ptr_eq(&self.0, &other.0) || (self.0.raw == other.0.raw)
    }
}

impl Object {
    /// Parse metadata from `raw` (a JSON object) and keep the bytes as they are.
    pub fn from_bytes(raw: Bytes) -> Result<Self, ObjectError> {
        let meta = parse_meta(&raw)?;
        Ok(Self::from_parts(raw, meta))
    }

    /// Build from bytes and metadata already parsed (e.g. by the watch decoder).
    pub fn from_parts(raw: Bytes, meta: Meta) -> Self {
        Object(Arc::new(Inner { raw, meta }))
    }

    /// Build from a JSON value (tests and tools; not the hot path).
    pub fn from_value(v: &serde_json::Value) -> Result<Self, ObjectError> {
        Self::from_bytes(Bytes::from(serde_json::to_vec(v)?))
    }

    pub fn raw(&self) -> &Bytes {
        &self.0.raw
    }
    pub fn meta(&self) -> &Meta {
        &self.0.meta
    }
    pub fn name(&self) -> &str {
        &self.0.meta.name
    }
    pub fn namespace(&self) -> Option<&str> {
        self.0.meta.namespace.as_deref()
    }
    pub fn resource_version(&self) -> &str {
        &self.0.meta.resource_version
    }
    pub fn uid(&self) -> &str {
        &self.0.meta.uid
    }

    /// The store key, `namespace/name` or `name` (spec 3.1).
    pub fn key(&self) -> String {
        object_key(self.namespace(), self.name())
    }

    /// Decode the whole object (off the hot path only).
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.0.raw)
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

/// Parse only `metadata` out of an object's JSON.
pub fn parse_meta(raw: &[u8]) -> Result<Meta, ObjectError> {
    // Everything outside `metadata` is skipped by serde without allocation.
    #[derive(Deserialize)]
    struct Outer {
        #[serde(default)]
        metadata: Option<MetaOwned>,
    }
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct MetaOwned {
        #[serde(default)]
        name: Option<Box<str>>,
        #[serde(default)]
        namespace: Option<Box<str>>,
        #[serde(default)]
        uid: Option<Box<str>>,
        #[serde(default)]
        resource_version: Option<Box<str>>,
        #[serde(default)]
        generation: Option<i64>,
        #[serde(default, deserialize_with = "ordered_map")]
        labels: Vec<(Box<str>, Box<str>)>,
        #[serde(default, deserialize_with = "ordered_map")]
        annotations: Vec<(Box<str>, Box<str>)>,
        #[serde(default)]
        owner_references: Option<Vec<OwnerRef>>,
        #[serde(default)]
        deletion_timestamp: Option<Box<str>>,
        #[serde(default)]
        finalizers: Option<Vec<Box<str>>>,
    }
    let outer: Outer = serde_json::from_slice(raw)?;
    let m = outer.metadata.unwrap_or_default();
    Ok(Meta {
        namespace: m.namespace.filter(|n| !n.is_empty()),
        name: m.name.unwrap_or_default(),
        uid: m.uid.unwrap_or_default(),
        resource_version: m.resource_version.unwrap_or_default(),
        generation: m.generation.unwrap_or(0),
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references.unwrap_or_default(),
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers.unwrap_or_default(),
    })
}

fn ordered_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<(Box<str>, Box<str>)>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<(Box<str>, Box<str>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings or null")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0));
            while let Some((k, v)) = a.next_entry::<Box<str>, Box<str>>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_option(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_metadata_of_a_sample_configmap() {
        let raw = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"pre-5","namespace":"samples","uid":"u1","resourceVersion":"50470","labels":{"sample":"yes"},"finalizers":["a/b"]},"data":{"k":"v5"}}"#;
        let o = Object::from_bytes(Bytes::from_static(raw)).unwrap();
        assert_eq!(o.key(), "samples/pre-5");
        assert_eq!(o.resource_version(), "50470");
        assert_eq!(o.meta().label("sample"), Some("yes"));
        assert_eq!(&*o.meta().finalizers[0], "a/b");
    }

    #[test]
    fn split_key_accepts_one_or_two_parts_only() {
        // spec 3.1
        assert_eq!(split_key("a").unwrap(), (None, "a"));
        assert_eq!(split_key("ns/a").unwrap(), (Some("ns"), "a"));
        assert!(split_key("a/b/c").is_err());
    }
}
