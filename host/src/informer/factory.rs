//! One informer per watch scope, shared by every handler that asks for it (DESIGN: "one watch
//! per distinct (resource, namespace, label selector, field selector)").
//!
//! Why reference counting by registration: plugins come and go at runtime; a watch nobody
//! listens to is pure load on the API server, so the informer stops with its last handler.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::lister_watcher::ListerWatcher;
use super::processor::ResourceEventHandler;
use super::shared::{HandlerRegistration, InformerError, InformerOptions, SharedIndexInformer};

/// Identifies a watch scope. Opaque to the factory: equal keys share one informer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerKey(String);

impl InformerKey {
    /// The canonical key of (resource, namespace, label selector, field selector); `resource`
    /// should name group, version and resource (e.g. `apps/v1/deployments`).
    pub fn new(
        resource: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Self {
        // Unit separators cannot occur in any of the parts.
        InformerKey(format!(
            "{resource}\u{1f}{}\u{1f}{}\u{1f}{}",
            namespace.unwrap_or(""),
            label_selector.unwrap_or(""),
            field_selector.unwrap_or("")
        ))
    }

    /// A key from an arbitrary string (for callers with their own canonical form).
    pub fn from_raw(s: impl Into<String>) -> Self {
        InformerKey(s.into())
    }
}

impl std::fmt::Display for InformerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.replace('\u{1f}', "|"))
    }
}

struct Entry<L: ListerWatcher> {
    informer: SharedIndexInformer<L>,
    refs: usize,
}

struct Inner<L: ListerWatcher> {
    informers: Mutex<HashMap<InformerKey, Entry<L>>>,
    defaults: InformerOptions,
    runtime: tokio::runtime::Handle,
}

/// Creates, shares and retires informers by [`InformerKey`].
pub struct SharedInformerFactory<L: ListerWatcher> {
    inner: Arc<Inner<L>>,
}

impl<L: ListerWatcher> Clone for SharedInformerFactory<L> {
    fn clone(&self) -> Self {
        SharedInformerFactory {
            inner: self.inner.clone(),
        }
    }
}

impl<L: ListerWatcher> SharedInformerFactory<L> {
    /// A factory whose informers use `defaults` and run on the current tokio runtime.
    /// Panics outside a runtime (a programming error, not input).
    pub fn new(defaults: InformerOptions) -> Self {
        Self::with_runtime(defaults, tokio::runtime::Handle::current())
    }

    pub fn with_runtime(defaults: InformerOptions, runtime: tokio::runtime::Handle) -> Self {
        SharedInformerFactory {
            inner: Arc::new(Inner {
                informers: Mutex::new(HashMap::new()),
                defaults,
                runtime,
            }),
        }
    }

    /// Register `handler` on the informer for `key`, creating and starting it (with a
    /// ListerWatcher from `make_lw`) if there is none. The informer lives while any of its
    /// registrations does.
    pub fn add_handler(
        &self,
        key: InformerKey,
        make_lw: impl FnOnce() -> L,
        handler: Arc<dyn ResourceEventHandler>,
        resync: Option<Duration>,
    ) -> Result<FactoryRegistration<L>, InformerError> {
        let mut map = self.inner.informers.lock();
        let fresh = !map.contains_key(&key);
        if fresh {
            let mut opts = self.inner.defaults.clone();
            opts.reflector.name = key.to_string();
            let informer = SharedIndexInformer::new(make_lw(), opts);
            map.insert(key.clone(), Entry { informer, refs: 0 });
        }
        let Some(entry) = map.get_mut(&key) else {
            return Err(InformerError::Stopped);
        };
        let informer = entry.informer.clone();
        let reg = match resync {
            Some(r) => informer.add_event_handler_with_resync(handler, r),
            None => informer.add_event_handler(handler),
        };
        let reg = match reg {
            Ok(r) => r,
            Err(e) => {
                if fresh {
                    map.remove(&key);
                }
                return Err(e);
            }
        };
        entry.refs += 1;
        if fresh {
            let inf = informer.clone();
            let key_s = key.to_string();
            self.inner.runtime.spawn(async move {
                if let Err(e) = inf.run().await {
                    tracing::error!(informer = %key_s, error = %e, "informer did not run");
                }
            });
        }
        Ok(FactoryRegistration {
            factory: Arc::downgrade(&self.inner),
            key,
            informer,
            reg: Some(reg),
        })
    }

    /// The running informer for `key`, if any.
    pub fn informer(&self, key: &InformerKey) -> Option<SharedIndexInformer<L>> {
        self.inner
            .informers
            .lock()
            .get(key)
            .map(|e| e.informer.clone())
    }

    /// Number of live informers.
    pub fn len(&self) -> usize {
        self.inner.informers.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stop every informer (host shutdown). Registrations dropped later are no-ops.
    pub fn shutdown(&self) {
        for (_, e) in self.inner.informers.lock().drain() {
            e.informer.stop();
        }
    }
}

/// A handler's place on a shared informer. Dropping it (or [`FactoryRegistration::remove`])
/// removes the handler, and stops the informer if it was the last one.
pub struct FactoryRegistration<L: ListerWatcher> {
    factory: Weak<Inner<L>>,
    key: InformerKey,
    informer: SharedIndexInformer<L>,
    reg: Option<HandlerRegistration>,
}

impl<L: ListerWatcher> FactoryRegistration<L> {
    /// The informer this handler is registered on: its indexer is the lister's cache.
    pub fn informer(&self) -> &SharedIndexInformer<L> {
        &self.informer
    }

    pub fn key(&self) -> &InformerKey {
        &self.key
    }

    /// This handler has seen the informer's initial list (spec 4.5).
    pub fn has_synced(&self) -> bool {
        self.reg
            .as_ref()
            .is_some_and(HandlerRegistration::has_synced)
    }

    pub fn registration(&self) -> Option<&HandlerRegistration> {
        self.reg.as_ref()
    }

    /// Remove now (same as dropping).
    pub fn remove(mut self) {
        self.release();
    }

    fn release(&mut self) {
        let Some(reg) = self.reg.take() else { return };
        self.informer.remove_event_handler(&reg);
        let Some(f) = self.factory.upgrade() else {
            return;
        };
        let mut map = f.informers.lock();
        let Some(e) = map.get_mut(&self.key) else {
            return;
        };
        // The map may hold a newer informer for this key (after shutdown); leave it alone.
        if !e.informer.same_as(&self.informer) {
            return;
        }
        e.refs = e.refs.saturating_sub(1);
        if e.refs == 0 {
            tracing::info!(informer = %self.key, "last handler gone; stopping informer");
            e.informer.stop();
            map.remove(&self.key);
        }
    }
}

impl<L: ListerWatcher> Drop for FactoryRegistration<L> {
    fn drop(&mut self) {
        self.release();
    }
}
