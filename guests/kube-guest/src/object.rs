//! [`Object`]: a Kubernetes object as JSON, with typed access to its metadata.
//!
//! Why JSON and not generated structs for every kind: guests watch any kind, including custom
//! resources, and the host hands objects over as the API server's JSON. A `serde_json::Value`
//! behind typed metadata accessors keeps every field (nothing is dropped by a round trip through
//! a struct that does not know it), and [`Object::get_as`] decodes just the part a controller
//! wants into its own types.

use std::cell::OnceCell;
use std::ops::{Deref, DerefMut};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::CachedObject;

/// A Kubernetes object: its JSON, with metadata accessors.
///
/// It dereferences to [`serde_json::Value`], so `obj["spec"]["replicas"]` works as usual.
///
/// ```
/// use kube_guest::Object;
/// let obj = Object::from_slice(br#"{"apiVersion":"v1","kind":"ConfigMap",
///     "metadata":{"name":"app","namespace":"prod","labels":{"team":"web"},"generation":3},
///     "data":{"k":"v"}}"#).unwrap();
/// assert_eq!(obj.key(), "prod/app");
/// assert_eq!(obj.label("team"), Some("web"));
/// assert_eq!(obj.generation(), 3);
/// assert_eq!(obj["data"]["k"], "v");
/// ```
///
/// An object a handler receives is parsed only when it is read: its key, name, namespace,
/// uid, resourceVersion, generation, labels and deletion state come from the metadata the host
/// already parsed, so a handler that only enqueues a key, or filters on labels, never parses
/// the JSON. The first access to anything else (indexing, `value()`, annotations, a mutation)
/// parses it once.
#[derive(Clone, Default)]
pub struct Object {
    /// The JSON, parsed on first use when the object came from the host.
    value: OnceCell<Value>,
    /// The host's bytes and metadata, while the object is unmodified. Held in place, not
    /// boxed: a reconcile's lister read makes one `Object`, and a box was one more allocation
    /// and free in the guest per read.
    host: Option<HostObject>,
}

/// What the host handed over with a notification: the JSON and, unless the host could not give
/// them, the positions of the metadata strings in it.
#[derive(Clone)]
struct HostObject {
    json: Vec<u8>,
    meta: Option<HostMeta>,
}

/// The host-parsed metadata of a [`HostObject`], as positions in its JSON: the `meta` block of
/// the WIT's `cached-object` (flags, four start/length pairs, then four numbers per label).
#[derive(Clone)]
struct HostMeta {
    meta: Vec<u32>,
    generation: i64,
}

/// The first label's position in `meta`.
const LABELS_AT: usize = 9;

/// The verbatim metadata of a host object, resolved against its bytes.
struct MetaView<'a> {
    json: &'a [u8],
    meta: &'a HostMeta,
}

impl<'a> MetaView<'a> {
    /// String `i` of the header: 0 namespace, 1 name, 2 uid, 3 resourceVersion.
    fn s(&self, i: usize) -> &'a str {
        let m = &self.meta.meta;
        slice(self.json, m[1 + 2 * i], m[2 + 2 * i])
    }
    fn deleting(&self) -> bool {
        self.meta.meta[0] & 2 != 0
    }
    fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let json = self.json;
        self.meta.meta[LABELS_AT..]
            .chunks_exact(4)
            .map(move |q| (slice(json, q[0], q[1]), slice(json, q[2], q[3])))
    }
}

/// `json[start .. start + len]` as text. The host's spans bound quoted strings of valid UTF-8,
/// so this never fails; if it did, the string would read as empty rather than trap.
fn slice(json: &[u8], start: u32, len: u32) -> &str {
    let (a, b) = (start as usize, start as usize + len as usize);
    json.get(a..b)
        .and_then(|s| std::str::from_utf8(s).ok())
        .unwrap_or("")
}

/// A reference from a dependent to its owner (`metadata.ownerReferences[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's name (owners are in the dependent's namespace, or cluster-scoped).
    pub name: String,
    /// The owner's UID: a recreated owner of the same name is a different owner.
    pub uid: String,
    /// Whether the owner is the managing controller (at most one reference may say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether foreground deletion of the owner waits for this dependent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

impl OwnerReference {
    /// Whether this reference marks its owner as the managing controller.
    pub fn is_controller(&self) -> bool {
        self.controller == Some(true)
    }
}

/// The key of an object: `namespace/name`, or `name` for cluster-scoped objects (the form the
/// host's workqueue and lister use, as client-go's `MetaNamespaceKeyFunc`).
///
/// ```
/// assert_eq!(kube_guest::object_key(Some("prod"), "web"), "prod/web");
/// assert_eq!(kube_guest::object_key(None, "node-1"), "node-1");
/// ```
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Splits a `namespace/name` key (or a bare `name` for cluster-scoped objects).
///
/// ```
/// assert_eq!(kube_guest::split_key("prod/web"), (Some("prod"), "web"));
/// assert_eq!(kube_guest::split_key("node-1"), (None, "node-1"));
/// ```
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

fn str_map(v: Option<&Value>) -> impl Iterator<Item = (&str, &str)> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

impl Object {
    fn of(v: Value) -> Self {
        Object {
            value: OnceCell::from(v),
            host: None,
        }
    }

    /// An object as a notification carries it: the host's JSON and the positions of its
    /// metadata. Parsing waits until something the metadata does not answer is read.
    #[doc(hidden)]
    pub fn from_host(o: CachedObject) -> Self {
        // Bit 0 of the flags: the positions are valid (else the metadata comes from the JSON).
        let verbatim = o.meta.len() >= LABELS_AT && o.meta[0] & 1 != 0;
        let meta = verbatim.then_some(HostMeta {
            meta: o.meta,
            generation: o.generation,
        });
        Object {
            value: OnceCell::new(),
            host: Some(HostObject { json: o.json, meta }),
        }
    }

    /// An object the host's cache answered with (the lister): its JSON, parsed on first read.
    /// A reconcile that only checks an object exists, or reads nothing of it, parses nothing.
    #[doc(hidden)]
    pub fn from_host_json(json: Vec<u8>) -> Self {
        Object {
            value: OnceCell::new(),
            host: Some(HostObject { json, meta: None }),
        }
    }

    /// The host-parsed metadata, while the object is unmodified.
    fn host_meta(&self) -> Option<MetaView<'_>> {
        let h = self.host.as_ref()?;
        Some(MetaView {
            json: &h.json,
            meta: h.meta.as_ref()?,
        })
    }

    /// The JSON value, parsed now if it was not yet.
    fn v(&self) -> &Value {
        self.value.get_or_init(|| {
            let json = self.host.as_ref().map_or(&b"{}"[..], |h| &h.json[..]);
            // The host only sends JSON objects; should one ever not parse, the object reads as
            // empty (and its metadata accessors still answer from the host's metadata).
            serde_json::from_slice(json).unwrap_or_else(|_| Value::Object(Map::new()))
        })
    }

    /// The JSON value for writing: parsed if need be; the host's metadata no longer applies.
    fn v_mut(&mut self) -> &mut Value {
        self.v();
        self.host = None;
        self.value.get_mut().expect("initialised by v() above")
    }

    /// A new object with apiVersion, kind, name and (for namespaced kinds) namespace set.
    ///
    /// ```
    /// let cm = kube_guest::Object::new("v1", "ConfigMap", Some("prod"), "settings");
    /// assert_eq!(cm.to_string(),
    ///     r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"prod"}}"#);
    /// ```
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        let mut meta = Map::new();
        meta.insert("name".into(), name.into());
        if let Some(ns) = namespace {
            meta.insert("namespace".into(), ns.into());
        }
        let mut root = Map::new();
        root.insert("apiVersion".into(), api_version.into());
        root.insert("kind".into(), kind.into());
        root.insert("metadata".into(), Value::Object(meta));
        Object::of(Value::Object(root))
    }

    /// Parses an object from JSON bytes (what handlers and the lister receive). Anything but a
    /// JSON object is an error.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        Self::from_value(serde_json::from_slice(bytes)?)
    }

    /// Wraps a JSON value, which must be an object.
    pub fn from_value(v: Value) -> Result<Self> {
        if v.is_object() {
            Ok(Object::of(v))
        } else {
            Err(Error::msg("a Kubernetes object must be a JSON object"))
        }
    }

    /// Serialises a typed value (e.g. your own struct for a custom resource) into an object.
    pub fn from_typed<T: Serialize>(t: &T) -> Result<Self> {
        Self::from_value(serde_json::to_value(t)?)
    }

    /// The JSON bytes, as the host's imports take them.
    pub fn to_vec(&self) -> Vec<u8> {
        if let Some(h) = self.host.as_ref() {
            // Unmodified: the host's bytes are the object.
            return h.json.clone();
        }
        // A `Value` always serialises.
        serde_json::to_vec(self.v()).unwrap_or_default()
    }

    /// The JSON value.
    pub fn value(&self) -> &Value {
        self.v()
    }

    /// The JSON value, mutable.
    pub fn value_mut(&mut self) -> &mut Value {
        self.v_mut()
    }

    /// The JSON value, owned.
    pub fn into_value(mut self) -> Value {
        std::mem::take(self.v_mut())
    }

    /// Decodes the part at JSON pointer `pointer` (e.g. `/spec`, `""` for the whole object)
    /// into `T`; a missing part decodes from `null` (so `Option` and `#[serde(default)]` fields
    /// work).
    ///
    /// ```
    /// #[derive(serde::Deserialize)]
    /// struct Spec { replicas: Option<i64> }
    /// let d = kube_guest::Object::from_slice(br#"{"spec":{"replicas":3}}"#).unwrap();
    /// assert_eq!(d.get_as::<Spec>("/spec").unwrap().replicas, Some(3));
    /// ```
    pub fn get_as<T: DeserializeOwned>(&self, pointer: &str) -> Result<T> {
        if let (true, None, Some(h)) = (pointer.is_empty(), self.value.get(), self.host.as_ref()) {
            // The whole object, not parsed yet: straight from the host's bytes into `T`.
            return Ok(serde_json::from_slice(&h.json)?);
        }
        let v = self.v().pointer(pointer).cloned().unwrap_or(Value::Null);
        Ok(serde_json::from_value(v)?)
    }

    fn meta_field(&self, field: &str) -> Option<&Value> {
        self.v().get("metadata")?.get(field)
    }

    fn meta_str(&self, field: &str) -> Option<&str> {
        self.meta_field(field)?.as_str()
    }

    /// `apiVersion` (empty if missing).
    pub fn api_version(&self) -> &str {
        self.v()["apiVersion"].as_str().unwrap_or("")
    }

    /// `kind` (empty if missing).
    pub fn kind(&self) -> &str {
        self.v()["kind"].as_str().unwrap_or("")
    }

    /// `metadata.name` (empty if missing, e.g. in a create with `generateName`).
    pub fn name(&self) -> &str {
        if let Some(m) = self.host_meta() {
            return m.s(1);
        }
        self.meta_str("name").unwrap_or("")
    }

    /// `metadata.namespace`; none for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        if let Some(m) = self.host_meta() {
            return Some(m.s(0)).filter(|ns| !ns.is_empty());
        }
        self.meta_str("namespace").filter(|ns| !ns.is_empty())
    }

    /// The object's key, see [`object_key`].
    pub fn key(&self) -> String {
        object_key(self.namespace(), self.name())
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        if let Some(m) = self.host_meta() {
            return Some(m.s(2)).filter(|u| !u.is_empty());
        }
        self.meta_str("uid")
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        if let Some(m) = self.host_meta() {
            return Some(m.s(3)).filter(|v| !v.is_empty());
        }
        self.meta_str("resourceVersion")
    }

    /// `metadata.generation`, 0 when the kind does not set it.
    pub fn generation(&self) -> i64 {
        if let Some(m) = self.host_meta() {
            return m.meta.generation;
        }
        self.meta_field("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }

    /// `metadata.creationTimestamp` (RFC 3339).
    pub fn creation_timestamp(&self) -> Option<&str> {
        self.meta_str("creationTimestamp")
    }

    /// `metadata.deletionTimestamp`: set once deletion was requested and finalizers hold it.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.meta_str("deletionTimestamp")
    }

    /// Whether deletion was requested (the object waits for its finalizers).
    pub fn is_deleting(&self) -> bool {
        if let Some(m) = self.host_meta() {
            return m.deleting();
        }
        self.deletion_timestamp().is_some()
    }

    /// One label.
    pub fn label(&self, key: &str) -> Option<&str> {
        if let Some(m) = self.host_meta() {
            return m.labels().find(|(k, _)| *k == key).map(|(_, v)| v);
        }
        self.meta_field("labels")?.get(key)?.as_str()
    }

    /// All labels, in the order the JSON has them.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        let (host, json) = match self.host_meta() {
            Some(m) => (Some(m.labels()), None),
            None => (None, Some(str_map(self.meta_field("labels")))),
        };
        host.into_iter().flatten().chain(json.into_iter().flatten())
    }

    /// One annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.meta_field("annotations")?.get(key)?.as_str()
    }

    /// All annotations.
    pub fn annotations(&self) -> impl Iterator<Item = (&str, &str)> {
        str_map(self.meta_field("annotations"))
    }

    /// `metadata.finalizers`.
    pub fn finalizers(&self) -> Vec<&str> {
        self.meta_field("finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    }

    /// Whether `finalizer` is present.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers().contains(&finalizer)
    }

    /// `metadata.ownerReferences` (entries that do not parse are skipped).
    pub fn owner_references(&self) -> Vec<OwnerReference> {
        self.meta_field("ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| OwnerReference::deserialize(r).ok())
            .collect()
    }

    /// The owner reference with `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<OwnerReference> {
        self.owner_references()
            .into_iter()
            .find(OwnerReference::is_controller)
    }

    /// Whether `owner` (matched by UID) is this object's controller.
    pub fn is_controlled_by(&self, owner: &Object) -> bool {
        match (self.controller_ref(), owner.uid()) {
            (Some(r), Some(uid)) => r.uid == uid,
            _ => false,
        }
    }

    /// A reference to this object as the managing controller of a dependent: `controller` and
    /// `blockOwnerDeletion` set, as controller-runtime's `SetControllerReference` makes it.
    /// None if the object has no UID yet (it was never stored).
    ///
    /// ```
    /// let owner = kube_guest::Object::from_slice(br#"{"apiVersion":"example.com/v1",
    ///     "kind":"Widget","metadata":{"name":"w","namespace":"d","uid":"123"}}"#).unwrap();
    /// let mut cm = kube_guest::Object::new("v1", "ConfigMap", Some("d"), "w-config");
    /// cm.set_owner_reference(owner.controller_owner_ref().unwrap());
    /// assert!(cm.is_controlled_by(&owner));
    /// assert_eq!(cm["metadata"]["ownerReferences"][0]["blockOwnerDeletion"], true);
    /// ```
    pub fn controller_owner_ref(&self) -> Option<OwnerReference> {
        Some(OwnerReference {
            api_version: self.api_version().to_string(),
            kind: self.kind().to_string(),
            name: self.name().to_string(),
            uid: self.uid()?.to_string(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        })
    }

    /// A reference to this object, for [`Recorder::publish`](crate::events::Recorder::publish):
    /// apiVersion, kind, namespace, name and uid (which `kubectl describe` matches on).
    pub fn object_ref(&self) -> crate::events::ObjectReference {
        crate::events::ObjectReference {
            api_version: self.api_version().to_string(),
            kind: self.kind().to_string(),
            namespace: self.namespace().map(str::to_string),
            name: self.name().to_string(),
            uid: self.uid().map(str::to_string),
        }
    }

    /// `metadata`, created if missing (a non-object `metadata` is replaced).
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let v = self.v_mut();
        if !v.is_object() {
            *v = Value::Object(Map::new());
        }
        let root = v.as_object_mut().expect("made an object above");
        let meta = root
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        meta.as_object_mut().expect("made an object above")
    }

    fn meta_map_mut(&mut self, field: &str) -> &mut Map<String, Value> {
        let m = self
            .metadata_mut()
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !m.is_object() {
            *m = Value::Object(Map::new());
        }
        m.as_object_mut().expect("made an object above")
    }

    /// Sets a label.
    pub fn set_label(&mut self, key: &str, value: &str) {
        self.meta_map_mut("labels").insert(key.into(), value.into());
    }

    /// Sets an annotation.
    pub fn set_annotation(&mut self, key: &str, value: &str) {
        self.meta_map_mut("annotations")
            .insert(key.into(), value.into());
    }

    /// Removes an annotation; returns its value.
    pub fn remove_annotation(&mut self, key: &str) -> Option<String> {
        match self.meta_map_mut("annotations").remove(key)? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Adds `r` to the owner references, replacing one with the same UID. A reference with
    /// `controller: true` clears that flag on any other reference (only one controller).
    pub fn set_owner_reference(&mut self, r: OwnerReference) {
        let refs = self
            .metadata_mut()
            .entry("ownerReferences")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !refs.is_array() {
            *refs = Value::Array(Vec::new());
        }
        let refs = refs.as_array_mut().expect("made an array above");
        refs.retain(|o| o.get("uid").and_then(Value::as_str) != Some(r.uid.as_str()));
        if r.is_controller() {
            for o in refs.iter_mut() {
                if let Some(m) = o.as_object_mut() {
                    m.remove("controller");
                }
            }
        }
        // An `OwnerReference` always serialises.
        refs.push(serde_json::to_value(&r).unwrap_or(Value::Null));
    }
}

impl Deref for Object {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.v()
    }
}

impl DerefMut for Object {
    fn deref_mut(&mut self) -> &mut Value {
        self.v_mut()
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Value {
        o.into_value()
    }
}

impl PartialEq for Object {
    fn eq(&self, other: &Object) -> bool {
        self.v() == other.v()
    }
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Object").field(self.v()).finish()
    }
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.v().fmt(f)
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.v().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Value::deserialize(d).map(Object::of)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Object {
        Object::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "prod", "uid": "u-1", "resourceVersion": "42",
                "generation": 7, "labels": {"app": "web", "n": 1},
                "annotations": {"a": "b"},
                "finalizers": ["x/y", 3, "z"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "ua"},
                    {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "ub", "controller": true},
                    {"bogus": true}
                ],
                "deletionTimestamp": "2024-01-01T00:00:00Z"
            }
        }))
        .unwrap()
    }

    #[test]
    fn metadata_accessors_read_what_is_there_and_skip_what_is_not() {
        let d = deployment();
        assert_eq!((d.api_version(), d.kind()), ("apps/v1", "Deployment"));
        assert_eq!(d.key(), "prod/web");
        assert_eq!(d.uid(), Some("u-1"));
        assert_eq!(d.resource_version(), Some("42"));
        assert_eq!(d.generation(), 7);
        assert_eq!(d.labels().collect::<Vec<_>>(), vec![("app", "web")]);
        assert_eq!(d.label("n"), None);
        assert_eq!(d.annotation("a"), Some("b"));
        assert_eq!(d.finalizers(), vec!["x/y", "z"]);
        assert!(d.has_finalizer("z") && !d.has_finalizer("w"));
        assert_eq!(d.owner_references().len(), 2);
        assert_eq!(d.controller_ref().unwrap().name, "b");
        assert!(d.is_deleting());

        let empty = Object::default();
        assert_eq!(
            (empty.name(), empty.namespace(), empty.key()),
            ("", None, String::new())
        );
        assert_eq!(empty.generation(), 0);
        assert!(empty.finalizers().is_empty() && empty.owner_references().is_empty());
        assert!(Object::from_slice(b"[1]").is_err());
        assert!(Object::from_slice(b"{").is_err());
    }

    #[test]
    fn mutators_create_missing_maps_and_keep_one_controller() {
        let mut o = Object::new("v1", "ConfigMap", None, "c");
        o.set_label("l", "1");
        o.set_annotation("a", "2");
        assert_eq!(o.label("l"), Some("1"));
        assert_eq!(o.remove_annotation("a").as_deref(), Some("2"));
        assert_eq!(o.annotation("a"), None);

        let mut d = deployment();
        let owner = Object::from_value(json!({"apiVersion": "example.com/v1", "kind": "W",
            "metadata": {"name": "w", "uid": "uw"}}))
        .unwrap();
        d.set_owner_reference(owner.controller_owner_ref().unwrap());
        assert!(d.is_controlled_by(&owner));
        assert_eq!(
            d.owner_references()
                .iter()
                .filter(|r| r.is_controller())
                .count(),
            1
        );
        // Same UID again replaces rather than duplicates.
        d.set_owner_reference(owner.controller_owner_ref().unwrap());
        assert_eq!(d.owner_references().len(), 3);
        assert!(Object::new("v1", "X", None, "n")
            .controller_owner_ref()
            .is_none());
    }

    #[test]
    fn keys_round_trip() {
        for (ns, name) in [(Some("a"), "b"), (None, "c")] {
            let k = object_key(ns, name);
            assert_eq!(split_key(&k), (ns, name));
        }
        assert_eq!(object_key(Some(""), "n"), "n");
    }
}
