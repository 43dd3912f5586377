//! Emulator behaviour over HTTP: watch selectors and bookmarks, every fault, and write
//! semantics (status subresource, generation, finalizers, preconditions, garbage collection,
//! deletecollection, generateName, patch types).

mod emulator_common;

use std::time::Duration;

use emulator_common::*;
use http::Method;
use kwh_emulator::{Emulator, EmulatorHandle};
use serde_json::{json, Value};

async fn start() -> (EmulatorHandle, Http) {
    let h = Emulator::builder().start().await.unwrap();
    let http = Http::new(h.base_url());
    (h, http)
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn default_cm(name: &str, labels: Value) -> Value {
    cm("default", name, labels)
}

async fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    tokio::time::timeout(STEP, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test]
async fn watch_selector_transitions_spec_6_10() {
    let (h, http) = start().await;
    let (_, _, mut ev) = http
        .watch(&format!(
            "{CMS}?watch=1&labelSelector=app%3Dweb&timeoutSeconds=10"
        ))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    let a = h.create(default_cm("a", json!({"app": "web"}))).unwrap();
    h.create(default_cm("other", json!({"app": "db"}))).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("a"))
    );
    // Leaving the selector → DELETED with the previous state at the new RV.
    let mut moved = a.clone();
    moved["metadata"]["labels"]["app"] = "db".into();
    let moved = h.update(moved).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        moved["metadata"]["resourceVersion"]
    );
    // Entering it → ADDED.
    let mut back = moved.clone();
    back["metadata"]["labels"]["app"] = "web".into();
    h.update(back).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["type"], "ADDED");
    h.shutdown().await;
}

#[tokio::test]
async fn watch_in_a_namespace_sees_only_that_namespace() {
    let (h, http) = start().await;
    h.create(ns("other")).unwrap();
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&timeoutSeconds=10"))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    h.create(cm("other", "x", json!({}))).unwrap();
    h.create(default_cm("y", json!({}))).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "y");
    h.shutdown().await;
}

#[tokio::test]
async fn periodic_bookmarks_carry_the_latest_rv() {
    let h = Emulator::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let http = Http::new(h.base_url());
    let (_, _, mut ev) = http
        .watch(&format!(
            "{CMS}?watch=1&allowWatchBookmarks=true&timeoutSeconds=20"
        ))
        .await;
    h.create(default_cm("a", json!({}))).unwrap();
    assert_eq!(ev.next_within(STEP).await.unwrap()["type"], "ADDED");
    // A write elsewhere moves the global RV; bookmarks (every 200 ms) report it. A bookmark
    // may already be on its way from before the write, so read until one carries the new RV;
    // none may ever claim more than the store has.
    h.create(ns("elsewhere")).unwrap();
    let now = h.current_resource_version();
    let mut last = 0;
    loop {
        let b = ev.next_within(STEP).await.unwrap();
        assert_eq!(
            (b["type"].as_str(), b["object"]["kind"].as_str()),
            (Some("BOOKMARK"), Some("ConfigMap"))
        );
        let rv: u64 = b["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rv >= last && rv <= now,
            "bookmark RV {rv} after {last}, store at {now}"
        );
        last = rv;
        if rv == now {
            break;
        }
    }
    h.shutdown().await;
}

#[tokio::test]
async fn watches_without_bookmarks_get_none() {
    let h = Emulator::builder()
        .bookmark_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let http = Http::new(h.base_url());
    let (_, _, mut ev) = http.watch(&format!("{CMS}?watch=1&timeoutSeconds=1")).await;
    // Ends at the timeout with no bookmark in between.
    assert_eq!(ev.next_within(STEP).await, None);
    h.shutdown().await;
}

#[tokio::test]
async fn fault_close_watches_after_n_events() {
    let (h, http) = start().await;
    h.faults().close_watches_after(2);
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&timeoutSeconds=30"))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    for i in 0..4 {
        h.create(default_cm(&format!("c{i}"), json!({}))).unwrap();
    }
    assert!(ev.next_within(STEP).await.is_some());
    assert!(ev.next_within(STEP).await.is_some());
    assert_eq!(ev.next_within(STEP).await, None);
    wait_for(|| h.stats().open_watches_total() == 0, "watch closed").await;
    h.shutdown().await;
}

#[tokio::test]
async fn fault_inject_expired_sends_410_and_closes() {
    let (h, http) = start().await;
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&timeoutSeconds=30"))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    h.faults().inject_expired();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(
        (e["object"]["code"].as_u64(), e["object"]["reason"].as_str()),
        (Some(410), Some("Expired"))
    );
    assert_eq!(ev.next_within(STEP).await, None);
    h.shutdown().await;
}

#[tokio::test]
async fn fault_fail_next_429_with_retry_after_then_500() {
    let (h, http) = start().await;
    h.faults().fail_next(2, 429, 3);
    for _ in 0..2 {
        let r = http.get(CMS).await;
        assert_eq!(r.status, 429);
        assert_eq!(r.headers["retry-after"], "3");
        assert_eq!(r.json()["reason"], "TooManyRequests");
    }
    assert_eq!(http.get(CMS).await.status, 200);
    h.faults().fail_next(1, 500, 0);
    assert_eq!(http.get(CMS).await.status, 500);
    assert_eq!(http.get(CMS).await.status, 200);
    h.shutdown().await;
}

#[tokio::test]
async fn fault_stall_holds_events_until_it_ends() {
    let (h, http) = start().await;
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&timeoutSeconds=30"))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    h.faults().stall_streams(Duration::from_millis(800));
    h.create(default_cm("a", json!({}))).unwrap();
    assert!(
        ev.quiet_for(Duration::from_millis(300)).await,
        "stalled stream sent an event"
    );
    h.create(default_cm("b", json!({}))).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "a");
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "b");
    h.shutdown().await;
}

#[tokio::test]
async fn fault_expire_watch_history_expires_old_rvs() {
    let (h, http) = start().await;
    h.create(default_cm("a", json!({}))).unwrap();
    let old = h.current_resource_version();
    h.create(default_cm("b", json!({}))).unwrap();
    h.faults().expire_watch_history();
    let (status, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&resourceVersion={old}"))
        .await;
    assert_eq!(status, 200);
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(ev.next_within(STEP).await, None);
    let d = h.faults().delivered();
    assert_eq!((d.history_expired, d.watches_too_old), (1, 1));
    // From the current RV all is well.
    let now = h.current_resource_version();
    let (_, _, mut ev) = http
        .watch(&format!(
            "{CMS}?watch=1&resourceVersion={now}&timeoutSeconds=5"
        ))
        .await;
    h.create(default_cm("c", json!({}))).unwrap();
    assert_eq!(ev.next_within(STEP).await.unwrap()["type"], "ADDED");
    h.shutdown().await;
}

/// Where a compaction or an expired history meets a client that lists: each LIST answered 410
/// is counted, and those a compaction refused apart.
#[tokio::test]
async fn lists_answered_410_are_counted_with_their_cause() {
    let (h, http) = start().await;
    for n in ["a", "b", "c"] {
        h.create(default_cm(n, json!({}))).unwrap();
    }
    let first = http.get(&format!("{CMS}?limit=1")).await.json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    let old = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    h.create(default_cm("d", json!({}))).unwrap();
    h.faults().compact_history();
    let r = http.get(&format!("{CMS}?limit=1&continue={token}")).await;
    assert_eq!(r.status, 410, "an expired continue token");
    let d = h.faults().delivered();
    assert_eq!((d.compacted, d.lists_expired, d.lists_compacted), (1, 1, 1));
    // An Exact LIST behind the history's floor, not the compaction point.
    let now = h.current_resource_version();
    h.create(default_cm("e", json!({}))).unwrap();
    h.faults().expire_watch_history();
    let r = http
        .get(&format!("{CMS}?limit=1&resourceVersion={now}"))
        .await;
    assert_eq!(r.status, 410);
    let d = h.faults().delivered();
    assert_eq!((d.lists_expired, d.lists_compacted), (2, 1));
    // Behind both.
    let r = http
        .get(&format!("{CMS}?limit=1&resourceVersion={old}"))
        .await;
    assert_eq!(r.status, 410);
    assert_eq!(h.faults().delivered().lists_compacted, 2);
    // Lists that succeed count nothing.
    assert_eq!(http.get(&format!("{CMS}?limit=1")).await.status, 200);
    assert_eq!(http.get(CMS).await.status, 200);
    assert_eq!(h.faults().delivered().lists_expired, 3);
    h.shutdown().await;
}

/// A compaction armed to come before the next page of a LIST: that page is refused (a write
/// came between the pages), the first page and the next LIST are not.
#[tokio::test]
async fn a_compaction_before_the_next_continue_refuses_that_page() {
    let (h, http) = start().await;
    for n in ["a", "b", "c"] {
        h.create(default_cm(n, json!({}))).unwrap();
    }
    h.faults().compact_before_continue(1);
    let first = http.get(&format!("{CMS}?limit=1")).await;
    assert_eq!(first.status, 200, "a first page carries no token");
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    h.create(default_cm("d", json!({}))).unwrap();
    let r = http.get(&format!("{CMS}?limit=1&continue={token}")).await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["reason"]),
        (410, &json!("Expired"))
    );
    let d = h.faults().delivered();
    assert_eq!((d.compacted, d.lists_expired, d.lists_compacted), (1, 1, 1));
    // Used up: a new LIST pages through.
    let first = http.get(&format!("{CMS}?limit=2")).await.json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    h.create(default_cm("e", json!({}))).unwrap();
    let r = http.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(r.status, 200);
    assert_eq!(h.faults().delivered().compacted, 1);
    h.shutdown().await;
}

#[tokio::test]
async fn fault_drop_connections_cuts_streams() {
    let (h, http) = start().await;
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&timeoutSeconds=30"))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    h.faults().drop_connections();
    assert_eq!(ev.next_within(STEP).await, None);
    wait_for(
        || h.stats().open_watches_total() == 0,
        "watch counter back to 0",
    )
    .await;
    // New connections work.
    assert_eq!(http.get(CMS).await.status, 200);
    h.shutdown().await;
}

#[tokio::test]
async fn stats_count_requests_by_verb() {
    let (h, http) = start().await;
    http.post(CMS, &default_cm("a", json!({}))).await;
    http.get(CMS).await;
    http.get(&format!("{CMS}/a")).await;
    http.patch(
        &format!("{CMS}/a"),
        "application/merge-patch+json",
        r#"{"data":{"x":"1"}}"#,
    )
    .await;
    http.delete(&format!("{CMS}/a")).await;
    http.get("/api").await;
    let s = h.stats();
    assert_eq!(s.requests("other"), 1, "discovery is not an object get");
    for v in ["create", "list", "get", "patch", "delete"] {
        assert_eq!(s.requests(v), 1, "{v}");
    }
    assert!(
        !h.wait_for_open_watches("/configmaps", 1, Duration::from_millis(50))
            .await
    );
    assert!(
        h.wait_for_open_watches("/configmaps", 0, Duration::from_millis(50))
            .await
    );
    h.shutdown().await;
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (h, http) = start().await;
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"replicas": 1}, "status": {"replicas": 9}});
    let r = http
        .post("/apis/apps/v1/namespaces/default/deployments", &d)
        .await;
    assert_eq!(r.status, 201);
    let created = r.json();
    // The status sent is dropped: a Deployment starts from its zero status (serialized `{}`).
    assert_eq!(created["status"], json!({}), "status is reset on create");
    assert_eq!(created["metadata"]["generation"], 1);
    let path = "/apis/apps/v1/namespaces/default/deployments/d";
    // Main-resource writes ignore status.
    let r = http
        .patch(
            path,
            "application/merge-patch+json",
            r#"{"status":{"replicas":5}}"#,
        )
        .await
        .json();
    assert_eq!(r["status"], json!({}));
    // /status changes only status, and does not bump generation.
    let r = http
        .patch(
            &format!("{path}/status"),
            "application/merge-patch+json",
            r#"{"spec":{"replicas":7},"status":{"replicas":5}}"#,
        )
        .await
        .json();
    assert_eq!(
        (
            r["status"]["replicas"].as_i64(),
            r["spec"]["replicas"].as_i64()
        ),
        (Some(5), Some(1))
    );
    assert_eq!(r["metadata"]["generation"], 1);
    // A spec change bumps generation; a metadata change does not.
    let r = http
        .patch(
            path,
            "application/merge-patch+json",
            r#"{"spec":{"replicas":2}}"#,
        )
        .await
        .json();
    assert_eq!(r["metadata"]["generation"], 2);
    assert_eq!(r["status"]["replicas"], 5);
    let r = http
        .patch(
            path,
            "application/merge-patch+json",
            r#"{"metadata":{"labels":{"a":"b"}}}"#,
        )
        .await
        .json();
    assert_eq!(r["metadata"]["generation"], 2);
    // A no-op write does not move the RV.
    let rv = r["metadata"]["resourceVersion"].clone();
    let r = http
        .patch(
            path,
            "application/merge-patch+json",
            r#"{"metadata":{"labels":{"a":"b"}}}"#,
        )
        .await
        .json();
    assert_eq!(r["metadata"]["resourceVersion"], rv);
    h.shutdown().await;
}

#[tokio::test]
async fn finalizers_defer_deletion_until_emptied() {
    let (h, http) = start().await;
    let mut c = default_cm("f", json!({}));
    c["metadata"]["finalizers"] = json!(["example.com/hold"]);
    http.post(CMS, &c).await;
    let r = http.delete(&format!("{CMS}/f")).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        http.get(&format!("{CMS}/f")).await.status,
        200,
        "still there"
    );
    let r = http
        .patch(
            &format!("{CMS}/f"),
            "application/json-patch+json",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        http.get(&format!("{CMS}/f")).await.status,
        404,
        "removed with its last finalizer"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn delete_preconditions_conflict() {
    let (h, http) = start().await;
    http.post(CMS, &default_cm("p", json!({}))).await;
    let body =
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "nope"}});
    let r = http
        .send(
            Method::DELETE,
            &format!("{CMS}/p"),
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 409);
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("Precondition failed: UID in precondition: nope"));
    let body = json!({"preconditions": {"resourceVersion": "1"}});
    let r = http
        .send(
            Method::DELETE,
            &format!("{CMS}/p"),
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 409);
    let r = http.delete(&format!("{CMS}/p")).await;
    assert_eq!(r.status, 200);
    // An immediate deletion of a built-in kind answers a Success Status.
    let v = r.json();
    assert_eq!(
        (v["kind"].as_str(), v["status"].as_str()),
        (Some("Status"), Some("Success"))
    );
    assert_eq!(
        (v["details"]["name"].as_str(), v["details"]["kind"].as_str()),
        (Some("p"), Some("configmaps"))
    );
    assert_eq!(http.delete(&format!("{CMS}/p")).await.status, 404);
    h.shutdown().await;
}

#[tokio::test]
async fn owner_reference_garbage_collection() {
    let (h, _http) = start().await;
    let owner = h.create(default_cm("owner", json!({}))).unwrap();
    let second = h.create(default_cm("second", json!({}))).unwrap();
    let oref = |o: &Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]})
    };
    let mut dep = default_cm("dep", json!({}));
    dep["metadata"]["ownerReferences"] = json!([oref(&owner)]);
    h.create(dep).unwrap();
    let mut shared = default_cm("shared", json!({}));
    shared["metadata"]["ownerReferences"] = json!([oref(&owner), oref(&second)]);
    h.create(shared).unwrap();
    let mut grandchild = default_cm("grandchild", json!({}));
    let dep_now = h.get("v1", "ConfigMap", Some("default"), "dep").unwrap();
    grandchild["metadata"]["ownerReferences"] = json!([oref(&dep_now)]);
    h.create(grandchild).unwrap();
    h.delete("v1", "ConfigMap", Some("default"), "owner")
        .unwrap();
    assert!(h.get("v1", "ConfigMap", Some("default"), "dep").is_none());
    assert!(h
        .get("v1", "ConfigMap", Some("default"), "grandchild")
        .is_none());
    let s = h.get("v1", "ConfigMap", Some("default"), "shared").unwrap();
    assert_eq!(
        s["metadata"]["ownerReferences"].as_array().unwrap().len(),
        1,
        "live owner keeps it"
    );
    h.shutdown().await;
}

/// The garbage collector also removes an object written after all its owners are gone (a
/// controller recreating a child from a stale cache): the create answers 201, then the object
/// is deleted, as the collector does moments later on a cluster. An owner of a kind the server
/// does not serve cannot be looked up and keeps its dependent.
#[tokio::test]
async fn an_object_whose_every_owner_is_gone_is_collected_after_its_create() {
    let (h, http) = start().await;
    let owner = h.create(default_cm("owner", json!({}))).unwrap();
    let uid = owner["metadata"]["uid"].as_str().unwrap().to_owned();
    h.delete("v1", "ConfigMap", Some("default"), "owner")
        .unwrap();
    let oref = |kind: &str, uid: &str| json!([{"apiVersion": "v1", "kind": kind, "name": "owner", "uid": uid}]);
    let mut late = default_cm("late", json!({}));
    late["metadata"]["ownerReferences"] = oref("ConfigMap", &uid);
    let r = http.post(CMS, &late).await;
    assert_eq!(r.status, 201);
    assert!(h.get("v1", "ConfigMap", Some("default"), "late").is_none());
    // An owner recreated under the same name is another object: still gone for the collector.
    h.create(default_cm("owner", json!({}))).unwrap();
    let r = http.post(CMS, &late).await;
    assert_eq!(r.status, 201);
    assert!(h.get("v1", "ConfigMap", Some("default"), "late").is_none());
    // A live owner keeps it; so does an owner the server cannot look up.
    let live = h.get("v1", "ConfigMap", Some("default"), "owner").unwrap();
    late["metadata"]["ownerReferences"] =
        oref("ConfigMap", live["metadata"]["uid"].as_str().unwrap());
    assert_eq!(http.post(CMS, &late).await.status, 201);
    assert!(h.get("v1", "ConfigMap", Some("default"), "late").is_some());
    let mut unknown = default_cm("unknown", json!({}));
    unknown["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "example.com/v1", "kind": "Nothing", "name": "x", "uid": "u"}]);
    assert_eq!(http.post(CMS, &unknown).await.status, 201);
    assert!(h
        .get("v1", "ConfigMap", Some("default"), "unknown")
        .is_some());
    h.shutdown().await;
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents() {
    let (h, http) = start().await;
    let owner = h.create(default_cm("owner", json!({}))).unwrap();
    let mut dep = default_cm("dep", json!({}));
    dep["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]);
    h.create(dep).unwrap();
    let r = http
        .delete(&format!("{CMS}/owner?propagationPolicy=Orphan"))
        .await;
    assert_eq!(r.status, 200);
    let d = h.get("v1", "ConfigMap", Some("default"), "dep").unwrap();
    assert!(d["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .is_empty());
    h.shutdown().await;
}

#[tokio::test]
async fn deletecollection_by_label() {
    let (h, http) = start().await;
    for (n, app) in [("a", "web"), ("b", "web"), ("c", "db")] {
        h.create(default_cm(n, json!({"app": app}))).unwrap();
    }
    let r = http.delete(&format!("{CMS}?labelSelector=app%3Dweb")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 2);
    let left = http.get(CMS).await.json();
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn generate_name_and_bad_patch_types() {
    let (h, http) = start().await;
    let mut c = default_cm("", json!({}));
    c["metadata"] = json!({"generateName": "gen-"});
    let r = http.post(CMS, &c).await;
    assert_eq!(r.status, 201);
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let r = http
        .patch(&format!("{CMS}/{name}"), "text/plain", "{}")
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["reason"], "UnsupportedMediaType");
    let r = http
        .patch(
            &format!("{CMS}/missing"),
            "application/merge-patch+json",
            "{}",
        )
        .await;
    assert_eq!(r.status, 404);
    h.shutdown().await;
}

#[tokio::test]
async fn crd_registers_and_removes_its_resource() {
    let (h, http) = start().await;
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
    let r = http
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["status"]["conditions"][1]["type"], "Established");
    let groups = http.get("/apis").await.json();
    assert!(groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == "example.com"));
    let res = http.get("/apis/example.com/v1").await.json();
    assert_eq!(res["resources"][0]["name"], "widgets");
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"a": 1}, "status": {"s": 1}});
    let r = http
        .post("/apis/example.com/v1/namespaces/default/widgets", &w)
        .await;
    assert_eq!(r.status, 201);
    assert!(
        r.json().get("status").is_none(),
        "CRD declares a status subresource"
    );
    let r = http
        .patch(
            "/apis/example.com/v1/namespaces/default/widgets/w",
            "application/strategic-merge-patch+json",
            "{}",
        )
        .await;
    assert_eq!(
        r.status, 415,
        "spec 6.11: no strategic merge for custom resources"
    );
    let r = http
        .delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        http.get("/apis/example.com/v1/namespaces/default/widgets")
            .await
            .status,
        404
    );
    assert_eq!(http.get("/apis/example.com/v1").await.status, 404);
    h.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_removes_its_contents() {
    let (h, http) = start().await;
    h.create(ns("gone")).unwrap();
    h.create(cm("gone", "x", json!({}))).unwrap();
    assert_eq!(http.delete("/api/v1/namespaces/gone").await.status, 200);
    assert!(h.get("v1", "ConfigMap", Some("gone"), "x").is_none());
    assert_eq!(http.get("/api/v1/namespaces/gone").await.status, 404);
    h.shutdown().await;
}

#[tokio::test]
async fn seed_yaml_reads_multi_document_and_lists() {
    let (h, _http) = start().await;
    let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: s}\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a, namespace: s}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b, namespace: s}\n";
    assert_eq!(h.seed_yaml(text).unwrap(), 3);
    let names: Vec<_> = h
        .list("v1", "ConfigMap", Some("s"))
        .iter()
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("a"), json!("b")]);
    assert!(h.list("v1", "ConfigMap", Some("nope")).is_empty());
    assert!(h.list("v9", "Nothing", None).is_empty());
    assert!(h.get("v1", "ConfigMap", Some("s"), "b").is_some());
    assert!(h.seed_yaml("kind: [").is_err());
    // A missing namespace is created for a seeded object.
    let one = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: fresh}\n";
    assert_eq!(h.seed_yaml(one).unwrap(), 1);
    assert!(h.get("v1", "Namespace", None, "fresh").is_some());
    h.shutdown().await;
}

#[tokio::test]
async fn http2_and_tls_are_served() {
    let h = Emulator::builder().tls(true).start().await.unwrap();
    assert!(h.base_url().starts_with("https://"));
    assert!(h.certificate_pem().unwrap().contains("BEGIN CERTIFICATE"));
    assert!(h.kubeconfig().contains("insecure-skip-tls-verify: true"));
    h.shutdown().await;
    // h2 prior knowledge over plain TCP.
    let (h, _) = start().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let r = tokio::time::timeout(
        STEP,
        client.get(format!("{}/version", h.base_url()).parse().unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (r.status(), r.version()),
        (http::StatusCode::OK, http::Version::HTTP_2)
    );
    h.shutdown().await;
}

#[tokio::test]
async fn dry_run_stores_nothing() {
    let (h, http) = start().await;
    let rv = h.current_resource_version();
    let r = http
        .post(&format!("{CMS}?dryRun=All"), &default_cm("d", json!({})))
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["metadata"]["name"], "d");
    assert_eq!(http.get(&format!("{CMS}/d")).await.status, 404);
    h.create(default_cm("d", json!({}))).unwrap();
    let rv_after_create = h.current_resource_version();
    assert_eq!(rv_after_create, rv + 1, "the dry run did not consume an RV");
    let r = http
        .patch(
            &format!("{CMS}/d?dryRun=All"),
            "application/merge-patch+json",
            r#"{"data":{"k":"new"}}"#,
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["data"]["k"].as_str()),
        (200, Some("new"))
    );
    assert_eq!(
        http.delete(&format!("{CMS}/d?dryRun=All")).await.status,
        200
    );
    let cur = http.get(&format!("{CMS}/d")).await.json();
    assert_eq!(cur["data"]["k"], "d");
    // client-go sends a delete's dry run in the DeleteOptions body.
    let r = http
        .send(
            Method::DELETE,
            &format!("{CMS}/d"),
            Some("application/json"),
            br#"{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        http.get(&format!("{CMS}/d")).await.status,
        200,
        "still there"
    );
    assert_eq!(h.current_resource_version(), rv_after_create);
    h.shutdown().await;
}

/// `value` with what differs between any two servers' answers set aside: uids, times and
/// resourceVersions.
fn volatile_aside(mut value: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    match k.as_str() {
                        "uid" | "creationTimestamp" | "time" | "resourceVersion" => {
                            *x = json!("(volatile)")
                        }
                        _ => walk(x),
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

/// One recorded dry run: the sample's name, the request's method, path, content type and
/// body, and the status kube-apiserver answered with.
type DryRunCase = (
    &'static str,
    Method,
    String,
    Option<&'static str>,
    String,
    u16,
);

/// The dry runs recorded under `dry-run/`, against the configmaps at `cms`, in their order.
fn recorded_dry_runs(cms: &str) -> [DryRunCase; 7] {
    let cm = |name: &str, data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": data})
        .to_string()
    };
    const JSON: &str = "application/json";
    const MERGE: &str = "application/merge-patch+json";
    const APPLY: &str = "application/apply-patch+yaml";
    [
        (
            "create-configmap-dryrun",
            Method::POST,
            format!("{cms}?dryRun=All&fieldManager=curl"),
            Some(JSON),
            cm("new-one", json!({"k": "v"})),
            201,
        ),
        (
            "merge-patch-dryrun",
            Method::PATCH,
            format!("{cms}/existing?dryRun=All&fieldManager=curl"),
            Some(MERGE),
            json!({"data": {"a": "2"}}).to_string(),
            200,
        ),
        (
            "merge-patch-noop-dryrun",
            Method::PATCH,
            format!("{cms}/existing?dryRun=All&fieldManager=curl"),
            Some(MERGE),
            json!({"data": {"a": "1"}}).to_string(),
            200,
        ),
        (
            "apply-dryrun",
            Method::PATCH,
            format!("{cms}/existing?dryRun=All&fieldManager=shadow"),
            Some(APPLY),
            cm("existing", json!({"b": "3"})),
            200,
        ),
        (
            "apply-create-dryrun",
            Method::PATCH,
            format!("{cms}/not-there?dryRun=All&fieldManager=shadow"),
            Some(APPLY),
            cm("not-there", json!({"b": "3"})),
            201,
        ),
        (
            "delete-dryrun",
            Method::DELETE,
            format!("{cms}/existing?dryRun=All"),
            None,
            String::new(),
            200,
        ),
        (
            "invalid-create-dryrun",
            Method::POST,
            format!("{cms}?dryRun=All"),
            Some(JSON),
            cm("Bad_Name", json!({})),
            422,
        ),
    ]
}

/// Sends each case: the status and body are the recorded ones (volatile fields aside), and a
/// patch's answer keeps the stored resourceVersion of `before`.
async fn assert_answers_are_the_recorded_ones(http: &Http, cases: [DryRunCase; 7], before: &Value) {
    for (sample, method, path, ct, body, status) in cases {
        let r = http.send(method.clone(), &path, ct, body.as_bytes()).await;
        assert_eq!(
            r.status,
            status,
            "{sample}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let got = r.json();
        assert_eq!(
            volatile_aside(got.clone()),
            volatile_aside(sample_json(&format!("dry-run/{sample}.json"))),
            "{sample}"
        );
        if method == Method::PATCH && status == 200 {
            assert_eq!(
                got["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
                "{sample}: the stored resourceVersion"
            );
        }
    }
}

/// Server-side dry runs (`dryRun=All`) answered as kube-apiserver v1.26 answered them
/// (`dry-run/`, recorded for the issue "Shadow runs"): a create, a merge patch that changes and
/// one that changes nothing, an apply to an existing and to an absent object, a delete, and an
/// invalid create, each body equal to the recorded one with uids, times and resourceVersions
/// aside (a patch's answer keeps the stored resourceVersion); afterwards the object is as it
/// was (`after-get-existing`), the created one absent (`after-get-new-one`), and the store
/// used no revision, so no watch event can have been sent.
#[tokio::test]
async fn dry_run_answers_are_the_recorded_ones_and_nothing_changes() {
    // The recorded object was created a second before the dry runs (managedFields are
    // ordered by the second of each write, then by manager).
    let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_795_000_000));
    let clock = now.clone();
    let h = Emulator::builder()
        .clock(std::sync::Arc::new(move || {
            clock.load(std::sync::atomic::Ordering::Relaxed)
        }))
        .start()
        .await
        .expect("emulator");
    let http = Http::new(h.base_url());
    let cms = "/api/v1/namespaces/dryrun-samples/configmaps";
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "dryrun-samples"}});
    assert_eq!(http.post("/api/v1/namespaces", &ns).await.status, 201);
    let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "existing"}, "data": {"a": "1"}});
    let r = http
        .post(&format!("{cms}?fieldManager=kubectl-create"), &existing)
        .await;
    assert_eq!(r.status, 201);
    let before = http.get(&format!("{cms}/existing")).await.json();
    let revision = h.current_resource_version();
    now.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cases = recorded_dry_runs(cms);
    assert_answers_are_the_recorded_ones(&http, cases, &before).await;
    let after = http.get(&format!("{cms}/existing")).await.json();
    assert_eq!(after, before, "unchanged, resourceVersion included");
    assert_eq!(
        volatile_aside(after),
        volatile_aside(sample_json("dry-run/after-get-existing.json"))
    );
    let r = http.get(&format!("{cms}/new-one")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json(), sample_json("dry-run/after-get-new-one.json"));
    assert_eq!(h.current_resource_version(), revision, "no revision used");
    h.shutdown().await;
}

/// A `dryRun` value other than `All` is refused as kube-apiserver refuses it
/// (`dry-run/bad-dryrun-value.json`), for each verb's options kind.
#[tokio::test]
async fn unsupported_dry_run_values_are_refused_as_the_server_refuses_them() {
    let (h, http) = start().await;
    let r = http
        .post(&format!("{CMS}?dryRun=Some"), &default_cm("d", json!({})))
        .await;
    assert_eq!(r.status, 422);
    let want = sample_json("dry-run/bad-dryrun-value.json");
    assert_eq!(r.json(), want);
    assert_eq!(
        http.get(&format!("{CMS}/d")).await.status,
        404,
        "nothing created"
    );
    h.create(default_cm("d", json!({}))).unwrap();
    let r = http
        .send(
            Method::DELETE,
            &format!("{CMS}/d"),
            Some("application/json"),
            br#"{"dryRun":["Some"]}"#,
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\""
    );
    assert_eq!(
        http.get(&format!("{CMS}/d")).await.status,
        200,
        "not deleted"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn non_object_bodies_are_rejected_not_panics() {
    let (h, http) = start().await;
    assert!(h.create(json!([1, 2])).is_err());
    assert!(h.seed_yaml("just a string\n").is_err());
    assert_eq!(
        http.send(Method::POST, CMS, Some("application/json"), b"[1]")
            .await
            .status,
        400
    );
    assert_eq!(
        http.send(Method::POST, CMS, Some("application/json"), b"{oops")
            .await
            .status,
        400
    );
    h.create(default_cm("x", json!({}))).unwrap();
    let r = http
        .patch(
            &format!("{CMS}/x"),
            "application/json-patch+json",
            r#"[{"op":"replace","path":"","value":1}]"#,
        )
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .patch(&format!("{CMS}/y"), "application/apply-patch+yaml", "3")
        .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    // The server still answers.
    assert_eq!(http.get(&format!("{CMS}/x")).await.status, 200);
    h.shutdown().await;
}

/// The length-delimited fields of a protobuf message, by tag (read by hand from the wire
/// format, not with the emulator's own decoder).
fn pb_fields(mut b: &[u8]) -> Vec<(u64, Vec<u8>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut x = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = b[0];
            *b = &b[1..];
            x |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        x
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        assert_eq!(
            key & 7,
            2,
            "WatchEvent and RawExtension hold only bytes and strings"
        );
        let n = varint(&mut b) as usize;
        out.push((key >> 3, b[..n].to_vec()));
        b = &b[n..];
    }
    out
}

/// Spec 6.3, in protobuf: a client preferring protobuf (client-go configured for it) is
/// answered `application/vnd.kubernetes.protobuf;stream=watch`: length-prefixed
/// `meta.v1.WatchEvent`s (type = 1, object = 2, a RawExtension whose raw = 1 is the object in
/// the `k8s\0` envelope), the same events as a JSON watch; Tables stay JSON.
#[tokio::test]
async fn a_watch_preferring_protobuf_is_framed_watch_events() {
    let (h, http) = start().await;
    const PB: &str = "application/vnd.kubernetes.protobuf, application/json";
    let (status, headers, mut pb) = http.watch_with_accept(&format!("{CMS}?watch=1"), PB).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let (_, _, mut js) = http.watch(&format!("{CMS}?watch=1")).await;
    h.create(default_cm("a", json!({"app": "x"}))).unwrap();
    let mut changed = default_cm("a", json!({"app": "y"}));
    changed["data"] = json!({"k": "v"});
    assert_eq!(http.put(&format!("{CMS}/a"), &changed).await.status, 200);
    h.delete("v1", "ConfigMap", Some("default"), "a").unwrap();
    for want in ["ADDED", "MODIFIED", "DELETED"] {
        let frame = pb.next_frame_within(STEP).await.expect("a frame");
        let event = pb_fields(&frame);
        assert_eq!(event[0], (1, want.as_bytes().to_vec()));
        assert_eq!(event[1].0, 2);
        let raw = pb_fields(&event[1].1);
        assert_eq!(raw[0].0, 1);
        assert!(raw[0].1.starts_with(b"k8s\0"), "the object in its envelope");
        let object = kwh_emulator::protobuf::decode(&raw[0].1).expect("decodes");
        let line = js.next_within(STEP).await.expect("a JSON event");
        assert_eq!(line["type"], want);
        assert_eq!(object, line["object"], "{want}");
    }
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io, application/vnd.kubernetes.protobuf";
    let (_, headers, _) = http
        .watch_with_accept(&format!("{CMS}?watch=1"), table)
        .await;
    assert_eq!(headers["content-type"], "application/json");
    h.shutdown().await;
}

#[tokio::test]
async fn yaml_bodies_are_accepted_and_protobuf_is_415() {
    let (h, http) = start().await;
    let y = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  k: v\n";
    let r = http
        .send(Method::POST, CMS, Some("application/yaml"), y.as_bytes())
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["data"]["k"], "v");
    let r = http
        .send(
            Method::POST,
            CMS,
            Some("application/vnd.kubernetes.protobuf"),
            b"k8s\0",
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    h.shutdown().await;
}

#[tokio::test]
async fn send_initial_events_with_an_rv_still_lists_then_bookmarks() {
    let (h, http) = start().await;
    h.create(default_cm("a", json!({}))).unwrap();
    h.create(default_cm("b", json!({}))).unwrap();
    let rv = h.current_resource_version();
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=5"))
        .await;
    for _ in 0..2 {
        assert_eq!(ev.next_within(STEP).await.unwrap()["type"], "ADDED");
    }
    let b = ev.next_within(STEP).await.unwrap();
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // sendInitialEvents=false without an RV: only changes.
    drop(ev);
    wait_for(|| h.stats().open_watches_total() == 0, "first watch closed").await;
    let (_, _, mut ev) = http
        .watch(&format!("{CMS}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&timeoutSeconds=5"))
        .await;
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    h.create(default_cm("c", json!({}))).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "c");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_with_one_rv_have_exactly_one_winner() {
    let (h, http) = start().await;
    let cur = h.create(default_cm("race", json!({}))).unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let http = http.clone();
        let mut v = cur.clone();
        v["data"]["k"] = format!("w{i}").into();
        tasks.push(tokio::spawn(async move {
            http.put(&format!("{CMS}/race"), &v).await.status.as_u16()
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(tokio::time::timeout(STEP, t).await.unwrap().unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 409).count(), 15, "{codes:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watchers_see_the_same_events_in_order() {
    let (h, http) = start().await;
    let mut watchers = Vec::new();
    for _ in 0..20 {
        watchers.push(
            http.watch(&format!(
                "{CMS}?watch=1&resourceVersion=1&timeoutSeconds=30"
            ))
            .await
            .2,
        );
    }
    for i in 0..50 {
        h.create(default_cm(&format!("c{i:02}"), json!({})))
            .unwrap();
    }
    for ev in &mut watchers {
        for i in 0..50 {
            let e = ev.next_within(STEP).await.unwrap();
            assert_eq!(e["object"]["metadata"]["name"], format!("c{i:02}"));
        }
    }
    h.shutdown().await;
}

#[tokio::test]
async fn deprecated_watch_path_prefix_is_served() {
    let (h, http) = start().await;
    let (status, _, mut ev) = http
        .watch("/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=5")
        .await;
    assert_eq!(status, 200);
    wait_for(|| h.stats().open_watches_total() == 1, "watch open").await;
    h.create(default_cm("a", json!({}))).unwrap();
    assert_eq!(ev.next_within(STEP).await.unwrap()["type"], "ADDED");
    assert_eq!(
        http.get("/api/v1/watch/namespaces/default/configmaps/a")
            .await
            .status,
        404
    );
    h.shutdown().await;
}

#[tokio::test]
async fn watch_as_table_sends_one_row_tables() {
    let (h, http) = start().await;
    h.create(default_cm("t", json!({}))).unwrap();
    let (_, _, mut ev) = http
        .watch_with_accept(
            &format!("{CMS}?watch=1&timeoutSeconds=5"),
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .await;
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["kind"], "Table");
    assert_eq!(e["object"]["rows"][0]["cells"][0], "t");
    assert_eq!(e["object"]["rows"][0]["object"]["metadata"]["name"], "t");
    h.shutdown().await;
}

#[tokio::test]
async fn get_as_table_is_a_one_row_table() {
    let (h, http) = start().await;
    h.create(default_cm("g", json!({}))).unwrap();
    let r = http
        .get_with_accept(
            &format!("{CMS}/g"),
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .await
        .json();
    assert_eq!(
        (r["kind"].as_str(), r["rows"][0]["cells"][0].as_str()),
        (Some("Table"), Some("g"))
    );
    let plain = http.get(&format!("{CMS}/g")).await.json();
    assert_eq!(plain["kind"], "ConfigMap");
    h.shutdown().await;
}

/// What client-go's metadata informers and kube-rs's `metadata_watcher` send: protobuf first,
/// then JSON metadata, then plain JSON.
const META_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

#[tokio::test]
async fn metadata_only_list_pages_carry_each_objects_whole_metadata_and_nothing_else() {
    let (h, http) = start().await;
    for n in ["m1", "m2", "m3"] {
        h.create(default_cm(n, json!({"app": n}))).unwrap();
    }
    let plain = http.get(CMS).await.json();
    let page = http
        .get_with_accept(&format!("{CMS}?limit=2"), META_LIST)
        .await;
    assert_eq!(page.status, 200);
    let page = page.json();
    assert_eq!(
        (page["kind"].as_str(), page["apiVersion"].as_str()),
        (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
    );
    // The list's own metadata is the objects' list's: the continue token pages on as usual.
    let token = page["metadata"]["continue"]
        .as_str()
        .expect("a continue token");
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for (got, full) in items.iter().zip(plain["items"].as_array().unwrap()) {
        assert_eq!(
            keys(got),
            ["apiVersion", "kind", "metadata"],
            "no data: {got}"
        );
        assert_eq!(got["kind"], "PartialObjectMetadata");
        assert_eq!(got["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(got["metadata"], full["metadata"]);
    }
    let rest = http
        .get_with_accept(&format!("{CMS}?limit=2&continue={token}"), META_LIST)
        .await
        .json();
    assert_eq!(rest["items"][0]["metadata"]["name"], "m3");
    assert_eq!(rest["items"][0]["kind"], "PartialObjectMetadata");
    // A plain list is unchanged.
    assert_eq!(plain["kind"], "ConfigMapList");
    assert_eq!(plain["items"][0]["data"]["k"], "m1");
    h.shutdown().await;
}

#[tokio::test]
async fn metadata_only_watch_and_get_send_partial_object_metadata_bookmarks_included() {
    let (h, http) = start().await;
    h.create(default_cm("w", json!({}))).unwrap();
    let full = http.get(&format!("{CMS}/w")).await.json();
    let got = http.get_with_accept(&format!("{CMS}/w"), META).await.json();
    assert_eq!(keys(&got), ["apiVersion", "kind", "metadata"]);
    assert_eq!(got["kind"], "PartialObjectMetadata");
    assert_eq!(got["metadata"], full["metadata"]);

    let (_, _, mut ev) = http
        .watch_with_accept(
            &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5"),
            META,
        )
        .await;
    let added = ev.next_within(STEP).await.unwrap();
    assert_eq!(added["type"], "ADDED");
    assert_eq!(keys(&added["object"]), ["apiVersion", "kind", "metadata"]);
    assert_eq!(added["object"]["metadata"], full["metadata"]);
    let end = ev.next_within(STEP).await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let mut changed = full.clone();
    changed["data"]["k"] = "changed".into();
    assert_eq!(http.put(&format!("{CMS}/w"), &changed).await.status, 200);
    let modified = ev.next_within(STEP).await.unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["kind"], "PartialObjectMetadata");
    assert!(modified["object"].get("data").is_none());
    assert_ne!(
        modified["object"]["metadata"]["resourceVersion"],
        full["metadata"]["resourceVersion"]
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watches_share_one_h2_connection() {
    let (h, _) = start().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut bodies = Vec::new();
    for _ in 0..300 {
        let uri = format!("{}{CMS}?watch=1&timeoutSeconds=30", h.base_url());
        let r = tokio::time::timeout(STEP, client.get(uri.parse().unwrap()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.version(), http::Version::HTTP_2);
        bodies.push(r.into_body());
    }
    assert!(h.wait_for_open_watches("/configmaps", 300, STEP).await);
    drop(bodies);
    assert!(h.wait_for_open_watches("/configmaps", 0, STEP).await);
    h.shutdown().await;
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_force_only_with_apply() {
    let (h, http) = start().await;
    h.create(default_cm("m", json!({}))).unwrap();
    // `data.k` is owned by the creator ("emulator"); apply a field nobody owns.
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\ndata:\n  other: applied\n";
    let r = http
        .patch(&format!("{CMS}/m"), "application/apply-patch+yaml", body)
        .await;
    assert_eq!(r.status, 422, "apply without fieldManager");
    let r = http
        .patch(
            &format!("{CMS}/m?force=true"),
            "application/merge-patch+json",
            "{}",
        )
        .await;
    assert_eq!(r.status, 422, "force on a non-apply patch");
    let r = http
        .patch(
            &format!("{CMS}/m?fieldManager=me"),
            "application/apply-patch+yaml",
            body,
        )
        .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(
        (v["data"]["k"].as_str(), v["data"]["other"].as_str()),
        (Some("m"), Some("applied"))
    );
    // Changing the creator's field conflicts (409) unless forced.
    let steal = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\ndata:\n  k: mine\n";
    let r = http
        .patch(
            &format!("{CMS}/m?fieldManager=me"),
            "application/apply-patch+yaml",
            steal,
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["reason"].as_str()),
        (409, Some("Conflict"))
    );
    let r = http
        .patch(
            &format!("{CMS}/m?fieldManager=me&force=true"),
            "application/apply-patch+yaml",
            steal,
        )
        .await;
    assert_eq!(r.status, 200);
    let mf = v["metadata"]["managedFields"].as_array().unwrap();
    assert!(
        mf.iter()
            .any(|e| e["manager"] == "me" && e["operation"] == "Apply"),
        "{mf:?}"
    );
    // Apply creates when the object is missing.
    let body = body.replace("name: m", "name: n");
    let r = http
        .patch(
            &format!("{CMS}/n?fieldManager=me"),
            "application/apply-patch+yaml",
            &body,
        )
        .await;
    assert_eq!(r.status, 201);
    h.shutdown().await;
}
