//! What a plugin's imports see: the plugin (its manifest, backends, configuration, log
//! budget) and the store it is called in.

use std::sync::Arc;

use bytes::Bytes;

use super::backend::Backends;
use super::guest_log::GuestLog;
use super::manifest::Manifest;
use super::own_keys::OwnKeyHandlers;

/// What the host-side import implementations see of their plugin.
pub(crate) struct PluginCtx {
    pub(crate) name: Arc<str>,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) backends: Backends,
    /// The operator's configuration of this plugin, as JSON (`null` when none).
    pub(crate) config: Arc<serde_json::Value>,
    /// `config` serialized once, as `config.get` and `validate-config` hand it to the guest.
    pub(crate) config_json: Bytes,
    /// The handlers the guest has handed over to the host (`queue.enqueue-own-keys`).
    pub(crate) own_keys: Arc<OwnKeyHandlers>,
    /// What the plugin may put in the host's log (its `log` import, stdout and stderr).
    pub(crate) log: Arc<GuestLog>,
}

/// What a plugin's imports see in its store (the sandbox's part around it:
/// [`kwh_sandbox::Sandboxed`]).
pub struct GuestState {
    pub(crate) ctx: Arc<PluginCtx>,
    /// The key of the reconcile running in this store, when `reconciling`: a buffer reused
    /// call to call (every reconcile sets it; only a write reads it).
    pub(crate) reconcile_key: String,
    pub(crate) reconciling: bool,
    /// The running reconcile's log lines, when the plugin's log captures them (a shadow's).
    pub(crate) reconcile_log: Vec<String>,
}

impl GuestState {
    /// The key of the reconcile running in this store, if one is.
    pub(crate) fn reconciling(&self) -> Option<&str> {
        self.reconciling.then_some(self.reconcile_key.as_str())
    }
}
