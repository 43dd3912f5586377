//! Contract 0.2.0 end to end, over HTTP to the emulator: a plugin's configuration reaches the
//! guest (`config` import) and is checked at load (`validate-config`), the Events it records
//! are written as `events.k8s.io/v1` Events aggregated as client-go's broadcaster does, and
//! components built against 0.1.0 (checked in, built before 0.2.0 existed) still load and run.
//! The recorder itself, without a guest, in `recorder` (one test binary for both: each one
//! links wasmtime).

#[path = "plugin_events/recorder.rs"]
mod recorder;
#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use kwh_plugin::{Contract, LoadCause, PluginSpec, RuntimeOptions};
use support::cluster::{emulator, eventually, runtime_with};
use support::guests::guest;

const T: Duration = Duration::from_secs(120);

fn spec(path: PathBuf, config: Value) -> PluginSpec {
    PluginSpec {
        config: Arc::new(config),
        ..PluginSpec::with_defaults(path, &RuntimeOptions::default())
    }
}

fn heralded(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"herald": "yes"}}})
}

/// The floor of the issue: 10,000 identical events from one reconcile loop cost at most 10
/// API writes, and the one Event they become counts all of them (after the shutdown flush).
/// `kubectl describe` matches on the regarding uid, so the Event carries the ConfigMap's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_identical_events_from_one_reconcile_are_one_event_and_few_writes() {
    let em = emulator().await;
    let mut rt = runtime_with(&em, RuntimeOptions::default());
    let started = tokio::time::timeout(
        T,
        rt.start_spec(spec(
            guest("herald"),
            json!({"repeat": 10000, "reason": "Loud"}),
        )),
    )
    .await
    .expect("in time")
    .expect("starts");
    assert_eq!(started, kwh_plugin::Started::Running);
    assert!(eventually(Duration::from_secs(20), || rt.is_ready()).await);
    let writes = |em: &kwh_emulator::EmulatorHandle| {
        let s = em.stats();
        s.requests("create") + s.requests("patch") + s.requests("update")
    };
    let before = writes(&em);
    let cm = em.create(heralded("loud")).expect("create");
    let events =
        |em: &kwh_emulator::EmulatorHandle| em.list("events.k8s.io/v1", "Event", Some("default"));
    assert!(
        eventually(Duration::from_secs(20), || !events(&em).is_empty()).await,
        "the first occurrence is written at once"
    );
    // The recorder's counters are on /metrics: every occurrence recorded, all but the first
    // counted into the series, none dropped.
    let (addr, ops) = kwh_plugin::ops::serve("127.0.0.1:0".parse().expect("addr"), rt.status())
        .await
        .expect("ops");
    let herald = rt.plugins()[0].clone();
    assert!(
        eventually(Duration::from_secs(20), || {
            herald
                .reconcile_stats()
                .total
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        })
        .await,
        "the reconcile ends"
    );
    let (_, body) = support::cluster::http_get(&addr.to_string(), "/metrics").await;
    assert!(body.contains("events_recorded_total 10000"), "{body}");
    assert!(body.contains("events_aggregated_total 9999"), "{body}");
    assert!(
        body.contains("events_dropped_total{reason=\"queue_full\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("events_dropped_total{reason=\"rate_limited\"} 0"),
        "{body}"
    );
    ops.abort();
    assert!(rt.shutdown(Duration::from_secs(10)).await);
    let stored = events(&em);
    assert_eq!(stored.len(), 1, "{stored:#?}");
    let ev = &stored[0];
    assert_eq!(ev["series"]["count"], 10_000, "{ev:#}");
    assert_eq!(ev["reason"], "Loud");
    assert_eq!(ev["action"], "Observe");
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["reportingController"], "herald");
    assert_eq!(ev["note"], "heralded default/loud");
    assert_eq!(ev["regarding"]["uid"], cm["metadata"]["uid"]);
    assert_eq!(ev["regarding"]["kind"], "ConfigMap");
    let instance = ev["reportingInstance"].as_str().expect("instance");
    assert!(
        instance.contains('_') && instance.len() <= 128,
        "{instance}"
    );
    let spent = writes(&em) - before;
    assert!(
        spent <= 10,
        "{spent} API writes for 10,000 identical events"
    );
    em.shutdown().await;
}

/// A configuration the guest refuses stops that plugin alone, in one line naming the file and
/// the guest's message; one that does not parse as the guest's settings type likewise.
#[tokio::test]
async fn a_configuration_the_guest_refuses_stops_its_load_with_the_guest_s_message() {
    let engine = support::engine();
    let path = guest("herald");
    let load = |config: Value| {
        let engine = engine.clone();
        let path = path.clone();
        async move {
            tokio::time::timeout(
                T,
                engine.load_configured(&path, Default::default(), Arc::new(config)),
            )
            .await
            .expect("in time")
        }
    };
    let err = load(json!({"repeat": 200000}))
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(&err.cause, LoadCause::ConfigRefused(m) if m == "repeat must be at most 100000, not 200000"),
        "{err}"
    );
    let line = err.to_string();
    assert!(
        line.contains("herald.wasm") && !line.contains('\n'),
        "{line}"
    );
    let err = load(json!({"repaet": 1})).await.err().expect("refused");
    assert!(
        matches!(&err.cause, LoadCause::ConfigRefused(m) if m.contains("unknown field `repaet`")),
        "{err}"
    );
    // No configuration is the defaults; a good one loads.
    let ok = load(Value::Null).await.expect("defaults");
    assert_eq!(ok.contract(), Contract::V0_2);
    assert!(ok.manifest().records_events, "herald imports events");
    load(json!({"repeat": 3})).await.expect("in range");
}

/// Components built against 0.1.0 before 0.2.0 existed (checked in) load, are recognised as
/// 0.1.0, and run: the 0.1.0 config reloader rolls a Deployment when its ConfigMap changes,
/// receiving notifications in 0.1.0's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_built_against_0_1_0_load_and_run_unchanged() {
    let fixtures = support::guests::repo_root().join("tests/fixtures/contract-0.1.0");
    let engine = support::engine();
    for (file, name) in [
        ("janitor.wasm", "janitor"),
        ("config_reloader.wasm", "config-reloader"),
        ("namespace_defaults.wasm", "namespace-defaults"),
        ("guest_noop.wasm", "noop"),
    ] {
        let loaded = tokio::time::timeout(T, engine.load(&fixtures.join(file), Default::default()))
            .await
            .expect("in time")
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(loaded.name(), name);
        assert_eq!(loaded.contract(), Contract::V0_1, "{file}");
        assert!(!loaded.manifest().records_events);
    }

    let em = emulator().await;
    let mut rt = runtime_with(&em, RuntimeOptions::default());
    let started = tokio::time::timeout(
        T,
        rt.start_spec(spec(fixtures.join("config_reloader.wasm"), Value::Null)),
    )
    .await
    .expect("in time")
    .expect("starts");
    assert_eq!(started, kwh_plugin::Started::Running);
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "1"}}))
        .expect("cm");
    em.create(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default",
            "annotations": {"config-reloader/enabled": "true"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x",
                    "envFrom": [{"configMapRef": {"name": "settings"}}]}]}}}}))
        .expect("deployment");
    assert!(eventually(Duration::from_secs(20), || rt.is_ready()).await);
    let web = |em: &kwh_emulator::EmulatorHandle| {
        em.get("apps/v1", "Deployment", Some("default"), "web")
            .unwrap_or_default()
    };
    assert!(
        eventually(Duration::from_secs(20), || {
            web(&em)["metadata"]["annotations"]["config-reloader/observed-hash"].is_string()
        })
        .await,
        "the 0.1.0 reloader records the baseline hash"
    );
    // The reloader compares against the hash in its cache: change the ConfigMap only once the
    // cache holds the baseline, or a reconcile reading the Deployment from before its own write
    // would take the new hash as the baseline (under load, the watch can lag the write).
    let deployments =
        kwh_informer::factory::InformerKey::new("apps/v1/deployments", None, None, None);
    assert!(
        eventually(Duration::from_secs(20), || {
            rt.factory()
                .informer(&deployments)
                .and_then(|i| i.indexer().get_by_key("default/web"))
                .is_some_and(|o| {
                    String::from_utf8_lossy(o.raw()).contains("config-reloader/observed-hash")
                })
        })
        .await,
        "the cache holds the baseline"
    );
    let mut cm = em
        .get("v1", "ConfigMap", Some("default"), "settings")
        .expect("cm");
    cm["data"]["k"] = json!("2");
    em.update(cm).expect("update");
    assert!(
        eventually(Duration::from_secs(20), || {
            web(&em)["spec"]["template"]["metadata"]["annotations"]["config-reloader/config-hash"]
                .is_string()
        })
        .await,
        "a change of the ConfigMap rolls the Deployment"
    );
    assert!(rt.shutdown(Duration::from_secs(10)).await);
    em.shutdown().await;
}
