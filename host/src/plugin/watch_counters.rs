//! Lists and watches per shared informer, counted where they leave the host.
//!
//! Why a wrapper around the lister-watcher: it sees every LIST and WATCH the reflector makes,
//! so relists (after 410 Gone, errors, or watch-list fallback) and watch restarts are counted
//! without the informer having to know about metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::informer::lister_watcher::{ListerWatcher, WatchStream};
use crate::kube::params::{ListParams, WatchParams};
use crate::kube::watch::ObjectList;
use crate::kube::{Error, ResourceClient};

/// Counters of one informer's requests.
#[derive(Debug, Default)]
pub struct LwCounters {
    /// Full lists started (first pages only; a paginated list counts once).
    pub lists: AtomicU64,
    /// Watch requests started.
    pub watches: AtomicU64,
}

impl LwCounters {
    /// Lists after the first one.
    pub fn relists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed).saturating_sub(1)
    }
    /// Watches after the first one.
    pub fn watch_restarts(&self) -> u64 {
        self.watches.load(Ordering::Relaxed).saturating_sub(1)
    }
}

/// Counters of every informer the runtime created, by informer key (as displayed).
pub type CounterMap = Arc<Mutex<BTreeMap<String, Arc<LwCounters>>>>;

/// A [`ResourceClient`] that counts its lists and watches.
pub struct CountingLw {
    inner: ResourceClient,
    counters: Arc<LwCounters>,
}

impl CountingLw {
    /// Wraps `inner`, registering fresh counters under `key` in `map` (replacing those of an
    /// earlier informer of the same key, which has stopped).
    pub fn new(inner: ResourceClient, key: String, map: &CounterMap) -> Self {
        let counters = Arc::new(LwCounters::default());
        map.lock().insert(key, counters.clone());
        CountingLw { inner, counters }
    }
}

impl ListerWatcher for CountingLw {
    async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        if params.continue_token.is_none() {
            self.counters.lists.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.list(params).await
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        // A watch-list stream (initial events) replaces a list.
        if params.send_initial_events {
            self.counters.lists.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.watches.fetch_add(1, Ordering::Relaxed);
        self.inner.watch(params).await
    }
}
