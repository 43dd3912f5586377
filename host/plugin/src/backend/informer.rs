//! The guest's `lister` import over the shared informer stores of the plugin's watches.
use std::sync::Arc;

use parking_lot::RwLock;

use super::{ApiError, ListerBackend};
use crate::index::IndexNames;
use kwh_client::object::{with_object_key, Object};
use kwh_client::selector::LabelSelector;
use kwh_informer::store::{Store, NAMESPACE_INDEX};

/// One watched scope's cache: the informer's indexer, the namespace it is limited to, and the
/// custom indexes the plugin declared on that watch (its index name → the store's).
struct Scope {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    store: Arc<Store>,
    indexes: IndexNames,
}

/// Lister reads served from the shared informer caches of the plugin's watches.
///
/// Filled after the plugin's handlers are registered (the stores belong to informers that only
/// exist then); until then every read finds nothing, which is what an unsynced cache answers.
#[derive(Default)]
pub struct InformerLister {
    scopes: RwLock<Vec<Scope>>,
}

impl InformerLister {
    /// Whether an object of `kind` in `namespace` would be in one of these caches (a watch of
    /// the kind over all namespaces, or over that one): then its absence there means absent.
    pub fn covers(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> bool {
        self.scopes.read().iter().any(|s| {
            s.api_version == api_version
                && s.kind == kind
                && (s.namespace.is_none() || s.namespace.as_deref() == namespace)
        })
    }

    /// An empty lister.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the cache of one watch of `api_version`/`kind` (limited to `namespace` if set).
    pub fn add_store(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        store: Arc<Store>,
    ) {
        self.add_indexed_store(api_version, kind, namespace, store, IndexNames::new());
    }

    /// Adds the cache of one watch together with the custom indexes the plugin declared on it
    /// (already registered on `store`, see [`crate::index::register`]). Caches are added in the
    /// manifest's order: the n-th added is watch number n, which `get_by_key` reads. Index
    /// queries resolve the guest's names through `indexes` only, so a plugin reaches the built-in
    /// `namespace` index and its own indexes, never another plugin's on the same shared store.
    pub fn add_indexed_store(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        store: Arc<Store>,
        indexes: IndexNames,
    ) {
        self.scopes.write().push(Scope {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            store,
            indexes,
        });
    }

    /// Stores of one kind. Several watches of a kind (different namespaces or selectors) are
    /// several caches; reads consult each.
    fn stores(&self, api_version: &str, kind: &str) -> Vec<(Option<String>, Arc<Store>)> {
        self.scopes
            .read()
            .iter()
            .filter(|s| s.api_version == api_version && s.kind == kind)
            .map(|s| (s.namespace.clone(), s.store.clone()))
            .collect()
    }
}

fn bad_index(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(e.to_string())
}

impl ListerBackend for InformerLister {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, ApiError> {
        // Every reconcile's read passes here: the scopes are searched in place (no list of them
        // collected, no store handle cloned), under their read lock, which only a new watch
        // ever takes for writing.
        Ok(with_object_key(namespace, name, |key| {
            self.scopes
                .read()
                .iter()
                .filter(|s| s.api_version == api_version && s.kind == kind)
                .find_map(|s| s.store.get_by_key(key))
        }))
    }

    fn get_by_key(&self, watch: u32, key: &str) -> Result<Option<Object>, ApiError> {
        let scopes = self.scopes.read();
        let Some(scope) = usize::try_from(watch).ok().and_then(|i| scopes.get(i)) else {
            return Ok(None);
        };
        Ok(scope.store.get_by_key(key))
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Object>, ApiError> {
        let selector = match label_selector.filter(|s| !s.trim().is_empty()) {
            Some(s) => Some(
                LabelSelector::parse(s)
                    .map_err(|e| ApiError::bad_request(format!("label selector {s:?}: {e}")))?,
            ),
            None => None,
        };
        let pred = |o: &Object| selector.as_ref().is_none_or(|s| s.matches_meta(&o.meta()));
        let stores = self.stores(api_version, kind);
        let mut out = Vec::new();
        for (scope_ns, store) in &stores {
            if let (Some(want), Some(have)) = (namespace, scope_ns.as_deref()) {
                if want != have {
                    continue;
                }
            }
            out.extend(store.list_filtered(namespace, &pred));
        }
        if stores.len() > 1 {
            // Overlapping watches of one kind hold the same object twice.
            out.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
            out.dedup_by(|a, b| a.namespace() == b.namespace() && a.name() == b.name());
        }
        Ok(out)
    }

    fn by_index(
        &self,
        api_version: &str,
        kind: &str,
        index_name: &str,
        index_value: &str,
    ) -> Result<Vec<Object>, ApiError> {
        // (store, the store's name for the index) of every cache of the kind that has it.
        let mut stores: Vec<(Arc<Store>, String)> = Vec::new();
        let mut declared: Vec<&str> = Vec::new();
        let scopes = self.scopes.read();
        let mut any_scope = false;
        for sc in scopes
            .iter()
            .filter(|s| s.api_version == api_version && s.kind == kind)
        {
            any_scope = true;
            declared.extend(sc.indexes.keys().map(String::as_str));
            let internal = if index_name == NAMESPACE_INDEX {
                Some(NAMESPACE_INDEX.to_string())
            } else {
                sc.indexes.get(index_name).cloned()
            };
            if let Some(internal) = internal {
                stores.push((sc.store.clone(), internal));
            }
        }
        if !any_scope {
            // Not wired yet: an unsynced cache finds nothing.
            return Ok(Vec::new());
        }
        if stores.is_empty() {
            declared.sort_unstable();
            declared.dedup();
            declared.insert(0, NAMESPACE_INDEX);
            return Err(ApiError::bad_request(format!(
                "no index {index_name:?} on {kind} ({api_version}): the manifest's watches of that \
                 kind declare {}",
                declared.join(", ")
            )));
        }
        drop(scopes);
        let mut out = Vec::new();
        for (store, internal) in &stores {
            out.extend(store.by_index(internal, index_value).map_err(bad_index)?);
        }
        if stores.len() > 1 {
            out.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
            out.dedup_by(|a, b| a.namespace() == b.namespace() && a.name() == b.name());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(ns: &str, name: &str, labels: &str) -> Object {
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "resourceVersion": "1",
                         "labels": serde_json::from_str::<serde_json::Value>(labels).unwrap()}
        });
        Object::from_value(&v).unwrap()
    }

    #[test]
    fn lister_reads_only_the_registered_caches_and_filters_by_selector() {
        let store = Arc::new(Store::with_namespace_index());
        store.add(cm("a", "x", r#"{"app":"web"}"#));
        store.add(cm("a", "y", r#"{"app":"db"}"#));
        store.add(cm("b", "z", r#"{"app":"web"}"#));
        let l = InformerLister::new();
        assert_eq!(l.list("v1", "ConfigMap", None, None).unwrap().len(), 0);
        l.add_store("v1", "ConfigMap", None, store);
        assert_eq!(
            l.get("v1", "ConfigMap", Some("a"), "x")
                .unwrap()
                .unwrap()
                .name(),
            "x"
        );
        assert!(l.get("v1", "ConfigMap", Some("b"), "x").unwrap().is_none());
        assert!(l.get("v1", "Secret", Some("a"), "x").unwrap().is_none());
        let web = l.list("v1", "ConfigMap", None, Some("app=web")).unwrap();
        assert_eq!(web.len(), 2);
        let in_a = l.list("v1", "ConfigMap", Some("a"), Some("app")).unwrap();
        assert_eq!(in_a.len(), 2);
        let e = l
            .list("v1", "ConfigMap", None, Some("app in (web"))
            .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            l.by_index("v1", "ConfigMap", "namespace", "b")
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            l.by_index("v1", "ConfigMap", "nope", "b").unwrap_err().code,
            400
        );
    }

    #[test]
    fn custom_indexes_resolve_through_each_plugins_own_names() {
        use crate::index::{internal_name, register};
        use crate::manifest::IndexSpec;
        let spec = |name: &str, path: &str| IndexSpec {
            name: name.into(),
            paths: vec![path.into()],
            namespaced: true,
        };
        let cm_with = |ns: &str, name: &str, data: serde_json::Value| {
            Object::from_value(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": ns, "name": name}, "data": data
            }))
            .unwrap()
        };
        // One shared store, as two plugins watching the same kind get from the factory.
        let store = Arc::new(Store::with_namespace_index());
        store.add(cm_with(
            "a",
            "x",
            serde_json::json!({"ref": "t", "other": "u"}),
        ));
        let a = InformerLister::new();
        let a_ix = register(&store, &[spec("refs", "data.ref")]);
        a.add_indexed_store("v1", "ConfigMap", None, store.clone(), a_ix);
        let b = InformerLister::new();
        // Same paths under another name share the store's index; different paths get their own.
        let b_ix = register(
            &store,
            &[spec("mine", "data.ref"), spec("refs", "data.other")],
        );
        b.add_indexed_store("v1", "ConfigMap", None, store.clone(), b_ix);
        assert_eq!(store.index_names().len(), 3, "namespace + two definitions");

        let names = |l: &InformerLister, ix: &str, v: &str| -> Vec<String> {
            l.by_index("v1", "ConfigMap", ix, v)
                .unwrap()
                .iter()
                .map(|o| o.key())
                .collect()
        };
        assert_eq!(names(&a, "refs", "a/t"), vec!["a/x"]);
        assert!(names(&a, "refs", "a/u").is_empty());
        assert_eq!(names(&b, "refs", "a/u"), vec!["a/x"]);
        assert_eq!(names(&b, "mine", "a/t"), vec!["a/x"]);
        assert_eq!(names(&a, "namespace", "a"), vec!["a/x"]);

        // A name only the other plugin declared, or the store's own name, is not reachable.
        let e = a.by_index("v1", "ConfigMap", "mine", "a/t").unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert!(e.message.contains("namespace, refs"), "{}", e.message);
        let internal = internal_name(&spec("refs", "data.ref"));
        assert_eq!(
            a.by_index("v1", "ConfigMap", &internal, "a/t")
                .unwrap_err()
                .code,
            400
        );
        // A kind with no cache wired yet finds nothing, as an unsynced cache does.
        assert!(a.by_index("v1", "Secret", "refs", "x").unwrap().is_empty());
    }
}
