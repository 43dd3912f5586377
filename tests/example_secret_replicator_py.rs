//! End to end: the secret replicator written in Python (`examples/secret-replicator-py`, built
//! with componentize-py, CPython inside the component) run by the real plugin runtime against
//! the emulator over HTTP, with the Events it records about its sources; its settings (checked
//! by its `validate-config` at load) in the guest harness.
//!
//! The component is built and compiled once per test process: `build.sh` rebuilds it only when a
//! source changed, and the compile cache lives under the target directory, so a rerun loads the
//! compiled artifact instead of running Cranelift over ~19 MB of WebAssembly again.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kwh_emulator::EmulatorHandle;
use kwh_plugin::{
    EngineConfig, GuestError, Limits, LoadCause, PluginEngine, PluginRuntime, RuntimeOptions,
};
use kwh_testing::{Harness, ReconcileOutcome};
use serde_json::{json, Value};
use support::cluster::{client, emulator, eventually};
use support::fakes::Fakes;
use tokio::sync::OnceCell;

/// Bounds the first build (componentize-py download included) and the cold compile together.
const PREPARE: Duration = Duration::from_secs(1200);
const T: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(30);

const TARGETS: &str = "replicator.kube/replicate-to";
const SOURCE: &str = "replicator.kube/source";
const REPLICA: &str = "replicator.kube/replica";

/// The built component and one engine whose disk cache already holds its compiled form.
struct Prepared {
    engine: PluginEngine,
    wasm: PathBuf,
}

/// Builds the component and compiles it once for the whole test process, so that tests running
/// in parallel do not each run Cranelift over it.
async fn prepared() -> &'static Prepared {
    static PREPARED: OnceCell<Prepared> = OnceCell::const_new();
    PREPARED
        .get_or_init(|| async {
            tokio::time::timeout(PREPARE, async {
                let wasm = tokio::task::spawn_blocking(|| {
                    support::guests::python_example("secret-replicator-py")
                })
                .await
                .expect("the build does not panic");
                let engine = PluginEngine::new(EngineConfig {
                    cache_dir: Some(
                        support::guests::target_dir().join("python-guests/compile-cache"),
                    ),
                    max_instances: 32,
                    ..EngineConfig::default()
                })
                .expect("engine");
                let started = Instant::now();
                let loaded = engine
                    .load(&wasm, Limits::default())
                    .await
                    .expect("the component loads under the default limits");
                eprintln!(
                    "secret-replicator-py: {} bytes, loaded in {:?} ({} compiled)",
                    std::fs::metadata(&wasm).map(|m| m.len()).unwrap_or(0),
                    started.elapsed(),
                    engine.compiles()
                );
                assert_eq!(loaded.name(), "secret-replicator");
                Prepared { engine, wasm }
            })
            .await
            .expect("build and compile in time")
        })
        .await
}

/// The emulator and a runtime running the replicator with production limits.
async fn start() -> (EmulatorHandle, PluginRuntime) {
    let p = prepared().await;
    let em = emulator().await;
    let mut rt = PluginRuntime::new(
        p.engine.clone(),
        client(&em),
        RuntimeOptions {
            fail_fast: true,
            ..RuntimeOptions::default()
        },
    );
    tokio::time::timeout(T, rt.start(&p.wasm))
        .await
        .expect("starts in time")
        .expect("starts");
    assert!(
        eventually(WAIT, || rt.is_ready()).await,
        "the Secret informer syncs"
    );
    assert!(em.wait_for_open_watches("/secrets", 1, WAIT).await);
    (em, rt)
}

fn secret(ns: &str, name: &str, targets: Option<&str>, data: Value) -> Value {
    let mut s = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns}, "data": data});
    if let Some(t) = targets {
        s["metadata"]["annotations"] = json!({ TARGETS: t });
    }
    s
}

fn namespaces(em: &EmulatorHandle, names: &[&str]) {
    for ns in names {
        em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .expect("create namespace");
    }
}

fn get(em: &EmulatorHandle, ns: &str, name: &str) -> Option<Value> {
    em.get("v1", "Secret", Some(ns), name)
}

/// Whether `ns/name` is a replica of `default/<name>` holding exactly `data`.
fn is_replica_with(em: &EmulatorHandle, ns: &str, name: &str, data: &Value) -> bool {
    get(em, ns, name).is_some_and(|r| {
        r["data"] == *data
            && r["metadata"]["labels"][REPLICA] == "true"
            && r["metadata"]["annotations"][SOURCE] == format!("default/{name}")
    })
}

/// The `events.k8s.io/v1` Events in `ns` whose reason is `reason`.
fn events(em: &EmulatorHandle, ns: &str, reason: &str) -> Vec<Value> {
    em.list("events.k8s.io/v1", "Event", Some(ns))
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// Waits for the one Event in `ns` with `reason` and returns it.
async fn event(em: &EmulatorHandle, ns: &str, reason: &str) -> Value {
    assert!(
        eventually(WAIT, || !events(em, ns, reason).is_empty()).await,
        "a {reason} event in {ns}: {:?}",
        em.list("events.k8s.io/v1", "Event", Some(ns))
    );
    let mut found = events(em, ns, reason);
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|e| e["manager"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_follow_their_source_through_create_update_and_delete() {
    let (em, rt) = start().await;
    let m = rt.plugins()[0].plugin().manifest().clone();
    assert_eq!(m.name, "secret-replicator");

    namespaces(&em, &["team-a", "team-b", "team-c"]);
    // Created: replicas appear in the listed namespaces, and only there.
    let v1 = json!({"password": "czNjcmV0"});
    em.create(secret(
        "default",
        "creds",
        Some("team-a, team-b"),
        v1.clone(),
    ))
    .expect("create");
    assert!(
        eventually(WAIT, || is_replica_with(&em, "team-a", "creds", &v1)
            && is_replica_with(&em, "team-b", "creds", &v1))
        .await,
        "replicas appear in team-a and team-b"
    );
    assert!(get(&em, "team-c", "creds").is_none());
    // One Event about the source (its uid: `kubectl describe secret creds` shows it), from the
    // plugin, naming where it replicated.
    let source_uid = get(&em, "default", "creds").expect("source")["metadata"]["uid"].clone();
    let ev = event(&em, "default", "Replicated").await;
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["action"], "Replicate");
    assert_eq!(ev["reportingController"], "secret-replicator");
    assert_eq!(ev["note"], "replicated to team-a, team-b");
    assert_eq!(
        (
            &ev["regarding"]["kind"],
            &ev["regarding"]["name"],
            &ev["regarding"]["uid"]
        ),
        (&json!("Secret"), &json!("creds"), &source_uid)
    );
    let replica = get(&em, "team-a", "creds").expect("replica");
    assert_eq!(replica["type"], "Opaque");
    assert!(
        replica["metadata"]["annotations"].get(TARGETS).is_none(),
        "a replica does not replicate further"
    );
    assert_eq!(
        managers(&replica),
        ["secret-replicator"],
        "written by server-side apply under the plugin's field manager"
    );
    assert!(get(&em, "default", "creds-copy").is_none());

    // Updated: the replicas follow.
    let v2 = json!({"password": "cm90YXRlZA==", "user": "YWRtaW4="});
    let mut src = get(&em, "default", "creds").expect("source");
    src["data"] = v2.clone();
    em.update(src).expect("update");
    assert!(
        eventually(WAIT, || is_replica_with(&em, "team-a", "creds", &v2)
            && is_replica_with(&em, "team-b", "creds", &v2))
        .await,
        "replicas follow the source's new data"
    );

    // Deleted: the replicas go too.
    em.delete("v1", "Secret", Some("default"), "creds")
        .expect("delete");
    assert!(
        eventually(WAIT, || get(&em, "team-a", "creds").is_none()
            && get(&em, "team-b", "creds").is_none())
        .await,
        "replicas are deleted with their source"
    );
    // The deletion is an Event too, about the source that is gone (`kubectl events` lists it).
    let ev = event(&em, "default", "ReplicasDeleted").await;
    assert_eq!(
        (&ev["type"], &ev["action"]),
        (&json!("Normal"), &json!("Delete"))
    );
    assert_eq!(
        ev["note"],
        "deleted replicas team-a/creds, team-b/creds: the source is gone"
    );
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_dropped_from_the_annotation_loses_its_replica() {
    let (em, rt) = start().await;
    namespaces(&em, &["ns1", "ns2"]);
    let data = json!({"token": "dG9rZW4="});
    em.create(secret("default", "api", Some("ns1,ns2"), data.clone()))
        .expect("create");
    assert!(
        eventually(WAIT, || is_replica_with(&em, "ns1", "api", &data)
            && is_replica_with(&em, "ns2", "api", &data))
        .await,
        "replicas appear"
    );
    let mut src = get(&em, "default", "api").expect("source");
    src["metadata"]["annotations"][TARGETS] = json!("ns2");
    em.update(src).expect("update");
    assert!(
        eventually(WAIT, || get(&em, "ns1", "api").is_none()).await,
        "the replica in the dropped namespace is deleted"
    );
    assert!(is_replica_with(&em, "ns2", "api", &data), "the other stays");

    // Removing the annotation altogether removes the rest.
    let mut src = get(&em, "default", "api").expect("source");
    src["metadata"]["annotations"] = json!({});
    em.update(src).expect("update");
    assert!(
        eventually(WAIT, || get(&em, "ns2", "api").is_none()).await,
        "no annotation, no replicas"
    );
    assert!(get(&em, "default", "api").is_some(), "the source stays");
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_replica_is_restored_and_foreign_secrets_are_left_alone() {
    let (em, rt) = start().await;
    namespaces(&em, &["mine", "other"]);
    // A Secret of someone else's already has the name in one target namespace.
    let theirs = json!({"k": "dGhlaXJz"});
    em.create(secret("other", "db", None, theirs.clone()))
        .expect("create");
    let data = json!({"password": "b3JpZ2luYWw="});
    em.create(secret("default", "db", Some("mine,other"), data.clone()))
        .expect("create");
    assert!(
        eventually(WAIT, || is_replica_with(&em, "mine", "db", &data)).await,
        "the replica appears"
    );

    let mut edited = get(&em, "mine", "db").expect("replica");
    edited["data"] = json!({"password": "dGFtcGVyZWQ=", "extra": "aGFuZA=="});
    em.update(edited).expect("hand edit");
    assert!(
        eventually(WAIT, || is_replica_with(&em, "mine", "db", &data)).await,
        "the hand-edited replica is restored, the added key removed: {:?}",
        get(&em, "mine", "db").map(|r| r["data"].clone())
    );
    let foreign = get(&em, "other", "db").expect("foreign secret");
    assert_eq!(
        foreign["data"], theirs,
        "a Secret it does not own is never overwritten"
    );
    assert!(foreign["metadata"]["labels"].get(REPLICA).is_none());
    // ... which its source's owner learns from a Warning on the source.
    let ev = event(&em, "default", "ReplicaConflict").await;
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["regarding"]["name"], "db");
    assert_eq!(
        ev["note"],
        "other/db exists and is not its replica; leaving it alone"
    );
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

/// Resident set size of this process, in bytes (Linux; none elsewhere).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpython_instance_starts_and_answers_within_the_default_limits() {
    let (em, rt) = start().await;
    let plugin = rt.plugins()[0].plugin().clone();
    assert_eq!(plugin.limits(), &Limits::default());
    let mut instance = plugin.instance().expect("an instance slot");

    let rss = rss_bytes();
    let started = Instant::now();
    tokio::time::timeout(T, instance.warm())
        .await
        .expect("in time")
        .expect("instantiates in the default pool slot and memory cap");
    let instantiate = started.elapsed();
    let rss_delta = rss.zip(rss_bytes()).map(|(a, b)| b.saturating_sub(a));

    // The first call runs in an interpreter initialised at build time: no start-up cost, well
    // inside the default one-second handler deadline (which the instance enforces).
    let plain =
        kwh_client::object::Object::from_value(&secret("default", "plain", None, json!({})))
            .expect("object");
    let started = Instant::now();
    tokio::time::timeout(T, instance.on_add(0, &plain))
        .await
        .expect("in time")
        .expect("the first handler call meets its deadline");
    let first_call = started.elapsed();
    let started = Instant::now();
    instance.on_add(0, &plain).await.expect("second call");
    let second_call = started.elapsed();

    let started = Instant::now();
    let outcome = tokio::time::timeout(T, instance.reconcile("default/absent"))
        .await
        .expect("in time")
        .expect("the first reconcile meets its deadline");
    let first_reconcile = started.elapsed();
    assert_eq!(
        outcome,
        Ok(kwh_plugin::Outcome::Done),
        "nothing to do for an absent source"
    );
    assert_eq!(
        plugin
            .stats()
            .traps
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    eprintln!(
        "secret-replicator-py: instantiate {instantiate:?} (resident +{} KiB), first on-add \
         {first_call:?}, second {second_call:?}, first reconcile {first_reconcile:?}",
        rss_delta.map_or(0, |d| d / 1024)
    );
    drop(instance);
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

/// The engine's instance pool must hold `max_instances` instances of any component the loader
/// accepts. A CPython component instantiates 14 core instances where a Rust guest needs a
/// handful; a pool sized for the latter ran out at about half of `max_instances` CPython
/// instances, failing workers' instantiations while the plugin was still below its own limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_pool_holds_max_instances_cpython_instances_at_once() {
    const N: u32 = 6;
    let p = prepared().await;
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: Some(support::guests::target_dir().join("python-guests/compile-cache")),
        max_instances: N,
        ..EngineConfig::default()
    })
    .expect("engine");
    let limits = Limits {
        max_instances: N + 1,
        ..Limits::default()
    };
    let loaded = tokio::time::timeout(T, engine.load(&p.wasm, limits))
        .await
        .expect("loads in time")
        .expect("loads");
    assert_eq!(
        engine.compiles(),
        0,
        "the compiled form comes from the cache"
    );
    let fakes = Fakes::new();
    let plugin = loaded.activate(fakes.backends());
    let pool = engine
        .engine()
        .pooling_allocator_metrics()
        .expect("the pooling allocator is in use");

    // All N instantiate at the same time, as a plugin's workers do when it starts.
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..N {
        let mut instance = plugin.instance().expect("below the plugin's own limit");
        tasks.spawn(async move { instance.warm().await.map(|()| instance) });
    }
    let mut live = Vec::new();
    while let Some(done) = tokio::time::timeout(T, tasks.join_next())
        .await
        .expect("instantiations finish in time")
    {
        match done.expect("no panic") {
            Ok(instance) => live.push(instance),
            Err(e) => panic!("{} of {N} instances live, then: {e}", live.len()),
        }
    }
    let core = pool.core_instances();
    eprintln!(
        "{N} CPython instances in {:?}: {core} core instances, {} memories, {} tables",
        started.elapsed(),
        pool.memories(),
        pool.tables()
    );
    assert_eq!(pool.component_instances(), u64::from(N));
    assert!(
        core > u64::from(N) * 8,
        "a CPython instance needs more than the 8 core instances a Rust guest is sized by: {core}"
    );

    // One more than the pool holds: refused, naming the limit that was reached.
    let mut extra = plugin.instance().expect("below the plugin's own limit");
    let err = tokio::time::timeout(T, extra.warm())
        .await
        .expect("in time")
        .expect_err("the pool is full");
    let GuestError::Instantiate(message) = &err else {
        panic!("{err:?}");
    };
    assert!(
        message.contains(&format!(
            "maximum concurrent limit of {N} for component instances reached"
        )),
        "{message}"
    );
    // A dropped instance frees its slot for the next one.
    drop(live.pop());
    tokio::time::timeout(T, extra.warm())
        .await
        .expect("in time")
        .expect("a freed slot is reused");
    assert_eq!(pool.component_instances(), u64::from(N));
}

/// The replicator's setting, `missingNamespaceRetrySeconds`, read in the component from the
/// host's `config` import: a missing namespace is retried after the configured 5 s, and each
/// action is an Event (a Warning for the missing namespace, the replication of the rest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_interval_comes_from_the_configuration() {
    let p = prepared().await;
    let mut h = tokio::time::timeout(
        T,
        Harness::builder(&p.wasm)
            .engine(p.engine.clone())
            .config(json!({"missingNamespaceRetrySeconds": 5}))
            .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "here"}}))
            .build(),
    )
    .await
    .expect("loads in time")
    .expect("loads with the configuration");
    h.add(secret(
        "default",
        "api",
        Some("here, later"),
        json!({"token": "dG9rZW4="}),
    ))
    .await
    .expect("add");
    assert_eq!(
        tokio::time::timeout(T, h.reconcile("default/api"))
            .await
            .expect("in time"),
        ReconcileOutcome::RequeueAfter(Duration::from_secs(5))
    );
    let events: Vec<(String, String, String, String)> = h
        .take_events()
        .into_iter()
        .map(|e| {
            assert_eq!(e.reporting_controller, "secret-replicator");
            assert_eq!(e.key(), "default/api");
            assert!(e.event.regarding.uid.is_some());
            (
                e.type_name().to_string(),
                e.event.reason,
                e.event.action,
                e.event.note.unwrap_or_default(),
            )
        })
        .collect();
    let ev = |t: &str, r: &str, a: &str, n: &str| (t.into(), r.into(), a.into(), n.into());
    assert_eq!(
        events,
        [
            ev("Normal", "Replicated", "Replicate", "replicated to here"),
            ev(
                "Warning",
                "NamespaceMissing",
                "Replicate",
                "namespaces later do not exist; retrying in 5s"
            ),
        ]
    );
}

/// The component's `validate-config` refuses what is not a setting of its, or out of range, at
/// load: the plugin does not start, and the error carries its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_it_refuses_stop_the_load_with_its_message() {
    let p = prepared().await;
    for (config, message) in [
        (
            json!({"missingNamespaceRetrySeconds": 0}),
            "missingNamespaceRetrySeconds must be between 1 and 3600, not 0",
        ),
        (
            json!({"retry": 5}),
            "invalid configuration: unknown key 'retry' (known: missingNamespaceRetrySeconds)",
        ),
        (
            json!(["a"]),
            "invalid configuration: expected a map of settings, not [\"a\"]",
        ),
    ] {
        let loaded = tokio::time::timeout(
            T,
            p.engine
                .load_configured(&p.wasm, Limits::default(), Arc::new(config.clone())),
        )
        .await
        .expect("in time");
        let Err(e) = loaded else {
            panic!("{config} is accepted")
        };
        match &e.cause {
            LoadCause::ConfigRefused(m) => assert_eq!(m, message, "{config}"),
            other => panic!("{config}: {other}"),
        }
        assert!(
            e.to_string()
                .contains("secret_replicator_py.wasm: configuration refused by the plugin: "),
            "{e}"
        );
    }
    // Its defaults, and a value in range, load.
    for config in [
        Value::Null,
        json!({}),
        json!({"missingNamespaceRetrySeconds": 3600}),
    ] {
        tokio::time::timeout(
            T,
            p.engine
                .load_configured(&p.wasm, Limits::default(), Arc::new(config.clone())),
        )
        .await
        .expect("in time")
        .unwrap_or_else(|e| panic!("{config}: {e}"));
    }
}

/// The example's scenario files (`examples/secret-replicator-py/scenarios`) pass under the real
/// `host test`: a guest written in Python is unit-tested exactly as a Rust one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenarios_pass_under_host_test() {
    let p = prepared().await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/secret-replicator-py/scenarios");
    // The compile cache `prepared` filled: `host test` loads the component without a cold
    // Cranelift compile.
    let cache = support::guests::target_dir().join("python-guests/compile-cache");
    support::scenarios::assert_scenarios_pass(&p.wasm, &dir, Some(&cache)).await;
}

/// Spec (explore): the Python example's scenarios explore clean — every single perturbation
/// (stale caches, crashes between writes, reordered and coalesced notifications, tombstones,
/// timing) and pairs of them, with no oracle broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenarios_explore_clean() {
    let p = prepared().await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/secret-replicator-py/scenarios");
    let cache = support::guests::target_dir().join("python-guests/compile-cache");
    support::scenarios::assert_scenarios_explore_clean(&p.wasm, &dir, Some(&cache), 60).await;
}
