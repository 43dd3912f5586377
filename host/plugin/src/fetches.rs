//! Each source entry's fetch (a `WasmController`'s module pulled from its registry, say) on a
//! task of its own, so that a slow or silent registry delays only its own entry: never another
//! entry's apply, removal or status, nor the pass of the reconciler of plugin sources
//! ([`crate::sources`]) that hands every entry over. A pass starts the fetches that are due,
//! hands the entries whose fetch has not finished over as [`crate::Want::Keep`], and takes the
//! finished ones with [`Fetches::finished`], which never waits for one still running.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The fetches in flight, by entry id.
pub struct Fetches<T> {
    flying: HashMap<String, Flight<T>>,
    /// Notified as each fetch finishes.
    wake: Arc<Notify>,
}

struct Flight<T> {
    generation: i64,
    recheck: bool,
    task: JoinHandle<T>,
}

/// A fetch that finished.
#[derive(Debug)]
pub struct Done<T> {
    /// The entry's generation it fetched.
    pub generation: i64,
    /// Whether it only asked again for what that generation named (a tag due to be resolved
    /// again), the generation having been applied already.
    pub recheck: bool,
    /// What it came to; an error when its task failed (it panicked).
    pub result: Result<T, String>,
}

impl<T: Send + 'static> Fetches<T> {
    /// No fetches; `wake` is notified as each one finishes (the caller's next pass).
    pub fn new(wake: Arc<Notify>) -> Self {
        Fetches {
            flying: HashMap::new(),
            wake,
        }
    }

    /// Starts `fetch` for entry `id`'s `generation` on a task of its own, cancelling the
    /// entry's fetch in flight (its result would be stale).
    pub fn start(
        &mut self,
        id: &str,
        generation: i64,
        recheck: bool,
        fetch: impl Future<Output = T> + Send + 'static,
    ) {
        self.cancel(id);
        let wake = self.wake.clone();
        let task = tokio::spawn(async move {
            let out = fetch.await;
            wake.notify_one();
            out
        });
        self.flying.insert(
            id.to_owned(),
            Flight {
                generation,
                recheck,
                task,
            },
        );
    }

    /// The generation entry `id`'s fetch in flight is for, and whether it is a recheck.
    pub fn in_flight(&self, id: &str) -> Option<(i64, bool)> {
        self.flying.get(id).map(|f| (f.generation, f.recheck))
    }

    /// Cancels entry `id`'s fetch in flight; whether there was one.
    pub fn cancel(&mut self, id: &str) -> bool {
        self.flying.remove(id).inspect(|f| f.task.abort()).is_some()
    }

    /// Cancels the fetches of the entries `keep` does not keep (entries gone from the source).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.flying.retain(|id, f| {
            let kept = keep(id);
            if !kept {
                f.task.abort();
            }
            kept
        });
    }

    /// The fetches that finished, taken out of the ones in flight. Waits for none still
    /// running.
    pub async fn finished(&mut self) -> HashMap<String, Done<T>> {
        let done: Vec<String> = self
            .flying
            .iter()
            .filter(|(_, f)| f.task.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = HashMap::with_capacity(done.len());
        for id in done {
            let Some(flight) = self.flying.remove(&id) else {
                continue;
            };
            // Finished: this await does not wait.
            let result = flight
                .task
                .await
                .map_err(|e| format!("the fetch stopped: {e}"));
            out.insert(
                id,
                Done {
                    generation: flight.generation,
                    recheck: flight.recheck,
                    result,
                },
            );
        }
        out
    }
}

impl<T> Drop for Fetches<T> {
    fn drop(&mut self) {
        for f in self.flying.values() {
            f.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_fetch_that_never_finishes_holds_up_no_other() {
        let wake = Arc::new(Notify::new());
        let mut f = Fetches::new(wake.clone());
        f.start("silent", 1, false, std::future::pending::<u32>());
        f.start("quick", 1, false, async { 7 });
        tokio::time::timeout(Duration::from_secs(5), wake.notified())
            .await
            .expect("the quick one wakes the caller");
        let done = tokio::time::timeout(Duration::from_secs(5), f.finished())
            .await
            .expect("finished() does not wait for the silent one");
        assert_eq!(done.len(), 1);
        assert_eq!(done["quick"].result, Ok(7));
        assert_eq!(f.in_flight("silent"), Some((1, false)));
        assert_eq!(f.in_flight("quick"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_newer_generation_or_a_removal_cancels_the_fetch_in_flight() {
        let wake = Arc::new(Notify::new());
        let mut f = Fetches::new(wake.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // The first generation's fetch holds `tx` until it is dropped with its task.
        f.start("a", 1, false, async move {
            let _held = tx;
            std::future::pending::<u32>().await
        });
        f.start("a", 2, false, async { 2 });
        assert!(rx.await.is_err(), "generation 1's fetch was cancelled");
        wake.notified().await;
        let done = f.finished().await;
        assert_eq!(done["a"].generation, 2);
        f.start("b", 1, true, std::future::pending::<u32>());
        f.retain(|id| id != "b");
        assert_eq!(f.in_flight("b"), None);
        assert!(!f.cancel("b"));
    }
}
