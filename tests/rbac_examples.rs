//! Every example, and the README's greeter, works with exactly the RBAC that `host rbac` prints
//! for it, on an emulator that enforces RBAC as kube-apiserver does: the host binary runs with a
//! ServiceAccount token bound to the printed roles and nothing else, and the example's scenario
//! is driven over HTTP. Then each printed rule is taken away in turn and the host's log must name
//! the 403 it causes (an informer that cannot list, a write that is refused), and for the
//! examples that create objects by server-side apply, taking away only `create` must fail the
//! apply with the API server's empty-reason refusal (`configmaps "x" is forbidden: `).

mod support;

use std::path::Path;
use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use serde_json::{json, Value};
use support::cluster::eventually;
use support::process::HostProcess;
use support::rbac::{is_forbidden_line, RbacCluster, Rule};

/// Bound for any single expected change (the first run of a test compiles its component).
const WAIT: Duration = Duration::from_secs(60);

/// Runs `plugin` with exactly the printed RBAC, drives the scenario (`drive(em, 0)`) and waits
/// for `done(em, 0)`; no line of the host's log may mention a 403.
async fn works_with_the_printed_rbac(
    c: &RbacCluster,
    plugin: &Path,
    drive: &dyn Fn(&EmulatorHandle, usize),
    done: &dyn Fn(&EmulatorHandle, usize) -> bool,
) {
    let mut host = c.host(plugin);
    host.line("caches synced; reconcile workers started").await;
    drive(&c.em, 0);
    assert!(
        eventually(WAIT, || done(&c.em, 0)).await,
        "the scenario completes with the printed RBAC: {}",
        host.log()
    );
    stop(&mut host).await;
    // "Forbidden", not "403": a log line's timestamp may well contain 403.
    assert!(
        !host.seen.iter().any(|l| l.text.contains("Forbidden")),
        "no refusal with the printed RBAC: {}",
        host.log()
    );
}

async fn stop(host: &mut HostProcess) {
    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
}

/// Takes each printed rule away in turn (run `i` drives `drive(em, i)`), and sees the 403 it
/// causes named in the host's log; the full rules are restored afterwards.
async fn every_rule_is_needed(
    c: &RbacCluster,
    plugin: &Path,
    drive: &dyn Fn(&EmulatorHandle, usize),
) {
    let rules = c.rules();
    assert!(!rules.is_empty(), "{:?}", c.docs);
    for (i, rule) in rules.iter().enumerate() {
        c.grant(Some((rule, None)));
        let mut host = c.host(plugin);
        drive(&c.em, i + 1);
        let line = host
            .line_where(WAIT, |l| is_forbidden_line(&l.text, &rule.resource))
            .await;
        let Some(line) = line else {
            panic!(
                "without the rule on {} the log names its 403: {}",
                rule.resource,
                host.log()
            )
        };
        eprintln!("without {}: {line}", rule.resource);
        stop(&mut host).await;
    }
    c.grant(None);
}

/// Takes only `create` away from the rule on `resource`; the apply of `name` that would create
/// the object is refused with the API server's empty-reason 403, named in the log.
async fn create_is_needed_for_apply(
    c: &RbacCluster,
    plugin: &Path,
    resource: &str,
    name: &str,
    drive: &dyn Fn(&EmulatorHandle, usize),
    run: usize,
) {
    let rules = c.rules();
    let rule: &Rule = rules
        .iter()
        .find(|r| r.resource == resource)
        .unwrap_or_else(|| panic!("a rule on {resource}: {rules:?}"));
    assert!(
        rule.verbs.iter().any(|v| v == "create") && rule.verbs.iter().any(|v| v == "patch"),
        "{rule:?}"
    );
    c.grant(Some((rule, Some("create"))));
    let mut host = c.host(plugin);
    drive(&c.em, run);
    // The API server gives no reason after "is forbidden: ": the message ends there (or the
    // guest's list of failures goes on after a "; ").
    let refused = format!("403 Forbidden: {resource} \"{name}\" is forbidden:");
    let line = host
        .line_where(WAIT, |l| {
            l.text.trim_end().ends_with(&refused) || l.text.contains(&format!("{refused} ;"))
        })
        .await;
    let Some(line) = line else {
        panic!("an apply that creates needs create: {}", host.log())
    };
    eprintln!("without create on {resource}: {line}");
    stop(&mut host).await;
    c.grant(None);
}

// ----- the README's greeter -----

fn greeter_drive(em: &EmulatorHandle, i: usize) {
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("team-{i}"), "namespace": "default",
            "labels": {"greet": "yes"}}}))
        .expect("configmap");
}

fn greeter_done(em: &EmulatorHandle, i: usize) -> bool {
    em.get(
        "v1",
        "ConfigMap",
        Some("default"),
        &format!("team-{i}-greeting"),
    )
    .is_some_and(|g| g["data"]["message"] == format!("hello, team-{i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_greeter_works_with_exactly_the_printed_rbac() {
    let plugin = support::guests::guest("greeter");
    let c = RbacCluster::new(&[], &[plugin.as_os_str()]).await;
    works_with_the_printed_rbac(&c, &plugin, &greeter_drive, &greeter_done).await;
    every_rule_is_needed(&c, &plugin, &greeter_drive).await;
    let run = 100;
    create_is_needed_for_apply(
        &c,
        &plugin,
        "configmaps",
        &format!("team-{run}-greeting"),
        &greeter_drive,
        run,
    )
    .await;
    c.shutdown().await;
}

// ----- config-reloader -----

fn reloader_seed() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "app-config", "namespace": "default"},
            "data": {"level": "info"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "app-secret", "namespace": "default"},
            "data": {"password": "czNjcjN0"}}),
    ]
}

/// An opted-in Deployment whose pod template carries a configuration hash that is out of date:
/// the first reconcile rolls it, which patches it and records a `ConfigChanged` Event (so the
/// Events rule is exercised too).
fn reloader_drive(em: &EmulatorHandle, i: usize) {
    let name = format!("web-{i}");
    em.create(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"config-reloader/enabled": "true"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name},
                    "annotations": {"config-reloader/config-hash": "stale"}},
                "spec": {
                    "volumes": [{"name": "config", "configMap": {"name": "app-config"}}],
                    "containers": [{"name": "app", "image": "example.com/app:1",
                        "env": [{"name": "PASSWORD", "valueFrom":
                            {"secretKeyRef": {"name": "app-secret", "key": "password"}}}]}]
                }
            }
        }
    }))
    .expect("deployment");
}

fn reloader_done(em: &EmulatorHandle, i: usize) -> bool {
    let rolled = em
        .get(
            "apps/v1",
            "Deployment",
            Some("default"),
            &format!("web-{i}"),
        )
        .is_some_and(|d| {
            d["spec"]["template"]["metadata"]["annotations"]["config-reloader/config-hash"]
                .as_str()
                .is_some_and(|h| h != "stale")
        });
    // The roll's Event is written after the patch, on the host's own time.
    rolled
        && em
            .list("events.k8s.io/v1", "Event", Some("default"))
            .iter()
            .any(|e| e["reason"] == "ConfigChanged" && e["regarding"]["name"] == format!("web-{i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_reloader_works_with_exactly_the_printed_rbac() {
    let plugin = support::guests::example("config-reloader");
    let c = RbacCluster::new(&reloader_seed(), &[plugin.as_os_str()]).await;
    works_with_the_printed_rbac(&c, &plugin, &reloader_drive, &reloader_done).await;
    every_rule_is_needed(&c, &plugin, &reloader_drive).await;
    c.shutdown().await;
}

// ----- janitor -----

fn janitor_drive(em: &EmulatorHandle, i: usize) {
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("expired-{i}"), "namespace": "default",
            "annotations": {"janitor/ttl": "0s"}}}))
        .expect("configmap");
}

fn janitor_done(em: &EmulatorHandle, i: usize) -> bool {
    em.get("v1", "ConfigMap", Some("default"), &format!("expired-{i}"))
        .is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_works_with_exactly_the_printed_rbac() {
    let plugin = support::guests::example("janitor");
    let c = RbacCluster::new(&[], &[plugin.as_os_str()]).await;
    works_with_the_printed_rbac(&c, &plugin, &janitor_drive, &janitor_done).await;
    every_rule_is_needed(&c, &plugin, &janitor_drive).await;
    c.shutdown().await;
}

// ----- namespace-defaults -----

fn example_file(example: &str, name: &str) -> String {
    let path = format!(
        "{}/../examples/{example}/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn yaml_docs(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn defaults_drive(em: &EmulatorHandle, i: usize) {
    em.create(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": format!("team-n{i}"), "labels": {"team": format!("n{i}")}}}))
        .expect("namespace");
}

fn defaults_done(em: &EmulatorHandle, i: usize) -> bool {
    let ns = format!("team-n{i}");
    em.get("v1", "ConfigMap", Some(&ns), "team-settings")
        .is_some()
        && em
            .get("v1", "ResourceQuota", Some(&ns), "team-quota")
            .is_some()
        && em
            .get(
                "defaults.kube-wasm.dev/v1alpha1",
                "NamespaceDefaults",
                None,
                "team-defaults",
            )
            .and_then(|o| o["status"]["conditions"].as_array().cloned())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_works_with_exactly_the_printed_rbac() {
    let plugin = support::guests::example("namespace-defaults");
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/namespace-defaults/crd.yaml");
    let mut seed = yaml_docs(&example_file("namespace-defaults", "crd.yaml"));
    seed.extend(yaml_docs(&example_file(
        "namespace-defaults",
        "example.yaml",
    )));
    let c = RbacCluster::new(
        &seed,
        &[
            std::ffi::OsStr::new("--crd"),
            crd.as_os_str(),
            plugin.as_os_str(),
        ],
    )
    .await;
    works_with_the_printed_rbac(&c, &plugin, &defaults_drive, &defaults_done).await;
    every_rule_is_needed(&c, &plugin, &defaults_drive).await;
    // Both objects it manages are created by apply: each needs create.
    create_is_needed_for_apply(
        &c,
        &plugin,
        "configmaps",
        "team-settings",
        &defaults_drive,
        100,
    )
    .await;
    create_is_needed_for_apply(
        &c,
        &plugin,
        "resourcequotas",
        "team-quota",
        &defaults_drive,
        101,
    )
    .await;
    c.shutdown().await;
}

// ----- secret-replicator-py -----

const TARGETS: &str = "replicator.kube/replicate-to";

fn replicator_drive(em: &EmulatorHandle, i: usize) {
    let ns = format!("target-{i}");
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        .expect("namespace");
    em.create(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": format!("creds-{i}"), "namespace": "default",
            "annotations": {TARGETS: ns}},
        "data": {"password": "czNjcmV0"}}),
    )
    .expect("secret");
}

fn replicator_done(em: &EmulatorHandle, i: usize) -> bool {
    em.get(
        "v1",
        "Secret",
        Some(&format!("target-{i}")),
        &format!("creds-{i}"),
    )
    .is_some_and(|s| s["data"]["password"] == "czNjcmV0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_secret_replicator_works_with_exactly_the_printed_rbac() {
    let plugin =
        tokio::task::spawn_blocking(|| support::guests::python_example("secret-replicator-py"))
            .await
            .expect("the build does not panic");
    let c = RbacCluster::new(&[], &[plugin.as_os_str()]).await;
    works_with_the_printed_rbac(&c, &plugin, &replicator_drive, &replicator_done).await;
    every_rule_is_needed(&c, &plugin, &replicator_drive).await;
    create_is_needed_for_apply(&c, &plugin, "secrets", "creds-100", &replicator_drive, 100).await;
    c.shutdown().await;
}

// ----- the host's own Leases (leader election, sharding) -----

/// Lease calls with the host's ServiceAccount token, by path, as the host makes them.
struct LeaseCalls {
    client: kwh_client::Client,
}

impl LeaseCalls {
    fn new(c: &RbacCluster) -> Self {
        let config = kwh_client::Config::from_kubeconfig_paths(
            std::slice::from_ref(&c.kubeconfig),
            &kwh_client::config::KubeconfigOptions::default(),
        )
        .expect("kubeconfig");
        LeaseCalls {
            client: kwh_client::Client::new(config).expect("client"),
        }
    }

    async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<(Value, &str)>,
    ) -> Result<Value, kwh_client::error::Status> {
        let body = body.map(|(v, t)| (bytes::Bytes::from(v.to_string()), t));
        match self.client.request_raw(method, path, body).await {
            Ok(b) if b.is_empty() => Ok(Value::Null),
            Ok(b) => Ok(serde_json::from_slice(&b).unwrap_or(Value::Null)),
            Err(e) => Err(e.status().cloned().unwrap_or_else(|| panic!("{e}"))),
        }
    }
}

fn leases_path(ns: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")
}

/// A Lease as client-go's leader election writes it (apiserver-samples lease.request.json).
fn lease(ns: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"holderIdentity": "host-a_1f2e", "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-24T22:59:48.085870Z",
            "renewTime": "2026-11-24T22:59:48.085870Z", "leaseTransitions": 0}})
}

/// The call was refused with the API server's 403 naming `verb`, the Leases and `scope`
/// (`in the namespace "x"` or `at the cluster scope`).
fn refused(r: Result<Value, kwh_client::error::Status>, verb: &str, scope: &str) {
    let s = match r {
        Err(s) => s,
        Ok(v) => panic!("{verb} was allowed: {v}"),
    };
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
    let user = format!(
        "system:serviceaccount:{}:{}",
        support::rbac::SA_NAMESPACE,
        SA
    );
    let why = format!(
        "User \"{user}\" cannot {verb} resource \"leases\" in API group \"coordination.k8s.io\" {scope}"
    );
    assert!(s.message.ends_with(&why), "{verb}: {}", s.message);
}

const SA: &str = support::rbac::SA_NAME;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_lease_rules_allow_leader_election_and_nothing_more() {
    use http::Method;
    let plugin = support::guests::guest("greeter");
    let c = RbacCluster::new(
        &[],
        &[std::ffi::OsStr::new("--leader-elect"), plugin.as_os_str()],
    )
    .await;
    let api = LeaseCalls::new(&c);
    let ns = support::rbac::SA_NAMESPACE;
    let (col, own) = (
        leases_path(ns),
        format!("{}/kube-wasm-host", leases_path(ns)),
    );

    // client-go's round: get (none yet), create, get, update with the resourceVersion read.
    let missing = api
        .call(Method::GET, &own, None)
        .await
        .expect_err("none yet");
    assert_eq!(missing.code, 404, "allowed, and not found: {missing:?}");
    let body = lease(ns, "kube-wasm-host", json!({}));
    api.call(Method::POST, &col, Some((body, "application/json")))
        .await
        .expect("create");
    let mut held = api.call(Method::GET, &own, None).await.expect("get");
    held["spec"]["renewTime"] = "2026-11-24T22:59:50.245261Z".into();
    let renewed = api
        .call(Method::PUT, &own, Some((held, "application/json")))
        .await
        .expect("update");
    assert_eq!(renewed["spec"]["renewTime"], "2026-11-24T22:59:50.245261Z");

    // A standby watches its Lease by name (a release wakes it at once).
    let named =
        format!("{col}?watch=1&fieldSelector=metadata.name%3Dkube-wasm-host&timeoutSeconds=1");
    api.call(Method::GET, &named, None)
        .await
        .expect("a watch of the one Lease");

    nothing_else_on_leases(&api, ns, &col, &own).await;
    the_leaders_event_in_its_namespace_only(&api, ns).await;
    c.shutdown().await;
}

/// The refusals of the leader election test, apart to keep it short: `col` is the Leases of
/// `ns`, `own` the host's.
async fn nothing_else_on_leases(api: &LeaseCalls, ns: &str, col: &str, own: &str) {
    use http::Method;
    // Nothing else: not another Lease (which it may create, as a create has no name yet), not
    // a list, a watch of all, a patch or a delete, not another namespace.
    let scope = format!("in the namespace \"{ns}\"");
    let other = format!("{col}/other");
    api.call(
        Method::POST,
        col,
        Some((lease(ns, "other", json!({})), "application/json")),
    )
    .await
    .expect("create has no name to restrict");
    refused(api.call(Method::GET, &other, None).await, "get", &scope);
    let body = lease(ns, "other", json!({}));
    refused(
        api.call(Method::PUT, &other, Some((body, "application/json")))
            .await,
        "update",
        &scope,
    );
    refused(api.call(Method::GET, col, None).await, "list", &scope);
    refused(
        api.call(Method::GET, &format!("{col}?watch=1"), None).await,
        "watch",
        &scope,
    );
    let merge = (
        json!({"spec": {"holderIdentity": "x"}}),
        "application/merge-patch+json",
    );
    refused(
        api.call(Method::PATCH, own, Some(merge)).await,
        "patch",
        &scope,
    );
    refused(api.call(Method::DELETE, own, None).await, "delete", &scope);
    refused(
        api.call(
            Method::POST,
            &leases_path("default"),
            Some((
                lease("default", "kube-wasm-host", json!({})),
                "application/json",
            )),
        )
        .await,
        "create",
        "in the namespace \"default\"",
    );
}

/// The leader's Event calls of the leader election test, apart to keep it short.
async fn the_leaders_event_in_its_namespace_only(api: &LeaseCalls, ns: &str) {
    use http::Method;
    // The new leader's Event on its Lease ("<identity> became leader", as client-go records
    // it): created, then its series patched, in the Leases' namespace only.
    let events = |ns: &str| format!("/apis/events.k8s.io/v1/namespaces/{ns}/events");
    let event = |ns: &str| {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "kube-wasm-host.leader", "namespace": ns},
            "eventTime": "2026-11-27T14:00:00.000000Z", "reportingController": "kube-wasm-host",
            "reportingInstance": "host-a_1f2e", "action": "Acquire", "reason": "LeaderElection",
            "type": "Normal", "note": "host-a_1f2e became leader",
            "regarding": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "namespace": ns, "name": "kube-wasm-host"}})
    };
    api.call(
        Method::POST,
        &events(ns),
        Some((event(ns), "application/json")),
    )
    .await
    .expect("the leader's Event");
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-11-27T14:00:01.000000Z"}});
    api.call(
        Method::PATCH,
        &format!("{}/kube-wasm-host.leader", events(ns)),
        Some((series, "application/merge-patch+json")),
    )
    .await
    .expect("its series");
    let elsewhere = api
        .call(
            Method::POST,
            &events("default"),
            Some((event("default"), "application/json")),
        )
        .await
        .expect_err("no Events in another namespace");
    assert_eq!(elsewhere.code, 403, "{elsewhere:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_lease_rules_allow_shard_membership_and_nothing_more() {
    use http::Method;
    let plugin = support::guests::guest("greeter");
    let c = RbacCluster::new(&[], &[std::ffi::OsStr::new("--shards"), plugin.as_os_str()]).await;
    let api = LeaseCalls::new(&c);
    let ns = support::rbac::SA_NAMESPACE;
    let col = leases_path(ns);
    let group = json!({"kube-wasm-host.io/shard-group": "kube-wasm-host"});
    let selector = "labelSelector=kube-wasm-host.io%2Fshard-group%3Dkube-wasm-host";

    // Each replica holds its own membership Lease, finds the others by label, renews its
    // own and deletes it at a clean shutdown.
    for who in ["host-a", "host-b"] {
        let body = lease(ns, &format!("kube-wasm-host-{who}"), group.clone());
        api.call(Method::POST, &col, Some((body, "application/json")))
            .await
            .expect("create a membership Lease");
    }
    let members = api
        .call(Method::GET, &format!("{col}?{selector}"), None)
        .await
        .expect("list by label");
    let names: Vec<_> = members["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["kube-wasm-host-host-a", "kube-wasm-host-host-b"]);
    api.call(
        Method::GET,
        &format!("{col}?watch=1&{selector}&timeoutSeconds=1"),
        None,
    )
    .await
    .expect("watch by label");
    let own = format!("{col}/kube-wasm-host-host-a");
    let mut held = api.call(Method::GET, &own, None).await.expect("get");
    held["spec"]["renewTime"] = "2026-11-24T22:59:50.245261Z".into();
    api.call(Method::PUT, &own, Some((held, "application/json")))
        .await
        .expect("update");
    api.call(Method::DELETE, &own, None).await.expect("delete");

    // Not patch, not another namespace, not the cluster scope.
    let merge = (
        json!({"spec": {"holderIdentity": "x"}}),
        "application/merge-patch+json",
    );
    refused(
        api.call(
            Method::PATCH,
            &format!("{col}/kube-wasm-host-host-b"),
            Some(merge),
        )
        .await,
        "patch",
        &format!("in the namespace \"{ns}\""),
    );
    refused(
        api.call(Method::GET, &leases_path("default"), None).await,
        "list",
        "in the namespace \"default\"",
    );
    refused(
        api.call(Method::GET, "/apis/coordination.k8s.io/v1/leases", None)
            .await,
        "list",
        "at the cluster scope",
    );
    c.shutdown().await;
}

/// `host rbac --plugins-from-cluster` grants what the host needs for `WasmController`
/// resources and nothing more on them: list, watch and get them, patch their status; not
/// change their spec, create or delete them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_rules_let_the_host_read_wasmcontrollers_and_write_only_their_status() {
    use http::Method;
    let crd_text = std::fs::read_to_string(
        support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml"),
    )
    .expect("CRD");
    let crd: Value = yaml_serde::from_str(&crd_text).expect("CRD YAML");
    let wc = json!({"apiVersion": "kube-wasm.dev/v1alpha1", "kind": "WasmController",
        "metadata": {"name": "x"}, "spec": {"module": "/nowhere/x.wasm"}});
    let c = RbacCluster::new(&[crd, wc], &["--plugins-from-cluster"]).await;
    let api = LeaseCalls::new(&c);
    let col = "/apis/kube-wasm.dev/v1alpha1/wasmcontrollers";
    let one = format!("{col}/x");
    let merge = "application/merge-patch+json";
    api.call(Method::GET, col, None).await.expect("list");
    api.call(
        Method::GET,
        &format!("{col}?watch=1&timeoutSeconds=1"),
        None,
    )
    .await
    .expect("watch");
    api.call(Method::GET, &one, None).await.expect("get");
    api.call(
        Method::PATCH,
        &format!("{one}/status"),
        Some((json!({"status": {"revision": 1}}), merge)),
    )
    .await
    .expect("status patched");
    let forbidden = |r: Result<Value, kwh_client::error::Status>, what: &str| match r {
        Err(s) => assert_eq!(s.code, 403, "{what}: {s:?}"),
        Ok(v) => panic!("{what} was allowed: {v}"),
    };
    forbidden(
        api.call(
            Method::PATCH,
            &one,
            Some((json!({"spec": {"module": "/elsewhere.wasm"}}), merge)),
        )
        .await,
        "a spec patch",
    );
    forbidden(api.call(Method::DELETE, &one, None).await, "a delete");
    let other = json!({"apiVersion": "kube-wasm.dev/v1alpha1", "kind": "WasmController",
        "metadata": {"name": "y"}, "spec": {"module": "/nowhere/y.wasm"}});
    forbidden(
        api.call(Method::POST, col, Some((other, "application/json")))
            .await,
        "a create",
    );
    c.shutdown().await;
}
