//! Shadow runs through the binary (issue "Shadow runs", its test): the config-reloader example
//! is the live revision against the emulator under a stream of ConfigMap changes, and three
//! shadows run beside it in turn:
//! - one that annotates Deployments differently (another annotation prefix): each difference
//!   is reported with its patch, and nothing of it is written;
//! - a build whose baseline annotation key has a typo the API server refuses: on new
//!   Deployments the refusal is reported (and an Event says so on the Deployment), nothing is
//!   written;
//! - an identical one: no difference, promoted automatically after its threshold while the
//!   changes go on, and no change lost across the promotion (every Deployment ends at the
//!   configuration hash of its ConfigMap's last data, as one created with that data does).
//!
//! Zero writes of a shadow persist: a watch on every Deployment, open from before the first
//! shadow to the end, never shows an annotation of the two shadows that write something else.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use kwh_client::client::WriteParams;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::WatchEvent;
use kwh_client::{ApiResource, Client};
use serde_json::{json, Value};
use support::cluster::http_get;
use support::guests::example;
use support::process::{HostProcess, WAIT};

/// Deployments in the stream, each using a ConfigMap of its own.
const DEPLOYMENTS: usize = 4;
const OTHER_PREFIX: &str = "other.example.com";
/// The typo build's Deployment annotation key (the live one's is `observed-hash`).
const TYPO: &str = "observed_has!";

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn deployments() -> ApiResource {
    ApiResource::new("apps/v1", "Deployment", "deployments", true)
}

fn configmaps() -> ApiResource {
    ApiResource::new("v1", "ConfigMap", "configmaps", true)
}

/// A copy of the config-reloader whose Deployment annotation `observed-hash` is misspelt
/// `observed_has!` (the bytes occur once): a new build with a bug the API server refuses.
fn typo_build(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(example("config-reloader")).expect("read example");
    let from = b"observed-hash";
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the annotation name occurs once");
    bytes[at[0]..at[0] + from.len()].copy_from_slice(TYPO.as_bytes());
    let p = dir.join("config_reloader_typo.wasm");
    std::fs::write(&p, bytes).expect("write");
    p
}

fn plugins_file(path: &Path, shadow: &str) {
    let mut s = "- module: config_reloader.wasm\n".to_string();
    if !shadow.is_empty() {
        s.push_str("  shadow:\n");
        for line in shadow.lines() {
            s.push_str(&format!("    {line}\n"));
        }
    }
    std::fs::write(path, s).expect("plugins file");
}

async fn create(client: &Client, res: &ApiResource, ns: Option<&str>, body: Value) {
    client
        .create(res, ns, body.to_string().into(), &WriteParams::default())
        .await
        .unwrap_or_else(|e| panic!("create {body}: {e}"));
}

async fn set_data(client: &Client, ns: &str, i: usize, value: &str) {
    let patch = json!({"data": {"value": value}});
    client
        .patch(
            &configmaps(),
            Some(ns),
            &format!("cm-{i}"),
            None,
            &kwh_client::client::Patch::Merge(patch.to_string().into()),
            &WriteParams::default(),
        )
        .await
        .expect("patch ConfigMap");
}

/// A namespace with `DEPLOYMENTS` ConfigMaps at `value` and a reloaded Deployment on each.
async fn populate(client: &Client, ns: &str, value: &str) {
    let namespace = ApiResource::new("v1", "Namespace", "namespaces", false);
    create(
        client,
        &namespace,
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    for i in 0..DEPLOYMENTS {
        create(
            client,
            &configmaps(),
            Some(ns),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": ns},
                "data": {"value": value}}),
        )
        .await;
        let app = format!("d-{i}");
        create(
            client,
            &deployments(),
            Some(ns),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": app, "namespace": ns,
                    // Opted in under both prefixes: the live revision's and the first
                    // shadow's (a team moving to a new prefix).
                    "annotations": {"config-reloader/enabled": "true",
                        format!("{OTHER_PREFIX}/enabled"): "true"}},
                "spec": {"selector": {"matchLabels": {"app": app}},
                    "template": {"metadata": {"labels": {"app": app}},
                        "spec": {"containers": [{"name": "app", "image": "nginx",
                            "envFrom": [{"configMapRef": {"name": format!("cm-{i}")}}]}]}}}}),
        )
        .await;
    }
}

/// Each Deployment's `config-reloader/observed-hash` in `ns` (none: not recorded yet).
async fn observed(client: &Client, ns: &str) -> Vec<Option<String>> {
    let list = client
        .list(&deployments(), Some(ns), &ListParams::default())
        .await
        .expect("list");
    let mut by_name: Vec<(String, Option<String>)> = list
        .items
        .iter()
        .map(|o| {
            let v: Value = serde_json::from_slice(o.raw()).expect("JSON");
            let h = v["metadata"]["annotations"]["config-reloader/observed-hash"]
                .as_str()
                .map(str::to_owned);
            (o.name().to_owned(), h)
        })
        .collect();
    by_name.sort();
    by_name.into_iter().map(|(_, h)| h).collect()
}

/// Waits for the `n`-th line (counting from the first the host printed) containing `text`.
async fn nth_line(host: &mut HostProcess, text: &str, n: usize) {
    let mut count = 0;
    let found = host
        .line_where(WAIT, |l| {
            count += usize::from(l.text.contains(text));
            count >= n
        })
        .await;
    assert!(
        found.is_some(),
        "no line {n} containing {text:?}:\n{}",
        host.log()
    );
}

/// The plugin's `shadow` in `/statusz` once `done` holds of it.
async fn shadow_status(addr: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, body) = http_get(addr, "/statusz").await;
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("statusz JSON");
        let s = v["plugins"][0]["shadow"].clone();
        if done(&s) {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn names_with(s: &Value, outcome: &str) -> Vec<String> {
    let mut n: Vec<String> = s["lastDifferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["outcome"] == outcome)
        .filter_map(|d| d["name"].as_str().map(str::to_owned))
        .collect();
    n.sort();
    n.dedup();
    n
}

/// LIST requests the emulator at `emulator` (`host:port`) has served, this test's own included.
async fn emulator_lists(emulator: &str) -> u64 {
    let (_, body) = http_get(emulator, "/_emulator/stats").await;
    let v: Value = serde_json::from_str(&body).expect("stats JSON");
    v["requests"]["list"].as_u64().expect("a count")
}

/// Collects every Deployment event from now on, to look for the shadows' writes in, until
/// the sender is used; the task answers what it saw.
async fn watch_every_deployment(
    client: &Client,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Vec<String>>,
) {
    let from = client
        .list(&deployments(), None, &ListParams::default())
        .await
        .expect("list")
        .resource_version;
    let mut watch = client
        .watch(&deployments(), None, &WatchParams::default().at(from))
        .await
        .expect("watch");
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let seen = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                ev = watch.next() => match ev {
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o))) => {
                        seen.push(o.as_str().to_owned());
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                },
            }
        }
        seen
    });
    (stop, seen)
}

/// Phase 1, another annotation prefix: a difference per Deployment, with its patch, the live
/// revision's last write of the Deployment and the shadow's log lines.
async fn a_shadow_with_another_prefix_reports_each_difference(
    host: &mut HostProcess,
    client: &Client,
    addr: &str,
    plugins: &Path,
) {
    plugins_file(
        plugins,
        &format!("module: config_reloader.wasm\nconfig: {{prefix: {OTHER_PREFIX}}}"),
    );
    nth_line(host, "shadow revision started", 1).await;
    for i in 0..DEPLOYMENTS {
        set_data(client, "stream", i, "v1").await;
    }
    // Each with the live revision's last write of the Deployment and the shadow's log lines
    // (attached once its reconcile has returned).
    let s = shadow_status(addr, |s| {
        names_with(s, "changes").len() == DEPLOYMENTS
            && s["lastDifferences"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|d| d["logs"].is_array())
    })
    .await;
    let d = s["lastDifferences"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["outcome"] == "changes"))
        .expect("a difference");
    assert_eq!(
        (d["op"].as_str(), d["kind"].as_str()),
        (Some("patch"), Some("Deployment"))
    );
    let paths: Vec<&str> = d["patch"]
        .as_array()
        .expect("a JSON patch")
        .iter()
        .filter_map(|op| op["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"/metadata/annotations/other.example.com~1observed-hash"),
        "{d}"
    );
    assert_eq!(s["refusals"], 0, "{s}");
    assert_eq!(d["liveWrite"]["op"], "patch", "{d}");
    assert!(
        d["liveWrite"]["body"]
            .as_str()
            .is_some_and(|b| b.contains("config-reloader/config-hash")),
        "the live revision's roll: {d}"
    );
    assert!(
        d["logs"].as_array().into_iter().flatten().any(|l| l
            .as_str()
            .is_some_and(|l| l.contains("recorded configuration hash"))),
        "the shadow's reconcile logged its first sight: {d}"
    );
}

/// Phase 2, the typo build: on each new Deployment its write is refused by the server, the
/// refusal is reported as its own kind, and the Deployment gets a `ShadowRefused` Event.
async fn a_typo_builds_refused_writes_are_reported(
    host: &mut HostProcess,
    client: &Client,
    addr: &str,
    plugins: &Path,
) {
    plugins_file(plugins, "module: config_reloader_typo.wasm");
    nth_line(host, "shadow revision started", 2).await;
    populate(client, "fresh", "v0").await;
    let s = shadow_status(addr, |s| names_with(s, "refused").len() == DEPLOYMENTS).await;
    let r = s["lastDifferences"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["outcome"] == "refused"))
        .expect("a refusal");
    assert_eq!(r["refusal"]["code"], 422, "{r}");
    assert!(
        r["refusal"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(TYPO) && m.contains("metadata.annotations")),
        "{r}"
    );
    assert_eq!(s["differences"], 0, "a refusal is its own kind: {s}");
    let events = ApiResource::new("events.k8s.io/v1", "Event", "events", true);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let list = client
            .list(&events, Some("fresh"), &ListParams::default())
            .await
            .expect("events");
        let refused = list.items.iter().any(|e| {
            let v: Value = serde_json::from_slice(e.raw()).expect("JSON");
            v["reason"] == "ShadowRefused" && v["regarding"]["kind"] == "Deployment"
        });
        if refused {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ShadowRefused Event"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Phase 3, the live module itself: no difference, promoted automatically while a round of
/// changes goes on every 100 ms, with no relist. Returns the next round's number.
async fn an_identical_shadow_is_promoted_while_the_changes_go_on(
    host: &mut HostProcess,
    client: &Client,
    emulator: &str,
    plugins: &Path,
) -> usize {
    plugins_file(
        plugins,
        &format!(
            "module: config_reloader.wasm\npromoteAfter: {{reconciles: {DEPLOYMENTS}, duration: 1s}}"
        ),
    );
    nth_line(host, "shadow revision started", 3).await;
    let lists_before = emulator_lists(emulator).await;
    let mut round = 3;
    let deadline = tokio::time::Instant::now() + WAIT;
    while {
        host.drain();
        !host.saw("shadow promoted")
    } {
        assert!(tokio::time::Instant::now() < deadline, "never promoted");
        for i in 0..DEPLOYMENTS {
            set_data(client, "stream", i, &format!("v{round}")).await;
        }
        round += 1;
        // The stream's pace: a round of changes every 100 ms.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        host.lines_mentioning(&["automatic promotion of the shadow stopped"])
            .is_empty(),
        "it never differed"
    );
    assert_eq!(
        emulator_lists(emulator).await,
        lists_before,
        "the promotion is an upgrade on the same informers: no relist"
    );
    round
}

/// Changes go on across and after the promotion (from `round`), the last one the same for
/// all; every stream Deployment ends at the hash Deployments created with the final data have.
async fn no_change_is_lost_across_the_promotion(client: &Client, round: usize) {
    for r in round..round + 3 {
        for i in 0..DEPLOYMENTS {
            set_data(client, "stream", i, &format!("v{r}")).await;
        }
    }
    for i in 0..DEPLOYMENTS {
        set_data(client, "stream", i, "final").await;
    }
    // Deployments created with the final data record the hash every stream Deployment must
    // have reached (the hash covers the ConfigMap's name and data, not its namespace).
    populate(client, "control", "final").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (stream, control) = (
            observed(client, "stream").await,
            observed(client, "control").await,
        );
        if control.iter().all(Option::is_some) && stream == control {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a change was lost: stream {stream:?}, control {control:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Of the Deployment objects the watch saw: the live revision's rolls are there, and nothing
/// the two writing shadows would have written.
fn assert_no_shadow_write_persisted(seen: &[String]) {
    assert!(
        seen.iter()
            .any(|o| o.contains("config-reloader/config-hash")),
        "the watch saw the live revision's rolls ({} events)",
        seen.len()
    );
    for o in seen {
        // (The Deployments carry `other.example.com/enabled` from their creation.)
        assert!(
            !o.contains(&format!("{OTHER_PREFIX}/observed"))
                && !o.contains(&format!("{OTHER_PREFIX}/config-hash"))
                && !o.contains(TYPO),
            "a shadow's write persisted: {o}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_reloader_beside_three_shadows_writes_alone_and_loses_nothing_across_a_promotion(
) {
    let dir = support::temp_dir("shadow-runs");
    std::fs::copy(example("config-reloader"), dir.join("config_reloader.wasm")).expect("copy");
    typo_build(&dir);
    let plugins = dir.join("plugins.yaml");
    plugins_file(&plugins, "");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
            os("--emulator"),
        ],
        "info",
    );
    let (url, kubeconfig) = host.emulator().await;
    let emulator = url.trim_start_matches("http://").to_string();
    let addr = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    let client = support::process::client(&kubeconfig);

    // Every Deployment event from here on, to look for the shadows' writes in.
    let (stop, seen) = watch_every_deployment(&client).await;

    populate(&client, "stream", "v0").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while observed(&client, "stream")
        .await
        .iter()
        .any(Option::is_none)
    {
        assert!(tokio::time::Instant::now() < deadline, "no baseline");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // 1. Another annotation prefix: a difference per Deployment, with its patch.
    a_shadow_with_another_prefix_reports_each_difference(&mut host, &client, &addr, &plugins).await;

    // 2. A build with a typo in its baseline annotation's key: on a Deployment it sees for the
    // first time (new ones: the others have a rolled pod template, which it reads first) it
    // writes the key, the server refuses it, a refusal is reported, and the Deployment gets
    // an Event saying so.
    a_typo_builds_refused_writes_are_reported(&mut host, &client, &addr, &plugins).await;

    // 3. The live module itself: no difference, promoted automatically while the changes go on.
    let round = an_identical_shadow_is_promoted_while_the_changes_go_on(
        &mut host, &client, &emulator, &plugins,
    )
    .await;
    // Changes go on across and after the promotion; the last one is the same for all.
    no_change_is_lost_across_the_promotion(&client, round).await;
    let (_, body) = http_get(&addr, "/statusz").await;
    let v: Value = serde_json::from_str(&body).expect("statusz JSON");
    assert!(v["plugins"][0]["shadow"].is_null(), "promoted: {v}");

    // Nothing the two writing shadows would have written reached the cluster.
    let _ = stop.send(());
    let seen = seen.await.expect("the watch task");
    assert_no_shadow_write_persisted(&seen);
    host.sigterm();
    host.exit(WAIT).await;
    let _ = std::fs::remove_dir_all(dir);
}
