//! Golden tests: the emulator's answers against the captured kube-apiserver v1.26.1 samples —
//! status codes, Status bodies, list metadata, watch framing and headers (spec section 6).

mod emulator_common;

use std::time::Duration;

use base64::Engine;
use emulator_common::*;
use kwh_emulator::{Emulator, EmulatorHandle};
use serde_json::{json, Value};

/// An emulator and an HTTP/2 client: the samples were captured over HTTP/2, so their headers
/// compare as they are.
async fn start() -> (EmulatorHandle, Http) {
    let h = Emulator::builder().start().await.unwrap();
    let http = Http::h2(h.base_url());
    (h, http)
}

/// The sample set: namespace `samples` with pre-1..pre-5 labelled sample=yes.
async fn seeded() -> (EmulatorHandle, Http) {
    let (h, http) = start().await;
    h.create(ns("samples")).unwrap();
    for i in 1..=5 {
        h.create(cm("samples", &format!("pre-{i}"), json!({"sample": "yes"})))
            .unwrap();
    }
    (h, http)
}

fn decode_token(t: &str) -> Value {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

#[tokio::test]
async fn error_401_unauthorized_matches_sample() {
    let h = Emulator::builder()
        .token(Some("sekret".into()))
        .start()
        .await
        .unwrap();
    let mut http = Http::h2(h.base_url());
    let r = http.get("/api/v1/namespaces/samples/configmaps").await;
    assert_eq!(r.status, 401);
    assert_head_matches("error-401-unauthorized", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-401-unauthorized.json"));
    http.token = Some("wrong".into());
    assert_eq!(http.get("/api").await.status, 401);
    http.token = Some("sekret".into());
    assert_eq!(http.get("/api").await.status, 200);
    h.shutdown().await;
}

#[tokio::test]
async fn error_404_notfound_and_no_namespace_match_samples() {
    let (h, http) = seeded().await;
    let r = http
        .get("/api/v1/namespaces/samples/configmaps/does-not-exist")
        .await;
    assert_eq!(r.status, 404);
    assert_head_matches("error-404-notfound", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-404-notfound.json"));
    let r = http.get("/api/v1/namespaces/nope/configmaps/x").await;
    assert_head_matches("error-404-no-namespace", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-404-no-namespace.json"));
    // Creating into a missing namespace is a 404 naming the namespace.
    let r = http
        .post(
            "/api/v1/namespaces/nope/configmaps",
            &cm("nope", "x", json!({})),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "namespaces \"nope\" not found");
    h.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_answer_404_status() {
    let (h, http) = start().await;
    for p in [
        "/api/v1/nothings",
        "/apis/nope.io/v1",
        "/apis/apps/v9/deployments",
        "/x",
    ] {
        let r = http.get(p).await;
        assert_eq!(r.status, 404, "{p}");
        let v = r.json();
        assert_eq!(
            (v["reason"].as_str(), v["code"].as_u64()),
            (Some("NotFound"), Some(404))
        );
    }
    h.shutdown().await;
}

#[tokio::test]
async fn error_409_alreadyexists_and_stale_rv_match_samples() {
    let (h, http) = seeded().await;
    let r = http
        .post(
            "/api/v1/namespaces/samples/configmaps",
            &cm("samples", "pre-1", json!({})),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_head_matches("error-409-alreadyexists", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-409-alreadyexists.json"));
    let cur = http
        .get("/api/v1/namespaces/samples/configmaps/pre-1")
        .await
        .json();
    let mut first = cur.clone();
    first["data"]["k"] = "changed".into();
    let r = http
        .put("/api/v1/namespaces/samples/configmaps/pre-1", &first)
        .await;
    assert_eq!(r.status, 200);
    let mut stale = cur;
    stale["data"]["k"] = "again".into();
    let r = http
        .put("/api/v1/namespaces/samples/configmaps/pre-1", &stale)
        .await;
    assert_eq!(r.status, 409);
    assert_head_matches("error-409-conflict-stale-rv", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-409-conflict-stale-rv.json"));
    h.shutdown().await;
}

#[tokio::test]
async fn error_422_invalid_matches_sample() {
    let (h, http) = seeded().await;
    let r = http
        .post(
            "/api/v1/namespaces/samples/configmaps",
            &cm("samples", "Bad_Name", json!({})),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_head_matches("error-422-invalid", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-422-invalid.json"));
    let mut noname = cm("samples", "", json!({}));
    noname["metadata"].as_object_mut().unwrap().remove("name");
    let r = http
        .post("/api/v1/namespaces/samples/configmaps", &noname)
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn error_500_bad_rv_watch_matches_sample() {
    let (h, http) = seeded().await;
    let r = http
        .get("/api/v1/namespaces/samples/configmaps?watch=1&resourceVersion=notanumber")
        .await;
    assert_eq!(r.status, 500);
    assert_head_matches("error-500-bad-rv-watch", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-500-bad-rv-watch.json"));
    h.shutdown().await;
}

#[tokio::test]
async fn list_pages_match_samples_spec_6_2() {
    let (h, http) = seeded().await;
    let p1 = http
        .get("/api/v1/namespaces/samples/configmaps?limit=2")
        .await;
    assert_eq!(p1.status, 200);
    assert_head_matches("list-page1", p1.status, &p1.headers);
    let (p1, s1) = (p1.json(), sample_json("list-page1.json"));
    assert_eq!(keys(&p1), keys(&s1));
    assert_eq!(
        (&p1["kind"], &p1["apiVersion"]),
        (&s1["kind"], &s1["apiVersion"])
    );
    assert_eq!(keys(&p1["metadata"]), keys(&s1["metadata"]));
    assert_eq!(p1["metadata"]["remainingItemCount"], 3);
    let t1 = decode_token(p1["metadata"]["continue"].as_str().unwrap());
    let st1 = decode_token(s1["metadata"]["continue"].as_str().unwrap());
    assert_eq!(keys(&t1), keys(&st1));
    assert_eq!((&t1["v"], &t1["start"]), (&st1["v"], &st1["start"]));
    assert_eq!(
        t1["rv"].to_string(),
        p1["metadata"]["resourceVersion"].as_str().unwrap()
    );
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&p1), names(&s1));
    // Item metadata carries the same fields (managedFields included), and the managedFields
    // entry has the sample's shape.
    let (item, sitem) = (&p1["items"][0], &s1["items"][0]);
    assert_eq!(keys(&item["metadata"]), keys(&sitem["metadata"]));
    assert_eq!(
        keys(&item["metadata"]["managedFields"][0]),
        keys(&sitem["metadata"]["managedFields"][0])
    );
    assert_eq!(
        item["metadata"]["managedFields"][0]["fieldsV1"],
        sitem["metadata"]["managedFields"][0]["fieldsV1"]
    );

    // Writes between pages do not show: the pages are one snapshot.
    h.create(cm("samples", "pre-0", json!({}))).unwrap();
    let c = p1["metadata"]["continue"].as_str().unwrap();
    let p2 = http
        .get(&format!(
            "/api/v1/namespaces/samples/configmaps?limit=2&continue={c}"
        ))
        .await
        .json();
    let s2 = sample_json("list-page2.json");
    assert_eq!(keys(&p2["metadata"]), keys(&s2["metadata"]));
    assert_eq!(p2["metadata"]["remainingItemCount"], 1);
    assert_eq!(names(&p2), names(&s2));
    assert_eq!(
        decode_token(p2["metadata"]["continue"].as_str().unwrap())["start"],
        "pre-4\u{0}"
    );
    let c = p2["metadata"]["continue"].as_str().unwrap();
    let p3 = http
        .get(&format!(
            "/api/v1/namespaces/samples/configmaps?limit=2&continue={c}"
        ))
        .await
        .json();
    let s3 = sample_json("list-page3.json");
    assert_eq!(keys(&p3["metadata"]), keys(&s3["metadata"]));
    assert_eq!(names(&p3), names(&s3));
    assert_eq!(
        p3["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    h.shutdown().await;
}

#[tokio::test]
async fn list_rv0_ignores_limit_like_the_watch_cache() {
    let (h, http) = seeded().await;
    let r = http
        .get("/api/v1/namespaces/samples/configmaps?limit=2&resourceVersion=0")
        .await
        .json();
    let s = sample_json("list-rv0-from-watch-cache.json");
    assert_eq!(keys(&r["metadata"]), keys(&s["metadata"]));
    assert_eq!(
        r["items"].as_array().unwrap().len(),
        s["items"].as_array().unwrap().len()
    );
    h.shutdown().await;
}

#[tokio::test]
async fn list_with_selector_omits_remaining_item_count_spec_6_2() {
    let (h, http) = seeded().await;
    let r = http
        .get("/api/v1/namespaces/samples/configmaps?limit=2&labelSelector=sample%3Dyes")
        .await
        .json();
    assert!(r["metadata"]["continue"].is_string());
    assert!(r["metadata"].get("remainingItemCount").is_none());
    let r = http
        .get("/api/v1/configmaps?fieldSelector=metadata.name%3Dpre-3")
        .await
        .json();
    assert_eq!(r["items"].as_array().unwrap().len(), 1);
    let r = http
        .get("/api/v1/configmaps?labelSelector=a%20in%20(")
        .await;
    assert_eq!(r.status, 400);
    let r = http
        .get("/api/v1/configmaps?fieldSelector=data.k%3Dx")
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["message"], "field label not supported: data.k");
    h.shutdown().await;
}

#[tokio::test]
async fn list_410_exact_rv_and_expired_continue_match_samples_spec_6_6() {
    let (h, http) = seeded().await;
    let p1 = http
        .get("/api/v1/namespaces/samples/configmaps?limit=2")
        .await
        .json();
    let rv = p1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // Exact at the current RV works before compaction.
    let ok = http
        .get(&format!(
            "/api/v1/namespaces/samples/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(ok.status, 200);
    h.create(cm("samples", "after", json!({}))).unwrap();
    h.faults().compact_history();
    let r = http
        .get(&format!(
            "/api/v1/namespaces/samples/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(r.status, 410);
    assert_head_matches("list-410-exact-rv", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("list-410-exact-rv.json"));
    let c = p1["metadata"]["continue"].as_str().unwrap();
    let r = http
        .get(&format!(
            "/api/v1/namespaces/samples/configmaps?limit=2&continue={c}"
        ))
        .await;
    assert_eq!(r.status, 410);
    assert_head_matches("list-410-expired-continue", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("list-410-expired-continue.json"));
    // The inconsistent token resumes at the latest state.
    let c = r.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = http
        .get(&format!(
            "/api/v1/namespaces/samples/configmaps?limit=10&continue={c}"
        ))
        .await;
    assert_eq!(r.status, 200);
    let names: Vec<_> = r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["pre-3", "pre-4", "pre-5"]);
    h.shutdown().await;
}

#[tokio::test]
async fn list_as_table_has_the_sample_shape() {
    let (h, http) = seeded().await;
    let r = http
        .get_with_accept(
            "/api/v1/namespaces/samples/configmaps?limit=2",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .await;
    assert_eq!(r.status, 200);
    let (t, s) = (r.json(), sample_json("list-as-table.json"));
    assert_eq!(
        (&t["kind"], &t["apiVersion"]),
        (&s["kind"], &s["apiVersion"])
    );
    assert_eq!(keys(&t["metadata"]), keys(&s["metadata"]));
    assert_eq!(t["columnDefinitions"][0]["name"], "Name");
    assert_eq!(
        keys(&t["columnDefinitions"][0]),
        keys(&s["columnDefinitions"][0])
    );
    let (row, srow) = (&t["rows"][0], &s["rows"][0]);
    assert_eq!(keys(row), keys(srow));
    assert_eq!(row["cells"][0], "pre-1");
    assert_eq!(row["object"]["kind"], srow["object"]["kind"]);
    assert_eq!(row["object"]["metadata"]["name"], "pre-1");
    h.shutdown().await;
}

#[tokio::test]
async fn watch_stream_framing_matches_sample_spec_6_3_6_4() {
    let (h, http) = seeded().await;
    let (status, headers, mut ev) = http
        .watch("/api/v1/namespaces/samples/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=5")
        .await;
    assert_eq!(status, 200);
    // Streamed: no content-length, and over HTTP/2 (as captured) no transfer-encoding either.
    assert_head_matches("watch-stream", status, &headers);
    let sample: Vec<Value> = sample("watch-stream.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut synthetic = Vec::new();
    for _ in 0..5 {
        let e = ev.next_within(STEP).await.unwrap();
        assert_eq!(keys(&e), ["object", "type"]);
        assert_eq!(e["type"], "ADDED");
        synthetic.push(e["object"]["metadata"]["name"].as_str().unwrap().to_owned());
    }
    synthetic.sort();
    assert_eq!(synthetic, ["pre-1", "pre-2", "pre-3", "pre-4", "pre-5"]);
    assert_eq!(
        keys(&synthetic_obj(&sample)),
        ["apiVersion", "data", "kind", "metadata"]
    );
    let live = h
        .create(cm("samples", "live-1", json!({"sample": "yes"})))
        .unwrap();
    let mut changed = live.clone();
    changed["data"]["k"] = "b".into();
    h.update(changed).unwrap();
    h.delete("v1", "ConfigMap", Some("samples"), "live-1")
        .unwrap();
    let types: Vec<String> = {
        let mut t = Vec::new();
        for _ in 0..3 {
            t.push(
                ev.next_within(STEP).await.unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        t
    };
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    // A bookmark about 2 s before the timeout, shaped like the sample's, then the end.
    let b = ev.next_within(STEP).await.unwrap();
    let sb = sample.iter().find(|e| e["type"] == "BOOKMARK").unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(keys(&b["object"]), keys(&sb["object"]));
    assert_eq!(
        keys(&b["object"]["metadata"]),
        keys(&sb["object"]["metadata"])
    );
    assert_eq!(b["object"]["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(
        b["object"]["metadata"]["resourceVersion"].as_str().unwrap(),
        h.current_resource_version().to_string()
    );
    assert_eq!(
        ev.next_within(STEP).await,
        None,
        "stream ends at timeoutSeconds"
    );
    h.shutdown().await;
}

fn synthetic_obj(sample: &[Value]) -> Value {
    sample[0]["object"].clone()
}

#[tokio::test]
async fn watch_from_list_rv_has_no_synthetic_events() {
    let (h, http) = seeded().await;
    let list = http
        .get("/api/v1/namespaces/samples/configmaps")
        .await
        .json();
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let (_, _, mut ev) = http
        .watch(&format!(
            "/api/v1/namespaces/samples/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=5"
        ))
        .await;
    h.create(cm("samples", "new", json!({}))).unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("new"))
    );
    h.shutdown().await;
}

#[tokio::test]
async fn watch_410_old_rv_is_200_one_error_event_and_close() {
    let h = Emulator::builder().history_window(3).start().await.unwrap();
    let http = Http::h2(h.base_url());
    h.create(ns("samples")).unwrap();
    for i in 0..10 {
        h.create(cm("samples", &format!("c{i}"), json!({})))
            .unwrap();
    }
    let (status, headers, mut ev) = http
        .watch("/api/v1/namespaces/samples/configmaps?watch=1&resourceVersion=1")
        .await;
    assert_head_matches("watch-410-old-rv", status, &headers);
    let e = ev.next_within(STEP).await.unwrap();
    let s: Value =
        serde_json::from_str(sample("watch-410-old-rv.jsonl").lines().next().unwrap()).unwrap();
    assert_eq!(keys(&e), keys(&s));
    assert_eq!(keys(&e["object"]), keys(&s["object"]));
    assert_eq!(e["type"], s["type"]);
    for f in ["kind", "apiVersion", "status", "reason", "code"] {
        assert_eq!(e["object"][f], s["object"][f], "{f}");
    }
    let msg = e["object"]["message"].as_str().unwrap();
    assert!(msg.starts_with("too old resource version: 1 ("), "{msg}");
    assert_eq!(ev.next_within(STEP).await, None);
    h.shutdown().await;
}

/// An etcd compaction does not expire watches: a watch from an RV older than the compaction
/// is still served (200 and its events, no 410) from the watch cache, as the recorded
/// `watch-from-compacted-rv-50478-via-watch-cache` shows, while an Exact LIST at that RV is
/// 410 (above). The watch 410 is the watch cache's own window (`expire_watch_history`).
#[tokio::test]
async fn a_watch_from_a_compacted_rv_is_served_from_the_watch_cache() {
    let (h, http) = seeded().await;
    let old = h.current_resource_version();
    let mut pre1 = h.get("v1", "ConfigMap", Some("samples"), "pre-1").unwrap();
    pre1["data"] = json!({"k": "changed"});
    h.update(pre1).unwrap();
    h.faults().compact_history();
    assert_eq!(h.faults().delivered().compacted, 1);
    let (status, headers, mut ev) = http
        .watch(&format!(
            "/api/v1/namespaces/samples/configmaps?watch=1&resourceVersion={old}&timeoutSeconds=5"
        ))
        .await;
    assert_head_matches("watch-stream", status, &headers);
    let recorded: Value = serde_json::from_str(
        sample("watch-from-compacted-rv-50478-via-watch-cache.jsonl")
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let e = ev.next_within(STEP).await.unwrap();
    assert_eq!(keys(&e), keys(&recorded));
    assert_eq!(
        (&e["type"], &recorded["type"]),
        (&json!("MODIFIED"), &json!("MODIFIED"))
    );
    assert_eq!(e["object"]["metadata"]["name"], "pre-1");
    assert_eq!(e["object"]["data"]["k"], "changed");
    h.shutdown().await;
}

#[tokio::test]
async fn watch_rv1_on_fresh_store_replays_everything() {
    let (h, http) = seeded().await;
    let (status, headers, mut ev) = http
        .watch("/api/v1/namespaces/samples/configmaps?watch=1&resourceVersion=1&timeoutSeconds=5")
        .await;
    assert_head_matches("watch-rv1-not-expired-on-fresh-cache", status, &headers);
    // As recorded: every event since RV 1 replayed in order, each an ADDED of the same shape
    // (no 410: on a fresh cache RV 1 is inside the window).
    let recorded: Vec<Value> = sample("watch-rv1-not-expired-on-fresh-cache.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(recorded.iter().take(5).all(|e| e["type"] == "ADDED"));
    for i in 1..=5 {
        let e = ev.next_within(STEP).await.unwrap();
        assert_eq!(keys(&e), keys(&recorded[i - 1]));
        assert_eq!(keys(&e["object"]), keys(&recorded[i - 1]["object"]));
        assert_eq!(e["type"], "ADDED");
        assert_eq!(e["object"]["metadata"]["name"], format!("pre-{i}"));
    }
    h.shutdown().await;
}

#[tokio::test]
async fn discovery_documents_have_the_sample_shape() {
    let (h, http) = start().await;
    let v = http.get("/version").await.json();
    assert_eq!(keys(&v), keys(&sample_json("version.json")));
    let api = http.get("/api").await.json();
    let s = sample_json("discovery-api.json");
    assert_eq!(keys(&api), keys(&s));
    assert_eq!(api["versions"], s["versions"]);
    assert_eq!(
        api["serverAddressByClientCIDRs"][0]["serverAddress"],
        h.addr().to_string()
    );
    let v1 = http.get("/api/v1").await.json();
    let s1 = sample_json("discovery-api-v1.json");
    assert_eq!(
        (&v1["kind"], &v1["groupVersion"]),
        (&s1["kind"], &s1["groupVersion"])
    );
    let find = |doc: &Value, n: &str| {
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .cloned()
            .unwrap()
    };
    for name in [
        "configmaps",
        "namespaces",
        "pods",
        "pods/status",
        "secrets",
        "services",
    ] {
        let (ours, theirs) = (find(&v1, name), find(&s1, name));
        for f in [
            "name",
            "namespaced",
            "kind",
            "verbs",
            "shortNames",
            "singularName",
        ] {
            assert_eq!(ours.get(f), theirs.get(f), "{name}.{f}");
        }
    }
    let apis = http.get("/apis").await.json();
    let sa = sample_json("discovery-apis.json");
    assert_eq!(keys(&apis), keys(&sa));
    let group = |doc: &Value, n: &str| {
        doc["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == n)
            .cloned()
    };
    for g in [
        "apps",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert_eq!(group(&apis, g), group(&sa, g), "{g}");
    }
    let apps = http.get("/apis/apps/v1").await.json();
    assert_eq!(apps["groupVersion"], "apps/v1");
    assert!(apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "deployments/status"));
    // Aggregated discovery is answered with the legacy document as plain JSON (kubectl falls back).
    let r = http
        .get_with_accept(
            "/api",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .await;
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(r.json()["kind"], "APIVersions");
    h.shutdown().await;
}

#[tokio::test]
async fn watch_list_end_bookmark_and_422_spec_6_7() {
    let (h, http) = seeded().await;
    let r = http
        .get("/api/v1/namespaces/samples/configmaps?watch=1&sendInitialEvents=true")
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["reason"], "Invalid");
    let (status, _, mut ev) = http
        .watch("/api/v1/namespaces/samples/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5")
        .await;
    assert_eq!(status, 200);
    for _ in 0..5 {
        assert_eq!(ev.next_within(STEP).await.unwrap()["type"], "ADDED");
    }
    let b = ev.next_within(STEP).await.unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(
        b["object"]["metadata"]["resourceVersion"].as_str().unwrap(),
        h.current_resource_version().to_string()
    );
    let _ = Duration::ZERO;
    h.shutdown().await;
}
