//! Emulator behaviour that controllers lean on, checked over HTTP as kube-apiserver v1.26 behaves:
//! a cluster-scoped custom resource with a status subresource owning namespaced objects,
//! finalizers and deletionTimestamp (no new finalizers once deleting, generation bumped when the
//! deletion is marked), garbage collection through a finalizer's removal, server-side apply with
//! owner references, the kinds whose DELETE orphans dependents by default (batch/v1 Jobs), and
//! namespaces that terminate while finalizers hold some of their contents.

mod emulator_common;

use emulator_common::*;
use http::Method;
use kwh_emulator::{Emulator, EmulatorHandle};
use serde_json::{json, Value};

async fn start() -> (EmulatorHandle, Http) {
    let h = Emulator::builder().start().await.expect("emulator starts");
    let http = Http::new(h.base_url());
    (h, http)
}

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const GADGETS: &str = "/apis/example.com/v1/gadgets";

/// A cluster-scoped kind with a status subresource, like a namespace-wide policy object.
fn cluster_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}}]}})
}

fn owner_ref(o: &Value) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

#[tokio::test]
async fn cluster_scoped_custom_resource_with_status_subresource() {
    let (h, http) = start().await;
    assert_eq!(http.post(CRDS, &cluster_crd()).await.status, 201);
    let discovery = http.get("/apis/example.com/v1").await.json();
    assert_eq!(discovery["resources"][0]["namespaced"], false);

    let g = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"size": 1}, "status": {"ignored": true}});
    let r = http.post(GADGETS, &g).await;
    assert_eq!(r.status, 201);
    let created = r.json();
    assert!(created["metadata"].get("namespace").is_none());
    assert!(created.get("status").is_none(), "status ignored on create");
    assert_eq!(created["metadata"]["generation"], 1);

    // A status write changes status only and leaves the generation alone.
    let mut s = created.clone();
    s["status"] = json!({"managed": ["a/b"]});
    s["spec"]["size"] = 9.into();
    let r = http.put(&format!("{GADGETS}/g/status"), &s).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["status"]["managed"][0], "a/b");
    assert_eq!(v["spec"]["size"], 1, "spec untouched by /status");
    assert_eq!(v["metadata"]["generation"], 1);

    // A spec change bumps it; the status written before stays.
    let r = http
        .patch(
            &format!("{GADGETS}/g"),
            "application/merge-patch+json",
            r#"{"spec":{"size":2}}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["metadata"]["generation"], 2);
    assert_eq!(v["status"]["managed"][0], "a/b");
    h.shutdown().await;
}

#[tokio::test]
async fn finalizer_holds_a_custom_resource_and_its_removal_collects_namespaced_dependents() {
    let (h, http) = start().await;
    assert_eq!(http.post(CRDS, &cluster_crd()).await.status, 201);
    h.create(ns("team-a")).expect("namespace");
    let g = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "finalizers": ["example.com/cleanup"]}, "spec": {}});
    let owner = http.post(GADGETS, &g).await.json();

    // A namespaced dependent of a cluster-scoped owner, written by server-side apply.
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "defaults", "namespace": "team-a",
            "ownerReferences": [owner_ref(&owner)]},
        "data": {"a": "1"}});
    let r = http
        .patch(
            "/api/v1/namespaces/team-a/configmaps/defaults?fieldManager=ctl",
            "application/apply-patch+yaml",
            &applied.to_string(),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json()["metadata"]["ownerReferences"][0]["uid"],
        owner["metadata"]["uid"]
    );

    let r = http.delete(&format!("{GADGETS}/g")).await;
    assert_eq!(r.status, 200);
    let marked = r.json();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        marked["metadata"]["generation"], 2,
        "marking the deletion bumps the generation"
    );
    assert!(
        h.get("v1", "ConfigMap", Some("team-a"), "defaults")
            .is_some(),
        "dependents stay while the owner is held by its finalizer"
    );

    // Nothing may add a finalizer to an object being deleted.
    let r = http
        .patch(
            &format!("{GADGETS}/g"),
            "application/merge-patch+json",
            r#"{"metadata":{"finalizers":["example.com/cleanup","example.com/other"]}}"#,
        )
        .await;
    assert_eq!(r.status, 422);
    let st = r.json();
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(
        st["details"]["causes"][0]["reason"], "FieldValueForbidden",
        "{st}"
    );
    assert_eq!(
        st["message"],
        "Gadget.example.com \"g\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/other\"}"
    );

    // Emptying the finalizers removes the owner, and the collector takes its dependents.
    let r = http
        .patch(
            &format!("{GADGETS}/g"),
            "application/merge-patch+json",
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(http.get(&format!("{GADGETS}/g")).await.status, 404);
    assert!(h
        .get("v1", "ConfigMap", Some("team-a"), "defaults")
        .is_none());
    h.shutdown().await;
}

#[tokio::test]
async fn apply_by_one_manager_updates_and_prunes_its_fields() {
    let (h, http) = start().await;
    h.create(ns("team-b")).expect("namespace");
    let path = "/api/v1/namespaces/team-b/resourcequotas/defaults?fieldManager=ctl&force=true";
    let q = |hard: Value| {
        json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "defaults", "namespace": "team-b"}, "spec": {"hard": hard}})
        .to_string()
    };
    let r = http
        .patch(
            path,
            "application/apply-patch+yaml",
            &q(json!({"pods": "10", "requests.cpu": "4"})),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = http
        .patch(
            path,
            "application/apply-patch+yaml",
            &q(json!({"pods": "20"})),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["spec"]["hard"],
        json!({"pods": "20"}),
        "a field the manager stopped applying is removed"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn namespaces_carry_their_name_label() {
    let (h, http) = start().await;
    let r = http.post("/api/v1/namespaces", &ns("labelled")).await;
    assert_eq!(r.status, 201);
    assert_eq!(
        r.json()["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "labelled"
    );
    let l = http
        .get("/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Dlabelled")
        .await
        .json();
    assert_eq!(l["items"].as_array().map(Vec::len), Some(1));
    h.shutdown().await;
}

fn job_and_pod(h: &EmulatorHandle, name: &str) {
    let job = h
        .create(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}))
        .expect("job");
    h.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-pod"), "namespace": "default",
            "ownerReferences": [owner_ref(&job)]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
        .expect("pod");
}

#[tokio::test]
async fn deleting_a_batch_v1_job_orphans_its_pods_unless_asked_otherwise() {
    let (h, http) = start().await;
    const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";

    job_and_pod(&h, "plain");
    assert_eq!(http.delete(&format!("{JOBS}/plain")).await.status, 200);
    let pod = h
        .get("v1", "Pod", Some("default"), "plain-pod")
        .expect("the pod is orphaned, not deleted");
    assert!(pod["metadata"]["ownerReferences"]
        .as_array()
        .is_none_or(Vec::is_empty));

    job_and_pod(&h, "background");
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "propagationPolicy": "Background"});
    let r = http
        .send(
            Method::DELETE,
            &format!("{JOBS}/background"),
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(h
        .get("v1", "Pod", Some("default"), "background-pod")
        .is_none());

    // Other kinds keep the background default.
    let owner = h.create(cm("default", "owner", json!({}))).expect("cm");
    let mut dep = cm("default", "dep", json!({}));
    dep["metadata"]["ownerReferences"] = json!([owner_ref(&owner)]);
    h.create(dep).expect("dep");
    assert_eq!(
        http.delete("/api/v1/namespaces/default/configmaps/owner")
            .await
            .status,
        200
    );
    assert!(h.get("v1", "ConfigMap", Some("default"), "dep").is_none());
    h.shutdown().await;
}

#[tokio::test]
async fn a_namespace_held_by_finalizers_terminates_and_refuses_new_content() {
    let (h, http) = start().await;
    h.create(ns("ending")).expect("namespace");
    let mut held = cm("ending", "held", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    h.create(held).expect("held");
    h.create(cm("ending", "free", json!({}))).expect("free");

    let r = http.delete("/api/v1/namespaces/ending").await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["status"]["phase"], "Terminating");
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        http.get("/api/v1/namespaces/ending").await.json()["status"]["phase"],
        "Terminating"
    );
    assert!(
        h.get("v1", "ConfigMap", Some("ending"), "free").is_none(),
        "contents without finalizers go at once"
    );
    let held = h
        .get("v1", "ConfigMap", Some("ending"), "held")
        .expect("held by its finalizer");
    assert!(held["metadata"]["deletionTimestamp"].is_string());

    // New content is refused while the namespace terminates, as NamespaceLifecycle does.
    let r = http
        .post(
            "/api/v1/namespaces/ending/configmaps",
            &cm("ending", "new", json!({})),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"new\" is forbidden: unable to create new content in namespace ending because it is being terminated",
            "reason": "Forbidden",
            "details": {"name": "new", "kind": "configmaps", "causes": [{
                "reason": "NamespaceTerminating",
                "message": "namespace ending is being terminated",
                "field": "metadata.namespace"}]},
            "code": 403})
    );

    // Releasing the last finalizer removes the object, and with it the namespace.
    let r = http
        .patch(
            "/api/v1/namespaces/ending/configmaps/held",
            "application/merge-patch+json",
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(http.get("/api/v1/namespaces/ending").await.status, 404);
    h.shutdown().await;
}
