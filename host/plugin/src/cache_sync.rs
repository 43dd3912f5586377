//! The gate a plugin's reconcile workers pass before their first reconcile: it opens once every
//! watch of the plugin has delivered its informer's initial list, as client-go controllers and
//! controller-runtime start their workers only after `WaitForCacheSync` of every informer they
//! use.
//!
//! Why a gate and not a delayed start: notifications are handled while the caches fill, so a
//! guest's handlers enqueue keys meanwhile; only the reconciles wait. A reconcile reads nothing
//! but the host's cache, so one that ran while another of the plugin's informers was still
//! listing would take objects that exist for absent and act on it (a config reloader would
//! roll a Deployment for a ConfigMap it had not listed yet, then roll it back).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the sync condition is checked: client-go's `WaitForCacheSync` period.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Open,
    Closed,
}

/// Shared by a plugin's workers (who wait) and its watcher task (who opens it). Cheap to clone.
#[derive(Clone)]
pub struct CacheSync {
    tx: Arc<watch::Sender<State>>,
}

impl Default for CacheSync {
    fn default() -> Self {
        CacheSync {
            tx: Arc::new(watch::channel(State::Waiting).0),
        }
    }
}

impl std::fmt::Debug for CacheSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CacheSync")
            .field(&*self.tx.borrow())
            .finish()
    }
}

impl CacheSync {
    /// A closed-until-synced gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolves when the caches have synced (true), or when the gate was closed first (false:
    /// the plugin is stopping, and a worker must not reconcile on a partial cache).
    pub async fn wait(&self) -> bool {
        let mut rx = self.tx.subscribe();
        matches!(
            rx.wait_for(|s| *s != State::Waiting).await.map(|s| *s),
            Ok(State::Open)
        )
    }

    /// Whether the workers have been let through.
    pub fn is_open(&self) -> bool {
        *self.tx.borrow() == State::Open
    }

    /// Lets the workers through.
    pub fn open(&self) {
        self.tx.send_if_modified(|s| {
            let waiting = *s == State::Waiting;
            if waiting {
                *s = State::Open;
            }
            waiting
        });
    }

    /// Stops waiting workers (shutdown before the caches synced). An open gate stays open, so
    /// workers already reconciling drain the queue as usual.
    pub fn close(&self) {
        self.tx.send_if_modified(|s| {
            let waiting = *s == State::Waiting;
            if waiting {
                *s = State::Closed;
            }
            waiting
        });
    }

    /// Opens the gate once `synced` holds, checking it every 100 ms; the task ends then, or
    /// when the gate is closed first.
    pub fn open_when(
        &self,
        plugin: &str,
        synced: impl Fn() -> bool + Send + 'static,
    ) -> JoinHandle<()> {
        let gate = self.clone();
        let plugin = plugin.to_owned();
        tokio::spawn(async move {
            let mut rx = gate.tx.subscribe();
            loop {
                if *rx.borrow_and_update() != State::Waiting {
                    return;
                }
                if synced() {
                    gate.open();
                    tracing::info!(%plugin, "caches synced; reconcile workers started");
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = rx.changed() => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn opens_only_once_the_condition_holds() {
        let gate = CacheSync::new();
        let synced = Arc::new(AtomicBool::new(false));
        let task = gate.open_when("p", {
            let s = synced.clone();
            move || s.load(Ordering::SeqCst)
        });
        let waiter = tokio::spawn({
            let g = gate.clone();
            async move { g.wait().await }
        });
        // Several polls pass with the condition false: the gate stays shut.
        tokio::time::sleep(POLL * 3).await;
        assert!(!gate.is_open());
        assert!(!waiter.is_finished());
        synced.store(true, Ordering::SeqCst);
        let opened = tokio::time::timeout(T, waiter).await.expect("in time");
        assert!(opened.expect("joins"));
        tokio::time::timeout(T, task)
            .await
            .expect("watcher ends")
            .expect("joins");
        assert!(gate.is_open());
    }

    #[tokio::test]
    async fn closing_before_sync_releases_waiters_without_opening() {
        let gate = CacheSync::new();
        let task = gate.open_when("p", || false);
        let waiter = tokio::spawn({
            let g = gate.clone();
            async move { g.wait().await }
        });
        gate.close();
        let opened = tokio::time::timeout(T, waiter).await.expect("in time");
        assert!(
            !opened.expect("joins"),
            "a closed gate lets nobody reconcile"
        );
        tokio::time::timeout(T, task)
            .await
            .expect("watcher ends at close")
            .expect("joins");
        // Closing is final; an open gate is not shut by a later close.
        gate.open();
        assert!(!gate.is_open());
        let g2 = CacheSync::new();
        g2.open();
        g2.close();
        assert!(g2.is_open());
        assert!(g2.wait().await);
    }
}
