//! Builders for the manifest: what a plugin watches (with custom indexes), what it writes, how
//! often it resyncs and how many workers reconcile.
//!
//! ```
//! use std::time::Duration;
//! use kube_guest::{Index, Manifest, Verb, Watch, Write};
//! let m = Manifest::new("config-reloader")
//!     .watch(Watch::new("apps/v1", "Deployment").with_index(
//!         Index::new("configmaps", &["spec.template.spec.volumes[*].configMap.name"]).namespaced(),
//!     ))
//!     .watch(Watch::new("v1", "ConfigMap").in_namespace("prod"))
//!     .write(Write::new("apps/v1", "Deployment", &[Verb::Patch]))
//!     .resync(Duration::from_secs(600))
//!     .workers(2);
//! assert_eq!(m.watches[0].indexes[0].name, "configmaps");
//! assert_eq!(m.resync_period_ms, 600_000);
//! ```

use std::time::Duration;

use crate::{Index, Manifest, Verb, Watch, Write};

impl Manifest {
    /// A manifest for plugin `name` (a DNS label: `a-z`, `0-9`, `-`) with nothing declared,
    /// no resync and one worker.
    pub fn new(name: &str) -> Self {
        Manifest {
            name: name.to_string(),
            watches: Vec::new(),
            writes: Vec::new(),
            resync_period_ms: 0,
            workers: 1,
        }
    }

    /// Adds a watch; handlers receive its position (0 for the first) as `watch`.
    pub fn watch(mut self, w: Watch) -> Self {
        self.watches.push(w);
        self
    }

    /// Adds a written kind and its verbs.
    pub fn write(mut self, w: Write) -> Self {
        self.writes.push(w);
        self
    }

    /// Re-delivers every cached object as an update this often (zero disables): a safety net
    /// for state outside the cluster, not a substitute for watching what you depend on.
    pub fn resync(mut self, every: Duration) -> Self {
        self.resync_period_ms = every.as_millis().try_into().unwrap_or(u64::MAX);
        self
    }

    /// The number of reconcile workers (each its own instance; keys are never reconciled
    /// concurrently).
    pub fn workers(mut self, n: u32) -> Self {
        self.workers = n;
        self
    }
}

impl Watch {
    /// Every object of a kind: all namespaces, no selectors, no custom indexes.
    pub fn new(api_version: &str, kind: &str) -> Self {
        Watch {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: None,
            label_selector: None,
            field_selector: None,
            indexes: Vec::new(),
        }
    }

    /// Only objects in `namespace`.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// Only objects matching a label selector, e.g. `app=web,tier in (a,b)`.
    pub fn with_labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }

    /// Only objects matching a field selector, e.g. `metadata.name!=x`.
    pub fn with_fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_string());
        self
    }

    /// Adds a custom index on this kind's cache (see [`Index`]).
    pub fn with_index(mut self, index: Index) -> Self {
        self.indexes.push(index);
        self
    }
}

impl Index {
    /// An index named `name` whose values are the strings at `paths`: dot-separated field
    /// names from the object's root, `[*]` after a name stepping into every array element,
    /// e.g. `spec.template.spec.containers[*].envFrom[*].configMapRef.name`. Non-strings and
    /// missing fields yield nothing. The host computes it natively on every cache update.
    pub fn new(name: &str, paths: &[&str]) -> Self {
        Index {
            name: name.to_string(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            namespaced: false,
        }
    }

    /// Prefixes each value with the object's namespace and `/`, making values the keys of the
    /// objects they name (a ConfigMap a Deployment mounts is in the Deployment's namespace), so
    /// `keys_by_index("configmaps", &configmap.key())` finds its users.
    pub fn namespaced(mut self) -> Self {
        self.namespaced = true;
        self
    }
}

impl Write {
    /// `verbs` on `api_version`/`kind`.
    pub fn new(api_version: &str, kind: &str, verbs: &[Verb]) -> Self {
        Write {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            verbs: verbs.to_vec(),
        }
    }
}

/// Builds a watch of every object of a kind, cluster-wide, without selectors
/// (the same as [`Watch::new`]).
pub fn watch_all(api_version: &str, kind: &str) -> Watch {
    Watch::new(api_version, kind)
}
