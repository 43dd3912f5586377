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
        // An informer stopped behind the factory's back is replaced, not reused.
        if map.get(&key).is_some_and(|e| e.informer.is_stopped()) {
            map.remove(&key);
        }
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
                match inf.run().await {
                    Ok(()) => {}
                    // Stopped before its task first ran: the factory shut down, or its last
                    // handler went, at once (a host exiting at a bad plugin, a plugin removed
                    // right after it started). Nothing was lost.
                    Err(InformerError::Stopped) => {
                        tracing::debug!(informer = %key_s, "informer stopped before it ran")
                    }
                    Err(e) => {
                        tracing::error!(informer = %key_s, error = %e, "informer did not run")
                    }
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

    /// Resolves once this handler has seen the initial list; false if the informer stopped
    /// first. Polls every 100 ms, as client-go's WaitForCacheSync does.
    pub async fn wait_for_sync(&self) -> bool {
        loop {
            if self.has_synced() {
                return true;
            }
            if self.informer.is_stopped() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::fake::{self, FakeLw};
    use crate::processor::test_support::{recorder, recv_n, Seen};
    use crate::tombstone::test_support::obj;

    fn lw() -> Arc<FakeLw> {
        FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "1")]),
            fake::watch_hang(vec![]),
        ])
    }

    #[tokio::test(start_paused = true)]
    async fn one_informer_per_key_shared_and_stopped_with_its_last_handler() {
        let f: SharedInformerFactory<Arc<FakeLw>> =
            SharedInformerFactory::new(InformerOptions::default());
        let made = Arc::new(AtomicUsize::new(0));
        let key = InformerKey::new("v1/configmaps", Some("ns"), Some("app=x"), None);
        let mk = || {
            made.fetch_add(1, Ordering::SeqCst);
            lw()
        };
        let (h1, mut rx1) = recorder();
        let (h2, mut rx2) = recorder();
        let r1 = f.add_handler(key.clone(), mk, h1, None).unwrap();
        let r2 = f.add_handler(key.clone(), mk, h2, None).unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 1, "one ListerWatcher per key");
        assert_eq!(f.len(), 1);
        assert!(r1.informer().same_as(r2.informer()));
        let want = vec![Seen::Add("ns/a".into(), "1".into(), true)];
        assert!(
            tokio::time::timeout(Duration::from_secs(5), r1.wait_for_sync())
                .await
                .unwrap()
        );
        assert_eq!(recv_n(&mut rx1, 1).await, want);
        assert_eq!(recv_n(&mut rx2, 1).await, want);
        // One list and one watch for both handlers.
        assert_eq!(r1.informer().lister_watcher().requests().len(), 2);

        // Another scope is another informer.
        let other = InformerKey::new("v1/configmaps", Some("ns"), None, None);
        let (h3, _rx3) = recorder();
        let r3 = f.add_handler(other.clone(), mk, h3, None).unwrap();
        assert_eq!(f.len(), 2);
        assert!(!r3.informer().same_as(r1.informer()));

        // Dropping one of two registrations keeps the informer.
        let inf = r1.informer().clone();
        drop(r1);
        assert!(!inf.is_stopped());
        assert_eq!(inf.handler_count(), 1);
        // The last one stops and retires it.
        r2.remove();
        assert!(inf.is_stopped());
        assert!(f.informer(&key).is_none());
        assert_eq!(f.len(), 1);
        // Asking again starts a fresh informer.
        let (h4, mut rx4) = recorder();
        let r4 = f.add_handler(key.clone(), mk, h4, None).unwrap();
        assert!(!r4.informer().same_as(&inf));
        assert_eq!(recv_n(&mut rx4, 1).await, want);
        assert!(
            tokio::time::timeout(Duration::from_secs(5), r4.informer().wait_for_sync())
                .await
                .unwrap()
        );
        // Stopped behind the factory's back: the next caller gets a fresh informer.
        r4.informer().stop();
        let (h5, mut rx5) = recorder();
        let r5 = f.add_handler(key.clone(), mk, h5, None).unwrap();
        assert!(!r5.informer().same_as(r4.informer()));
        assert_eq!(recv_n(&mut rx5, 1).await, want);
        // Dropping the stale registration leaves the fresh informer alone.
        drop(r4);
        assert!(!r5.informer().is_stopped());
        f.shutdown();
        assert!(r5.informer().is_stopped());
        assert!(f.is_empty());
        drop(r3);
        drop(r5);
    }

    #[test]
    fn informer_keys_distinguish_every_part() {
        let k = |r, n, l, f| InformerKey::new(r, n, l, f);
        assert_eq!(
            k("v1/pods", None, None, None),
            k("v1/pods", Some(""), None, None)
        );
        assert_ne!(
            k("v1/pods", Some("a"), None, None),
            k("v1/pods", None, Some("a"), None)
        );
        assert_ne!(
            k("v1/pods", None, Some("a"), None),
            k("v1/pods", None, None, Some("a"))
        );
        assert_eq!(
            k("v1/pods", Some("ns"), Some("x=1"), None).to_string(),
            "v1/pods|ns|x=1|"
        );
    }
}
