//! Informer notifications into a plugin's `on-add` / `on-update` / `on-delete`.
//!
//! Each watch of a plugin is one handler registration on a shared informer, but all of a
//! plugin's registrations share one dispatch instance behind an async mutex: the guest sees one
//! notification at a time, and each registration's notifications in the informer's order (the
//! processor calls a registration's handler sequentially). The dispatch instance is separate
//! from the reconcile workers' instances, so a slow reconcile never delays notifications.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tracing::Instrument;

use super::instance::{GuestError, PluginInstance};
use super::loader::Plugin;
use crate::informer::processor::ResourceEventHandler;
use crate::informer::tombstone::ObjOrTombstone;
use crate::kube::object::Object;

/// The dispatch side of one plugin: its instance and counters.
pub struct Dispatcher {
    name: Arc<str>,
    instance: tokio::sync::Mutex<PluginInstance>,
    /// Notifications delivered to the guest (successfully or not).
    pub delivered: AtomicU64,
    /// Notifications whose handler call failed in the sandbox.
    pub failures: AtomicU64,
}

impl Dispatcher {
    /// Takes one instance slot of `plugin` for dispatch.
    pub fn new(plugin: &Plugin) -> Result<Arc<Self>, GuestError> {
        Ok(Arc::new(Dispatcher {
            name: Arc::from(plugin.name()),
            instance: tokio::sync::Mutex::new(plugin.instance()?),
            delivered: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }))
    }

    /// The handler for watch number `watch` of the manifest.
    pub fn handler(self: &Arc<Self>, watch: u32) -> Arc<dyn ResourceEventHandler> {
        Arc::new(WatchHandler {
            dispatcher: self.clone(),
            watch,
        })
    }

    fn record(&self, what: &str, key: &str, r: Result<(), GuestError>) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = r {
            // The instance has already discarded its store; the next notification gets a fresh
            // one. The notification itself is not retried: handlers should only enqueue keys,
            // and the next resync or change re-delivers the object.
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %self.name, handler = what, %key, error = %e,
                "handler failed; notification dropped, instance replaced");
        }
    }
}

struct WatchHandler {
    dispatcher: Arc<Dispatcher>,
    watch: u32,
}

/// The bytes handed to `on-delete` for a tombstone whose last state is unknown: enough metadata
/// for the guest to compute the key.
fn tombstone_stub(key: &str) -> Vec<u8> {
    let (ns, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    };
    let meta = match ns {
        Some(ns) => serde_json::json!({"namespace": ns, "name": name}),
        None => serde_json::json!({"name": name}),
    };
    serde_json::json!({ "metadata": meta })
        .to_string()
        .into_bytes()
}

impl ResourceEventHandler for WatchHandler {
    fn on_add(&self, obj: Object, _is_in_initial_list: bool) -> BoxFuture<'_, ()> {
        let d = &self.dispatcher;
        let span = tracing::debug_span!("dispatch", plugin = %d.name, op = "add");
        async move {
            let r = d.instance.lock().await.on_add(self.watch, obj.raw()).await;
            d.record("on-add", &obj.key(), r);
        }
        .instrument(span)
        .boxed()
    }

    fn on_update(&self, old: Object, new: Object) -> BoxFuture<'_, ()> {
        let d = &self.dispatcher;
        let span = tracing::debug_span!("dispatch", plugin = %d.name, op = "update");
        async move {
            let r = d
                .instance
                .lock()
                .await
                .on_update(self.watch, old.raw(), new.raw())
                .await;
            d.record("on-update", &new.key(), r);
        }
        .instrument(span)
        .boxed()
    }

    fn on_delete(&self, obj: ObjOrTombstone) -> BoxFuture<'_, ()> {
        let d = &self.dispatcher;
        let span = tracing::debug_span!("dispatch", plugin = %d.name, op = "delete");
        async move {
            let key = obj.key();
            let tombstone = obj.is_tombstone();
            let stub;
            let bytes: &[u8] = match obj.object() {
                Some(o) => o.raw(),
                None => {
                    stub = tombstone_stub(&key);
                    &stub
                }
            };
            let r = d
                .instance
                .lock()
                .await
                .on_delete(self.watch, bytes, tombstone)
                .await;
            d.record("on-delete", &key, r);
        }
        .instrument(span)
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstone_stub_names_the_object() {
        let v: serde_json::Value = serde_json::from_slice(&tombstone_stub("ns/a")).unwrap();
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(v["metadata"]["name"], "a");
        let v: serde_json::Value = serde_json::from_slice(&tombstone_stub("node-1")).unwrap();
        assert_eq!(v["metadata"]["name"], "node-1");
        assert!(v["metadata"].get("namespace").is_none());
    }
}
