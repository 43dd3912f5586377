//! Reflector state-machine tests against a scripted ListerWatcher under tokio's paused clock.

use super::*;
use crate::fake::{self, FakeLw, Item, Recorded, Req, Step};
use crate::tombstone::test_support::obj;
use kwh_client::params::ListParams;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Add(String, String),
    Update(String, String),
    Delete(String),
    Replace(Vec<String>, String),
    Resync,
}

#[derive(Default)]
struct Rec(Mutex<Vec<Op>>);

impl Rec {
    fn ops(&self) -> Vec<Op> {
        self.0.lock().clone()
    }
}

impl ReflectorStore for Rec {
    fn add(&self, o: Object) {
        self.0
            .lock()
            .push(Op::Add(o.key(), o.resource_version().into()))
    }
    fn update(&self, o: Object) {
        self.0
            .lock()
            .push(Op::Update(o.key(), o.resource_version().into()))
    }
    fn delete(&self, o: Object) {
        self.0.lock().push(Op::Delete(o.key()))
    }
    fn replace(&self, list: Vec<Object>, rv: &str) {
        let mut keys: Vec<String> = list.iter().map(Object::key).collect();
        keys.sort();
        self.0.lock().push(Op::Replace(keys, rv.into()))
    }
    fn resync(&self) {
        self.0.lock().push(Op::Resync)
    }
}

fn add(name: &str, rv: &str) -> Item {
    Item::Ev(WatchEvent::Added(obj("ns", name, rv)))
}
fn modified(name: &str, rv: &str) -> Item {
    Item::Ev(WatchEvent::Modified(obj("ns", name, rv)))
}
fn deleted(name: &str, rv: &str) -> Item {
    Item::Ev(WatchEvent::Deleted(obj("ns", name, rv)))
}
fn err_event(code: u16, reason: &str) -> Item {
    Item::Ev(WatchEvent::Error(Status::failure(code, reason, "scripted")))
}
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

type R = Reflector<FakeLw, Rec>;

fn make(lw: &Arc<FakeLw>, opts: ReflectorOptions, rand: f64) -> (Arc<R>, Arc<Rec>) {
    let store = Arc::new(Rec::default());
    let r = Reflector::new(lw.clone(), store.clone(), opts).with_rand(Box::new(move || rand));
    (Arc::new(r), store)
}

/// Run the reflector until `n` requests were made, then stop it (bounded).
async fn run_until(r: &Arc<R>, lw: &Arc<FakeLw>, n: usize) -> Vec<Recorded> {
    let stop = StopSignal::new();
    let task = tokio::spawn({
        let r = r.clone();
        let stop = stop.clone();
        async move { r.run(stop).await }
    });
    let reqs = lw.wait_requests(n).await;
    stop.stop();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("reflector did not stop")
        .expect("reflector panicked");
    reqs
}

fn list_req(r: &Recorded) -> &ListParams {
    match &r.1 {
        Req::List(p) => p,
        other => panic!("expected a list, got {other:?}"),
    }
}
fn watch_req(r: &Recorded) -> &WatchParams {
    match &r.1 {
        Req::Watch(p) => p,
        other => panic!("expected a watch, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn spec_1_3_pagination_1_5_replace_and_1_6_watch_params() {
    let lw = FakeLw::new(vec![
        fake::list("10", Some("c1"), vec![obj("ns", "a", "9")]),
        fake::list("11", None, vec![obj("ns", "b", "10")]),
        fake::watch_hang(vec![]),
    ]);
    let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    let p1 = list_req(&reqs[0]);
    assert_eq!(p1.resource_version.as_deref(), Some("0"));
    assert_eq!(p1.limit, Some(500));
    assert_eq!(p1.continue_token, None);
    let p2 = list_req(&reqs[1]);
    assert_eq!(p2.continue_token.as_deref(), Some("c1"));
    assert_eq!(
        p2.resource_version, None,
        "continue clears the RV (k/k#85221)"
    );
    assert_eq!(p2.resource_version_match, None);
    assert_eq!(p2.limit, Some(500));
    // The list RV is the first page's (spec 1.3) and lastSyncRV follows it (spec 1.5).
    assert_eq!(
        store.ops(),
        vec![Op::Replace(vec!["ns/a".into(), "ns/b".into()], "10".into())]
    );
    let w = watch_req(&reqs[2]);
    assert_eq!(
        w,
        &WatchParams {
            resource_version: Some("10".into()),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(300),
            ..Default::default()
        }
    );
    assert_eq!(r.last_sync_resource_version(), "10");
}

#[test]
fn spec_1_6_watch_timeout_is_uniform_in_300_600() {
    for (rand, want) in [(0.0, 300), (0.5, 450), (0.999_999, 599), (1.0, 599)] {
        let lw = FakeLw::new(vec![]);
        let (r, _) = make(&lw, ReflectorOptions::default(), rand);
        assert_eq!(r.watch_timeout_seconds(), want, "rand {rand}");
    }
    // A zero minimum must not underflow.
    let lw = FakeLw::new(vec![]);
    let opts = ReflectorOptions {
        min_watch_timeout: Duration::ZERO,
        ..Default::default()
    };
    let (r, _) = make(&lw, opts, 0.9);
    assert_eq!(r.watch_timeout_seconds(), 0);
}

#[tokio::test(start_paused = true)]
async fn spec_1_7_events_and_1_8_normal_close_rewatches_at_once() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![
            Item::Sleep(secs(2.0)),
            add("a", "11"),
            modified("a", "12"),
            deleted("a", "13"),
            fake::bookmark("14", false),
        ]),
        fake::watch_hang(vec![]),
    ]);
    let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    assert_eq!(
        store.ops(),
        vec![
            Op::Replace(vec![], "10".into()),
            Op::Add("ns/a".into(), "11".into()),
            Op::Update("ns/a".into(), "12".into()),
            Op::Delete("ns/a".into()),
        ]
    );
    // Re-watch from the bookmark's RV, right when the stream ended: no relist, no backoff.
    let w = watch_req(&reqs[2]);
    assert_eq!(w.resource_version.as_deref(), Some("14"));
    assert_eq!(reqs[2].0, secs(2.0));
}

#[tokio::test(start_paused = true)]
async fn spec_1_7_objects_without_a_name_are_skipped() {
    let table = Object::from_value(&serde_json::json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "99"}, "rows": []
    }))
    .unwrap();
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![
            Item::Sleep(secs(2.0)),
            Item::Ev(WatchEvent::Added(table)),
            add("a", "11"),
        ]),
        fake::watch_hang(vec![]),
    ]);
    let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    assert_eq!(
        store.ops(),
        vec![
            Op::Replace(vec![], "10".into()),
            Op::Add("ns/a".into(), "11".into())
        ]
    );
    assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("11"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_7_objects_of_another_type_are_skipped() {
    let typed = |api_version: &str, kind: &str, name: &str, rv: &str| {
        Object::from_value(&serde_json::json!({
            "kind": kind, "apiVersion": api_version,
            "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}
        }))
        .unwrap()
    };
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![
            Item::Sleep(secs(2.0)),
            // Another kind, another version of the same kind, and a Table with a name.
            Item::Ev(WatchEvent::Added(typed("v1", "Secret", "s", "11"))),
            Item::Ev(WatchEvent::Modified(typed("v2", "ConfigMap", "v", "12"))),
            Item::Ev(WatchEvent::Added(typed(
                "meta.k8s.io/v1",
                "Table",
                "t",
                "13",
            ))),
            Item::Ev(WatchEvent::Added(typed("v1", "ConfigMap", "a", "14"))),
            // No type metadata at all: taken as the watched type.
            Item::Ev(WatchEvent::Added(
                Object::from_value(&serde_json::json!({
                    "metadata": {"namespace": "ns", "name": "b", "resourceVersion": "15"}
                }))
                .unwrap(),
            )),
        ]),
        fake::watch_hang(vec![]),
    ]);
    lw.expect_type("v1", "ConfigMap");
    let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    assert_eq!(
        store.ops(),
        vec![
            Op::Replace(vec![], "10".into()),
            Op::Add("ns/a".into(), "14".into()),
            Op::Add("ns/b".into(), "15".into())
        ]
    );
    assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("15"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_7_regression_7_6_synthetic_adds_do_not_move_last_sync_rv() {
    // A list without an RV leaves lastSyncRV "", so the watch starts at "" and its
    // ADDEDs are synthetic and out of RV order (k/k#136583).
    let lw = FakeLw::new(vec![
        fake::list("", None, vec![]),
        fake::watch(vec![add("x", "5"), add("y", "3"), Item::Sleep(secs(2.0))]),
        fake::watch(vec![add("z", "9"), modified("x", "10"), add("w", "11")]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    assert_eq!(watch_req(&reqs[1]).resource_version, None);
    // Still "": the ADDEDs were not propagated.
    assert_eq!(watch_req(&reqs[2]).resource_version, None);
    // After the first non-ADDED event every event counts again.
    assert_eq!(watch_req(&reqs[3]).resource_version.as_deref(), Some("11"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_short_watch_backs_off_then_relists_without_limit_7_1() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![obj("ns", "a", "10")]),
        fake::watch(vec![]),
        fake::list("12", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    // Backoff 800 ms (jitter pinned to 0), then a relist at lastSyncRV: never back in
    // time (regression 7.1) and without limit, so the watch cache serves it (spec 1.3).
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
    let p = list_req(&reqs[2]);
    assert_eq!(p.resource_version.as_deref(), Some("10"));
    assert_eq!(p.limit, None);
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_expired_in_stream_relists_at_last_sync_rv_regression_7_1() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![
            add("a", "12"),
            modified("a", "15"),
            err_event(410, "Expired"),
        ]),
        fake::list("20", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
    // Not marked unavailable: relist at "15", never at "" or "0".
    assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("15"));
    assert_eq!(watch_req(&reqs[3]).resource_version.as_deref(), Some("20"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_429_in_stream_backs_off_and_rewatches() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![add("a", "11"), err_event(429, "TooManyRequests")]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
    assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("11"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_internal_error_relists_by_default() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![err_event(500, "InternalError")]),
        fake::list("11", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    list_req(&reqs[2]);
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_internal_error_rewatches_with_max_retry_duration() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![add("a", "11"), err_event(500, "InternalError")]),
        fake::watch_hang(vec![]),
    ]);
    let opts = ReflectorOptions {
        max_internal_error_retry_duration: Duration::from_secs(30),
        ..Default::default()
    };
    let (r, _) = make(&lw, opts, 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("11"));
    assert_eq!(reqs[2].0, reqs[1].0, "re-watch at once");
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_other_stream_errors_back_off_and_relist() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![
            add("a", "11"),
            Item::Err(Error::Decode("bad json".into())),
        ]),
        fake::list("12", None, vec![]),
        fake::watch(vec![err_event(403, "Forbidden")]),
        fake::list("13", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let handled = Arc::new(Mutex::new(0usize));
    let h = handled.clone();
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let r = Arc::new(
        Arc::into_inner(r)
            .unwrap()
            .with_watch_error_handler(Arc::new(move |_| *h.lock() += 1)),
    );
    let reqs = run_until(&r, &lw, 6).await;
    assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("11"));
    assert_eq!(list_req(&reqs[4]).resource_version.as_deref(), Some("12"));
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
    assert_eq!(reqs[4].0 - reqs[3].0, secs(1.6));
    // In-stream errors never reach the watch-error handler (spec 1.9).
    assert_eq!(*handled.lock(), 0);
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_watch_start_refused_or_429_rewatch_after_backoff() {
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        Step::Watch(Err(fake::refused())),
        Step::Watch(Err(fake::api_err(429, "TooManyRequests"))),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    for r in &reqs[2..4] {
        assert_eq!(watch_req(r).resource_version.as_deref(), Some("10"));
    }
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
    assert_eq!(reqs[3].0 - reqs[2].0, secs(1.6));
}

#[tokio::test(start_paused = true)]
async fn spec_1_8_watch_start_connect_failure_other_than_refused_relists() {
    // A TLS or DNS failure is not client-go's IsConnectionRefused: ListAndWatch returns, the
    // watch-error handler sees it (spec 1.9), and the next round relists after a backoff.
    let tls = Error::Connect {
        url: "https://127.0.0.1:1".into(),
        message: "invalid peer certificate: UnknownIssuer".into(),
        refused: false,
    };
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        Step::Watch(Err(tls)),
        fake::list("11", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let seen = Arc::new(Mutex::new(0usize));
    let s = seen.clone();
    let r = Arc::new(
        Reflector::new(
            lw.clone(),
            Arc::new(Rec::default()),
            ReflectorOptions::default(),
        )
        .with_rand(Box::new(|| 0.0))
        .with_watch_error_handler(Arc::new(move |e| {
            assert!(matches!(e, ReflectorError::WatchStart(_)), "{e}");
            *s.lock() += 1;
        })),
    );
    let reqs = run_until(&r, &lw, 4).await;
    assert_eq!(*seen.lock(), 1);
    assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("10"));
    assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
}

#[tokio::test(start_paused = true)]
async fn spec_1_9_watch_error_handler_sees_list_and_watch_start_failures() {
    let lw = FakeLw::new(vec![
        Step::List(Err(fake::api_err(500, "InternalError"))),
        fake::list("10", None, vec![]),
        Step::Watch(Err(fake::api_err(403, "Forbidden"))),
        fake::list("11", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = seen.clone();
    let lw2 = lw.clone();
    let store = Arc::new(Rec::default());
    let r = Arc::new(
        Reflector::new(lw2, store, ReflectorOptions::default())
            .with_rand(Box::new(|| 0.0))
            .with_watch_error_handler(Arc::new(move |e| {
                s.lock().push(match e {
                    ReflectorError::List(_) => "list".into(),
                    ReflectorError::WatchStart(_) => "watch".into(),
                    other => other.to_string(),
                })
            })),
    );
    let reqs = run_until(&r, &lw, 5).await;
    assert_eq!(*seen.lock(), vec!["list".to_owned(), "watch".to_owned()]);
    // A watch-start failure other than refused/429 ends ListAndWatch: backoff, relist.
    assert_eq!(list_req(&reqs[3]).resource_version.as_deref(), Some("10"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_4_pager_expired_on_page_2_lists_fully_at_original_rv() {
    let lw = FakeLw::new(vec![
        fake::list("10", Some("c1"), vec![obj("ns", "a", "9")]),
        Step::List(Err(fake::expired())),
        fake::list("12", None, vec![obj("ns", "a", "9"), obj("ns", "b", "12")]),
        fake::watch_hang(vec![]),
    ]);
    let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    let full = list_req(&reqs[2]);
    assert_eq!(full.resource_version.as_deref(), Some("0"));
    assert_eq!(full.limit, None);
    assert_eq!(full.continue_token, None);
    assert_eq!(
        store.ops(),
        vec![Op::Replace(vec!["ns/a".into(), "ns/b".into()], "12".into())]
    );
    assert_eq!(watch_req(&reqs[3]).resource_version.as_deref(), Some("12"));
}

async fn relist_after_unavailable(err: Error) {
    // Sync at 10, short watch, relist at 10 fails → immediate retry at "" (spec 1.4).
    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![]),
        Step::List(Err(err)),
        fake::list("30", None, vec![]),
        fake::watch(vec![]),
        fake::list("31", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 7).await;
    // spec 1.2: "0" first, then lastSyncRV, then "" once unavailable.
    assert_eq!(list_req(&reqs[0]).resource_version.as_deref(), Some("0"));
    assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("10"));
    assert_eq!(list_req(&reqs[3]).resource_version, None);
    assert_eq!(reqs[3].0, reqs[2].0, "the retry is immediate");
    // A successful list clears "unavailable": the next relist is at lastSyncRV again.
    assert_eq!(list_req(&reqs[5]).resource_version.as_deref(), Some("30"));
}

#[tokio::test(start_paused = true)]
async fn spec_1_2_and_1_4_expired_list_retries_at_empty_rv() {
    relist_after_unavailable(fake::expired()).await;
}

#[tokio::test(start_paused = true)]
async fn spec_1_10_too_large_rv_list_retries_at_empty_rv() {
    let e = fake::too_large_rv();
    assert!(e.is_too_large_rv());
    relist_after_unavailable(e).await;
    // The message-only form counts too.
    let msg_only: Error =
        Status::failure(504, "Timeout", "Too large resource version: 5, current: 1").into();
    assert!(msg_only.is_too_large_rv());
}

#[tokio::test(start_paused = true)]
async fn spec_1_3_paginated_rv0_list_keeps_paging_and_page_size_option() {
    let lw = FakeLw::new(vec![
        fake::list("10", Some("c"), vec![obj("ns", "a", "1")]),
        fake::list("10", None, vec![obj("ns", "b", "1")]),
        fake::watch(vec![]),
        fake::list("11", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 5).await;
    let relist = list_req(&reqs[3]);
    assert_eq!(relist.resource_version.as_deref(), Some("10"));
    assert_eq!(relist.limit, Some(500), "server pages: keep paging");

    let lw = FakeLw::new(vec![
        fake::list("10", None, vec![]),
        fake::watch(vec![]),
        fake::list("11", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let opts = ReflectorOptions {
        page_size: Some(7),
        ..Default::default()
    };
    let (r, _) = make(&lw, opts, 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    assert_eq!(list_req(&reqs[0]).limit, Some(7));
    assert_eq!(list_req(&reqs[2]).limit, Some(7));
}

#[tokio::test(start_paused = true)]
async fn spec_1_1_run_backs_off_after_every_return_up_to_the_cap() {
    let mut steps: Vec<Step> = (0..10)
        .map(|_| Step::List(Err(fake::api_err(500, "InternalError"))))
        .collect();
    steps.push(fake::list("1", None, vec![]));
    steps.push(fake::watch_hang(vec![]));
    let lw = FakeLw::new(steps);
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
    let reqs = run_until(&r, &lw, 12).await;
    assert_eq!(reqs[0].0, Duration::ZERO, "first ListAndWatch runs at once");
    let gaps: Vec<f64> = reqs
        .windows(2)
        .take(10)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64())
        .collect();
    let want = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
    for (g, w) in gaps.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "gaps {gaps:?}");
    }
    // Steps come at 0, 0.8, …, 80.4 and 110.4 s (no reset: within 2 min of the first);
    // the step at 140.4 s is the first more than 2 min after it, so it resets.
    assert!((gaps[9] - 0.8).abs() < 1e-6, "gaps {gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn spec_1_11_resync_while_watching_when_should_resync() {
    for (should, want) in [(true, 3usize), (false, 0)] {
        let lw = FakeLw::new(vec![
            fake::list("1", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let store = Arc::new(Rec::default());
        let opts = ReflectorOptions {
            resync_period: Duration::from_secs(10),
            ..Default::default()
        };
        let r = Arc::new(
            Reflector::new(lw.clone(), store.clone(), opts)
                .with_should_resync(Arc::new(move || should)),
        );
        let stop = StopSignal::new();
        let task = tokio::spawn({
            let (r, stop) = (r.clone(), stop.clone());
            async move { r.run(stop).await }
        });
        lw.wait_requests(2).await;
        // Virtual time: ticks at 10, 20 and 30 s.
        tokio::time::sleep(secs(35.0)).await;
        stop.stop();
        tokio::time::timeout(secs(60.0), task)
            .await
            .unwrap()
            .unwrap();
        let n = store.ops().iter().filter(|o| **o == Op::Resync).count();
        assert_eq!(n, want, "should_resync={should}");
    }
}

fn watch_list_opts() -> ReflectorOptions {
    ReflectorOptions {
        use_watch_list: true,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn spec_1_12_watch_list_replaces_at_end_bookmark_and_continues_the_stream() {
    let lw = FakeLw::new(vec![fake::watch_hang(vec![
        add("a", "5"),
        add("b", "6"),
        add("c", "6"),
        deleted("c", "7"),
        fake::bookmark("7", false),
        fake::bookmark("8", true),
        modified("a", "9"),
    ])]);
    let (r, store) = make(&lw, watch_list_opts(), 0.0);
    let stop = StopSignal::new();
    let task = tokio::spawn({
        let (r, stop) = (r.clone(), stop.clone());
        async move { r.run(stop).await }
    });
    let reqs = lw.wait_requests(1).await;
    tokio::time::timeout(secs(60.0), async {
        while store.ops().len() < 2 {
            tokio::time::sleep(secs(0.01)).await;
        }
    })
    .await
    .expect("events not applied");
    stop.stop();
    task.await.unwrap();
    assert_eq!(
        watch_req(&reqs[0]),
        &WatchParams {
            resource_version: None,
            resource_version_match: Some("NotOlderThan".into()),
            send_initial_events: true,
            allow_watch_bookmarks: true,
            timeout_seconds: Some(300),
            ..Default::default()
        }
    );
    assert_eq!(
        store.ops(),
        vec![
            Op::Replace(vec!["ns/a".into(), "ns/b".into()], "8".into()),
            Op::Update("ns/a".into(), "9".into()),
        ]
    );
    assert_eq!(r.last_sync_resource_version(), "9");
    assert_eq!(lw.requests().len(), 1, "no list request");
}

#[tokio::test(start_paused = true)]
async fn spec_1_12_missing_end_bookmark_retries_watch_list() {
    let lw = FakeLw::new(vec![
        fake::watch(vec![add("a", "5"), Item::Sleep(secs(25.0))]),
        fake::watch_hang(vec![add("a", "5"), fake::bookmark("6", true)]),
    ]);
    let (r, store) = make(&lw, watch_list_opts(), 0.0);
    let stop = StopSignal::new();
    let task = tokio::spawn({
        let (r, stop) = (r.clone(), stop.clone());
        async move { r.run(stop).await }
    });
    let reqs = lw.wait_requests(2).await;
    tokio::time::timeout(secs(60.0), async {
        while store.ops().is_empty() {
            tokio::time::sleep(secs(0.01)).await;
        }
    })
    .await
    .expect("second attempt never completed");
    stop.stop();
    task.await.unwrap();
    // Retried as a watch-list when the stream closed, not a fallback list (k/k#140890).
    assert!(watch_req(&reqs[1]).send_initial_events);
    assert_eq!(reqs[1].0, secs(25.0));
    // Nothing of the incomplete first attempt reached the store; the second attempt's
    // end bookmark completes the initial state.
    assert_eq!(
        store.ops(),
        vec![Op::Replace(vec!["ns/a".into()], "6".into())]
    );
}

/// Warning messages logged while `f` runs on this thread (the paused-clock runtime runs every
/// task here).
async fn warnings_during<F: std::future::Future>(f: F) -> (F::Output, Vec<String>) {
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
    #[derive(Clone, Default)]
    struct Warnings(Arc<Mutex<Vec<String>>>);
    struct Msg(String);
    impl tracing::field::Visit for Msg {
        fn record_debug(&mut self, field: &tracing::field::Field, v: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{v:?}");
            }
        }
    }
    impl<S: tracing::Subscriber> Layer<S> for Warnings {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if *event.metadata().level() == tracing::Level::WARN {
                let mut m = Msg(String::new());
                event.record(&mut m);
                self.0.lock().push(m.0);
            }
        }
    }
    let w = Warnings::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(w.clone()));
    let out = f.await;
    let got = w.0.lock().clone();
    (out, got)
}

#[tokio::test(start_paused = true)]
async fn spec_1_12_a_missing_end_bookmark_is_warned_about_every_10_seconds() {
    // The first attempt streams for 25 s without the end bookmark: warnings at 10 s and 20 s,
    // then the retry completes at once and nothing more is said.
    let lw = FakeLw::new(vec![
        fake::watch(vec![add("a", "5"), Item::Sleep(secs(25.0))]),
        fake::watch_hang(vec![add("a", "5"), fake::bookmark("6", true)]),
    ]);
    let (r, store) = make(&lw, watch_list_opts(), 0.0);
    let ((), warnings) = warnings_during(async {
        let stop = StopSignal::new();
        let task = tokio::spawn({
            let (r, stop) = (r.clone(), stop.clone());
            async move { r.run(stop).await }
        });
        lw.wait_requests(2).await;
        tokio::time::timeout(secs(60.0), async {
            while store.ops().is_empty() {
                tokio::time::sleep(secs(0.01)).await;
            }
        })
        .await
        .expect("second attempt never completed");
        // Long after: no further warning once the initial state is complete.
        tokio::time::sleep(secs(30.0)).await;
        stop.stop();
        task.await.unwrap();
    })
    .await;
    let waiting: Vec<_> = warnings
        .iter()
        .filter(|w| w.contains("initial-events-end bookmark"))
        .collect();
    assert_eq!(waiting.len(), 2, "{warnings:?}");
}

#[tokio::test(start_paused = true)]
async fn spec_1_12_422_falls_back_to_list_and_watch() {
    let lw = FakeLw::new(vec![
        Step::Watch(Err(fake::api_err(422, "Invalid"))),
        fake::list("10", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, watch_list_opts(), 0.0);
    let reqs = run_until(&r, &lw, 3).await;
    assert_eq!(list_req(&reqs[1]).resource_version.as_deref(), Some("0"));
    let w = watch_req(&reqs[2]);
    assert!(!w.send_initial_events);
    assert_eq!(w.resource_version_match, None);
    assert_eq!(reqs[1].0, reqs[0].0, "fallback is immediate");
}

#[tokio::test(start_paused = true)]
async fn spec_1_12_expired_retries_at_empty_rv_and_429_backs_off() {
    let lw = FakeLw::new(vec![
        fake::watch(vec![fake::bookmark("8", true), err_event(410, "Expired")]),
        Step::Watch(Err(fake::expired())),
        Step::Watch(Err(fake::api_err(429, "TooManyRequests"))),
        fake::watch_hang(vec![fake::bookmark("20", true)]),
    ]);
    let (r, _) = make(&lw, watch_list_opts(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    // After the in-stream Expired: backoff, then a watch-list at lastSyncRV 8...
    assert_eq!(watch_req(&reqs[1]).resource_version.as_deref(), Some("8"));
    assert_eq!(reqs[1].0 - reqs[0].0, secs(0.8));
    // ...which expired: immediately again at "".
    assert_eq!(watch_req(&reqs[2]).resource_version, None);
    assert_eq!(reqs[2].0, reqs[1].0);
    // 429: back off, retry.
    assert!(watch_req(&reqs[3]).send_initial_events);
    assert_eq!(reqs[3].0 - reqs[2].0, secs(1.6));
}

#[tokio::test(start_paused = true)]
async fn spec_1_12_too_large_rv_retries_at_empty_rv_and_short_close_falls_back() {
    let lw = FakeLw::new(vec![
        Step::Watch(Err(fake::too_large_rv())),
        // Closed at once with no events: a very short watch, which is not retried.
        fake::watch(vec![]),
        fake::list("10", None, vec![]),
        fake::watch_hang(vec![]),
    ]);
    let (r, _) = make(&lw, watch_list_opts(), 0.0);
    let reqs = run_until(&r, &lw, 4).await;
    assert!(watch_req(&reqs[1]).send_initial_events);
    assert_eq!(watch_req(&reqs[1]).resource_version, None);
    assert_eq!(reqs[1].0, reqs[0].0, "TooLarge retries at once");
    // The list after the fallback uses RV "" (the RV is still marked unavailable).
    assert_eq!(list_req(&reqs[2]).resource_version, None);
    assert!(!watch_req(&reqs[3]).send_initial_events);
}

#[tokio::test(start_paused = true)]
async fn stop_during_backoff_ends_run_promptly() {
    let lw = FakeLw::new(vec![Step::List(Err(fake::api_err(500, "InternalError")))]);
    // Jitter pinned near its top: a long first sleep.
    let (r, _) = make(&lw, ReflectorOptions::default(), 0.99);
    let stop = StopSignal::new();
    let task = tokio::spawn({
        let (r, stop) = (r.clone(), stop.clone());
        async move { r.run(stop).await }
    });
    lw.wait_requests(1).await;
    let t0 = Instant::now();
    stop.stop();
    tokio::time::timeout(secs(60.0), task)
        .await
        .unwrap()
        .unwrap();
    assert!(t0.elapsed() < secs(0.1), "waited {:?}", t0.elapsed());
}

/// Reported from outside: a LIST whose `continue` token never changed was followed forever,
/// each page kept (RSS 117 → 737 MB in 35 s; empty pages at ~184 requests/s, no backoff, no
/// warning). A token this list already followed, the last one or an earlier one, fails the
/// list: one warning, a backoff, then a list from the start; no page of the circle is kept.
#[tokio::test(start_paused = true)]
async fn spec_1_3_a_repeated_continue_token_fails_the_list_and_relists_after_a_backoff() {
    for tokens in [vec!["c1", "c1"], vec!["c1", "c2", "c1"]] {
        let mut steps: Vec<Step> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| fake::list("10", Some(t), vec![obj("ns", &format!("p{i}"), "9")]))
            .collect();
        steps.push(fake::list("11", None, vec![obj("ns", "fresh", "11")]));
        steps.push(fake::watch_hang(vec![]));
        let lw = FakeLw::new(steps);
        let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
        let n = tokens.len();
        let (reqs, warnings) = warnings_during(run_until(&r, &lw, n + 2)).await;
        let relist = list_req(&reqs[n]);
        assert_eq!(relist.continue_token, None, "{tokens:?}: {reqs:?}");
        assert_eq!(relist.resource_version.as_deref(), Some("0"));
        assert_eq!(relist.limit, Some(500));
        assert_eq!(reqs[n].0 - reqs[n - 1].0, secs(0.8), "one backoff step");
        assert_eq!(
            store.ops(),
            vec![Op::Replace(vec!["ns/fresh".into()], "11".into())]
        );
        let failed = warnings
            .iter()
            .filter(|w| w.contains("list and watch failed"))
            .count();
        assert_eq!(failed, 1, "{warnings:?}");
    }
}

/// Reported from outside: a LIST took in items a WATCH drops (another kind, no metadata, no
/// or an empty name). Listed items pass the watch events' check (spec 1.7), with one warning
/// for the list.
#[tokio::test(start_paused = true)]
async fn spec_1_7_listed_objects_pass_the_check_watch_events_pass() {
    let o = |v: serde_json::Value| Object::from_value(&v).unwrap();
    let items = vec![
        o(serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"namespace": "ns", "name": "a", "resourceVersion": "5"}})),
        o(serde_json::json!({"kind": "Secret", "apiVersion": "v1",
            "metadata": {"namespace": "ns", "name": "s", "resourceVersion": "6"}})),
        o(serde_json::json!({"kind": "ConfigMap", "apiVersion": "v2",
            "metadata": {"namespace": "ns", "name": "v", "resourceVersion": "6"}})),
        o(serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1"})),
        o(serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"namespace": "ns", "name": "", "resourceVersion": "7"}})),
        // No type metadata: taken as the watched type, as on the watch path.
        o(
            serde_json::json!({"metadata": {"namespace": "ns", "name": "b", "resourceVersion": "8"}}),
        ),
    ];
    let lw = FakeLw::new(vec![
        fake::list("10", None, items),
        fake::watch_hang(vec![]),
    ]);
    lw.expect_type("v1", "ConfigMap");
    let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
    let (_, warnings) = warnings_during(run_until(&r, &lw, 2)).await;
    assert_eq!(
        store.ops(),
        vec![Op::Replace(vec!["ns/a".into(), "ns/b".into()], "10".into())]
    );
    let skipped = warnings
        .iter()
        .filter(|w| w.contains("skipping listed objects"))
        .count();
    assert_eq!(skipped, 1, "{warnings:?}");
}
