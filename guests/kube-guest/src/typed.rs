//! Typed objects from `k8s-openapi` (feature `k8s-openapi`), as kube-rs users write them:
//! `TypedApi::<Deployment>::all().get_by_key(key)?` answers a `Deployment`, and `apply` takes
//! one. The host still hands over JSON; these helpers decode it into the generated structs and
//! encode them back, so everything [`Api`] does is available, typed.
//!
//! What it costs (measured in this repository, release builds, `BENCHMARKS.md`): the feature
//! adds the generated types a guest uses to its component (the types of every API group are
//! compiled in only when referenced), and each typed read is a full decode of the object into
//! the struct, where an [`Object`] is parsed only when read beyond its metadata. Use it where a
//! typed view pays for itself (reading a Deployment's spec in `reconcile`), and keep handlers
//! on the default [`Object`]s.
//!
//! ```no_run
//! use k8s_openapi::api::apps::v1::Deployment;
//! use kube_guest::typed::TypedApi;
//! # fn f(key: &str) -> kube_guest::Result<()> {
//! let deployments = TypedApi::<Deployment>::all();
//! if let Some(d) = deployments.get_by_key(key)? {
//!     let replicas = d.spec.replicas.unwrap_or(1);
//!     kube_guest::info!("{key} wants {replicas} replicas");
//! }
//! # Ok(()) }
//! ```

use std::marker::PhantomData;

use k8s_openapi::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Result;
use crate::{Api, Object, Verb, Watch, Write};

/// An [`Api`] whose objects are `K`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedApi<K> {
    api: Api,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource + DeserializeOwned + Serialize> TypedApi<K> {
    /// Every namespace (for reads), or a cluster-scoped kind.
    pub fn all() -> Self {
        TypedApi {
            api: Api::all(K::API_VERSION, K::KIND),
            kind: PhantomData,
        }
    }

    /// One namespace.
    pub fn namespaced(namespace: &str) -> Self {
        TypedApi {
            api: Api::namespaced(K::API_VERSION, K::KIND, namespace),
            kind: PhantomData,
        }
    }

    /// The untyped [`Api`] of the same kind and namespace (patches, finalizers, status).
    pub fn untyped(&self) -> &Api {
        &self.api
    }

    /// One object by name; none if the cache does not have it.
    pub fn get(&self, name: &str) -> Result<Option<K>> {
        self.api.get(name)?.map(|o| decode(&o)).transpose()
    }

    /// One object by key (`namespace/name`, or `name`).
    pub fn get_by_key(&self, key: &str) -> Result<Option<K>> {
        self.api.get_by_key(key)?.map(|o| decode(&o)).transpose()
    }

    /// Objects matching a label selector (all when none).
    pub fn list(&self, label_selector: Option<&str>) -> Result<Vec<K>> {
        self.api.list(label_selector)?.iter().map(decode).collect()
    }

    /// Creates `obj`.
    pub fn create(&self, obj: &K) -> Result<K> {
        decode(&self.api.create(&encode(obj)?)?)
    }

    /// Replaces `obj` (409 `Conflict` if its resourceVersion is stale).
    pub fn replace(&self, obj: &K) -> Result<K> {
        decode(&self.api.replace(&encode(obj)?)?)
    }

    /// Server-side apply of `obj` (build it with only the fields this controller owns, e.g.
    /// from `Default` and the fields it sets).
    pub fn apply(&self, obj: &K, force: bool) -> Result<K> {
        decode(&self.api.apply(&encode(obj)?, force)?)
    }
}

/// Decodes an object into `K`.
pub fn decode<K: DeserializeOwned>(obj: &Object) -> Result<K> {
    obj.get_as("")
}

/// Encodes `K` as an [`Object`] (k8s-openapi writes its apiVersion and kind).
pub fn encode<K: Serialize>(obj: &K) -> Result<Object> {
    Object::from_typed(obj)
}

/// A watch of `K`'s kind.
pub fn watch<K: Resource>() -> Watch {
    Watch::new(K::API_VERSION, K::KIND)
}

/// Writes of `K`'s kind with `verbs`.
pub fn write<K: Resource>(verbs: &[Verb]) -> Write {
    Write::new(K::API_VERSION, K::KIND, verbs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn objects_round_trip_through_the_generated_types() {
        let o = Object::from_slice(
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}"#,
        )
        .unwrap();
        let cm: ConfigMap = decode(&o).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("a"));
        assert_eq!(cm.data.as_ref().unwrap()["k"], "v");
        let back = encode(&cm).unwrap();
        assert_eq!((back.api_version(), back.kind()), ("v1", "ConfigMap"));
        assert_eq!(back, o);
        assert_eq!(watch::<ConfigMap>().kind, "ConfigMap");
        assert_eq!(write::<ConfigMap>(&[Verb::Patch]).api_version, "v1");
    }
}
