//! The Event recorder against the in-process emulator over loopback: aggregation into series,
//! the per-object rate limit, the bounded queue, series expiry and flushes, 404 re-creation,
//! retries, and the body the API server receives. API writes are counted with the emulator's
//! request counters; stored Events are read from its store directly (no request counted).

use std::time::Duration;
use tokio::time::Instant;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use kwh_emulator::EmulatorHandle;
use kwh_plugin::events::{
    EventRecorder, EventStats, EventType, EventWriter, NewEvent, ObjectRef, RecorderConfig,
};

/// Bound on every wait; the tests finish far sooner.
const LIMIT: Duration = Duration::from_secs(20);

/// A fresh emulator on a loopback port, and a client of it.
async fn emulator() -> (kwh_emulator::EmulatorHandle, kwh_client::Client) {
    let h = kwh_emulator::Emulator::builder().start().await.unwrap();
    let client = h.client().unwrap();
    (h, client)
}

const CONTROLLER: &str = "janitor";

fn cm(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: name.into(),
        uid: Some(format!("uid-{name}")),
    }
}

fn event(regarding: ObjectRef, reason: &str) -> NewEvent {
    NewEvent {
        regarding,
        event_type: EventType::Normal,
        reason: reason.into(),
        action: "Delete".into(),
        note: Some(format!("note for {reason}")),
    }
}

/// A writer task and the sender that stops it.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

fn spawn(writer: EventWriter) -> Running {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(writer.run(async {
        let _ = stopped.await;
    }));
    Running { stop, task }
}

/// Stop the writer and wait for it: once this returns, every write it will make is made.
async fn stop(r: Running) {
    let _ = r.stop.send(());
    tokio::time::timeout(LIMIT, r.task)
        .await
        .expect("the writer stops within its grace period")
        .unwrap();
}

fn stored(h: &EmulatorHandle, ns: &str) -> Vec<Value> {
    h.list("events.k8s.io/v1", "Event", Some(ns))
}

fn with_reason<'a>(events: &'a [Value], reason: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["reason"] == reason).collect()
}

/// Creates and patches the API server has seen (failed ones included).
fn writes(h: &EmulatorHandle) -> u64 {
    let s = h.stats();
    s.requests("create") + s.requests("patch")
}

/// Poll the recorder's counters until `done` holds; panics after [`LIMIT`].
async fn until(recorder: &EventRecorder, what: &str, done: impl Fn(&EventStats) -> bool) {
    until_true(what, || done(&recorder.stats())).await;
}

async fn until_true(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_identical_events_cost_a_handful_of_writes() {
    let (h, client) = emulator().await;
    let (recorder, writer) = EventRecorder::new(client, RecorderConfig::new("host-a"));
    let running = spawn(writer);
    for _ in 0..10_000 {
        recorder.record(CONTROLLER, event(cm("hot"), "Expired"));
    }
    stop(running).await;

    let n = writes(&h);
    eprintln!(
        "10,000 identical events: {n} API writes, {:?}",
        recorder.stats()
    );
    assert!(n <= 10, "{n} writes");
    let events = stored(&h, "default");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["series"]["count"], 10_000);
    assert_eq!(events[0]["note"], "note for Expired");
    let stats = recorder.stats();
    assert_eq!(
        (stats.recorded, stats.aggregated, stats.created),
        (10_000, 9_999, 1)
    );
    assert!(stats.patched >= 1);
    assert_eq!(stats.created + stats.patched, n);
    assert_eq!(stats.write_failures + stats.dropped_queue_full, 0);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_events_make_distinct_events_up_to_the_burst() {
    let (h, client) = emulator().await;
    let (recorder, writer) = EventRecorder::new(client, RecorderConfig::new("host-a"));
    let running = spawn(writer);
    recorder.record(CONTROLLER, event(cm("two"), "Expired"));
    recorder.record(CONTROLLER, event(cm("two"), "Renewed"));
    for i in 0..30 {
        recorder.record(CONTROLLER, event(cm("busy"), &format!("Reason{i}")));
    }
    stop(running).await;

    let events = stored(&h, "default");
    let about = |name: &str| {
        events
            .iter()
            .filter(|e| e["regarding"]["name"] == name)
            .count()
    };
    assert_eq!(about("two"), 2);
    assert_eq!(about("busy"), 25);
    assert!(events.iter().all(|e| e.get("series").is_none()));
    let stats = recorder.stats();
    assert_eq!((stats.created, stats.dropped_rate_limited), (27, 5));
    assert_eq!(writes(&h), 27);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_new_series_without_blocking() {
    let (h, client) = emulator().await;
    let mut config = RecorderConfig::new("host-a");
    config.queue_capacity = 1;
    let (recorder, writer) = EventRecorder::new(client, config);

    // The writer is not running: the first create fills the queue and stays there.
    let r = recorder.clone();
    let blocking = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        r.record(CONTROLLER, event(cm("a"), "First"));
        for i in 0..10_000 {
            r.record(CONTROLLER, event(cm("a"), &format!("Other{i}")));
        }
        // A running series still counts while the queue is full.
        r.record(CONTROLLER, event(cm("a"), "First"));
        started.elapsed()
    });
    let took = tokio::time::timeout(Duration::from_secs(5), blocking)
        .await
        .expect("record never waits for room in the queue")
        .unwrap();
    eprintln!("10,002 record calls against a full queue took {took:?}");
    let stats = recorder.stats();
    assert_eq!(
        (
            stats.dropped_queue_full,
            stats.aggregated,
            stats.dropped_rate_limited
        ),
        (10_000, 1, 0)
    );
    assert_eq!(writes(&h), 0);

    // Once the writer drains the queue, a dropped series can start again.
    let running = spawn(writer);
    until(&recorder, "the first create", |s| s.created == 1).await;
    recorder.record(CONTROLLER, event(cm("a"), "Other0"));
    stop(running).await;

    let events = stored(&h, "default");
    assert_eq!(events.len(), 2, "{events:#?}");
    assert_eq!(with_reason(&events, "First")[0]["series"]["count"], 2);
    assert_eq!(with_reason(&events, "Other0").len(), 1);
    assert_eq!(recorder.stats().write_failures, 0);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_series_finishes_and_the_next_event_starts_another() {
    let (h, client) = emulator().await;
    // Long enough that the first three occurrences surely fall within it on a loaded machine.
    let expiry = Duration::from_secs(1);
    let mut config = RecorderConfig::new("host-a");
    config.series_expiry = expiry;
    config.series_flush = Duration::from_secs(3600);
    let (recorder, writer) = EventRecorder::new(client, config);
    let running = spawn(writer);

    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    until(&recorder, "the create", |s| s.created == 1).await;
    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    until(&recorder, "the second occurrence's patch", |s| {
        s.patched == 1
    })
    .await;
    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    let last = Instant::now();
    // Only time passing makes a series idle; nothing else is awaited here.
    let idle =
        (last + expiry + Duration::from_millis(50)).saturating_duration_since(Instant::now());
    tokio::time::sleep(idle).await;
    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    stop(running).await;

    let events = stored(&h, "default");
    assert_eq!(events.len(), 2, "{events:#?}");
    let mut counts: Vec<Value> = events
        .iter()
        .map(|e| e["series"]["count"].clone())
        .collect();
    counts.sort_by_key(|c| c.as_u64());
    // The finished series got its last count (3); the new one has one occurrence.
    assert_eq!(counts, [Value::Null, json!(3)]);
    let stats = recorder.stats();
    assert_eq!(
        (stats.created, stats.patched, stats.write_failures),
        (2, 2, 0)
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_series_are_flushed_every_interval() {
    let (h, client) = emulator().await;
    let mut config = RecorderConfig::new("host-a");
    config.series_flush = Duration::from_millis(100);
    let (recorder, writer) = EventRecorder::new(client, config);
    let running = spawn(writer);

    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    until(&recorder, "the create", |s| s.created == 1).await;
    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    until(&recorder, "the second occurrence's patch", |s| {
        s.patched == 1
    })
    .await;
    for _ in 0..5 {
        recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    }
    // Written by a flush, before any shutdown.
    until_true("a flush of count 7", || {
        stored(&h, "default")[0]["series"]["count"] == 7
    })
    .await;
    stop(running).await;
    let stats = recorder.stats();
    assert!(stats.patched >= 2, "{stats:?}");
    assert_eq!(writes(&h), 1 + stats.patched);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_patch_on_a_deleted_event_creates_it_again() {
    let (h, client) = emulator().await;
    let (recorder, writer) = EventRecorder::new(client, RecorderConfig::new("host-a"));
    let running = spawn(writer);

    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    until(&recorder, "the create", |s| s.created == 1).await;
    let name = stored(&h, "default")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    // As when the Event's TTL ran out.
    h.delete("events.k8s.io/v1", "Event", Some("default"), &name)
        .unwrap();
    recorder.record(CONTROLLER, event(cm("a"), "Expired"));
    stop(running).await;

    let events = stored(&h, "default");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["metadata"]["name"], name.as_str());
    assert_eq!(events[0]["series"]["count"], 2);
    assert_eq!(events[0]["note"], "note for Expired");
    let s = h.stats();
    assert_eq!((s.requests("create"), s.requests("patch")), (2, 1));
    let stats = recorder.stats();
    assert_eq!(
        (stats.created, stats.patched, stats.write_failures),
        (2, 0, 0)
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_writes_are_retried_then_counted_and_the_series_forgotten() {
    let (h, client) = emulator().await;
    let (recorder, writer) = EventRecorder::new(client, RecorderConfig::new("host-a"));
    let running = spawn(writer);

    // Two 500s, then success: retried, no failure.
    h.faults().fail_next(2, 500, 0);
    recorder.record(CONTROLLER, event(cm("a"), "Retried"));
    until(&recorder, "the retried create", |s| s.created == 1).await;
    assert_eq!(h.stats().requests("create"), 3);

    // A refusal is not retried; the series is forgotten so the next occurrence tries again.
    h.faults().fail_next(1, 403, 0);
    recorder.record(CONTROLLER, event(cm("a"), "Refused"));
    until(&recorder, "the refused create", |s| s.write_failures == 1).await;
    assert_eq!(h.stats().requests("create"), 4);
    recorder.record(CONTROLLER, event(cm("a"), "Refused"));
    until(&recorder, "the second try", |s| s.created == 2).await;

    // A server that keeps failing: a bounded number of tries.
    h.faults().fail_next(100, 503, 0);
    recorder.record(CONTROLLER, event(cm("a"), "Unavailable"));
    until(&recorder, "the given-up create", |s| s.write_failures == 2).await;
    let tries = h.stats().requests("create") - 5;
    h.faults().clear();
    stop(running).await;

    assert_eq!(tries, 4);
    let events = stored(&h, "default");
    assert_eq!(with_reason(&events, "Retried").len(), 1);
    assert_eq!(with_reason(&events, "Refused").len(), 1);
    assert!(with_reason(&events, "Unavailable").is_empty());
    let stats = recorder.stats();
    assert_eq!((stats.created, stats.write_failures), (2, 2));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_events_have_the_shape_of_the_recorded_request() {
    let (h, client) = emulator().await;
    h.create(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rbac-samples"}}),
    )
    .unwrap();
    let sample: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/apiserver-samples/rbac-leases-events/ev.request.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let (recorder, writer) = EventRecorder::new(client, RecorderConfig::new("host-a_1f2e"));
    let running = spawn(writer);
    let before = std::time::SystemTime::now();
    recorder.record(
        CONTROLLER,
        NewEvent {
            regarding: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("rbac-samples".into()),
                name: "exists".into(),
                uid: Some("00000000-0000-0000-0000-000000000000".into()),
            },
            event_type: EventType::Normal,
            reason: "Expired".into(),
            action: "Delete".into(),
            note: Some("deleted ConfigMap rbac-samples/exists: ttl 20s expired".into()),
        },
    );
    // A cluster-scoped object's Events go to `default`; its reference has no namespace.
    recorder.record(
        CONTROLLER,
        NewEvent {
            regarding: ObjectRef {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: "team-a".into(),
                uid: None,
            },
            event_type: EventType::Warning,
            reason: "Quota".into(),
            action: "Check".into(),
            note: Some("é".repeat(600)),
        },
    );
    stop(running).await;

    let events = stored(&h, "rbac-samples");
    assert_eq!(events.len(), 1, "{events:#?}");
    let got = &events[0];
    // Every field of the recorded request, with the same values except the name's timestamp
    // and eventTime.
    let sample_keys: Vec<&String> = sample.as_object().unwrap().keys().collect();
    for k in &sample_keys {
        assert!(got.get(k.as_str()).is_some(), "missing {k}: {got:#}");
    }
    for k in [
        "apiVersion",
        "kind",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
        "type",
        "note",
        "regarding",
    ] {
        assert_eq!(got[k], sample[k], "{k}");
    }
    assert_eq!(got["metadata"]["namespace"], "rbac-samples");
    let name = got["metadata"]["name"].as_str().unwrap();
    let hex = name.strip_prefix("exists.").unwrap();
    let nanos = u64::from_str_radix(hex, 16).unwrap();
    let since_epoch = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    };
    assert!(nanos >= since_epoch(before) && nanos <= since_epoch(std::time::SystemTime::now()));
    let time = got["eventTime"].as_str().unwrap();
    let sample_time = sample["eventTime"].as_str().unwrap();
    assert_eq!(time.len(), sample_time.len(), "{time}");
    for (i, (a, b)) in time.bytes().zip(sample_time.bytes()).enumerate() {
        assert_eq!(
            a.is_ascii_digit(),
            b.is_ascii_digit(),
            "{time} vs {sample_time} at {i}"
        );
        if !b.is_ascii_digit() {
            assert_eq!(a, b, "{time} vs {sample_time} at {i}");
        }
    }
    // The name's nanoseconds and eventTime are the same instant, to the microsecond.
    assert_eq!(
        time[20..26],
        format!("{:06}", (nanos % 1_000_000_000) / 1000)
    );

    let cluster = stored(&h, "default");
    assert_eq!(cluster.len(), 1, "{cluster:#?}");
    let ev = &cluster[0];
    assert_eq!(
        ev["regarding"],
        json!({"apiVersion": "v1", "kind": "Namespace", "name": "team-a"})
    );
    assert_eq!(ev["type"], "Warning");
    assert!(ev["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("team-a."));
    // 600 two-byte characters, cut to the API's 1024 bytes.
    assert_eq!(ev["note"].as_str().unwrap(), "é".repeat(512));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_fence_stops_every_event_write() {
    let (h, client) = emulator().await;
    let fence = kwh_coordination::leader_election::Fence::closed();
    let (recorder, writer) = EventRecorder::new(
        client,
        RecorderConfig {
            fence: Some(fence.clone()),
            ..RecorderConfig::new("host-a")
        },
    );
    let running = spawn(writer);
    let before = writes(&h);
    recorder.record(CONTROLLER, event(cm("a"), "Fenced"));
    until(&recorder, "the write given up", |s| s.write_failures == 1).await;
    assert_eq!(writes(&h), before, "nothing reached the API server");
    // Open (leading again): the next Event is written.
    fence.open_until(Instant::now() + Duration::from_secs(60));
    recorder.record(CONTROLLER, event(cm("b"), "Open"));
    until(&recorder, "the Event created", |s| s.created == 1).await;
    stop(running).await;
    assert_eq!(with_reason(&stored(&h, "default"), "Open").len(), 1);
    assert!(with_reason(&stored(&h, "default"), "Fenced").is_empty());
}
