//! Fault injection and counters, shared by the handle (tests) and the admin HTTP path.
//!
//! Why faults live in the server rather than in a proxy: the failures worth testing are
//! protocol-level (a 410 ERROR event inside a healthy stream, a watch closed after exactly N
//! events, 429 with Retry-After), which only the server can produce precisely.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::store::Store;

/// Signals every open stream and connection reacts to; each field is a generation counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kicks {
    /// Bumped to make every open watch send one ERROR 410 event and close.
    pub expire: u64,
    /// Bumped to drop every open connection abruptly.
    pub drop: u64,
    /// Bumped whenever the stall changes, so stalled streams re-check it at once.
    pub stall: u64,
}

/// Where each injected fault took effect, counted there: a test asserts from these that a
/// fault it armed was really delivered, not only armed.
#[derive(Debug, Default)]
struct DeliveredCounters {
    expired: AtomicU64,
    dropped: AtomicU64,
    closed_after: AtomicU64,
    failed: AtomicU64,
    too_many_requests: AtomicU64,
    stalled: AtomicU64,
    compacted: AtomicU64,
    history_expired: AtomicU64,
    server_errors: AtomicU64,
    lists_expired: AtomicU64,
    lists_compacted: AtomicU64,
    watches_too_old: AtomicU64,
    delayed: AtomicU64,
}

/// A snapshot of [`Faults::delivered`] (also the `faults` member of `GET /_emulator/stats`,
/// in camelCase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivered {
    /// Watches that sent the injected 410 and closed.
    pub expired: u64,
    /// Connections closed by the drop fault.
    pub dropped: u64,
    /// Watches closed by the close-after fault.
    pub closed_after: u64,
    /// Requests answered with an injected error other than 429.
    pub failed: u64,
    /// Requests answered with an injected 429.
    pub too_many_requests: u64,
    /// Times a watch stream paused for a stall.
    pub stalled: u64,
    /// Compactions that moved the compaction point.
    pub compacted: u64,
    /// Expiries of the watch history that dropped events.
    pub history_expired: u64,
    /// Requests answered with an injected 5xx (counted in `failed` too).
    pub server_errors: u64,
    /// LISTs answered 410 Expired: an injected 410, an RV or a continue token older than
    /// the compaction point or the history. Where a compaction or an expired history is
    /// seen by a client that lists (`compacted` and `history_expired` count the act).
    pub lists_expired: u64,
    /// Of `lists_expired`, those whose RV or continue token a compaction had passed.
    pub lists_compacted: u64,
    /// Watches that sent a 410 in-stream because their RV had fallen out of the watch
    /// history (expired by the fault, or overflowed its window), at start or later: where
    /// `history_expired` is seen by a client that watches.
    pub watches_too_old: u64,
    /// Requests held back by the delay fault before they were served.
    pub delayed: u64,
}

/// Which resources' LISTs are held, and how many LISTs met a hold.
#[derive(Debug, Default)]
struct HeldLists {
    resources: std::collections::BTreeSet<String>,
    held: u64,
}

/// What the next requests of some verbs meet (a failure, a delay), counted down.
#[derive(Debug, Clone, Copy)]
struct Armed<T> {
    remaining: u64,
    /// The verbs it applies to, one bit per [`VERBS`] position; all when 0.
    verbs: u16,
    what: T,
}

/// Arms `what` for the next `n` requests of `verbs`, replacing what was armed for the same
/// verbs (`n = 0` only disarms it).
fn arm<T>(list: &mut Vec<Armed<T>>, n: u64, verbs: u16, what: T) {
    list.retain(|armed| armed.verbs != verbs);
    if n > 0 {
        list.push(Armed {
            remaining: n,
            verbs,
            what,
        });
    }
}

/// What a request of `verb` meets, if anything is armed for it (the oldest that applies),
/// counted down.
fn take<T: Copy>(list: &mut Vec<Armed<T>>, verb: &str) -> Option<T> {
    if list.is_empty() {
        return None;
    }
    let bit = verb_bit(verb);
    let i = list
        .iter()
        .position(|armed| armed.verbs == 0 || armed.verbs & 1 << bit != 0)?;
    let what = list[i].what;
    list[i].remaining -= 1;
    if list[i].remaining == 0 {
        list.remove(i);
    }
    Some(what)
}

/// A verb name that [`Faults::fail_next_for`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown verb {0:?}: one of {VERBS:?}")]
pub struct UnknownVerb(pub String);

/// The [`Armed::verbs`] bits of `verbs`.
fn verb_mask(verbs: &[&str]) -> Result<u16, UnknownVerb> {
    verbs.iter().try_fold(0u16, |mask, v| {
        match VERBS.iter().position(|known| known == v) {
            Some(i) => Ok(mask | 1 << i),
            None => Err(UnknownVerb((*v).to_owned())),
        }
    })
}

/// The bit of `verb` in a verb mask (an unknown verb counts as the last, `other`).
fn verb_bit(verb: &str) -> usize {
    VERBS
        .iter()
        .position(|v| *v == verb)
        .unwrap_or(VERBS.len() - 1)
}

/// Fault controls. Cheap to share (`Arc` inside the handle); every method takes effect at once.
pub struct Faults {
    /// Where each fault took effect, counted there (see [`Delivered`]).
    delivered: DeliveredCounters,
    /// Resources (`group/plural`) whose LISTs wait, and how many LISTs have waited.
    held_lists: watch::Sender<HeldLists>,
    close_after: AtomicU64,
    /// LISTs with a continue token still to be preceded by a compaction.
    compact_before_continue: AtomicU64,
    /// Armed failures, one per verb set, oldest first: a request takes the first that
    /// applies to its verb.
    fail: Mutex<Vec<Armed<InjectedFailure>>>,
    delay: Mutex<Vec<Armed<Duration>>>,
    lag: Mutex<Vec<Armed<Duration>>>,
    stall_until: Mutex<Option<Instant>>,
    omit_initial_events_end: AtomicBool,
    refuse_watch_list: AtomicBool,
    kicks: watch::Sender<Kicks>,
    store: Arc<Store>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("close_after", &self.close_after.load(Ordering::Relaxed))
            .field("fail", &*self.fail.lock())
            .finish()
    }
}

/// A request failure chosen by [`Faults::fail_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedFailure {
    pub code: u16,
    pub retry_after: u32,
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Faults {
            delivered: DeliveredCounters::default(),
            held_lists: watch::channel(HeldLists::default()).0,
            close_after: AtomicU64::new(0),
            compact_before_continue: AtomicU64::new(0),
            fail: Mutex::new(Vec::new()),
            delay: Mutex::new(Vec::new()),
            lag: Mutex::new(Vec::new()),
            stall_until: Mutex::new(None),
            omit_initial_events_end: AtomicBool::new(false),
            refuse_watch_list: AtomicBool::new(false),
            kicks: watch::channel(Kicks::default()).0,
            store,
        }
    }

    /// Every watch (open or future) ends after it has sent `n` events; 0 turns this off.
    pub fn close_watches_after(&self, n: u64) {
        self.close_after.store(n, Ordering::Relaxed);
    }

    /// How many watches have sent the injected 410 and closed: a test confirms the fault took
    /// effect from this, since a kick reaches only the watches open at that moment.
    pub fn expiries_delivered(&self) -> u64 {
        self.delivered.expired.load(Ordering::Relaxed)
    }

    /// How many connections the drop fault has closed.
    pub fn connections_dropped(&self) -> u64 {
        self.delivered.dropped.load(Ordering::Relaxed)
    }

    /// Every fault's count of where it took effect.
    pub fn delivered(&self) -> Delivered {
        let d = &self.delivered;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Delivered {
            expired: n(&d.expired),
            dropped: n(&d.dropped),
            closed_after: n(&d.closed_after),
            failed: n(&d.failed),
            too_many_requests: n(&d.too_many_requests),
            stalled: n(&d.stalled),
            compacted: n(&d.compacted),
            history_expired: n(&d.history_expired),
            server_errors: n(&d.server_errors),
            lists_expired: n(&d.lists_expired),
            lists_compacted: n(&d.lists_compacted),
            watches_too_old: n(&d.watches_too_old),
            delayed: n(&d.delayed),
        }
    }

    pub(crate) fn count_expiry_delivered(&self) {
        self.delivered.expired.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_connection_dropped(&self) {
        self.delivered.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_closed_after(&self) {
        self.delivered.closed_after.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_stalled(&self) {
        self.delivered.stalled.fetch_add(1, Ordering::Relaxed);
    }

    /// A LIST answered 410; `compacted`: because a compaction had passed its RV or token.
    pub(crate) fn count_list_expired(&self, compacted: bool) {
        self.delivered.lists_expired.fetch_add(1, Ordering::Relaxed);
        if compacted {
            self.delivered
                .lists_compacted
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_watch_too_old(&self) {
        self.delivered
            .watches_too_old
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Every open watch sends one `ERROR` event with a 410 Expired Status, then closes.
    pub fn inject_expired(&self) {
        self.kicks.send_modify(|k| k.expire += 1);
    }

    /// The next `n` API requests answer `code` (429 adds `Retry-After: retry_after`; 410 is
    /// an `Expired` Status, as for a too old resourceVersion).
    /// Replaces every armed failure (`0` disarms them all).
    pub fn fail_next(&self, n: u64, code: u16, retry_after: u32) {
        let mut f = self.fail.lock();
        f.clear();
        arm(&mut f, n, 0, InjectedFailure { code, retry_after });
    }

    /// [`fail_next`](Self::fail_next) for requests of `verbs` only (names as in [`VERBS`]),
    /// the others pass: e.g. failures for an informer's lists and watches, not for the writes
    /// of a load generator beside it. It replaces only what was armed for the same verbs
    /// (`n = 0` disarms that), so failures for other verbs stay armed beside it; a request
    /// takes the oldest that applies. All verbs when `verbs` is empty.
    pub fn fail_next_for(
        &self,
        n: u64,
        code: u16,
        retry_after: u32,
        verbs: &[&str],
    ) -> Result<(), UnknownVerb> {
        let verbs = verb_mask(verbs)?;
        arm(
            &mut self.fail.lock(),
            n,
            verbs,
            InjectedFailure { code, retry_after },
        );
        Ok(())
    }

    /// The next `n` requests of `verbs` (all when empty) are served `by` late, as by an API
    /// server under load: a client's deadlines meet a slow answer, not a refusal. Replaces
    /// what was armed for the same verbs (`n = 0` disarms it); a delayed request may still
    /// meet an armed failure after its wait.
    pub fn delay_next(&self, n: u64, by: Duration, verbs: &[&str]) -> Result<(), UnknownVerb> {
        let verbs = verb_mask(verbs)?;
        arm(&mut self.delay.lock(), n, verbs, by);
        Ok(())
    }

    /// How late a request of `verb` is to be served, if a delay is armed for it.
    pub(crate) fn take_delay(&self, verb: &str) -> Option<Duration> {
        let by = take(&mut self.delay.lock(), verb)?;
        self.delivered.delayed.fetch_add(1, Ordering::Relaxed);
        Some(by)
    }

    /// The next `n` requests of `verbs` are answered at once, but the watch events of what they
    /// write reach the open streams `by` late (every stream stalls from just before the write
    /// on): kube-apiserver's watch cache lagging behind etcd, where a client sees its write's
    /// answer before its informer sees the write. Replaces what was armed for the same verbs.
    pub fn lag_watches_after_next(
        &self,
        n: u64,
        by: Duration,
        verbs: &[&str],
    ) -> Result<(), UnknownVerb> {
        let verbs = verb_mask(verbs)?;
        arm(&mut self.lag.lock(), n, verbs, by);
        Ok(())
    }

    /// Stalls the streams if a lag is armed for `verb` (see [`Faults::lag_watches_after_next`]).
    pub(crate) fn take_lag(&self, verb: &str) {
        let by = take(&mut self.lag.lock(), verb);
        if let Some(by) = by {
            self.stall_streams(by);
        }
    }

    /// Open watch streams stop sending for `d` (events queue up in the history meanwhile).
    pub fn stall_streams(&self, d: Duration) {
        *self.stall_until.lock() = Some(Instant::now() + d);
        self.kicks.send_modify(|k| k.stall += 1);
    }

    /// Compact the storage at the current RV, as `etcdctl compact` does: an Exact LIST at an
    /// older RV and a continue token from before are answered 410, but a watch from an older
    /// RV is still served from the watch cache (the recorded
    /// `watch-from-compacted-rv-…-via-watch-cache` sample).
    pub fn compact_history(&self) {
        if self.store.compact() {
            self.delivered.compacted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The next `n` LIST requests that carry a continue token are each preceded by a
    /// [`compact_history`](Self::compact_history): a compaction between two pages of a LIST,
    /// which a compaction on a timer only seldom hits (the pages follow each other within
    /// milliseconds). The page is refused if anything was written since the first one.
    pub fn compact_before_continue(&self, n: u64) {
        self.compact_before_continue.store(n, Ordering::Relaxed);
    }

    /// Whether a LIST with a continue token is to be preceded by a compaction (counts down).
    pub(crate) fn take_compact_before_continue(&self) -> bool {
        self.compact_before_continue
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Drop the watch cache's history, as when it restarts or a watcher falls behind its
    /// window: any RV before now is too old for watches (an in-stream 410) and lists alike.
    pub fn expire_watch_history(&self) {
        if self.store.expire_history() {
            self.delivered
                .history_expired
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Close every client connection without a goodbye (watches end mid-stream).
    pub fn drop_connections(&self) {
        self.kicks.send_modify(|k| k.drop += 1);
    }

    /// Watch-list streams (`sendInitialEvents=true`) never send the initial-events-end
    /// bookmark, as a server with the bug of k/k#139716 behaves.
    pub fn omit_initial_events_end(&self, on: bool) {
        self.omit_initial_events_end.store(on, Ordering::Relaxed);
    }

    /// Refuse watches with `sendInitialEvents` with 422, as a server whose WatchList feature
    /// is off does (spec 6.7).
    pub fn refuse_watch_list(&self, on: bool) {
        self.refuse_watch_list.store(on, Ordering::Relaxed);
    }

    /// LIST requests of `resource` (`group/plural`, `/configmaps` for core) wait until
    /// [`Faults::release_lists`]: a resource whose initial list is slow, as 10,000 objects on a
    /// real cluster are, while the other resources answer at once.
    pub fn hold_lists(&self, resource: &str) {
        self.held_lists.send_modify(|h| {
            h.resources.insert(resource.to_owned());
        });
    }

    /// Lets held LISTs of `resource`, and later ones, through.
    pub fn release_lists(&self, resource: &str) {
        self.held_lists.send_modify(|h| {
            h.resources.remove(resource);
        });
    }

    /// How many LIST requests have met a hold (counted when they start waiting).
    pub fn held_list_count(&self) -> u64 {
        self.held_lists.borrow().held
    }

    /// Waits while LISTs of `resource` are held (the router calls it before a LIST).
    pub(crate) async fn before_list(&self, resource: &str) {
        let mut rx = self.held_lists.subscribe();
        if !rx.borrow().resources.contains(resource) {
            return;
        }
        self.held_lists.send_modify(|h| h.held += 1);
        let _ = rx.wait_for(|h| !h.resources.contains(resource)).await;
    }

    /// Turn off every persistent fault (close-after, compaction before a continue,
    /// fail-next, stall, held lists, the watch-list knobs).
    pub fn clear(&self) {
        self.held_lists.send_modify(|h| h.resources.clear());
        self.close_watches_after(0);
        self.compact_before_continue(0);
        self.fail.lock().clear();
        self.delay.lock().clear();
        self.lag.lock().clear();
        *self.stall_until.lock() = None;
        self.omit_initial_events_end(false);
        self.refuse_watch_list(false);
        self.kicks.send_modify(|k| k.stall += 1);
    }

    pub(crate) fn omits_initial_events_end(&self) -> bool {
        self.omit_initial_events_end.load(Ordering::Relaxed)
    }

    pub(crate) fn refuses_watch_list(&self) -> bool {
        self.refuse_watch_list.load(Ordering::Relaxed)
    }

    pub(crate) fn close_after(&self) -> u64 {
        self.close_after.load(Ordering::Relaxed)
    }

    /// The injected failure a request of `verb` answers with, if one is armed for it.
    pub(crate) fn take_failure(&self, verb: &str) -> Option<InjectedFailure> {
        let out = take(&mut self.fail.lock(), verb)?;
        let d = &self.delivered;
        if out.code == 429 {
            d.too_many_requests.fetch_add(1, Ordering::Relaxed);
        } else {
            d.failed.fetch_add(1, Ordering::Relaxed);
        }
        if out.code >= 500 {
            d.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        if out.code == 410 && verb == "list" {
            d.lists_expired.fetch_add(1, Ordering::Relaxed);
        }
        Some(out)
    }

    pub(crate) fn stalled_until(&self) -> Option<Instant> {
        let mut s = self.stall_until.lock();
        match *s {
            Some(t) if t > Instant::now() => Some(t),
            _ => {
                *s = None;
                None
            }
        }
    }

    pub(crate) fn kicks(&self) -> watch::Receiver<Kicks> {
        self.kicks.subscribe()
    }
}

/// API verbs counted by [`Stats`].
pub const VERBS: [&str; 9] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "other",
];

/// Live counters kept by the server.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: [AtomicU64; 9],
    open_watches: Mutex<HashMap<String, u64>>,
    /// Woken whenever a watch opens or closes.
    pub(crate) watches_changed: tokio::sync::Notify,
}

impl Counters {
    pub(crate) fn count(&self, verb: &str) {
        let i = VERBS.iter().position(|v| *v == verb).unwrap_or(8);
        self.requests[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn watch_opened(self: &Arc<Self>, resource: &str) -> WatchGuard {
        *self
            .open_watches
            .lock()
            .entry(resource.to_owned())
            .or_default() += 1;
        self.watches_changed.notify_waiters();
        WatchGuard {
            counters: self.clone(),
            resource: resource.to_owned(),
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            requests: VERBS
                .iter()
                .zip(&self.requests)
                .map(|(v, n)| (*v, n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            open_watches: self
                .open_watches
                .lock()
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (k.clone(), *n))
                .collect(),
        }
    }
}

/// Decrements the open-watch counter when a watch stream ends.
pub(crate) struct WatchGuard {
    counters: Arc<Counters>,
    resource: String,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(n) = self.counters.open_watches.lock().get_mut(&self.resource) {
            *n = n.saturating_sub(1);
        }
        self.counters.watches_changed.notify_waiters();
    }
}

/// A snapshot of the server's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests by verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; `other` for discovery, health and anything else); verbs never seen
    /// are absent.
    pub requests: HashMap<&'static str, u64>,
    /// Open watch streams by resource (`group/plural`, `/configmaps` for core).
    pub open_watches: HashMap<String, u64>,
}

impl Stats {
    /// Requests seen for `verb`.
    pub fn requests(&self, verb: &str) -> u64 {
        self.requests.get(verb).copied().unwrap_or(0)
    }
    /// Open watches over all resources.
    pub fn open_watches_total(&self) -> u64 {
        self.open_watches.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_next_counts_down() {
        let f = Faults::new(Arc::new(Store::new(10)));
        f.fail_next(2, 429, 3);
        let want = Some(InjectedFailure {
            code: 429,
            retry_after: 3,
        });
        assert_eq!(f.take_failure("get"), want);
        assert_eq!(f.take_failure("watch"), want);
        assert_eq!(f.take_failure("get"), None);
        assert_eq!(f.delivered().too_many_requests, 2);
    }

    #[test]
    fn fail_next_for_verbs_passes_the_others_and_counts_by_kind() {
        let f = Faults::new(Arc::new(Store::new(10)));
        assert_eq!(
            f.fail_next_for(1, 500, 0, &["lists"]),
            Err(UnknownVerb("lists".into()))
        );
        f.fail_next_for(2, 500, 0, &["list", "watch"]).unwrap();
        assert_eq!(f.take_failure("patch"), None, "another verb passes");
        assert_eq!(f.take_failure("get"), None);
        assert!(f.take_failure("watch").is_some());
        assert!(f.take_failure("list").is_some());
        assert_eq!(f.take_failure("list"), None, "counted down");
        let d = f.delivered();
        assert_eq!((d.failed, d.server_errors, d.lists_expired), (2, 2, 0));
        // An injected 410 on a LIST is a LIST answered 410; on a watch it is not.
        f.fail_next_for(2, 410, 0, &[]).unwrap();
        assert!(f.take_failure("watch").is_some());
        assert!(f.take_failure("list").is_some());
        let d = f.delivered();
        assert_eq!((d.failed, d.server_errors, d.lists_expired), (4, 2, 1));
        // One armed failure per verb set: another set's stays armed beside it, the same
        // set's is replaced, and count 0 disarms only that set's.
        f.fail_next_for(1, 429, 1, &["get"]).unwrap();
        f.fail_next_for(5, 500, 0, &["list"]).unwrap();
        f.fail_next_for(1, 410, 0, &["list"]).unwrap();
        f.fail_next_for(1, 500, 0, &["watch"]).unwrap();
        f.fail_next_for(0, 0, 0, &["watch"]).unwrap();
        assert_eq!(f.take_failure("watch"), None);
        assert_eq!(f.take_failure("list").map(|x| x.code), Some(410));
        assert_eq!(f.take_failure("list"), None);
        assert_eq!(f.take_failure("get").map(|x| x.code), Some(429));
        // Without verbs, everything armed is replaced.
        f.fail_next_for(1, 500, 0, &["get"]).unwrap();
        f.fail_next(1, 503, 0);
        assert_eq!(f.take_failure("list").map(|x| x.code), Some(503));
        assert_eq!(f.take_failure("get"), None);
        assert_eq!(d.lists_compacted, 0);
        f.count_list_expired(true);
        f.count_watch_too_old();
        let d = f.delivered();
        assert_eq!(
            (d.lists_expired, d.lists_compacted, d.watches_too_old),
            (3, 1, 1),
            "the 410 taken by a LIST above, and these two"
        );
    }

    #[test]
    fn a_lag_stalls_the_streams_for_its_verbs_only_and_counts_down() {
        let f = Faults::new(Arc::new(Store::new(10)));
        let by = Duration::from_secs(60);
        f.lag_watches_after_next(1, by, &["patch"]).unwrap();
        f.take_lag("update");
        assert!(f.stalled_until().is_none(), "another verb");
        f.take_lag("patch");
        let until = f.stalled_until().expect("stalled");
        assert!(until > Instant::now() + by / 2, "for about {by:?}");
        f.clear();
        f.take_lag("patch");
        assert!(f.stalled_until().is_none(), "counted down, and cleared");
    }

    #[test]
    fn delay_next_holds_back_only_its_verbs_and_counts_down() {
        let f = Faults::new(Arc::new(Store::new(10)));
        let s = Duration::from_secs(1);
        assert_eq!(
            f.delay_next(1, s, &["creates"]),
            Err(UnknownVerb("creates".into()))
        );
        f.delay_next(2, s, &["create", "update"]).unwrap();
        assert_eq!(f.take_delay("get"), None, "another verb is not delayed");
        assert_eq!(f.take_delay("create"), Some(s));
        assert_eq!(f.take_delay("update"), Some(s));
        assert_eq!(f.take_delay("update"), None, "counted down");
        f.delay_next(5, s, &[]).unwrap();
        f.clear();
        assert_eq!(f.take_delay("get"), None, "cleared");
        assert_eq!(f.delivered().delayed, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn stall_expires() {
        let f = Faults::new(Arc::new(Store::new(10)));
        f.stall_streams(Duration::from_secs(5));
        assert!(f.stalled_until().is_some());
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(f.stalled_until().is_none());
    }

    #[test]
    fn kicks_bump_generations_and_counters_track_watches() {
        let f = Faults::new(Arc::new(Store::new(10)));
        let rx = f.kicks();
        f.inject_expired();
        f.drop_connections();
        assert_eq!(
            *rx.borrow(),
            Kicks {
                expire: 1,
                drop: 1,
                stall: 0
            }
        );
        f.stall_streams(Duration::from_secs(60));
        f.clear();
        assert_eq!(
            rx.borrow().stall,
            2,
            "stalled streams are woken on every change"
        );
        assert!(f.stalled_until().is_none());
        let c = Arc::new(Counters::default());
        c.count("list");
        c.count("bogus");
        let g = c.watch_opened("/configmaps");
        let s = c.snapshot();
        assert_eq!((s.requests("list"), s.requests("other")), (1, 1));
        assert_eq!(s.open_watches_total(), 1);
        drop(g);
        assert_eq!(c.snapshot().open_watches_total(), 0);
    }
}
