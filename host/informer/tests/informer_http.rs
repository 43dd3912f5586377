//! The informer pipeline over real HTTP against the emulator: the reflector's rules of spec §1
//! and the wire behaviour of §6 as a running informer sees them, then convergence under a
//! storm of faults.
//!
//! Every test observes the reflector through [`Recording`], a `ListerWatcher` around the real
//! `ResourceClient` that logs each request's parameters, time and outcome, and counts how
//! watch streams end. Waits are bounded and poll explicit conditions; nothing sleeps and hopes.

#[path = "../../emulator/tests/emulator_common/mod.rs"]
mod emulator_common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use emulator_common::{cm, STEP};
use futures_util::StreamExt;
use kwh_client::client::{Client, ResourceClient};
use kwh_client::config::{Config, KubeconfigOptions};
use kwh_client::decode::ObjectPool;
use kwh_client::discovery::Discovery;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::resource::ApiResource;
use kwh_client::watch::{ObjectList, WatchEvent};
use kwh_client::{Error, Object};
use kwh_emulator::{Emulator, EmulatorBuilder, EmulatorHandle};
use kwh_informer::backoff::Backoff;
use kwh_informer::lister_watcher::{ListerWatcher, WatchStream};
use kwh_informer::processor::HandlerFns;
use kwh_informer::reflector::ReflectorOptions;
use kwh_informer::shared::{InformerOptions, SharedIndexInformer};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

const NS: &str = "default";
const CM: &str = "/configmaps";

// ---------------------------------------------------------------------------------------------
// Recording ListerWatcher

#[derive(Debug, Clone)]
enum Req {
    List(ListParams),
    Watch(WatchParams),
}

#[derive(Debug, Clone)]
enum Outcome {
    /// A list page: its RV, (key, RV) of its items, and whether it carried a continue token.
    Page {
        rv: String,
        items: Vec<(String, String)>,
        more: bool,
    },
    Opened,
    Failed {
        code: Option<u16>,
        too_large: bool,
        expired: bool,
        /// Shown when an assertion prints the log.
        #[allow(dead_code)]
        message: String,
    },
}

#[derive(Debug, Clone)]
struct Call {
    at: Instant,
    req: Req,
    outcome: Outcome,
}

type Hook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Log {
    calls: Mutex<Vec<Call>>,
    /// ERROR events with a 410 Expired Status read from watch streams.
    stream_expired: AtomicU64,
    /// Streams that ended with a transport error (dropped connections).
    stream_broken: AtomicU64,
    /// Streams the server ended cleanly and the reflector read to the end.
    stream_closed: AtomicU64,
    /// Run once, after the first list page that has a continue token.
    between_pages: Mutex<Option<Hook>>,
    /// The request the reflector is waiting on (it sends one at a time), for a failure
    /// message: when it started and what it is.
    in_flight: Mutex<Option<(Instant, String)>>,
}

impl Log {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
    fn lists(&self) -> Vec<(ListParams, Outcome)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c.req {
                Req::List(p) => Some((p, c.outcome)),
                Req::Watch(_) => None,
            })
            .collect()
    }
    fn watches(&self) -> Vec<(WatchParams, Outcome)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c.req {
                Req::Watch(p) => Some((p, c.outcome)),
                Req::List(_) => None,
            })
            .collect()
    }
    /// The last `n` requests (age, kind, RV, outcome) and the stream-end counters, for a
    /// failure message.
    fn describe_tail(&self, n: usize) -> String {
        let calls = self.calls();
        let now = Instant::now();
        let mut out = format!(
            "streams expired {} / closed {} / broken {}; last {} of {} requests:",
            self.stream_expired.load(Ordering::SeqCst),
            self.stream_closed.load(Ordering::SeqCst),
            self.stream_broken.load(Ordering::SeqCst),
            n.min(calls.len()),
            calls.len()
        );
        for c in &calls[calls.len().saturating_sub(n)..] {
            let req = describe_req(&c.req);
            let outcome = match &c.outcome {
                Outcome::Page { rv, items, more } => {
                    format!("page rv={rv} items={} more={more}", items.len())
                }
                o => format!("{o:?}"),
            };
            out.push_str(&format!("\n  {:?} ago: {req} -> {outcome}", now - c.at));
        }
        match &*self.in_flight.lock() {
            Some((at, req)) => {
                out.push_str(&format!("\n  in flight since {:?}: {req}", now - *at));
            }
            None => out.push_str("\n  no request in flight"),
        }
        out
    }
    fn start(&self, req: &Req) -> Instant {
        let at = Instant::now();
        *self.in_flight.lock() = Some((at, describe_req(req)));
        at
    }
    fn failures(&self, code: u16) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed { code: Some(k), .. } if k == code))
            .count()
    }
}

fn describe_req(req: &Req) -> String {
    match req {
        Req::List(p) => format!(
            "LIST rv={:?} limit={:?} continue={}",
            p.resource_version,
            p.limit,
            p.continue_token.is_some()
        ),
        Req::Watch(p) => format!("WATCH rv={:?}", p.resource_version),
    }
}

/// The real client for one scope, with every request and stream ending recorded.
struct Recording {
    inner: ResourceClient,
    log: Arc<Log>,
}

fn failed(e: &Error) -> Outcome {
    Outcome::Failed {
        code: e.code(),
        too_large: e.is_too_large_rv(),
        expired: e.is_expired(),
        message: e.to_string(),
    }
}

impl Recording {
    fn record_list(
        &self,
        at: Instant,
        params: &ListParams,
        r: Result<ObjectList, Error>,
    ) -> Result<ObjectList, Error> {
        let outcome = match &r {
            Ok(l) => Outcome::Page {
                rv: l.resource_version.clone(),
                items: l
                    .items
                    .iter()
                    .map(|o| (o.key(), o.resource_version().to_owned()))
                    .collect(),
                more: l.continue_token.as_ref().is_some_and(|c| !c.is_empty()),
            },
            Err(e) => failed(e),
        };
        let more = matches!(outcome, Outcome::Page { more: true, .. });
        *self.log.in_flight.lock() = None;
        self.log.calls.lock().push(Call {
            at,
            req: Req::List(params.clone()),
            outcome,
        });
        if more {
            let hook = self.log.between_pages.lock().take();
            if let Some(f) = hook {
                f();
            }
        }
        r
    }
}

impl ListerWatcher for Recording {
    fn expected_type(&self) -> Option<(&str, &str)> {
        self.inner.expected_type()
    }

    async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        let at = self.log.start(&Req::List(params.clone()));
        let r = self.inner.list(params).await;
        self.record_list(at, params, r)
    }

    async fn list_reusing(
        &self,
        params: &ListParams,
        pool: Arc<dyn ObjectPool>,
    ) -> Result<ObjectList, Error> {
        let at = self.log.start(&Req::List(params.clone()));
        let r = self.inner.list_reusing(params, pool).await;
        self.record_list(at, params, r)
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        let at = self.log.start(&Req::Watch(params.clone()));
        let r = self.inner.watch(params).await;
        *self.log.in_flight.lock() = None;
        self.log.calls.lock().push(Call {
            at,
            req: Req::Watch(params.clone()),
            outcome: match &r {
                Ok(_) => Outcome::Opened,
                Err(e) => failed(e),
            },
        });
        let s = r?;
        let (seen, closed) = (self.log.clone(), self.log.clone());
        let s = s
            .inspect(move |ev| match ev {
                Ok(WatchEvent::Error(st)) if st.is_expired() => {
                    seen.stream_expired.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) if e.status().is_none() => {
                    seen.stream_broken.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            })
            .chain(
                futures_util::stream::once(async move {
                    closed.stream_closed.fetch_add(1, Ordering::SeqCst);
                })
                .filter_map(|()| async { None }),
            );
        Ok(Box::pin(s))
    }
}

// ---------------------------------------------------------------------------------------------
// Setup and waiting

struct Env {
    h: EmulatorHandle,
    client: Client,
    cm: ApiResource,
}

async fn env(b: EmulatorBuilder) -> Env {
    let h = b.start().await.unwrap();
    connect(h).await
}

async fn connect(h: EmulatorHandle) -> Env {
    let cfg = Config::from_kubeconfig_str(
        &h.kubeconfig(),
        &std::env::temp_dir(),
        &KubeconfigOptions::default(),
    )
    .unwrap();
    let client = Client::new(cfg).unwrap();
    let cm = tokio::time::timeout(
        STEP,
        Discovery::new(client.clone()).resolve("v1", "ConfigMap"),
    )
    .await
    .unwrap()
    .unwrap();
    Env { h, client, cm }
}

/// Backoff short enough for tests that inject hundreds of failures (1 ms doubling to 10 ms).
fn short_backoff() -> Backoff {
    Backoff::new(
        Duration::from_millis(1),
        Duration::from_millis(10),
        2.0,
        1.0,
        Duration::from_secs(120),
    )
}

fn opts(name: &str) -> ReflectorOptions {
    ReflectorOptions {
        name: name.into(),
        backoff: short_backoff(),
        ..Default::default()
    }
}

/// What a handler saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Add(String, String),
    Update(String, String),
    Delete(String, bool),
}

fn recorder() -> (HandlerFns, mpsc::UnboundedReceiver<Seen>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (t1, t2, t3) = (tx.clone(), tx.clone(), tx);
    let h = HandlerFns {
        add: Some(Box::new(move |o, _| {
            let _ = t1.send(Seen::Add(o.key(), o.resource_version().to_owned()));
        })),
        update: Some(Box::new(move |_, n| {
            let _ = t2.send(Seen::Update(n.key(), n.resource_version().to_owned()));
        })),
        delete: Some(Box::new(move |o| {
            let _ = t3.send(Seen::Delete(o.key(), o.is_tombstone()));
        })),
    };
    (h, rx)
}

struct Running {
    inf: SharedIndexInformer<Recording>,
    log: Arc<Log>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.inf.stop();
        tokio::time::timeout(STEP, self.task)
            .await
            .expect("informer did not stop")
            .unwrap();
    }
}

/// An informer over `default` ConfigMaps (optionally label-selected), started.
fn start(
    e: &Env,
    reflector: ReflectorOptions,
    labels: Option<&str>,
    fields: Option<&str>,
    handler: Option<HandlerFns>,
) -> Running {
    let mut rc = ResourceClient::new(e.client.clone(), e.cm.clone(), Some(NS.into()));
    if let Some(l) = labels {
        rc = rc.labels(l);
    }
    if let Some(f) = fields {
        rc = rc.fields(f);
    }
    let log = Arc::new(Log::default());
    let lw = Recording {
        inner: rc,
        log: log.clone(),
    };
    let inf = SharedIndexInformer::new(
        lw,
        InformerOptions {
            reflector,
            ..Default::default()
        },
    );
    if let Some(h) = handler {
        inf.add_event_handler(Arc::new(h)).unwrap();
    }
    let task = tokio::spawn({
        let inf = inf.clone();
        async move { inf.run().await.unwrap() }
    });
    Running { inf, log, task }
}

/// Poll `cond` every 10 ms until it holds; panic with `what` (and the last diagnostic) after
/// `within`.
async fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + within;
    loop {
        let r = cond();
        match r {
            Ok(()) => return,
            Err(why) if Instant::now() >= deadline => {
                panic!("timed out after {within:?} waiting for {what}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

fn check(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

async fn synced(r: &Running) {
    assert!(
        tokio::time::timeout(STEP, r.inf.wait_for_sync())
            .await
            .expect("informer did not sync in time"),
        "informer stopped before syncing"
    );
}

/// (key, RV) of every object in the informer's cache.
fn cache_state(r: &Running) -> BTreeMap<String, String> {
    r.inf
        .indexer()
        .list()
        .iter()
        .map(|o| (o.key(), o.resource_version().to_owned()))
        .collect()
}

/// (key, RV) of every `default` ConfigMap in the emulator, filtered by `keep`.
fn server_state(h: &EmulatorHandle, keep: impl Fn(&Value) -> bool) -> BTreeMap<String, String> {
    h.list("v1", "ConfigMap", Some(NS))
        .iter()
        .filter(|v| keep(v))
        .map(|v| {
            let m = &v["metadata"];
            (
                format!("{NS}/{}", m["name"].as_str().unwrap()),
                m["resourceVersion"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The informer's cache equals the server's state and its lastSyncRV is the server's latest.
async fn caught_up(r: &Running, h: &EmulatorHandle, within: Duration) {
    wait_until("the informer to catch up", within, || {
        let (ours, theirs) = (cache_state(r), server_state(h, |_| true));
        let (lsrv, cur) = (
            r.inf.last_sync_resource_version(),
            h.current_resource_version().to_string(),
        );
        check(ours == theirs && lsrv == cur, || {
            format!(
                "lastSyncRV {lsrv} vs {cur}; cache {} objects vs {}",
                ours.len(),
                theirs.len()
            )
        })
    })
    .await;
}

async fn open_watch(h: &EmulatorHandle) {
    wait_until("an open ConfigMap watch", STEP, || {
        let n = h.stats().open_watches.get(CM).copied().unwrap_or(0);
        check(n >= 1, || format!("{n} open"))
    })
    .await;
}

fn create_cms(h: &EmulatorHandle, n: usize, labels: Value) -> Vec<String> {
    (0..n)
        .map(|i| {
            let v = h
                .create(cm(NS, &format!("c{i:04}"), labels.clone()))
                .unwrap();
            v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn touch(h: &EmulatorHandle, name: &str, value: &str) -> String {
    let mut v = h.get("v1", "ConfigMap", Some(NS), name).unwrap();
    v["data"]["k"] = value.into();
    let v = h.update(v).unwrap();
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn relabel(h: &EmulatorHandle, name: &str, labels: Value) {
    let mut v = h.get("v1", "ConfigMap", Some(NS), name).unwrap();
    v["metadata"]["labels"] = labels;
    h.update(v).unwrap();
}

/// Advance the server's RV without touching ConfigMaps.
fn bump_other_resource(h: &EmulatorHandle, name: &str) {
    h.create(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}}),
    )
    .unwrap();
}

fn page_rv(o: &Outcome) -> &str {
    match o {
        Outcome::Page { rv, .. } => rv,
        other => panic!("expected a list page, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// spec 1.3: pagination

/// spec 1.3: the first list asks RV="0" with limit=500 (the server's watch cache answers it
/// whole), and a relist at lastSyncRV drops the limit so it is served from the cache too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_3_first_list_limit_500_at_rv_0_relist_without_limit() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 1201, json!({}));
    let r = start(&e, opts("pages-default"), None, None, None);
    synced(&r).await;
    open_watch(&e.h).await;
    let lists = r.log.lists();
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert_eq!(lists[0].0, ListParams::default().at("0").limit(500));
    let n = page_rv(&lists[0].1).to_owned();
    assert_eq!(r.inf.indexer().len(), 1201);

    e.h.faults().inject_expired();
    wait_until("a relist", STEP, || {
        let l = r.log.lists();
        check(l.len() == 2, || format!("{} lists", l.len()))
    })
    .await;
    // spec 1.3 (L716): RV=N with a limit would mean Exact and bypass the watch cache.
    assert_eq!(r.log.lists()[1].0, ListParams::default().at(n));
    caught_up(&r, &e.h, STEP).await;
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.3: with an explicit page size the relist pages by 500 following `continue`; later
/// pages carry no RV; every page belongs to the first page's snapshot even when the server
/// changes in between, and the watch from that RV then delivers the changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_3_paginated_relist_is_one_consistent_snapshot() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 1201, json!({}));
    let r = start(
        &e,
        ReflectorOptions {
            page_size: Some(500),
            ..opts("pages-500")
        },
        None,
        None,
        None,
    );
    synced(&r).await;
    open_watch(&e.h).await;
    let n = r.inf.last_sync_resource_version();

    let (h2, changed) = (e.h.clone(), Arc::new(Mutex::new(String::new())));
    let changed2 = changed.clone();
    *r.log.between_pages.lock() = Some(Box::new(move || {
        *changed2.lock() = touch(&h2, "c1100", "changed between pages");
        h2.create(cm(NS, "zz-late", json!({}))).unwrap();
    }));
    e.h.faults().inject_expired();
    wait_until("a paginated relist", STEP, || {
        let l = r.log.lists();
        check(l.len() == 4, || format!("{} lists", l.len()))
    })
    .await;
    let lists = r.log.lists();
    assert_eq!(lists[1].0, ListParams::default().at(n.clone()).limit(500));
    let mut seen: HashMap<String, String> = HashMap::new();
    for (i, (p, out)) in lists[1..].iter().enumerate() {
        assert_eq!(p.limit, Some(500), "page {i}");
        if i > 0 {
            assert!(p.continue_token.is_some(), "page {i}: {p:?}");
            assert_eq!(
                (&p.resource_version, &p.resource_version_match),
                (&None, &None),
                "k/k#85221: page {i}"
            );
        }
        match out {
            Outcome::Page { rv, items, more } => {
                assert_eq!(rv, &n, "page {i} from another snapshot");
                assert_eq!(items.len(), [500, 500, 201][i], "page {i}");
                assert_eq!(*more, i < 2);
                seen.extend(items.iter().cloned());
            }
            other => panic!("page {i}: {other:?}"),
        }
    }
    // The snapshot: c1100 at its old RV, no zz-late.
    assert_eq!(seen.len(), 1201);
    assert_ne!(seen["default/c1100"], *changed.lock());
    assert!(!seen.contains_key("default/zz-late"));
    // The watch from the list's RV brings both changes.
    caught_up(&r, &e.h, STEP).await;
    assert_eq!(cache_state(&r)["default/c1100"], *changed.lock());
    assert_eq!(r.log.watches().last().unwrap().0.resource_version, Some(n));
    r.stop().await;
    e.h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 1.7, 6.4, 6.9: bookmarks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_7_6_4_6_9_bookmarks_advance_last_sync_rv_without_store_changes() {
    let e = env(Emulator::builder().bookmark_interval(Duration::from_millis(100))).await;
    create_cms(&e.h, 3, json!({}));
    let (handler, mut rx) = recorder();
    let r = start(&e, opts("bookmarks"), None, None, Some(handler));
    synced(&r).await;
    for _ in 0..3 {
        let s = next(&mut rx).await;
        assert!(matches!(s, Seen::Add(..)), "{s:?}");
    }
    let before = cache_state(&r);
    let synced_rv = r.inf.last_sync_resource_version();
    for i in 0..5 {
        bump_other_resource(&e.h, &format!("s{i}"));
    }
    let target = e.h.current_resource_version().to_string();
    assert_ne!(synced_rv, target);
    wait_until("a bookmark carrying the latest RV", STEP, || {
        let rv = r.inf.last_sync_resource_version();
        check(rv == target, || format!("lastSyncRV {rv}"))
    })
    .await;
    // Only the RV moved: same cache, the same single watch, no relist, no notifications.
    assert_eq!(cache_state(&r), before);
    assert_eq!((r.log.lists().len(), r.log.watches().len()), (1, 1));
    assert!(rx.try_recv().is_err());
    r.stop().await;
    e.h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 1.4, 1.8: 410 at list and in the stream

/// spec 1.4: a list at an RV the server no longer has answers 410; the reflector marks the RV
/// unavailable and retries at once with RV="" (here with the explicit page size, the client-go
/// case where RV=N plus a limit is an Exact list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_4_list_410_retries_at_rv_empty() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 3, json!({}));
    let r = start(
        &e,
        ReflectorOptions {
            page_size: Some(500),
            ..opts("list-410")
        },
        None,
        None,
        None,
    );
    synced(&r).await;
    open_watch(&e.h).await;
    let n = r.inf.last_sync_resource_version();
    // Move the server past N without touching ConfigMaps, then drop the watch cache's
    // history: N is gone.
    bump_other_resource(&e.h, "s0");
    e.h.faults().expire_watch_history();
    e.h.faults().inject_expired();
    wait_until("the relist at RV=\"\"", STEP, || {
        let l = r.log.lists();
        check(l.len() >= 3, || format!("{l:?}"))
    })
    .await;
    let lists = r.log.lists();
    assert_eq!(lists[1].0, ListParams::default().at(n).limit(500));
    assert!(
        matches!(
            lists[1].1,
            Outcome::Failed {
                code: Some(410),
                expired: true,
                ..
            }
        ),
        "{:?}",
        lists[1].1
    );
    assert_eq!(lists[2].0, ListParams::default().limit(500));
    let fresh = page_rv(&lists[2].1).to_owned();
    assert_eq!(fresh, e.h.current_resource_version().to_string());
    assert_eq!(lists.len(), 3, "{lists:?}");
    caught_up(&r, &e.h, STEP).await;
    // The next watch starts from the fresh list's RV.
    assert_eq!(
        r.log.watches().last().unwrap().0.resource_version,
        Some(fresh)
    );
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.8: an ERROR 410 inside the stream ends the watch; after a backoff the reflector
/// relists at lastSyncRV (not "" — the RV is not marked unavailable) and watches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_8_in_stream_410_relists_at_last_sync_rv() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 3, json!({}));
    let r = start(&e, opts("stream-410"), None, None, None);
    synced(&r).await;
    open_watch(&e.h).await;
    touch(&e.h, "c0000", "x");
    caught_up(&r, &e.h, STEP).await;
    let n = r.inf.last_sync_resource_version();
    e.h.faults().inject_expired();
    wait_until("a relist and a new watch", STEP, || {
        let (l, w) = (r.log.lists().len(), r.log.watches().len());
        check(l == 2 && w == 2, || format!("{l} lists, {w} watches"))
    })
    .await;
    assert_eq!(r.log.stream_expired.load(Ordering::SeqCst), 1);
    let lists = r.log.lists();
    assert_eq!(lists[1].0, ListParams::default().at(n.clone()));
    assert_eq!(page_rv(&lists[1].1), n);
    touch(&e.h, "c0001", "y");
    caught_up(&r, &e.h, STEP).await;
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.8, 2.5: a relist after a 410 hands back the cached object for every item of the
/// same version (no second copy of an unchanged cache), and a new object for a changed one;
/// every relisted key still gets its Replaced delta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_8_relist_keeps_cached_objects_of_the_same_version() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 3, json!({}));
    let (handler, mut seen) = recorder();
    let r = start(
        &e,
        ReflectorOptions {
            reuse_cached_objects: true,
            ..opts("reuse")
        },
        None,
        None,
        Some(handler),
    );
    synced(&r).await;
    open_watch(&e.h).await;
    let get = |name: &str| r.inf.indexer().get_by_key(&format!("{NS}/{name}")).unwrap();
    let before: Vec<_> = ["c0000", "c0001", "c0002"].map(get).into();
    // c0001 changes while the watch is stalled, so only the relist can bring it.
    e.h.faults().stall_streams(Duration::from_secs(60));
    let rv = touch(&e.h, "c0001", "changed");
    e.h.faults().inject_expired();
    wait_until("a relist and a new watch", STEP, || {
        let (l, w) = (r.log.lists().len(), r.log.watches().len());
        check(l == 2 && w == 2, || format!("{l} lists, {w} watches"))
    })
    .await;
    e.h.faults().clear();
    caught_up(&r, &e.h, STEP).await;
    let after: Vec<_> = ["c0000", "c0001", "c0002"].map(get).into();
    assert!(
        Object::ptr_eq(&before[0], &after[0]),
        "unchanged c0000 copied"
    );
    assert!(
        Object::ptr_eq(&before[2], &after[2]),
        "unchanged c0002 copied"
    );
    assert!(!Object::ptr_eq(&before[1], &after[1]));
    assert_eq!(after[1].resource_version(), rv);
    // Besides the initial adds, the handler saw one update per relisted key (spec 2.5).
    let mut updates = BTreeMap::new();
    while updates.len() < 3 {
        if let Seen::Update(key, rv) = next(&mut seen).await {
            updates.insert(key, rv);
        }
    }
    let want: BTreeMap<String, String> = after
        .iter()
        .map(|o| (o.key(), o.resource_version().to_owned()))
        .collect();
    assert_eq!(updates, want);
    r.stop().await;
    e.h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 1.8: normal close

/// spec 1.8, 1.6: a watch the server closes normally is resumed at once from lastSyncRV, with
/// no relist: each new watch starts at the RV of the last event the previous one delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_8_1_6_normal_close_rewatches_from_last_sync_rv_without_relist() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 3, json!({}));
    let r = start(&e, opts("close"), None, None, None);
    synced(&r).await;
    open_watch(&e.h).await;
    let n = r.inf.last_sync_resource_version();
    e.h.faults().close_watches_after(2);
    let rvs: Vec<String> = (0..6)
        .map(|i| touch(&e.h, &format!("c{:04}", i % 3), &format!("v{i}")))
        .collect();
    caught_up(&r, &e.h, STEP).await;
    wait_until("the fourth watch", STEP, || {
        let w = r.log.watches().len();
        check(w == 4, || format!("{w} watches"))
    })
    .await;
    let starts: Vec<Option<String>> = r
        .log
        .watches()
        .into_iter()
        .map(|(p, _)| p.resource_version)
        .collect();
    assert_eq!(
        starts,
        [
            Some(n),
            Some(rvs[1].clone()),
            Some(rvs[3].clone()),
            Some(rvs[5].clone())
        ]
    );
    // spec 1.6: every watch asks for bookmarks and a timeout in [300, 600) s, and nothing of
    // watch-list.
    for (p, _) in r.log.watches() {
        assert!(p.allow_watch_bookmarks, "{p:?}");
        assert!(matches!(p.timeout_seconds, Some(300..=599)), "{p:?}");
        assert!(
            !p.send_initial_events && p.resource_version_match.is_none(),
            "{p:?}"
        );
    }
    assert_eq!(r.log.lists().len(), 1, "a normal close must not relist");
    assert_eq!(r.log.stream_closed.load(Ordering::SeqCst), 3);
    r.stop().await;
    e.h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 1.1: backoff bounds

/// Gaps between consecutive calls matching `pick`.
fn gaps(log: &Log, pick: impl Fn(&Call) -> bool) -> Vec<Duration> {
    let at: Vec<Instant> = log
        .calls()
        .iter()
        .filter(|c| pick(c))
        .map(|c| c.at)
        .collect();
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Each sleep of the default backoff is in [d, 2d) for d = 800 ms, 1.6 s, …; a request's own
/// time is added to the gap, so the upper bound gets a generous margin.
fn assert_backoff(gaps: &[Duration]) {
    let slack = Duration::from_secs(1);
    let mut d = Duration::from_millis(800);
    for (i, g) in gaps.iter().enumerate() {
        assert!(
            *g >= d && *g < 2 * d + slack,
            "gap {i} = {g:?}, want [{d:?}, {:?})",
            2 * d
        );
        d *= 2;
    }
}

/// spec 1.1: list failures (500) are retried after 800 ms·[1,2), then 1.6 s·[1,2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_1_backoff_bounds_between_failed_lists() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 2, json!({}));
    e.h.faults().fail_next(2, 500, 0);
    let r = start(
        &e,
        ReflectorOptions {
            name: "backoff-list".into(),
            ..Default::default()
        },
        None,
        None,
        None,
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(15), r.inf.wait_for_sync())
            .await
            .unwrap()
    );
    let lists = r.log.lists();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert_eq!(r.log.failures(500), 2);
    assert_backoff(&gaps(&r.log, |c| matches!(c.req, Req::List(_))));
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.1, 1.8: a watch start answered 429 is retried (a watch, not a relist) after
/// 800 ms·[1,2), then 1.6 s·[1,2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_1_1_8_backoff_bounds_between_watch_starts_on_429() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 2, json!({}));
    let r = start(
        &e,
        ReflectorOptions {
            name: "backoff-watch".into(),
            ..Default::default()
        },
        None,
        None,
        None,
    );
    synced(&r).await;
    open_watch(&e.h).await;
    e.h.faults().fail_next(2, 429, 1);
    e.h.faults().close_watches_after(1);
    touch(&e.h, "c0000", "x");
    wait_until("a refused watch", STEP, || {
        check(r.log.failures(429) >= 1, String::new)
    })
    .await;
    e.h.faults().close_watches_after(0);
    wait_until("a watch after two 429s", Duration::from_secs(15), || {
        let w = r.log.watches();
        check(w.len() == 4 && matches!(w[3].1, Outcome::Opened), || {
            format!("{w:?}")
        })
    })
    .await;
    assert_eq!(r.log.lists().len(), 1, "429 at watch start must not relist");
    let w = gaps(&r.log, |c| matches!(c.req, Req::Watch(_)));
    // w[0] is the gap from the first watch to the re-watch after the close.
    assert_backoff(&w[1..]);
    r.stop().await;
    e.h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 1.12: watch-list

fn watch_list_opts(name: &str) -> ReflectorOptions {
    ReflectorOptions {
        use_watch_list: true,
        ..opts(name)
    }
}

fn is_watch_list(p: &WatchParams) -> bool {
    p.send_initial_events
        && p.allow_watch_bookmarks
        && p.resource_version_match.as_deref() == Some("NotOlderThan")
}

/// spec 1.12: the informer syncs from one watch-list stream at its initial-events-end
/// bookmark (no LIST at all) and keeps that stream as its watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_12_watch_list_syncs_at_the_end_bookmark() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 5, json!({}));
    let r = start(&e, watch_list_opts("watch-list"), None, None, None);
    synced(&r).await;
    assert_eq!(cache_state(&r), server_state(&e.h, |_| true));
    assert_eq!(
        r.inf.last_sync_resource_version(),
        e.h.current_resource_version().to_string()
    );
    touch(&e.h, "c0001", "after");
    caught_up(&r, &e.h, STEP).await;
    let w = r.log.watches();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        is_watch_list(&w[0].0) && w[0].0.resource_version.is_none(),
        "{w:?}"
    );
    assert!(r.log.lists().is_empty());
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.12, 2.5: a watch-list relist (after an in-stream 410) keeps the cached object for
/// every initial event of the same version, as a LIST relist does, and a new one for a
/// changed object; every key still gets its Replaced delta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_12_watch_list_relist_keeps_cached_objects_of_the_same_version() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 3, json!({}));
    let (handler, mut seen) = recorder();
    let r = start(
        &e,
        watch_list_opts("watch-list-reuse"),
        None,
        None,
        Some(handler),
    );
    synced(&r).await;
    let get = |name: &str| r.inf.indexer().get_by_key(&format!("{NS}/{name}")).unwrap();
    let before: Vec<_> = ["c0000", "c0001", "c0002"].map(get).into();
    // c0001 changes while the stream is stalled, so only the relist's initial events bring it.
    e.h.faults().stall_streams(Duration::from_secs(60));
    let rv = touch(&e.h, "c0001", "changed");
    e.h.faults().inject_expired();
    wait_until("a second watch-list", STEP, || {
        let w = r.log.watches().len();
        check(w == 2, || format!("{w} watches"))
    })
    .await;
    wait_until("the relisted c0001", STEP, || {
        let got = get("c0001");
        check(got.resource_version() == rv, || {
            format!("c0001 at {}", got.resource_version())
        })
    })
    .await;
    e.h.faults().clear();
    caught_up(&r, &e.h, STEP).await;
    assert!(r.log.lists().is_empty(), "watch-list must not list");
    assert!(r.log.watches().iter().all(|(p, _)| is_watch_list(p)));
    let after: Vec<_> = ["c0000", "c0001", "c0002"].map(get).into();
    assert!(
        Object::ptr_eq(&before[0], &after[0]),
        "unchanged c0000 copied"
    );
    assert!(
        Object::ptr_eq(&before[2], &after[2]),
        "unchanged c0002 copied"
    );
    assert!(!Object::ptr_eq(&before[1], &after[1]));
    let mut updates = BTreeMap::new();
    while updates.len() < 3 {
        if let Seen::Update(key, rv) = next(&mut seen).await {
            updates.insert(key, rv);
        }
    }
    let want: BTreeMap<String, String> = after
        .iter()
        .map(|o| (o.key(), o.resource_version().to_owned()))
        .collect();
    assert_eq!(updates, want);
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.12, 7.5: without the end bookmark the informer never reports synced; it retries
/// watch-list (each stream ends at its 1 s timeout) without falling back, and syncs once the
/// server sends the bookmark again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_12_missing_end_bookmark_retries_and_stays_unsynced() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 5, json!({}));
    e.h.faults().omit_initial_events_end(true);
    let r = start(
        &e,
        ReflectorOptions {
            min_watch_timeout: Duration::from_secs(1),
            ..watch_list_opts("watch-list-no-end")
        },
        None,
        None,
        None,
    );
    wait_until("three watch-list attempts", STEP, || {
        let n = r.log.watches().len();
        check(n >= 3, || format!("{n} attempts"))
    })
    .await;
    assert!(!r.inf.has_synced());
    assert!(r.inf.indexer().is_empty());
    assert!(r.log.lists().is_empty(), "must not fall back to a list");
    assert!(r.log.watches().iter().all(|(p, _)| is_watch_list(p)));
    e.h.faults().omit_initial_events_end(false);
    synced(&r).await;
    assert_eq!(cache_state(&r), server_state(&e.h, |_| true));
    assert!(r.log.lists().is_empty());
    r.stop().await;
    e.h.shutdown().await;
}

/// spec 1.12, 6.7, 7.5 (k/k#120984): a server that refuses watch-list with 422 gets a
/// list+watch instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_12_422_falls_back_to_list_and_watch() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 5, json!({}));
    e.h.faults().refuse_watch_list(true);
    let r = start(&e, watch_list_opts("watch-list-422"), None, None, None);
    synced(&r).await;
    assert_eq!(cache_state(&r), server_state(&e.h, |_| true));
    open_watch(&e.h).await;
    // The server counts the watch open before its answer reaches the client's call log.
    wait_until("the watch in the call log", STEP, || {
        let n = r.log.calls().len();
        check(n >= 3, || format!("{n} calls"))
    })
    .await;
    let calls = r.log.calls();
    match &calls[0] {
        Call {
            req: Req::Watch(p),
            outcome: Outcome::Failed {
                code: Some(422), ..
            },
            ..
        } => assert!(is_watch_list(p)),
        other => panic!("expected a refused watch-list, got {other:?}"),
    }
    match &calls[1] {
        Call {
            req: Req::List(p),
            outcome: Outcome::Page { rv, .. },
            ..
        } => {
            assert_eq!(*p, ListParams::default().at("0").limit(500));
            match &calls[2].req {
                Req::Watch(w) => {
                    assert!(!w.send_initial_events && w.resource_version_match.is_none());
                    assert_eq!(w.resource_version.as_ref(), Some(rv));
                }
                other => panic!("expected a watch, got {other:?}"),
            }
        }
        other => panic!("expected a list, got {other:?}"),
    }
    r.stop().await;
    e.h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 1.10, 7.3: TooLargeRV

/// spec 1.10, 1.4, 7.3: the server is replaced by one whose store is behind the informer's
/// lastSyncRV (a restore from backup). The relist at lastSyncRV gets 504 TooLargeRV; the
/// reflector retries at RV="" and converges on the new server's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_10_7_3_too_large_rv_relists_at_rv_empty() {
    let e = env(Emulator::builder()).await;
    create_cms(&e.h, 30, json!({}));
    let r = start(&e, opts("too-large"), None, None, None);
    synced(&r).await;
    open_watch(&e.h).await;
    let n = r.inf.last_sync_resource_version();
    let port = e.h.addr().port();
    e.h.shutdown().await;

    let h2 = Emulator::builder().port(port).start().await.unwrap();
    h2.create(cm(NS, "restored", json!({}))).unwrap();
    assert!(h2.current_resource_version() < n.parse::<u64>().unwrap());
    // The reflector re-watches at N, where the new server has nothing newer, so the watch
    // just waits; an in-stream 410 makes it relist at N. (If the broken connection made the
    // watch start fail instead, the reflector relists at N on its own.)
    let too_large_then_fresh = |log: &Log| -> Result<(), String> {
        let lists = log.lists();
        let i = lists.iter().position(|(p, o)| {
            p.resource_version.as_deref() == Some(n.as_str())
                && matches!(
                    o,
                    Outcome::Failed {
                        code: Some(504),
                        too_large: true,
                        ..
                    }
                )
        });
        match i.and_then(|i| lists.get(i + 1)) {
            Some((p, Outcome::Page { .. })) if p.resource_version.is_none() => Ok(()),
            _ => Err(format!("{lists:?}")),
        }
    };
    if too_large_then_fresh(&r.log).is_err() {
        open_watch(&h2).await;
        h2.faults().inject_expired();
    }
    wait_until("a TooLargeRV list, then one at RV=\"\"", STEP, || {
        too_large_then_fresh(&r.log)
    })
    .await;
    caught_up(&r, &h2, STEP).await;
    assert_eq!(
        cache_state(&r).keys().collect::<Vec<_>>(),
        ["default/restored"]
    );
    r.stop().await;
    h2.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// spec 6.10: selectors

/// spec 6.10: a label-selected informer caches only matching objects (`!=` also matches a
/// missing key); an object relabelled out of the selector is deleted from the cache, one
/// relabelled in is added; a field selector scopes the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_6_10_selectors_scope_the_cache_and_relabels_move_objects() {
    let e = env(Emulator::builder()).await;
    e.h.create(cm(NS, "a", json!({"app": "web"}))).unwrap();
    e.h.create(cm(NS, "b", json!({"app": "db"}))).unwrap();
    e.h.create(cm(NS, "c", json!({"app": "api", "tier": "legacy"})))
        .unwrap();
    e.h.create(cm(NS, "d", json!({"app": "api"}))).unwrap();
    let (handler, mut rx) = recorder();
    let r = start(
        &e,
        opts("labels"),
        Some("app in (web,api),tier!=legacy"),
        None,
        Some(handler),
    );
    let f = start(&e, opts("fields"), None, Some("metadata.name!=b"), None);
    synced(&r).await;
    synced(&f).await;
    let keys = |r: &Running| cache_state(r).into_keys().collect::<Vec<_>>();
    assert_eq!(keys(&r), ["default/a", "default/d"]);
    assert_eq!(keys(&f), ["default/a", "default/c", "default/d"]);
    let mut initial = [next(&mut rx).await, next(&mut rx).await];
    initial.sort_by_key(|s| format!("{s:?}"));
    assert!(
        matches!(&initial[..], [Seen::Add(a, _), Seen::Add(d, _)] if a == "default/a" && d == "default/d")
    );

    open_watch(&e.h).await;
    relabel(&e.h, "a", json!({"app": "db"}));
    relabel(&e.h, "b", json!({"app": "web"}));
    relabel(&e.h, "c", json!({"app": "api", "tier": "frontend"}));
    let d_rv = touch(&e.h, "d", "still in");
    let got = [
        next(&mut rx).await,
        next(&mut rx).await,
        next(&mut rx).await,
        next(&mut rx).await,
    ];
    let rv = |name: &str| {
        e.h.get("v1", "ConfigMap", Some(NS), name).unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        got,
        [
            Seen::Delete("default/a".into(), false),
            Seen::Add("default/b".into(), rv("b")),
            Seen::Add("default/c".into(), rv("c")),
            Seen::Update("default/d".into(), d_rv),
        ]
    );
    assert_eq!(keys(&r), ["default/b", "default/c", "default/d"]);
    let want_f = server_state(&e.h, |v| v["metadata"]["name"] != "b");
    wait_until("the field-selected cache", STEP, || {
        check(cache_state(&f) == want_f, || {
            format!("{:?}", cache_state(&f))
        })
    })
    .await;
    r.stop().await;
    f.stop().await;
    e.h.shutdown().await;
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(STEP, rx.recv())
        .await
        .expect("no notification in time")
        .expect("handler channel closed")
}

// ---------------------------------------------------------------------------------------------
// Convergence under faults

const FAULT_KINDS: [&str; 7] = [
    "close-after",
    "in-stream-410",
    "429",
    "500",
    "stall",
    "compaction",
    "drop-connections",
];

/// The last notification a handler got per key: `Some(rv)` for an add or update, `None` for a
/// delete.
type LastSeen = Arc<Mutex<HashMap<String, Option<String>>>>;

fn counting_handler() -> (HandlerFns, LastSeen, Arc<AtomicU64>) {
    let last: LastSeen = Arc::default();
    let count = Arc::new(AtomicU64::new(0));
    let (l1, l2, l3) = (last.clone(), last.clone(), last.clone());
    let (c1, c2, c3) = (count.clone(), count.clone(), count.clone());
    let h = HandlerFns {
        add: Some(Box::new(move |o, _| {
            c1.fetch_add(1, Ordering::Relaxed);
            l1.lock()
                .insert(o.key(), Some(o.resource_version().to_owned()));
        })),
        update: Some(Box::new(move |_, n| {
            c2.fetch_add(1, Ordering::Relaxed);
            l2.lock()
                .insert(n.key(), Some(n.resource_version().to_owned()));
        })),
        delete: Some(Box::new(move |o| {
            c3.fetch_add(1, Ordering::Relaxed);
            l3.lock().insert(o.key(), None);
        })),
    };
    (h, last, count)
}

/// Arm a fault, then inject until the informer has observably received it (`delivered`
/// grows), bounded. An injection can miss: e.g. a 410 kick while the reflector is between
/// watches reaches no stream, so it is repeated every 50 ms.
///
/// The count is read before the fault is armed: an armed fault can be delivered at once (the
/// reflector's next request takes a `fail_next`; a watch already past the close-after count
/// ends at its next event), and a count read after that would wait for a second delivery that
/// never comes.
///
/// On failure the panic names what the reflector last asked for and got, and the watches the
/// server had open, so that a rare stall can be told apart from a slow machine.
async fn deliver(
    what: &str,
    (log, h): (&Log, &EmulatorHandle),
    arm: impl FnOnce(),
    mut inject: impl FnMut(),
    delivered: impl Fn() -> usize,
) {
    let before = delivered();
    arm();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        inject();
        let round = Instant::now() + Duration::from_millis(50);
        while Instant::now() < round {
            if delivered() > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let stats = h.stats();
        assert!(
            Instant::now() < deadline,
            "{what} was never delivered; server RV {}, open watches {:?}, requests seen by the \
             server: {} lists, {} watches (completed by the client: {} / {}); {}",
            h.current_resource_version(),
            stats.open_watches,
            stats.requests("list"),
            stats.requests("watch"),
            log.lists().len(),
            log.watches().len(),
            log.describe_tail(12)
        );
    }
}

/// Injects one fault of kind `kind` (an index of `FAULT_KINDS`) and waits until it took
/// effect where it should, as the convergence test does 50 times and more for each kind.
async fn inject_fault(kind: usize, rng: &mut StdRng, log: &Log, h: &EmulatorHandle) {
    let f = h.faults();
    match kind {
        0 => {
            // Arm the close, then feed events (writes to a probe object) until the
            // informer's watch has really been closed by the server.
            let after = rng.gen_range(1..=8);
            let mut n = 0u64;
            deliver(
                "a watch close",
                (log, h),
                || f.close_watches_after(after),
                || {
                    n += 1;
                    touch(h, "fault-probe", &n.to_string());
                },
                || log.stream_closed.load(Ordering::SeqCst) as usize,
            )
            .await
        }
        1 => {
            deliver(
                "an in-stream 410",
                (log, h),
                || {},
                || f.inject_expired(),
                || log.stream_expired.load(Ordering::SeqCst) as usize,
            )
            .await
        }
        2 | 3 => {
            let code = if kind == 2 { 429 } else { 500 };
            // Make the reflector send a request soon: end its watch.
            deliver(
                FAULT_KINDS[kind],
                (log, h),
                || f.fail_next(1, code, 1),
                || f.inject_expired(),
                || log.failures(code),
            )
            .await
        }
        4 => {
            // A stall takes effect when an open stream has something to send: feed it.
            let ms = rng.gen_range(10..60);
            let mut n = 0u64;
            deliver(
                "a stall",
                (log, h),
                || {},
                || {
                    f.stall_streams(Duration::from_millis(ms));
                    n += 1;
                    touch(h, "fault-probe", &format!("s{n}"));
                },
                || f.delivered().stalled as usize,
            )
            .await
        }
        5 => {
            deliver(
                "a compaction",
                (log, h),
                || {},
                || {
                    touch(h, "fault-probe", "c");
                    f.compact_history();
                },
                || f.delivered().compacted as usize,
            )
            .await
        }
        _ => {
            deliver(
                "a dropped connection",
                (log, h),
                || {},
                || f.drop_connections(),
                || f.delivered().dropped as usize,
            )
            .await
        }
    }
}

/// Issue 3's convergence test: a seeded writer makes 5,000 random creates, updates and deletes
/// over 500 objects while the emulator injects at least 50 faults of each kind (watch close
/// after N events, in-stream 410, 429 and 500 on the next request, stalled streams,
/// compaction, dropped connections). Afterwards the informer's cache equals the server's state
/// exactly (keys and resourceVersions), and a counting handler's last notification for every
/// object carries its final RV, or is a delete for objects that are gone.
///
/// The reflector runs with a 1 ms → 10 ms backoff (instead of 800 ms → 30 s) so that several
/// hundred failures fit in a short test; the retry logic is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convergence_under_faults_5000_writes_500_objects() {
    let started = Instant::now();
    let e = env(Emulator::builder().bookmark_interval(Duration::from_millis(200))).await;
    let (handler, last, notified) = counting_handler();
    let r = start(&e, opts("convergence"), None, None, Some(handler));
    synced(&r).await;
    let h = &e.h;
    let log = r.log.clone();

    h.create(cm(NS, "fault-probe", json!({"k": "0"}))).unwrap();
    let mut rng = StdRng::seed_from_u64(0x5eed_0003);
    let mut exists = [false; 500];
    let mut injected = [0usize; 7];
    let mut spent = [Duration::ZERO; 7];
    let mut ever = std::collections::BTreeSet::new();
    for op in 0..5000usize {
        let i = rng.gen_range(0..500);
        let name = format!("obj-{i:03}");
        if !exists[i] {
            h.create(cm(NS, &name, json!({"n": op.to_string()})))
                .unwrap();
            exists[i] = true;
            ever.insert(format!("{NS}/{name}"));
        } else if rng.gen_bool(0.75) {
            touch(h, &name, &op.to_string());
        } else {
            h.delete("v1", "ConfigMap", Some(NS), &name).unwrap();
            exists[i] = false;
        }
        tokio::task::yield_now().await;
        if op % 14 != 13 {
            continue;
        }
        let kind = (op / 14) % FAULT_KINDS.len();
        let t = Instant::now();
        inject_fault(kind, &mut rng, &log, h).await;
        injected[kind] += 1;
        spent[kind] += t.elapsed();
    }
    let writes_done = started.elapsed();
    // Every kind was delivered at least 50 times, as counted where it took effect (the
    // emulator's counters; each injection above waited for its own delivery).
    let d = h.faults().delivered();
    h.faults().clear();
    let counted = [
        d.closed_after,
        d.expired,
        d.too_many_requests,
        d.failed,
        d.stalled,
        d.compacted,
        d.dropped,
    ];
    for ((k, n), armed) in FAULT_KINDS.iter().zip(counted).zip(injected) {
        assert!(
            n >= 50 && armed >= 50,
            "{k}: {n} delivered of {armed} injected; {d:?}"
        );
    }

    caught_up(&r, h, Duration::from_secs(30)).await;
    let server = server_state(h, |_| true);
    assert_eq!(cache_state(&r), server);
    wait_until(
        "the handler to see every final state",
        Duration::from_secs(30),
        || {
            let last = last.lock();
            for (k, rv) in &server {
                if last.get(k) != Some(&Some(rv.clone())) {
                    return Err(format!("{k}: last saw {:?}, final {rv}", last.get(k)));
                }
            }
            for k in &ever {
                if !server.contains_key(k) && last.get(k).is_some_and(Option::is_some) {
                    return Err(format!(
                        "{k} is gone but its last notification was not a delete"
                    ));
                }
            }
            Ok(())
        },
    )
    .await;

    // The faults really reached the informer, as it saw them too; dropped connections broke
    // its streams.
    assert!(log.stream_expired.load(Ordering::SeqCst) >= 50);
    assert!(log.failures(429) >= 50 && log.failures(500) >= 50);
    assert!(log.stream_closed.load(Ordering::SeqCst) >= 50);
    assert!(
        log.stream_broken.load(Ordering::SeqCst) >= 1,
        "no dropped connection broke a stream the informer was reading"
    );
    eprintln!(
        "convergence: {} live objects, {} notifications, {} lists, {} watches, {} streams \
         expired / {} closed / {} broken; writes {:?} (waiting for delivery {:?}), total {:?}",
        server.len(),
        notified.load(Ordering::Relaxed),
        log.lists().len(),
        log.watches().len(),
        log.stream_expired.load(Ordering::SeqCst),
        log.stream_closed.load(Ordering::SeqCst),
        log.stream_broken.load(Ordering::SeqCst),
        writes_done,
        spent,
        started.elapsed()
    );
    r.stop().await;
    e.h.shutdown().await;
}

// ---- moved from the emulator's tests: the informer is above the emulator's crate ----

/// The next notification line of `informer_syncs_and_recovers_from_faults`, within `STEP`.
async fn next_line(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(STEP, rx.recv())
        .await
        .expect("no informer notification in time")
        .expect("handler channel closed")
}

/// The informer pipeline (reflector, DeltaFIFO, store, handlers) against the emulator, through
/// an injected 410 and dropped connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_syncs_and_recovers_from_faults() {
    let Env { h, client, cm } = env(Emulator::builder()).await;
    let mk = |name: &str, app: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "labels": {"app": app}}});
    h.create(mk("a", "web")).unwrap();
    h.create(mk("b", "db")).unwrap();
    let lw = ResourceClient::new(client, cm, Some("default".into())).labels("app=web");
    let inf = SharedIndexInformer::new(lw, InformerOptions::default());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (tx2, tx3) = (tx.clone(), tx.clone());
    inf.add_event_handler(Arc::new(HandlerFns {
        add: Some(Box::new(move |o, _| {
            drop(tx.send(format!("add {}", o.name())))
        })),
        update: Some(Box::new(move |_, n| {
            drop(tx2.send(format!("update {}", n.name())))
        })),
        delete: Some(Box::new(move |_| drop(tx3.send("delete".into())))),
    }))
    .unwrap();
    let runner = {
        let inf = inf.clone();
        tokio::spawn(async move { inf.run().await })
    };
    assert!(tokio::time::timeout(STEP, inf.wait_for_sync())
        .await
        .unwrap());
    assert_eq!(
        tokio::time::timeout(STEP, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        "add a"
    );
    assert_eq!(inf.indexer().list_keys(), ["default/a"]);

    assert!(h.wait_for_open_watches("/configmaps", 1, STEP).await);
    h.faults().inject_expired();
    h.create(mk("c", "web")).unwrap();
    // The 410 makes the reflector relist: `a` comes back as an update (a Replaced delta).
    let mut seen = vec![next_line(&mut rx).await, next_line(&mut rx).await];
    seen.sort();
    assert_eq!(seen, ["add c", "update a"]);

    assert!(h.wait_for_open_watches("/configmaps", 1, STEP).await);
    h.faults().drop_connections();
    let mut moved = h.get("v1", "ConfigMap", Some("default"), "a").unwrap();
    moved["metadata"]["labels"]["app"] = "db".into();
    h.update(moved).unwrap();
    // `a` leaving the selector is a delete (the reflector may relist after the broken
    // connection, which replays the rest as updates).
    loop {
        match next_line(&mut rx).await.as_str() {
            "delete" => break,
            u if u.starts_with("update ") => continue,
            other => panic!("unexpected notification {other}"),
        }
    }
    let mut keys = inf.indexer().list_keys();
    keys.sort();
    assert_eq!(keys, ["default/c"]);
    inf.stop();
    let ran = tokio::time::timeout(STEP, runner)
        .await
        .expect("the informer stops when asked")
        .expect("its task does not panic");
    assert!(ran.is_ok(), "run ends cleanly: {ran:?}");
    h.shutdown().await;
}
