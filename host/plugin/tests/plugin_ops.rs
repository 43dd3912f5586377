//! End to end: the plugin runtime's failure paths and operational signals against the emulator
//! over HTTP — reconcile backoff timing, informer relist and watch-restart metrics, readiness
//! before the informers sync, tombstones after a missed delete, each write kind of the real client
//! backend, and memory exhaustion inside a reconcile worker.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use kwh_informer::workqueue::rate_limiter::CONTROLLER_BASE_DELAY;
use kwh_plugin::{Limits, QuarantinePolicy, RuntimeOptions};
use serde_json::{json, Value};
use support::cluster::{
    cm, emulator, eventually, get_cm, get_until, http_get, http_get_with_head, runtime,
    runtime_with, start,
};
use support::guests::guest;

const T: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);

/// Serves the runtime's operations endpoint on an ephemeral loopback port.
async fn serve_ops(rt: &kwh_plugin::PluginRuntime) -> (String, tokio::task::JoinHandle<()>) {
    let (addr, task) = kwh_plugin::ops::serve("127.0.0.1:0".parse().expect("addr"), rt.status())
        .await
        .expect("serve");
    (addr.to_string(), task)
}

/// The value of the sample `name{label="value"}` in a `/metrics` body.
fn sample(body: &str, name: &str, label: &str, value: &str) -> Option<u64> {
    let prefix = format!("{name}{{{label}=\"{value}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// `informer_relists_total` and `informer_watch_restarts_total` of `informer` from `/metrics`.
async fn informer_counts(addr: &str, informer: &str) -> (u64, u64) {
    let (code, body) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    let get = |name| {
        sample(&body, name, "informer", informer)
            .unwrap_or_else(|| panic!("no {name} for {informer}:\n{body}"))
    };
    (
        get("informer_relists_total"),
        get("informer_watch_restarts_total"),
    )
}

/// Polls [`informer_counts`] until `want` holds; `None` after [`WAIT`].
async fn counts_until(
    addr: &str,
    informer: &str,
    want: impl Fn((u64, u64)) -> bool,
) -> Option<(u64, u64)> {
    tokio::time::timeout(WAIT, async {
        loop {
            let c = informer_counts(addr, informer).await;
            if want(c) {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .ok()
}

/// `managedFields` entries of `obj` as (manager, operation).
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_string(),
                        e["operation"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_5_6_a_failing_reconcile_is_retried_after_the_rate_limiters_growing_delays() {
    // Global capture: the lines are picked out by the plugin and an object name only this test uses.
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["unruly"]).await;
    em.create(cm("backoff", json!({"fail": "yes"})))
        .expect("create");

    // Each attempt logs when it started by the guest's monotonic clock. A guest's own error
    // keeps its instance, so all attempts read the same clock.
    let attempts = || -> Vec<Duration> {
        logs.lines()
            .into_iter()
            .filter(|l| l.target == "plugin::guest" && l.plugin.as_deref() == Some("unruly"))
            .filter_map(|l| {
                let us = l
                    .message
                    .strip_prefix("attempt default/backoff +")?
                    .strip_suffix("us")?
                    .parse()
                    .ok()?;
                Some(Duration::from_micros(us))
            })
            .collect()
    };
    const ATTEMPTS: usize = 8;
    assert!(
        eventually(WAIT, || attempts().len() >= ATTEMPTS).await,
        "the failing key is retried: {:?}",
        attempts()
    );
    let times = attempts();
    // spec 5.6: after the k-th failure the key waits base·2^(k-1) (ItemExponential, 5 ms base;
    // the bucket's burst of 100 adds nothing here). The timer never fires early, and the wait
    // starts after the attempt began, so each gap is at least that delay; the tolerance only
    // covers the microsecond rounding of the log line.
    let tolerance = Duration::from_micros(500);
    let mut want_total = Duration::ZERO;
    for k in 1..ATTEMPTS {
        let gap = times[k]
            .checked_sub(times[k - 1])
            .unwrap_or_else(|| panic!("attempts out of order or on another instance: {times:?}"));
        let delay = CONTROLLER_BASE_DELAY * 2u32.pow(k as u32 - 1);
        want_total += delay;
        assert!(
            gap + tolerance >= delay,
            "attempt {} came {gap:?} after attempt {k}, the limiter says {delay:?}: {times:?}",
            k + 1
        );
    }
    // Bounded: the delays are this limiter's (5 ms doubling: 635 ms over 7 gaps), not a
    // larger base or a flat delay; generous for a loaded machine.
    let total = times[ATTEMPTS - 1] - times[0];
    assert!(
        total < want_total + Duration::from_secs(4),
        "{ATTEMPTS} attempts took {total:?}, the limiter's delays add up to {want_total:?}"
    );
    let queue = rt.plugins()[0].queue().clone();
    assert!(queue.num_requeues(&"default/backoff".into()) >= ATTEMPTS as u32);
    assert!(get_cm(&em, "backoff-done").is_none());
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_1_8_watch_restarts_and_relists_are_counted_in_metrics() {
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["noop"]).await;
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);
    let (addr, task) = serve_ops(&rt).await;
    let informer = "v1/configmaps|||";
    let counts = informer_counts(&addr, informer).await;
    assert_eq!(counts, (0, 0), "one list and one watch so far");

    // A watch the server closes normally (here: after its first event) is re-watched at once,
    // without a relist. The new watch starts after that event and so stays open.
    em.faults().close_watches_after(1);
    em.create(cm("one", json!({}))).expect("create");
    let after_close = counts_until(&addr, informer, |(_, w)| w >= 1)
        .await
        .expect("a closed watch is restarted and counted");
    // The counter moves when the request leaves; a kick only reaches watches already open.
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);
    em.faults().close_watches_after(0);
    assert_eq!(after_close, (0, 1), "a normal close does not relist");

    // An expired watch (410 inside the stream) is followed by a relist and a new watch. A kick
    // reaches only the watches open at that moment (the restarted one may not be yet), so it
    // is repeated until the emulator counts one delivered.
    let delivered = em.faults().expiries_delivered();
    let mut kicked = false;
    for _ in 0..20 {
        em.faults().inject_expired();
        if eventually(Duration::from_millis(500), || {
            em.faults().expiries_delivered() > delivered
        })
        .await
        {
            kicked = true;
            break;
        }
    }
    assert!(kicked, "the 410 reached the informer's watch");
    let after_expiry = counts_until(&addr, informer, |(l, w)| {
        l > after_close.0 && w > after_close.1
    })
    .await
    .expect("the relist and the new watch are counted");
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);

    // A dropped connection ends the watch mid-stream: another watch is started and counted.
    let dropped = em.faults().connections_dropped();
    em.faults().drop_connections();
    assert!(
        eventually(WAIT, || em.faults().connections_dropped() > dropped).await,
        "the drop reached the informer's connection"
    );
    let after_drop = counts_until(&addr, informer, |(_, w)| w > after_expiry.1)
        .await
        .expect("the watch restart after a dropped connection is counted");
    assert!(after_drop.0 >= after_expiry.0, "counters never go down");
    task.abort();
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

/// The cache's digest in `/statusz?digest=1` equals the digest of the server's LIST once the
/// informer has caught up, follows a change, and is left out of a plain `/statusz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statusz_digest_equals_the_servers_list_once_caught_up() {
    use kwh_informer::store::CacheDigest;
    let em = emulator().await;
    for n in 0..20 {
        em.create(cm(&format!("d-{n}"), json!({"v": "0"})))
            .expect("create");
    }
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["noop"]).await;
    let (addr, task) = serve_ops(&rt).await;
    let server = || {
        let items = em.list("v1", "ConfigMap", None);
        let pairs: Vec<(String, String)> = items
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                let key = format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                );
                (key, m["resourceVersion"].as_str().unwrap_or("").to_owned())
            })
            .collect();
        CacheDigest::of(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    };
    let cache = |body: &str| -> Value {
        let v: Value = serde_json::from_str(body).expect("JSON");
        v["plugins"][0]["informers"][0]["cache"].clone()
    };
    let want = server();
    assert_eq!(want.objects, 20);
    let (_, body) = get_until(&addr, "/statusz?digest=1", WAIT, |_, b| {
        cache(b)["digest"] == format!("{want:x}")
    })
    .await
    .expect("the cache's digest reaches the server's");
    assert_eq!(cache(&body)["objects"], 20);
    assert!(cache(&http_get(&addr, "/statusz").await.1).is_null());

    let mut changed = em
        .get("v1", "ConfigMap", Some("default"), "d-3")
        .expect("d-3");
    changed["data"]["v"] = "1".into();
    em.update(changed).expect("update");
    let after = server();
    assert_ne!(after, want);
    get_until(&addr, "/statusz?digest=1", WAIT, |_, b| {
        cache(b)["digest"] == format!("{after:x}")
    })
    .await
    .expect("the digest follows the change");
    task.abort();
    rt.shutdown(Duration::from_secs(5)).await;
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_2_7_readyz_is_503_naming_the_plugin_until_its_informers_sync() {
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    // The first plugin has discovery resolve core v1, so the second one's kinds (Secret,
    // ConfigMap) need no request and the injected failures all hit its informer's LIST.
    start(&mut rt, &["noop"]).await;
    em.faults().fail_next(u64::MAX, 500, 0);
    tokio::time::timeout(T, rt.start(&guest("trapper")))
        .await
        .expect("in time")
        .expect("starts without waiting for its informers");
    let (addr, task) = serve_ops(&rt).await;

    // Readiness names the informer, and once its LIST has failed, the error it met.
    let unsynced = "plugin trapper: informer v1/secrets||| not synced";
    let (code, body) = http_get(&addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with(unsynced), "{body}");
    let refused = format!(
        "{unsynced}: last error: 500 InternalError: Internal error occurred: injected failure\n"
    );
    let with_cause = get_until(&addr, "/readyz", WAIT, |_, body| {
        body.contains("last error")
    })
    .await
    .expect("the LIST's failure is reported");
    assert_eq!(
        (with_cause.0, with_cause.1.as_str()),
        (503, refused.as_str())
    );
    // Still unready after the reflector's retry (spec 1.1 backoff) was refused as well.
    let secrets = "v1/secrets|||";
    let refused_twice = tokio::time::timeout(WAIT, async {
        loop {
            let (_, body) = http_get(&addr, "/metrics").await;
            if sample(&body, "informer_relists_total", "informer", secrets).unwrap_or(0) >= 1 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the LIST is retried");
    assert_eq!(
        sample(
            &refused_twice,
            "plugin_informers_synced",
            "plugin",
            "trapper"
        ),
        Some(0)
    );
    assert_eq!(
        sample(&refused_twice, "plugin_informers_synced", "plugin", "noop"),
        Some(1)
    );
    let (code, body) = http_get(&addr, "/readyz").await;
    assert_eq!((code, body.as_str()), (503, refused.as_str()));
    assert!(!rt.is_ready());

    em.faults().clear();
    let ready = get_until(&addr, "/readyz", WAIT, |code, _| code == 200)
        .await
        .expect("ready once the LIST succeeds");
    assert_eq!(ready.1, "ok\n");
    assert!(rt.plugins()[1].has_synced());
    task.abort();
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_2_5_a_delete_missed_while_the_watch_was_stalled_reaches_the_guest_as_a_tombstone() {
    // Global capture: the lines are picked out by the object name only this test uses.
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["copier"]).await;
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);
    em.create(cm("vanish", json!({"v": "1"}))).expect("create");
    assert!(eventually(WAIT, || get_cm(&em, "vanish-copy").is_some()).await);
    // Both ADDED events (the object and its copy) have reached the plugin: the watch stream has
    // sent everything it had and waits, so the stall below holds back the delete.
    let delivered = || {
        rt.plugins()[0]
            .dispatcher()
            .delivered
            .load(Ordering::Relaxed)
    };
    assert!(eventually(WAIT, || delivered() >= 2).await);
    assert_eq!(delivered(), 2, "a fresh emulator has no other ConfigMaps");

    em.faults().stall_streams(Duration::from_secs(60));
    em.delete("v1", "ConfigMap", Some("default"), "vanish")
        .expect("delete");
    // The history holding the DELETED event is gone: when the stream resumes it can only send
    // 410, so the reflector relists and the DeltaFIFO's Replace finds `vanish` missing.
    em.faults().expire_watch_history();
    em.faults().clear();

    let deletes = || -> Vec<String> {
        logs.lines()
            .into_iter()
            .filter(|l| l.target == "plugin::guest" && l.plugin.as_deref() == Some("copier"))
            .map(|l| l.message)
            .filter(|m| m.starts_with("event delete default/vanish "))
            .collect()
    };
    assert!(
        eventually(WAIT, || !deletes().is_empty()).await,
        "the guest is told about the delete"
    );
    assert_eq!(
        deletes(),
        ["event delete default/vanish v=1 tombstone=true"],
        "one on-delete, marked as a tombstone, with the last state the informer knew"
    );
    // The tombstone's key is reconciled like any other delete.
    assert!(
        eventually(WAIT, || get_cm(&em, "vanish-copy").is_none()).await,
        "the copy goes with its source"
    );
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_6_11_patches_replace_and_apply_reach_the_emulator_under_the_plugins_name() {
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["ttl", "copier"]).await;
    for name in ["jp", "smp", "rep", "ssa"] {
        em.create(cm(name, json!({"v": "1"}))).expect("create");
    }
    let ttl = &rt.plugins()[0];
    assert_eq!(ttl.plugin().name(), "ttl");
    // The guest's write keys (see the guest); `replace` reads the object from the informer
    // cache first and fails (to be retried) until it is there.
    for key in [
        "json-patch/default/jp",
        "sm-patch/default/smp",
        "replace/default/rep",
    ] {
        ttl.queue().add(key.into());
    }
    let field = |name: &str, f: fn(&Value) -> Value| get_cm(&em, name).map(|o| f(&o));
    assert!(
        eventually(WAIT, || field("jp", |o| o["data"].clone())
            == Some(json!({"patched": "json"})))
        .await,
        "a JSON patch replaces data as an `add` operation does: {:?}",
        get_cm(&em, "jp")
    );
    assert!(
        eventually(WAIT, || field("smp", |o| o["metadata"]["labels"].clone())
            == Some(json!({"patched": "strategic"})))
        .await,
        "a strategic merge patch adds the label: {:?}",
        get_cm(&em, "smp")
    );
    assert_eq!(
        field("smp", |o| o["data"].clone()),
        Some(json!({"v": "1"})),
        "and merges, keeping the rest"
    );
    assert!(
        eventually(WAIT, || field("rep", |o| o["data"].clone())
            == Some(json!({"replaced": "true"})))
        .await,
        "a replace stores the whole object: {:?}",
        get_cm(&em, "rep")
    );
    for name in ["jp", "smp", "rep"] {
        let obj = get_cm(&em, name).expect("object");
        assert!(
            managers(&obj).contains(&("ttl".into(), "Update".into())),
            "{name} records the plugin as the writer: {:?}",
            obj["metadata"]["managedFields"]
        );
    }
    // Server-side apply by a guest: the plugin's name is the field manager.
    assert!(eventually(WAIT, || get_cm(&em, "ssa-copy").is_some()).await);
    let copy = get_cm(&em, "ssa-copy").expect("copy");
    assert_eq!(
        managers(&copy),
        [("copier".to_string(), "Apply".to_string())],
        "{:?}",
        copy["metadata"]["managedFields"]
    );
    let stats = em.stats();
    assert!(stats.requests.get("update").is_some_and(|n| *n >= 1));
    assert!(stats.requests.get("patch").is_some_and(|n| *n >= 2));
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_exhaustion_in_reconcile_replaces_the_instance_and_rate_limits_the_key() {
    let em = emulator().await;
    let mut rt = runtime_with(
        &em,
        RuntimeOptions {
            limits: Limits {
                memory_bytes: 16 << 20,
                ..Limits::default()
            },
            // Off: five exhaustions within a minute would quarantine the plugin (tested
            // elsewhere); here the rate limiter alone paces the failing key.
            quarantine: QuarantinePolicy {
                failures: 0,
                ..QuarantinePolicy::default()
            },
            ..RuntimeOptions::default()
        },
    );
    start(&mut rt, &["unruly"]).await;
    let running = &rt.plugins()[0];
    let plugin = running.plugin().clone();
    let queue = running.queue().clone();
    let key: std::sync::Arc<str> = "default/greedy".into();
    let instances = || plugin.stats().instantiations.load(Ordering::Relaxed);
    let exhaustions = || plugin.stats().memory_exhaustions.load(Ordering::Relaxed);
    let first = instances();

    em.create(cm("greedy", json!({"hog": "yes"})))
        .expect("create");
    assert!(
        eventually(WAIT, || exhaustions() >= 3 && queue.num_requeues(&key) >= 3).await,
        "each attempt dies at the cap and the key is put back rate-limited: {} exhaustions, {} requeues",
        exhaustions(),
        queue.num_requeues(&key)
    );
    assert!(
        instances() > first,
        "a later attempt ran on a replacement instance"
    );
    assert!(running.reconcile_stats().errors.load(Ordering::Relaxed) >= 3);

    // The worker goes on with other keys on a fresh instance.
    em.create(cm("modest", json!({}))).expect("create");
    assert!(
        eventually(WAIT, || get_cm(&em, "modest-done").is_some()).await,
        "another key is reconciled meanwhile"
    );
    assert!(get_cm(&em, "greedy-done").is_none());

    // Told to behave, the key is reconciled at last and the rate limiter forgets it.
    let mut greedy = get_cm(&em, "greedy").expect("greedy");
    greedy["data"]["hog"] = "no".into();
    em.update(greedy).expect("update");
    assert!(
        eventually(WAIT, || get_cm(&em, "greedy-done").is_some()).await,
        "the key succeeds once its object allows it"
    );
    assert!(eventually(WAIT, || queue.num_requeues(&key) == 0).await);
    assert!(!running.health().is_quarantined());
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

/// With a token that may not list ConfigMaps (RBAC on), `/readyz` names the informer and the
/// API server's 403 as it worded it, and `/statusz` carries the same per informer; granting
/// the right lets the informer sync and the host become ready, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_the_informer_and_the_403_of_a_missing_rbac_rule() {
    use kwh_client::config::KubeconfigOptions;
    use kwh_client::{Client, Config};
    use kwh_emulator::authn::UserInfo;
    let em = kwh_emulator::Emulator::builder()
        .authorize(true)
        .user_token("nobody-token", UserInfo::new("nobody", &[]))
        .start()
        .await
        .expect("emulator");
    let cfg = Config::from_kubeconfig_str(
        &em.kubeconfig_with_token("nobody-token"),
        &std::env::temp_dir(),
        &KubeconfigOptions::default(),
    )
    .expect("kubeconfig");
    let mut rt = kwh_plugin::PluginRuntime::new(
        support::engine(),
        Client::new(cfg).expect("client"),
        RuntimeOptions::default(),
    );
    tokio::time::timeout(T, rt.start(&guest("copier")))
        .await
        .expect("in time")
        .expect("starts: discovery is open to every authenticated user");
    let (addr, task) = serve_ops(&rt).await;
    let expected = "plugin copier: informer v1/configmaps||| not synced: last error: 403 Forbidden: configmaps is forbidden: User \"nobody\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope\n";
    let (code, body) = get_until(&addr, "/readyz", WAIT, |_, body| {
        body.contains("last error")
    })
    .await
    .expect("the refusal is reported");
    assert_eq!((code, body.as_str()), (503, expected));
    let (_, statusz) = http_get(&addr, "/statusz").await;
    let doc: Value = serde_json::from_str(&statusz).expect("JSON");
    let informer = &doc["plugins"][0]["informers"][0];
    assert_eq!(informer["informer"], "v1/configmaps|||");
    assert_eq!(informer["synced"], false);
    assert!(
        informer["lastError"]
            .as_str()
            .is_some_and(|e| e.starts_with("403 Forbidden: configmaps is forbidden")),
        "{statusz}"
    );

    // The missing rule granted: the reflector's next retry lists, and the host becomes ready.
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "copier"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]}),
    )
    .expect("role");
    em.create(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "copier"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "copier"},
        "subjects": [{"kind": "User", "name": "nobody"}]}))
        .expect("binding");
    assert!(
        eventually(Duration::from_secs(60), || rt.is_ready()).await,
        "ready once the rule exists: {}",
        rt.status().readiness().1
    );
    task.abort();
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

/// One sample line of an exposition: name, labels (unescaped) and value.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let bad = |why: &str| format!("{why}: {line:?}");
    let name_end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
    let name = &line[..name_end];
    let valid_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    if !valid_name(name) {
        return Err(bad("metric name"));
    }
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            let (key, after) = inner.split_once("=\"").ok_or_else(|| bad("label"))?;
            if !valid_name(key) || key.contains(':') {
                return Err(bad("label name"));
            }
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars
                    .next()
                    .ok_or_else(|| bad("unterminated label value"))?
                {
                    (_, '\\') => match chars.next().ok_or_else(|| bad("escape"))?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        _ => return Err(bad("unknown escape")),
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_string(), value));
            inner = &after[end + 1..];
            if let Some(next) = inner.strip_prefix(',') {
                inner = next;
            } else if let Some(after_labels) = inner.strip_prefix('}') {
                rest = after_labels;
                break;
            } else {
                return Err(bad("label list"));
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or_else(|| bad("no space before the value"))?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| bad("value"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Checks the structure the OpenMetrics 1.0 text format requires of `body` and returns its
/// families as (name, type), in order: it ends with `# EOF`; each family has one `TYPE`, its
/// `HELP`/`TYPE`/`UNIT` lines come before its samples and its samples are contiguous (a
/// family is never reopened); sample names are the family's plus the suffixes its type allows
/// (counters `_total`); a unit is the family name's suffix; each histogram series has
/// cumulative buckets ending in `+Inf`, which equals its `_count`.
fn check_openmetrics(body: &str) -> Result<Vec<(String, String)>, String> {
    let lines = body
        .strip_suffix("# EOF\n")
        .ok_or("the exposition does not end with `# EOF`")?;
    let mut families: Vec<(String, String)> = Vec::new();
    // Of the family being read: whether it has samples yet, and each histogram series'
    // buckets (labels other than `le`) with its `_count`.
    let mut sampled = false;
    type Series = (Vec<(String, String)>, Vec<(f64, f64)>, Option<f64>);
    let mut histograms: Vec<Series> = Vec::new();
    let close_histograms = |histograms: &mut Vec<Series>| -> Result<(), String> {
        for (labels, buckets, count) in histograms.drain(..) {
            let last = buckets.last().ok_or(format!("{labels:?}: no buckets"))?;
            if last.0 != f64::INFINITY {
                return Err(format!("{labels:?}: the last bucket is not +Inf"));
            }
            if buckets
                .windows(2)
                .any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1)
            {
                return Err(format!("{labels:?}: buckets not cumulative: {buckets:?}"));
            }
            if Some(last.1) != count {
                return Err(format!("{labels:?}: +Inf {} but _count {count:?}", last.1));
            }
        }
        Ok(())
    };
    for line in lines.lines() {
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (kind, name, rest) = (parts.next(), parts.next(), parts.next());
            let (Some(kind), Some(name), Some(rest)) = (kind, name, rest) else {
                return Err(format!("bad metadata line {line:?}"));
            };
            let current = families.last().map(|(n, _)| n.as_str());
            if current != Some(name) || sampled {
                // A new family starts here; the one before must have been typed.
                if let Some((prev, "")) = families.last().map(|(n, t)| (n, t.as_str())) {
                    return Err(format!("family {prev} has no TYPE"));
                }
                close_histograms(&mut histograms)?;
                if families.iter().any(|(n, _)| n == name) {
                    return Err(format!("family {name} appears twice"));
                }
                families.push((name.to_string(), String::new()));
                sampled = false;
            }
            let family = families.last_mut().ok_or("no family")?;
            match kind {
                "HELP" => {}
                "TYPE" if family.1.is_empty() => family.1 = rest.to_string(),
                "TYPE" => return Err(format!("second TYPE for {name}")),
                "UNIT" if name.ends_with(&format!("_{rest}")) => {}
                _ => return Err(format!("bad metadata line {line:?}")),
            }
            continue;
        }
        let sample = parse_sample(line)?;
        let (family, kind) = families
            .last()
            .ok_or(format!("a sample before any family: {line:?}"))?;
        if kind.is_empty() {
            return Err(format!("family {family} has no TYPE"));
        }
        let suffix = sample
            .name
            .strip_prefix(family.as_str())
            .ok_or(format!("sample {line:?} outside its family {family}"))?;
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "gauge" | "unknown" => &[""],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            other => return Err(format!("unexpected type {other}")),
        };
        if !allowed.contains(&suffix) {
            return Err(format!("sample {line:?} in {kind} family {family}"));
        }
        if kind == "counter" && (sample.value.is_nan() || sample.value < 0.0) {
            return Err(format!("counter not a non-negative number: {line:?}"));
        }
        if kind == "histogram" && (suffix == "_bucket" || suffix == "_count") {
            let mut series = sample.labels.clone();
            let le = series.iter().position(|(k, _)| k == "le");
            let le = le.map(|i| series.remove(i).1);
            series.sort();
            let i = match histograms.iter().position(|(l, _, _)| *l == series) {
                Some(i) => i,
                None => {
                    histograms.push((series, Vec::new(), None));
                    histograms.len() - 1
                }
            };
            match (suffix, le) {
                ("_count", _) => histograms[i].2 = Some(sample.value),
                (_, Some(le)) => {
                    let bound = match le.as_str() {
                        "+Inf" => f64::INFINITY,
                        b => b.parse().map_err(|_| format!("le {le:?}"))?,
                    };
                    histograms[i].1.push((bound, sample.value));
                }
                _ => return Err(format!("bucket without le: {line:?}")),
            }
        }
        sampled = true;
    }
    close_histograms(&mut histograms)?;
    if let Some((last, _)) = families.iter().find(|(_, t)| t.is_empty()) {
        return Err(format!("family {last} has no TYPE"));
    }
    Ok(families)
}

#[test]
fn the_openmetrics_check_refuses_what_the_format_forbids() {
    let ok = "# HELP a A.\n# TYPE a counter\na_total{x=\"1\"} 1\n# EOF\n";
    assert_eq!(
        check_openmetrics(ok),
        Ok(vec![("a".to_string(), "counter".to_string())])
    );
    for (bad, why) in [
        ("# TYPE a counter\na_total 1\n", "no EOF"),
        (
            "# HELP a_total A.\n# TYPE a counter\na_total 1\n# EOF\n",
            "HELP names another family",
        ),
        ("# HELP a A.\n# EOF\n", "no TYPE"),
        ("# TYPE a counter\n# TYPE a counter\na_total 1\n# EOF\n", "two TYPEs"),
        ("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n# EOF\n", "reopened"),
        ("# TYPE a gauge\na 1\n# TYPE a gauge\na 2\n# EOF\n", "repeated"),
        ("# TYPE a counter\na 1\n# EOF\n", "counter without _total"),
        (
            "# TYPE h histogram\nh_bucket{le=\"1.0\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n# EOF\n",
            "not cumulative",
        ),
        ("# TYPE h histogram\nh_bucket{le=\"1.0\"} 1\nh_count 1\n# EOF\n", "no +Inf"),
        ("# TYPE g gauge\n# UNIT g seconds\ng 1\n# EOF\n", "unit not a suffix"),
    ] {
        assert!(check_openmetrics(bad).is_err(), "{why}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_serves_valid_openmetrics_with_every_family() {
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["copier"]).await;
    let (addr, task) = serve_ops(&rt).await;
    em.create(cm("scraped", json!({"v": "1"}))).expect("create");
    assert!(eventually(WAIT, || get_cm(&em, "scraped-copy").is_some()).await);
    let reconciled = get_until(&addr, "/metrics", WAIT, |_, body| {
        sample(body, "plugin_reconcile_total", "plugin", "copier").unwrap_or(0) >= 1
    })
    .await;
    assert!(reconciled.is_some(), "a reconcile is counted");

    let (code, head, body) = http_get_with_head(&addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase().contains(
            "\r\ncontent-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
        ),
        "{head}"
    );
    let families = match check_openmetrics(&body) {
        Ok(f) => f,
        Err(e) => panic!("{e}\n{body}"),
    };
    let family = |name: &str| {
        families
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    };
    for (name, kind) in [
        ("workqueue_depth", "gauge"),
        ("workqueue_adds", "counter"),
        ("workqueue_queue_duration_seconds", "histogram"),
        ("workqueue_work_duration_seconds", "histogram"),
        ("workqueue_unfinished_work_seconds", "gauge"),
        ("workqueue_longest_running_processor_seconds", "gauge"),
        ("workqueue_retries", "counter"),
        ("plugin_reconcile", "counter"),
        ("plugin_reconcile_errors", "counter"),
        ("plugin_reconcile_requeue_after", "counter"),
        ("plugin_guest_traps", "counter"),
        ("plugin_guest_deadline_hits", "counter"),
        ("plugin_guest_memory_exhaustions", "counter"),
        ("plugin_instantiations", "counter"),
        ("plugin_notifications", "counter"),
        ("plugin_notifications_enqueued_by_host", "counter"),
        ("plugin_notification_retries", "counter"),
        ("plugin_notifications_dropped", "counter"),
        ("plugin_notifications_held_back", "counter"),
        ("plugin_queue_adds_refused", "counter"),
        ("plugin_log_lines_dropped", "counter"),
        ("plugin_quarantines", "counter"),
        ("plugin_reconcile_duration_seconds", "histogram"),
        ("plugin_quarantined", "gauge"),
        ("plugin_informers_synced", "gauge"),
        ("plugin_workers_started", "gauge"),
        ("plugin_waiting_to_start", "gauge"),
        ("plugin_failed_to_start", "gauge"),
        ("informer_relists", "counter"),
        ("informer_watch_restarts", "counter"),
        ("informer_decode_errors", "counter"),
        ("events_recorded", "counter"),
        ("events_aggregated", "counter"),
        ("events_write_failures", "counter"),
        ("events_created", "counter"),
        ("events_series_patched", "counter"),
        ("events_dropped", "counter"),
        ("component_compiles", "counter"),
        ("component_cache_hits", "counter"),
        ("plugin_shadow_writes", "counter"),
    ] {
        assert_eq!(family(name), Some(kind), "{name} in\n{body}");
    }
    assert_eq!(families.len(), 40, "no family beyond those: {families:?}");
    assert!(
        body.contains("events_dropped_total{reason=\"queue_full\"} 0\n"),
        "{body}"
    );
    assert!(
        body.contains("workqueue_adds_total{name=\"copier\"} "),
        "{body}"
    );
    assert!(body.contains("plugin_reconcile_duration_seconds_count{plugin=\"copier\"} "));
    assert!(body.contains("plugin_workers_started{plugin=\"copier\"} 1\n"));
    assert!(body.contains("informer_relists_total{informer=\"v1/configmaps|||\"} 0\n"));
    assert!(body.contains("informer_decode_errors_total{informer=\"v1/configmaps|||\"} 0\n"));
    // The copier was compiled in process (the library's default compiler) or found cached.
    assert!(body.contains("component_compiles_total{compiler=\"child\"} 0\n"));
    task.abort();
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}
