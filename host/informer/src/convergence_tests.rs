//! The whole pipeline (reflector → DeltaFIFO → informer → store + handler) against an
//! in-memory API that mutates objects at random and injects faults: closed watches, compacted
//! history (410 on re-watch), 429 and refused watch starts, failed lists. Afterwards the cache
//! must equal the server's state and the handler must have seen every object's final state.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{stream, FutureExt, StreamExt};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::broadcast;

use super::lister_watcher::{ListerWatcher, WatchStream};
use super::processor::ResourceEventHandler;
use super::shared::{InformerOptions, SharedIndexInformer};
use super::tombstone::test_support::obj;
use super::tombstone::ObjOrTombstone;
use crate::fake;
use kwh_client::error::Status;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::{ObjectList, WatchEvent};
use kwh_client::{Error, Object};

#[derive(Default)]
struct State {
    rv: u64,
    objs: BTreeMap<String, Object>,
    /// Events newer than `oldest`, for resuming watches.
    history: VecDeque<(u64, WatchEvent)>,
    oldest: u64,
    /// Pending faults for the next requests.
    fail_lists: usize,
    fail_watch_starts: usize,
    /// Served: lists, watches, and watches refused with 410.
    lists: usize,
    watches: usize,
    expired: usize,
    /// Faults counted where they took effect: lists answered 500, watch starts refused (a
    /// refused connection) or answered 429, and open watches closed by a kill.
    lists_failed: usize,
    starts_refused: usize,
    starts_throttled: usize,
    streams_killed: Arc<std::sync::atomic::AtomicUsize>,
}

struct Server {
    st: Mutex<State>,
    events: broadcast::Sender<(u64, WatchEvent)>,
    /// Bumping it closes every open watch.
    kill: tokio::sync::watch::Sender<u64>,
}

impl Server {
    fn new() -> Arc<Self> {
        let (events, _) = broadcast::channel(100_000);
        let (kill, _) = tokio::sync::watch::channel(0);
        Arc::new(Server {
            st: Mutex::new(State::default()),
            events,
            kill,
        })
    }

    fn apply(&self, name: &str, delete: bool) {
        let mut st = self.st.lock();
        let key = format!("ns/{name}");
        st.rv += 1;
        let rv = st.rv.to_string();
        let ev = if delete {
            let Some(_) = st.objs.remove(&key) else {
                st.rv -= 1;
                return;
            };
            WatchEvent::Deleted(obj("ns", name, &rv))
        } else {
            let o = obj("ns", name, &rv);
            match st.objs.insert(key, o.clone()) {
                Some(_) => WatchEvent::Modified(o),
                None => WatchEvent::Added(o),
            }
        };
        let n = st.rv;
        st.history.push_back((n, ev.clone()));
        let _ = self.events.send((n, ev));
    }

    fn compact(&self) {
        let mut st = self.st.lock();
        st.oldest = st.rv;
        st.history.clear();
    }

    fn close_watches(&self) {
        self.kill.send_modify(|g| *g += 1);
    }

    fn snapshot(&self) -> BTreeMap<String, String> {
        self.st
            .lock()
            .objs
            .iter()
            .map(|(k, o)| (k.clone(), o.resource_version().to_owned()))
            .collect()
    }
}

fn parse_rv(rv: &Option<String>) -> Option<u64> {
    rv.as_deref()
        .filter(|r| *r != "0")
        .and_then(|r| r.parse().ok())
}

impl ListerWatcher for Arc<Server> {
    async fn list(&self, _params: &ListParams) -> Result<ObjectList, Error> {
        let mut st = self.st.lock();
        if st.fail_lists > 0 {
            st.fail_lists -= 1;
            st.lists_failed += 1;
            return Err(fake::api_err(500, "InternalError"));
        }
        st.lists += 1;
        Ok(ObjectList {
            resource_version: st.rv.to_string(),
            continue_token: None,
            remaining_item_count: None,
            items: st.objs.values().cloned().collect(),
        })
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        let mut st = self.st.lock();
        if st.fail_watch_starts > 0 {
            st.fail_watch_starts -= 1;
            return Err(if st.fail_watch_starts % 2 == 0 {
                st.starts_refused += 1;
                fake::refused()
            } else {
                st.starts_throttled += 1;
                fake::api_err(429, "TooManyRequests")
            });
        }
        st.watches += 1;
        let from = parse_rv(&params.resource_version);
        let initial: Vec<(u64, WatchEvent)> = match from {
            Some(n) if n < st.oldest => {
                st.expired += 1;
                let gone = Status::failure(410, "Expired", "too old resource version");
                let s = stream::iter(vec![Ok(WatchEvent::Error(gone))]);
                return Ok(Box::pin(s));
            }
            Some(n) => st
                .history
                .iter()
                .filter(|(rv, _)| *rv > n)
                .cloned()
                .collect(),
            None => st
                .objs
                .values()
                .map(|o| (st.rv, WatchEvent::Added(o.clone())))
                .collect(),
        };
        let live = self.events.subscribe();
        let mut kill = self.kill.subscribe();
        kill.mark_unchanged();
        let killed = st.streams_killed.clone();
        let last = initial
            .last()
            .map(|(rv, _)| *rv)
            .unwrap_or(from.unwrap_or(st.rv));
        drop(st);
        let live = stream::unfold(
            (live, kill, last, killed),
            |(mut live, mut kill, last, killed)| async move {
                loop {
                    tokio::select! {
                        _ = kill.changed() => {
                            killed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            return None;
                        }
                        ev = live.recv() => match ev {
                            Ok((rv, ev)) if rv > last => {
                                return Some((Ok(ev), (live, kill, rv, killed)))
                            }
                            Ok(_) => continue,
                            // Lagged or closed: end the watch; the reflector resumes.
                            Err(_) => return None,
                        }
                    }
                }
            },
        );
        let first = stream::iter(initial.into_iter().map(|(_, e)| Ok(e)));
        Ok(Box::pin(first.chain(live)))
    }
}

/// Remembers, per key, the last state delivered: Some(rv) or None after a delete.
#[derive(Default)]
struct Tracker(Mutex<HashMap<String, Option<String>>>, Mutex<usize>);

impl ResourceEventHandler for Tracker {
    fn on_add(&self, o: Object, _initial: bool) -> BoxFuture<'_, ()> {
        self.0
            .lock()
            .insert(o.key(), Some(o.resource_version().to_owned()));
        futures_util::future::ready(()).boxed()
    }
    fn on_update(&self, _old: Object, o: Object) -> BoxFuture<'_, ()> {
        self.on_add(o, false)
    }
    fn on_delete(&self, o: ObjOrTombstone) -> BoxFuture<'_, ()> {
        if o.is_tombstone() {
            *self.1.lock() += 1;
        }
        self.0.lock().insert(o.key(), None);
        futures_util::future::ready(()).boxed()
    }
}

/// 3,000 writes over 200 objects with a fault every tenth write the informer is healthy for
/// (an open watch): watches closed, history compacted behind a closed watch, watch starts
/// refused, lists failed. How many of each were armed.
async fn storm(server: &Server) -> (usize, usize, usize, usize) {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let (mut closes, mut compactions, mut start_faults, mut list_faults) = (0, 0, 0, 0);
    for i in 0..3000 {
        let name = format!("o{}", rng.gen_range(0..200));
        server.apply(&name, rng.gen_bool(0.3));
        // Faults hit a healthy informer (one with an open watch), as outages do. After the
        // last fault it may still be backing off (jittered, so for a different time each run):
        // wait, bounded, until it watches again, so every run arms the same number of faults.
        let healthy = i % 10 == 0
            && tokio::time::timeout(Duration::from_secs(300), async {
                while server.kill.receiver_count() == 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .is_ok();
        if healthy {
            match rng.gen_range(0..4) {
                0 => {
                    server.close_watches();
                    closes += 1;
                }
                1 => {
                    // Changes the informer cannot see before history is compacted: its
                    // re-watch gets 410 and it must relist, deletions becoming tombstones.
                    server.close_watches();
                    for _ in 0..3 {
                        let n = format!("o{}", rng.gen_range(0..200));
                        server.apply(&n, rng.gen_bool(0.5));
                    }
                    server.compact();
                    compactions += 1;
                }
                2 => {
                    // Added to what is still pending: a new arming never hides an old one.
                    server.st.lock().fail_watch_starts += 2;
                    server.close_watches();
                    start_faults += 1;
                }
                _ => {
                    server.close_watches();
                    server.apply(&format!("o{}", rng.gen_range(0..200)), true);
                    server.compact();
                    server.st.lock().fail_lists += 1;
                    list_faults += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..1000))).await;
    }
    (closes, compactions, start_faults, list_faults)
}

/// The informer's cache as key → resourceVersion.
fn cache_of<L: ListerWatcher>(inf: &SharedIndexInformer<L>) -> BTreeMap<String, String> {
    inf.indexer()
        .list()
        .iter()
        .map(|o| (o.key(), o.resource_version().to_owned()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn pipeline_converges_under_faults_7_1_7_2() {
    let server = Server::new();
    let inf = SharedIndexInformer::new(server.clone(), InformerOptions::default());
    let tracker = Arc::new(Tracker::default());
    inf.add_event_handler(tracker.clone()).unwrap();
    let task = tokio::spawn({
        let inf = inf.clone();
        async move { inf.run().await }
    });

    let (closes, compactions, start_faults, list_faults) = storm(&server).await;
    // Armed often enough; whether each took effect is asserted below from the server's own
    // counts.
    assert!(closes >= 10 && compactions >= 10 && start_faults >= 10 && list_faults >= 10);

    let want = server.snapshot();
    let converged = tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            let cache = cache_of(&inf);
            let seen_ok = {
                let seen = tracker.0.lock();
                want.iter()
                    .all(|(k, rv)| seen.get(k) == Some(&Some(rv.clone())))
                    && seen
                        .iter()
                        .all(|(k, v)| want.contains_key(k) || v.is_none())
            };
            if cache == want && seen_ok {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if converged.is_err() {
        let cache = cache_of(&inf);
        let seen = tracker.0.lock().clone();
        let cache_diff: Vec<_> = want
            .iter()
            .filter(|(k, v)| cache.get(*k) != Some(v))
            .map(|(k, v)| (k.clone(), v.clone(), cache.get(k).cloned()))
            .collect();
        let extra: Vec<_> = cache.keys().filter(|k| !want.contains_key(*k)).collect();
        let seen_diff: Vec<_> = want
            .iter()
            .filter(|(k, v)| seen.get(*k) != Some(&Some((*v).clone())))
            .map(|(k, v)| (k.clone(), v.clone(), seen.get(k).cloned()))
            .collect();
        panic!(
            "no convergence: last rv {}, cache diff {cache_diff:?}, extra {extra:?}, seen diff {seen_diff:?}",
            inf.last_sync_resource_version()
        );
    }
    // Every fault took effect where it was counted: lists failed, watch starts refused and
    // throttled, open watches killed, re-watches expired; relists (with tombstones) and
    // resumed watches followed.
    let (lists, expired, watches) = {
        let st = server.st.lock();
        let killed = st.streams_killed.load(std::sync::atomic::Ordering::Relaxed);
        assert!(st.lists_failed >= 10, "failed lists {}", st.lists_failed);
        assert!(
            st.starts_refused >= 10,
            "refused starts {}",
            st.starts_refused
        );
        assert!(
            st.starts_throttled >= 10,
            "429 starts {}",
            st.starts_throttled
        );
        assert!(
            killed >= closes,
            "killed streams {killed} of {closes} closes"
        );
        (st.lists, st.expired, st.watches)
    };
    assert!(lists >= 10, "lists {lists}");
    assert!(expired >= 10, "410s {expired}");
    assert!(watches > lists + expired, "watches {watches}");
    assert!(*tracker.1.lock() >= 10, "tombstones {}", *tracker.1.lock());
    inf.stop();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("informer did not stop")
        .unwrap()
        .unwrap();
}
