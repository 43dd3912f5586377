//! Declarative custom indexes: a guest names field paths in its manifest, the host turns them into
//! an [`IndexFunc`] that runs natively on every cache update, so keeping an index current never
//! calls into the guest.
//!
//! Why a streaming walk and not `serde_json::Value`: an index function runs on every add, update
//! and relist of a watched kind, often a large one (a Deployment is kilobytes of JSON, most of it
//! irrelevant to a path like `spec.template.spec.volumes[*].configMap.name`). The paths are
//! compiled once into a small trie; evaluation drives serde_json's deserializer through the trie
//! and skips every field the trie does not mention with `IgnoredAny`, so the only allocations
//! are the index values themselves.
//!
//! Semantics (the WIT `index` record): every string found at the end of any path is one value;
//! `[*]` after a field steps into every element of an array; numbers, booleans, null, objects,
//! arrays at the end of a path, fields that are missing and `[*]` over a non-array yield nothing.
//! A namespaced index prefixes each value with the object's namespace and `/` (the key of the
//! object referenced); for a cluster-scoped object the value stays bare, as its keys are.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::manifest::IndexSpec;
use kwh_client::object::Object;
use kwh_informer::store::{IndexFunc, Indexers, Store};

/// The store-level name of a custom index.
///
/// Why derived from the definition rather than from the plugin: the shared informer's store is
/// shared by every plugin that watches the same kind, and two plugins that declare the same
/// paths get the same values, so they can share one index (computed once per update). A plugin
/// still only reaches the indexes it declared: the lister resolves a guest's index name through
/// that plugin's own manifest, never by this name.
pub fn internal_name(spec: &IndexSpec) -> String {
    let mut paths: Vec<&str> = spec.paths.iter().map(String::as_str).collect();
    paths.sort_unstable();
    paths.dedup();
    // JSON-quoting keeps any character a field name may hold unambiguous.
    let quoted = serde_json::to_string(&paths).unwrap_or_default();
    let scope = if spec.namespaced {
        "namespaced"
    } else {
        "plain"
    };
    format!("custom:{scope}:{quoted}")
}

/// A plugin's custom indexes on one store: the guest's index name → the store's.
pub type IndexNames = HashMap<String, String>;

/// Registers the indexes `specs` (one watch's) on `store`, unless an identical definition is
/// already there (another plugin's, or an earlier watch's on the same shared informer), and
/// returns the guest's names mapped to the store's. Objects already cached are indexed at once.
pub fn register(store: &Store, specs: &[IndexSpec]) -> IndexNames {
    let existing = store.index_names();
    let mut names = IndexNames::with_capacity(specs.len());
    for spec in specs {
        let internal = internal_name(spec);
        if !existing.contains(&internal) && !names.values().any(|n| *n == internal) {
            // The only refusal is a name already taken, which by construction is the same
            // definition: sharing it is the point.
            let _ = store.add_indexers(Indexers::from([(internal.clone(), index_func(spec))]));
        }
        names.insert(spec.name.clone(), internal);
    }
    names
}

/// The index function of `spec`, for [`kwh_informer::store::Store::add_indexers`].
pub fn index_func(spec: &IndexSpec) -> IndexFunc {
    let paths = PathIndex::compile(&spec.paths, spec.namespaced);
    Arc::new(move |o: &Object| paths.values(o.raw(), o.namespace()))
}

/// Compiled field paths: a trie with one node per distinct path prefix.
///
/// Two edges leave a node: field names (taken when the value is a JSON object) and `[*]` (taken
/// when it is an array). Since a value is never both, every value of the document is visited with
/// exactly one node, and the walk needs no sets of states.
#[derive(Debug, Clone)]
pub struct PathIndex {
    nodes: Vec<Node>,
    namespaced: bool,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// A path ends here: a string value is an index value.
    terminal: bool,
    /// The node for every element, when a path continues with `[*]`.
    each: Option<usize>,
    /// The node for each field name a path continues with.
    fields: Vec<(Box<str>, usize)>,
}

impl PathIndex {
    /// Compiles dot-separated paths whose segments are a field name optionally followed by `[*]`.
    /// Paths are validated with the manifest; a malformed segment here is taken literally as a
    /// field name (which then simply never matches), never a panic.
    pub fn compile<S: AsRef<str>>(paths: &[S], namespaced: bool) -> Self {
        let mut nodes = vec![Node::default()];
        for path in paths {
            let mut at = 0;
            for seg in path.as_ref().split('.') {
                let (field, each) = match seg.strip_suffix("[*]") {
                    Some(f) => (f, true),
                    None => (seg, false),
                };
                at = match nodes[at].fields.iter().find(|(n, _)| &**n == field) {
                    Some(&(_, next)) => next,
                    None => {
                        nodes.push(Node::default());
                        let next = nodes.len() - 1;
                        nodes[at].fields.push((field.into(), next));
                        next
                    }
                };
                if each {
                    at = match nodes[at].each {
                        Some(next) => next,
                        None => {
                            nodes.push(Node::default());
                            let next = nodes.len() - 1;
                            nodes[at].each = Some(next);
                            next
                        }
                    };
                }
            }
            nodes[at].terminal = true;
        }
        PathIndex { nodes, namespaced }
    }

    /// The index values of the JSON document `raw` (sorted, without duplicates), prefixed with
    /// `namespace` when the index is namespaced. A document that is not valid JSON yields the
    /// values found before the error: objects in the cache were validated at ingest, so this
    /// only matters for callers that pass arbitrary bytes.
    pub fn values(&self, raw: &[u8], namespace: Option<&str>) -> Vec<String> {
        let mut out = Vec::new();
        let prefix = if self.namespaced { namespace } else { None };
        let mut de = serde_json::Deserializer::from_slice(raw);
        let walk = Walk {
            ix: self,
            node: 0,
            prefix,
            out: &mut out,
        };
        if let Err(e) = walk.deserialize(&mut de) {
            tracing::debug!(error = %e, "index path walk stopped at malformed JSON");
        }
        if out.len() > 1 {
            out.sort_unstable();
            out.dedup();
        }
        out
    }
}

/// One value of the document, visited with the trie node its path reached.
struct Walk<'a, 'o> {
    ix: &'a PathIndex,
    node: usize,
    prefix: Option<&'a str>,
    out: &'o mut Vec<String>,
}

impl Walk<'_, '_> {
    fn node(&self) -> &Node {
        &self.ix.nodes[self.node]
    }

    fn at(&mut self, node: usize) -> Walk<'_, '_> {
        Walk {
            ix: self.ix,
            node,
            prefix: self.prefix,
            out: self.out,
        }
    }

    fn push(&mut self, v: &str) {
        if !self.node().terminal {
            return;
        }
        self.out.push(match self.prefix {
            Some(ns) => {
                let mut s = String::with_capacity(ns.len() + 1 + v.len());
                s.push_str(ns);
                s.push('/');
                s.push_str(v);
                s
            }
            None => v.to_owned(),
        });
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let node = self.node();
        if !node.terminal && node.each.is_none() && node.fields.is_empty() {
            return d.deserialize_ignored_any(IgnoredAny).map(drop);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        self.push(v);
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        match self.node().each {
            Some(each) => while seq.next_element_seed(self.at(each))?.is_some() {},
            None => while seq.next_element::<IgnoredAny>()?.is_some() {},
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let ix = self.ix;
        let fields = &ix.nodes[self.node].fields;
        while let Some(next) = map.next_key_seed(Key(fields))? {
            match next {
                Some(child) => map.next_value_seed(self.at(child))?,
                None => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(())
    }
}

/// A map key, resolved to the child node it leads to without allocating.
struct Key<'a>(&'a [(Box<str>, usize)]);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().find(|(n, _)| &**n == v).map(|&(_, c)| c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(paths: &[&str], namespaced: bool) -> IndexSpec {
        IndexSpec {
            name: "refs".into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            namespaced,
        }
    }

    fn eval(paths: &[&str], namespaced: bool, obj: serde_json::Value) -> Vec<String> {
        let o = Object::from_value(&obj).expect("object");
        index_func(&spec(paths, namespaced))(&o)
    }

    fn deployment() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod", "annotations": {"x": "y"}},
            "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "volumes": [
                    {"name": "a", "configMap": {"name": "cm-a"}},
                    {"name": "s", "secret": {"secretName": "sec"}},
                    {"name": "p", "projected": {"sources": [
                        {"configMap": {"name": "cm-p"}},
                        {"secret": {"name": "sec-p"}},
                        {"serviceAccountToken": {"path": "t"}}
                    ]}},
                    {"name": "again", "configMap": {"name": "cm-a"}}
                ],
                "containers": [
                    {"name": "c1", "env": [
                        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                        {"name": "B", "value": "literal"}
                    ]},
                    {"name": "c2", "envFrom": [{"configMapRef": {"name": "cm-from"}}]}
                ]
            }}}
        })
    }

    #[test]
    fn array_paths_collect_every_string_sorted_and_deduplicated() {
        let v = eval(
            &["spec.template.spec.volumes[*].configMap.name"],
            false,
            deployment(),
        );
        assert_eq!(v, vec!["cm-a"]);
        let v = eval(
            &[
                "spec.template.spec.volumes[*].configMap.name",
                "spec.template.spec.volumes[*].projected.sources[*].configMap.name",
                "spec.template.spec.containers[*].env[*].valueFrom.configMapKeyRef.name",
                "spec.template.spec.containers[*].envFrom[*].configMapRef.name",
            ],
            false,
            deployment(),
        );
        assert_eq!(v, vec!["cm-a", "cm-env", "cm-from", "cm-p"]);
    }

    #[test]
    fn namespaced_values_are_object_keys() {
        let v = eval(
            &[
                "spec.template.spec.volumes[*].secret.secretName",
                "spec.template.spec.volumes[*].projected.sources[*].secret.name",
            ],
            true,
            deployment(),
        );
        assert_eq!(v, vec!["prod/sec", "prod/sec-p"]);
        // Cluster-scoped objects have bare keys, so their values stay bare too.
        let v = eval(
            &["spec.ref"],
            true,
            json!({"metadata": {"name": "n"}, "spec": {"ref": "x"}}),
        );
        assert_eq!(v, vec!["x"]);
    }

    #[test]
    fn non_strings_missing_fields_and_mismatched_shapes_yield_nothing() {
        let o = json!({
            "metadata": {"name": "n", "namespace": "d"},
            "spec": {"n": 3, "b": true, "z": null, "o": {"k": "v"}, "a": ["x", 1, null, ["y"], {"k": "z"}],
                     "s": "plain"}
        });
        for p in [
            "spec.n",
            "spec.b",
            "spec.z",
            "spec.o",
            "spec.a",
            "spec.missing",
            "nope.deeper",
        ] {
            assert!(eval(&[p], false, o.clone()).is_empty(), "{p}");
        }
        // `[*]` over a non-array, and a field step into a string or array.
        for p in ["spec.s[*]", "spec.o[*]", "spec.s.k", "spec.a.k"] {
            assert!(eval(&[p], false, o.clone()).is_empty(), "{p}");
        }
        // Only the string elements of an array are values; nested arrays need their own `[*]`.
        assert_eq!(eval(&["spec.a[*]"], false, o.clone()), vec!["x"]);
        assert_eq!(eval(&["spec.a[*].k"], false, o.clone()), vec!["z"]);
        assert_eq!(eval(&["spec.s"], false, o.clone()), vec!["plain"]);
        assert_eq!(eval(&["metadata.name"], true, o), vec!["d/n"]);
    }

    #[test]
    fn a_field_both_stepped_into_and_ended_at_or_iterated() {
        // `spec.x` ends at x, `spec.x[*]` iterates it, `spec.x.k` descends: whichever fits the
        // value's shape applies.
        let paths = ["spec.x", "spec.x[*]", "spec.x.k"];
        assert_eq!(eval(&paths, false, json!({"spec": {"x": "s"}})), vec!["s"]);
        assert_eq!(
            eval(&paths, false, json!({"spec": {"x": ["a", "b"]}})),
            vec!["a", "b"]
        );
        assert_eq!(
            eval(&paths, false, json!({"spec": {"x": {"k": "v"}}})),
            vec!["v"]
        );
    }

    #[test]
    fn escaped_keys_and_values_are_decoded() {
        let raw = br#"{"metadata":{"name":"n","namespace":"d"},"sp\u0065c":{"r":"a\"b"}}"#;
        let o = Object::from_bytes(bytes::Bytes::from_static(raw)).expect("object");
        assert_eq!(index_func(&spec(&["spec.r"], true))(&o), vec![r#"d/a"b"#]);
    }

    #[test]
    fn malformed_json_yields_what_was_found_and_never_panics() {
        let ix = PathIndex::compile(&["a", "b"], false);
        assert_eq!(ix.values(br#"{"a":"x","b":"#, None), vec!["x"]);
        assert!(ix.values(b"", None).is_empty());
        assert!(ix.values(b"[1,2", None).is_empty());
    }

    #[test]
    fn internal_names_depend_on_the_definition_only() {
        let a = spec(&["x.y", "a[*].b"], true);
        let mut b = spec(&["a[*].b", "x.y", "x.y"], true);
        b.name = "other".into();
        assert_eq!(internal_name(&a), internal_name(&b));
        assert_ne!(
            internal_name(&a),
            internal_name(&spec(&["x.y", "a[*].b"], false))
        );
        assert_ne!(internal_name(&a), internal_name(&spec(&["x.y"], true)));
        assert_ne!(internal_name(&a), kwh_informer::store::NAMESPACE_INDEX);
    }

    #[test]
    fn registered_on_a_store_it_follows_updates() {
        use kwh_informer::store::{Indexers, Store};
        let s = spec(&["spec.template.spec.volumes[*].configMap.name"], true);
        let store = Store::with_namespace_index();
        store.add(Object::from_value(&deployment()).expect("obj"));
        let name = internal_name(&s);
        store
            .add_indexers(Indexers::from([(name.clone(), index_func(&s))]))
            .expect("register");
        assert_eq!(
            store.index_keys(&name, "prod/cm-a").unwrap(),
            vec!["prod/web"]
        );
        let mut d = deployment();
        d["spec"]["template"]["spec"]["volumes"] = json!([{"configMap": {"name": "cm-b"}}]);
        store.update(Object::from_value(&d).expect("obj"));
        assert!(store.index_keys(&name, "prod/cm-a").unwrap().is_empty());
        assert_eq!(
            store.index_keys(&name, "prod/cm-b").unwrap(),
            vec!["prod/web"]
        );
    }
}
