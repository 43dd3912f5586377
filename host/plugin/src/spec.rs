//! What to run as one plugin, and with which settings of its own.
//!
//! A host runs third-party controllers side by side, so each may need its own sandbox limits,
//! worker count, namespace confinement and configuration: one plugin's 16 MiB cap must not bind
//! another that needs 64 MiB. A [`PluginSpec`] carries those per plugin; `--plugin x.wasm` is
//! the spec made of the runtime's global settings ([`PluginSpec::with_defaults`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::instance::Limits;
use super::options::RuntimeOptions;

/// One plugin to start, with everything the operator set for it alone.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSpec {
    /// The component file.
    pub path: PathBuf,
    /// Its sandbox limits (deadlines and memory per store, its own instance count).
    pub limits: Limits,
    /// Reconcile workers, over the count its manifest asks for.
    pub workers: Option<u32>,
    /// Confines its watches that name no namespace to this one, as the runtime's
    /// [`RuntimeOptions::namespace`] does for plugins without their own.
    pub namespace: Option<String>,
    /// Its configuration, kept as JSON for the guest (`null` when none was given).
    pub config: Arc<serde_json::Value>,
    /// Runs on the elected leader only, also when the host is sharded: for controllers that
    /// need a global view (the plugins file's `leaderOnly`).
    pub leader_only: bool,
    /// A shadow revision to run beside it (the plugins file's `shadow:`).
    pub shadow: Option<Arc<ShadowSpec>>,
}

/// A shadow revision of a plugin: another module (and configuration) run beside the live one
/// on the same informers, its writes dry runs compared with the stored objects.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowSpec {
    /// The shadow's component file.
    pub path: PathBuf,
    /// Its configuration (the live one's unless the entry gives its own).
    pub config: Arc<serde_json::Value>,
    /// Promoted to the live revision once it has agreed this long and this often.
    pub promote_after: Option<PromoteAfter>,
}

/// When a shadow is promoted without a hand: after `reconciles` reconciles and `after` time,
/// with no difference and no refusal in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromoteAfter {
    pub reconciles: u64,
    pub after: Duration,
}

impl PluginSpec {
    /// The plugin at `path` with the runtime's global limits and namespace, the manifest's
    /// workers and no configuration: what `--plugin x.wasm` runs.
    pub fn with_defaults(path: impl Into<PathBuf>, opts: &RuntimeOptions) -> Self {
        PluginSpec {
            path: path.into(),
            limits: opts.limits.clone(),
            workers: None,
            namespace: opts.namespace.clone(),
            config: Arc::new(serde_json::Value::Null),
            leader_only: false,
            shadow: None,
        }
    }

    /// What the live revision runs: this spec without its shadow.
    pub fn live(&self) -> PluginSpec {
        PluginSpec {
            shadow: None,
            ..self.clone()
        }
    }

    /// The shadow's own spec: the live one's settings with the shadow's module and
    /// configuration (what a promotion runs).
    pub fn shadow_spec(&self) -> Option<PluginSpec> {
        let s = self.shadow.as_ref()?;
        Some(PluginSpec {
            path: s.path.clone(),
            config: s.config.clone(),
            shadow: None,
            ..self.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_runtime_s_global_settings() {
        let opts = RuntimeOptions {
            namespace: Some("team".into()),
            ..RuntimeOptions::default()
        };
        let s = PluginSpec::with_defaults("x.wasm", &opts);
        assert_eq!(s.path, PathBuf::from("x.wasm"));
        assert_eq!(s.limits, opts.limits);
        assert_eq!(s.namespace.as_deref(), Some("team"));
        assert_eq!(s.workers, None);
        assert!(s.config.is_null());
    }
}
