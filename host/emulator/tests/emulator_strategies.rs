//! The differential test of the emulator's per-kind behaviour: the requests of the recorded
//! corpus (`apiserver-samples/strategies/`: a real kube-apiserver v1.26.1, one folder per kind,
//! its README) sent again to the emulator over HTTP, and every answer compared with the real
//! one: the status code, `metadata.generation`, whether `resourceVersion` moved, and the whole
//! object (managedFields included). Values the server allocates or draws at random (uids,
//! times, resourceVersions, cluster IPs, the token volume's suffix) are compared by shape, and a
//! uid the real server copied elsewhere (a Job's selector) must be the emulator's own uid there.
//!
//! The corpus keeps the answers, not the requests: the requests here are the minimal objects
//! and patches its README describes, chosen so that each answer is the one recorded. Where an
//! answer shows no change (a status patch of a field at its value), the request is one that
//! changes nothing; the main resource's status patch carries a value the status subresource
//! never set, so that "ignored there" is what is checked.

mod emulator_common;

use bytes::Bytes;
use emulator_common::*;
use http::{Method, Request};
use http_body_util::Full;
use kwh_emulator::Emulator;
use serde_json::{json, Value};

/// The recording's client: its User-Agent is the managers' name in managedFields.
const USER_AGENT: &str = "Python-urllib/3.11";
const NS: &str = "strategies2";

/// One kind of the corpus: its folder, collection path, the object created, and the patches
/// of its steps 5 (spec or data), 6 (status, to `/status`) and 7 (to the main resource).
struct Case {
    folder: &'static str,
    collection: String,
    create: Value,
    spec: Option<(&'static str, Value)>,
    status: Option<Value>,
    status_via_main: Option<Value>,
}

fn pod_spec(restart: Option<&str>) -> Value {
    let mut s = json!({"containers": [{"name": "c", "image": "nginx:1.25"}]});
    if let Some(r) = restart {
        s["restartPolicy"] = r.into();
    }
    s
}

fn template() -> Value {
    json!({"metadata": {"labels": {"app": "x"}}, "spec": pod_spec(None)})
}

fn object(api_version: &str, kind: &str, name: &str, rest: Value) -> Value {
    let mut v = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
    if let (Some(o), Some(r)) = (v.as_object_mut(), rest.as_object()) {
        o.extend(r.clone());
    }
    v
}

fn path(group_version: &str, plural: &str) -> String {
    let root = if group_version == "v1" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{group_version}")
    };
    format!("{root}/namespaces/{NS}/{plural}")
}

fn selector() -> Value {
    json!({"matchLabels": {"app": "x"}})
}

fn cases() -> Vec<Case> {
    let mut all = apps_cases();
    all.extend(other_cases());
    all
}

/// The apps group's kinds of the corpus.
#[rustfmt::skip]
fn apps_cases() -> Vec<Case> {
    let apps = |folder, plural, kind: &str, spec: Value, five: Value, status: Option<Value>, main: Option<Value>| Case {
        folder,
        collection: path("apps/v1", plural),
        create: object("apps/v1", kind, &format!("s-{folder}"), json!({"spec": spec})),
        spec: Some(("5-spec", five)),
        status,
        status_via_main: main,
    };
    vec![
        apps("deployment", "deployments", "Deployment",
            json!({"selector": selector(), "template": template()}),
            json!({"spec": {"replicas": 2}}),
            Some(json!({"status": {"observedGeneration": 1, "replicas": 1}})),
            Some(json!({"status": {"replicas": 5}}))),
        apps("replicaset", "replicasets", "ReplicaSet",
            json!({"selector": selector(), "template": template()}),
            json!({"spec": {"replicas": 2}}),
            Some(json!({"status": {"replicas": 1}})),
            Some(json!({"status": {"replicas": 5}}))),
        apps("statefulset", "statefulsets", "StatefulSet",
            json!({"selector": selector(), "template": template(), "serviceName": "s"}),
            json!({"spec": {"replicas": 2}}),
            Some(json!({"status": {"replicas": 1}})),
            Some(json!({"status": {"replicas": 5}}))),
        apps("daemonset", "daemonsets", "DaemonSet",
            json!({"selector": selector(), "template": template()}),
            json!({"spec": {"minReadySeconds": 5}}),
            Some(json!({"status": {"numberReady": 0}})),
            Some(json!({"status": {"numberReady": 3}}))),
    ]
}

/// The kinds of the corpus other than the apps group's.
#[rustfmt::skip]
fn other_cases() -> Vec<Case> {
    vec![
        Case {
            folder: "job",
            collection: path("batch/v1", "jobs"),
            create: object("batch/v1", "Job", "s-job", json!({"spec": {"template": {"spec": pod_spec(Some("Never"))}}})),
            spec: Some(("5-spec", json!({"spec": {"parallelism": 2}}))),
            status: Some(json!({"status": {"active": 1}})),
            status_via_main: Some(json!({"status": {"active": 4}})),
        },
        Case {
            folder: "cronjob",
            collection: path("batch/v1", "cronjobs"),
            create: object("batch/v1", "CronJob", "s-cronjob", json!({"spec": {
                "schedule": "*/5 * * * *",
                "jobTemplate": {"spec": {"template": {"spec": pod_spec(Some("Never"))}}},
            }})),
            spec: Some(("5-spec", json!({"spec": {"suspend": true}}))),
            status: Some(json!({"status": {}})),
            status_via_main: Some(json!({"status": {"lastScheduleTime": "2026-11-28T05:00:00Z"}})),
        },
        Case {
            folder: "service",
            collection: path("v1", "services"),
            create: object("v1", "Service", "s-service", json!({"spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}})),
            spec: Some(("5-spec", json!({"spec": {"ports": [{"port": 81}]}}))),
            status: Some(json!({"status": {"loadBalancer": {}}})),
            status_via_main: Some(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})),
        },
        Case {
            folder: "pod",
            collection: path("v1", "pods"),
            create: object("v1", "Pod", "s-pod", json!({"spec": pod_spec(None)})),
            spec: Some(("5-spec", json!({"spec": {"activeDeadlineSeconds": 30}}))),
            status: Some(json!({"status": {"phase": "Running"}})),
            status_via_main: Some(json!({"status": {"phase": "Failed"}})),
        },
        Case {
            folder: "configmap",
            collection: path("v1", "configmaps"),
            create: object("v1", "ConfigMap", "s-configmap", json!({"data": {"a": "1"}})),
            spec: Some(("5-data", json!({"data": {"a": "2"}}))),
            status: None,
            status_via_main: None,
        },
        Case {
            folder: "secret",
            collection: path("v1", "secrets"),
            // stringData, which the server merges into data.
            create: object("v1", "Secret", "s-secret", json!({"stringData": {"a": "1"}})),
            spec: None,
            status: None,
            status_via_main: None,
        },
        Case {
            folder: "serviceaccount",
            collection: path("v1", "serviceaccounts"),
            create: object("v1", "ServiceAccount", "s-serviceaccount", json!({})),
            spec: None,
            status: None,
            status_via_main: None,
        },
        Case {
            folder: "persistentvolumeclaim",
            collection: path("v1", "persistentvolumeclaims"),
            create: object("v1", "PersistentVolumeClaim", "s-persistentvolumeclaim", json!({"spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            }})),
            spec: Some(("5-spec", json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}))),
            status: Some(json!({"status": {"phase": "Bound"}})),
            status_via_main: Some(json!({"status": {"phase": "Lost"}})),
        },
        Case {
            folder: "ingress",
            collection: path("networking.k8s.io/v1", "ingresses"),
            create: object("networking.k8s.io/v1", "Ingress", "s-ingresse", json!({"spec": {
                "defaultBackend": {"service": {"name": "s", "port": {"number": 80}}},
            }})),
            spec: Some(("5-spec", json!({"spec": {"ingressClassName": "nginx"}}))),
            status: Some(json!({"status": {"loadBalancer": {}}})),
            status_via_main: Some(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})),
        },
        Case {
            folder: "poddisruptionbudget",
            collection: path("policy/v1", "poddisruptionbudgets"),
            create: object("policy/v1", "PodDisruptionBudget", "s-poddisruptionbudget",
                json!({"spec": {"minAvailable": 1, "selector": selector()}})),
            spec: Some(("5-spec", json!({"spec": {"minAvailable": 2}}))),
            status: Some(json!({"status": {"desiredHealthy": 1}})),
            status_via_main: Some(json!({"status": {"desiredHealthy": 5}})),
        },
        Case {
            folder: "lease",
            collection: path("coordination.k8s.io/v1", "leases"),
            create: object("coordination.k8s.io/v1", "Lease", "s-lease", json!({"spec": {"holderIdentity": "a"}})),
            spec: Some(("5-spec", json!({"spec": {"holderIdentity": "b"}}))),
            status: None,
            status_via_main: None,
        },
        Case {
            folder: "role",
            collection: path("rbac.authorization.k8s.io/v1", "roles"),
            create: object("rbac.authorization.k8s.io/v1", "Role", "s-role", json!({"rules": [
                {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
            ]})),
            spec: None,
            status: None,
            status_via_main: None,
        },
    ]
}

/// A request as the recording's client sent it.
async fn send(http: &Http, method: Method, path: &str, ct: Option<&str>, body: &Value) -> Resp {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("{}{path}", http.base))
        .header("accept", "application/json")
        .header("user-agent", USER_AGENT);
    if let Some(ct) = ct {
        b = b.header("content-type", ct);
    }
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    http.send_req(b.body(Full::new(Bytes::from(body))).unwrap())
        .await
}

async fn create_namespace(http: &Http, name: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let r = send(
        http,
        Method::POST,
        "/api/v1/namespaces",
        Some("application/json"),
        &ns,
    )
    .await;
    assert_eq!(r.status, 201, "namespace {name}");
}

async fn merge_patch(http: &Http, path: &str, body: Value) -> Resp {
    send(
        http,
        Method::PATCH,
        path,
        Some("application/merge-patch+json"),
        &body,
    )
    .await
}

/// The recorded answer of `step` for `folder`, if the corpus has it.
fn recorded(folder: &str, step: &str) -> Option<(u16, Value)> {
    let p = repo_root().join(format!(
        "../shared/apiserver-samples/strategies/{folder}/{step}.json"
    ));
    let text = std::fs::read_to_string(p).ok()?;
    let v: Value = serde_json::from_str(&text).unwrap();
    Some((v["status"].as_u64().unwrap() as u16, v["body"].clone()))
}

fn is_time(s: &str) -> bool {
    s.len() == 20 && s.as_bytes()[4] == b'-' && s.ends_with('Z') && s.as_bytes()[10] == b'T'
}

fn is_service_ip(s: &str) -> bool {
    let o: Vec<u32> = s.split('.').filter_map(|p| p.parse().ok()).collect();
    // The default service range, 10.96.0.0/12.
    o.len() == 4 && o[0] == 10 && (96..112).contains(&o[1]) && o.iter().all(|x| *x < 256)
}

/// The differences between a recorded value and the emulator's, by path; values the server
/// allocates are compared by shape.
fn differences(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    let leaf = path.rsplit('.').next().unwrap_or("");
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                if !a.contains_key(k) || !b.contains_key(k) {
                    out.push(format!("{path}.{k}: want {x}, got {y}"));
                } else {
                    differences(&format!("{path}.{k}"), x, y, out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (Value::String(a), Value::String(b)) => {
            let same_shape = match leaf {
                "creationTimestamp" | "time" => is_time(a) && is_time(b),
                "resourceVersion" => b.parse::<u64>().is_ok(),
                "uid" => b.len() == 36,
                "clusterIP" => is_service_ip(a) == is_service_ip(b),
                _ if path.contains(".clusterIPs[") => is_service_ip(a) == is_service_ip(b),
                _ => {
                    a.starts_with("kube-api-access-")
                        && b.starts_with("kube-api-access-")
                        && a.len() == b.len()
                }
            };
            if a != b && !same_shape {
                out.push(format!("{path}: want {want}, got {got}"));
            }
        }
        _ if want != got => out.push(format!("{path}: want {want}, got {got}")),
        _ => {}
    }
}

/// The recorded body with its uid replaced by the emulator's (a uid copied elsewhere, as a
/// Job's selector, must be the object's own), and a volume named by the token's suffix made
/// the emulator's (its shape checked by `differences`).
fn expected(want: &Value, created_uid: Option<(&str, &str)>) -> Value {
    let mut text = want.to_string();
    if let Some((recorded, ours)) = created_uid {
        text = text.replace(recorded, ours);
    }
    serde_json::from_str(&text).unwrap()
}

struct Run<'a> {
    http: &'a Http,
    diffs: Vec<String>,
    /// The recorded and the emulator's uid of the object of the current kind.
    uids: Option<(String, String)>,
    /// The recorded and the emulator's resourceVersion after the last step that succeeded.
    last_rv: (Option<String>, Option<String>),
}

impl Run<'_> {
    fn compare(&mut self, folder: &str, step: &str, r: &Resp) {
        let Some((status, want)) = recorded(folder, step) else {
            self.diffs
                .push(format!("{folder}/{step}: not in the corpus"));
            return;
        };
        let got = r.json();
        if r.status.as_u16() != status {
            self.diffs.push(format!(
                "{folder}/{step}: status {} (want {status}): {got}",
                r.status
            ));
            return;
        }
        if status >= 300 {
            for f in ["kind", "status", "reason", "code"] {
                if want[f] != got[f] {
                    self.diffs.push(format!(
                        "{folder}/{step}: {f}: want {}, got {}",
                        want[f], got[f]
                    ));
                }
            }
            // Its first line: the real server adds a rendering of the Go values it compared.
            let first = |v: &Value| {
                v["message"]
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            };
            if first(&want) != first(&got) {
                self.diffs.push(format!(
                    "{folder}/{step}: message: want {:?}, got {:?}",
                    first(&want),
                    first(&got)
                ));
            }
            return;
        }
        if self.uids.is_none() {
            let uid = |v: &Value| v["metadata"]["uid"].as_str().unwrap_or("").to_owned();
            self.uids = Some((uid(&want), uid(&got)));
        }
        let uids = self.uids.as_ref().map(|(a, b)| (a.as_str(), b.as_str()));
        let want = expected(&want, uids);
        let mut out = Vec::new();
        differences("", &want, &got, &mut out);
        self.diffs
            .extend(out.into_iter().map(|d| format!("{folder}/{step}: {d}")));
        let rv = |v: &Value| v["metadata"]["resourceVersion"].as_str().map(str::to_owned);
        let (w, g) = (rv(&want), rv(&got));
        if let (Some(lw), Some(lg)) = &self.last_rv {
            if (w.as_ref() != Some(lw)) != (g.as_ref() != Some(lg)) {
                self.diffs.push(format!(
                    "{folder}/{step}: resourceVersion moved: want {}, got {}",
                    w.as_ref() != Some(lw),
                    g.as_ref() != Some(lg)
                ));
            }
        }
        self.last_rv = (w, g);
    }

    async fn case(&mut self, c: &Case) {
        self.uids = None;
        self.last_rv = (None, None);
        let http = self.http;
        let r = send(
            http,
            Method::POST,
            &c.collection,
            Some("application/json"),
            &c.create,
        )
        .await;
        self.compare(c.folder, "1-create", &r);
        let name = c.create["metadata"]["name"].as_str().unwrap();
        let item = format!("{}/{name}", c.collection);
        let r = send(http, Method::GET, &item, None, &Value::Null).await;
        self.compare(c.folder, "2-get", &r);
        let r = merge_patch(
            http,
            &item,
            json!({"metadata": {"annotations": {"x": "1"}}}),
        )
        .await;
        self.compare(c.folder, "3-annotate", &r);
        let r = merge_patch(http, &item, json!({"metadata": {"labels": {"l": "1"}}})).await;
        self.compare(c.folder, "4-label", &r);
        if let Some((step, body)) = &c.spec {
            let r = merge_patch(http, &item, body.clone()).await;
            self.compare(c.folder, step, &r);
        }
        if let Some(body) = &c.status {
            let r = merge_patch(http, &format!("{item}/status"), body.clone()).await;
            self.compare(c.folder, "6-status", &r);
        }
        if let Some(body) = &c.status_via_main {
            let r = merge_patch(http, &item, body.clone()).await;
            self.compare(c.folder, "7-status-via-main", &r);
        }
        let r = merge_patch(
            http,
            &item,
            json!({"metadata": {"annotations": {"x": "1"}}}),
        )
        .await;
        self.compare(c.folder, "8-noop-patch", &r);
    }
}

/// Spec: the per-kind strategies of kube-apiserver (defaults, generation, status, allocated and
/// immutable fields), as recorded; zero differences is the floor.
#[tokio::test]
async fn the_recorded_corpus_of_sixteen_kinds_is_answered_as_the_real_server_answered() {
    let h = Emulator::builder()
        .namespace_controller(true)
        .start()
        .await
        .unwrap();
    let http = Http::new(h.base_url());
    create_namespace(&http, NS).await;
    let mut run = Run {
        http: &http,
        diffs: Vec::new(),
        uids: None,
        last_rv: (None, None),
    };
    for c in cases() {
        run.case(&c).await;
    }
    assert!(
        run.diffs.is_empty(),
        "{} differences from the real server:\n{}",
        run.diffs.len(),
        run.diffs.join("\n")
    );
    h.shutdown().await;
}

/// Spec: the ServiceAccount admission plugin refuses a Pod whose namespace has no `default`
/// ServiceAccount (the namespace's controller had not made one yet), as recorded.
#[tokio::test]
async fn a_pod_in_a_namespace_without_its_default_service_account_is_forbidden() {
    let h = Emulator::builder()
        .namespace_controller(true)
        .start()
        .await
        .unwrap();
    let http = Http::new(h.base_url());
    create_namespace(&http, "strategies").await;
    // The emulator makes it as the controller-manager would; the recording's namespace had none.
    let sa = "/api/v1/namespaces/strategies/serviceaccounts/default";
    assert_eq!(
        send(&http, Method::DELETE, sa, None, &Value::Null)
            .await
            .status,
        200
    );
    let pod = object("v1", "Pod", "s-pod", json!({"spec": pod_spec(None)}));
    let r = send(
        &http,
        Method::POST,
        "/api/v1/namespaces/strategies/pods",
        Some("application/json"),
        &pod,
    )
    .await;
    let (status, want) = recorded("pod-without-serviceaccount", "1-create").unwrap();
    assert_eq!(r.status.as_u16(), status);
    assert_eq!(r.json(), want);
    h.shutdown().await;
}

/// Spec: a custom resource's structural schema prunes what it does not declare and fills in
/// its defaults, on create and on every update and patch, as the apiextensions server does.
#[tokio::test]
async fn a_custom_resource_is_pruned_and_defaulted_by_its_schema() {
    let h = Emulator::builder().start().await.unwrap();
    let http = Http::new(h.base_url());
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "default": 3},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}}]}});
    let r = send(
        &http,
        Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some("application/json"),
        &crd,
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"typo": 1, "labels": {"a": "b"}, "free": {"x": {"y": 1}}}, "extra": true});
    let r = send(&http, Method::POST, widgets, Some("application/json"), &w).await;
    assert_eq!(r.status, 201);
    let created = r.json();
    assert_eq!(
        created["spec"],
        json!({"size": 3, "labels": {"a": "b"}, "free": {"x": {"y": 1}}})
    );
    assert!(created.get("extra").is_none(), "{created}");
    let r = merge_patch(
        &http,
        &format!("{widgets}/w"),
        json!({"spec": {"size": null, "other": 2}}),
    )
    .await;
    let patched = r.json();
    assert_eq!(
        patched["spec"]["size"], 3,
        "a removed field with a default is defaulted again"
    );
    assert!(patched["spec"].get("other").is_none(), "{patched}");
    let r = merge_patch(
        &http,
        &format!("{widgets}/w/status"),
        json!({"status": {"ready": true, "phase": "x"}}),
    )
    .await;
    assert_eq!(r.json()["status"], json!({"ready": true}));
    // kubectl get's columns come from the CRD's additionalPrinterColumns.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let r = http.get_with_accept(widgets, table).await.json();
    let columns: Vec<&str> = r["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Size", "Age"]);
    assert_eq!(r["rows"][0]["cells"][1], 3);
    h.shutdown().await;
}

/// Spec: the fields each kind's validation keeps after creation, refused with 422 as the
/// server words it; the changes it allows go through.
#[tokio::test]
async fn immutable_fields_are_refused_and_allowed_changes_pass() {
    let h = Emulator::builder().start().await.unwrap();
    let http = Http::new(h.base_url());
    create_namespace(&http, NS).await;
    for c in cases() {
        let r = send(
            &http,
            Method::POST,
            &c.collection,
            Some("application/json"),
            &c.create,
        )
        .await;
        assert_eq!(r.status, 201, "{}", c.folder);
    }
    let rb = object(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "rb",
        json!({
        "roleRef": {"kind": "Role", "name": "s-role"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}]}),
    );
    let rbs = path("rbac.authorization.k8s.io/v1", "rolebindings");
    assert_eq!(
        send(&http, Method::POST, &rbs, Some("application/json"), &rb)
            .await
            .status,
        201
    );
    let refused = [
        (format!("{}/s-pod", path("v1", "pods")), json!({"spec": {"restartPolicy": "Never"}}),
         "Pod \"s-pod\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        (format!("{}/s-statefulset", path("apps/v1", "statefulsets")), json!({"spec": {"serviceName": "t"}}),
         "StatefulSet.apps \"s-statefulset\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"),
        (format!("{}/s-deployment", path("apps/v1", "deployments")), json!({"spec": {"selector": {"matchLabels": {"app": "y"}}}}),
         "Deployment.apps \"s-deployment\" is invalid: spec.selector: Invalid value:"),
        (format!("{}/s-job", path("batch/v1", "jobs")), json!({"spec": {"template": {"spec": {"activeDeadlineSeconds": 5}}}}),
         "Job.batch \"s-job\" is invalid: spec.template: Invalid value:"),
        (format!("{rbs}/rb"), json!({"roleRef": {"name": "other"}}),
         "RoleBinding.rbac.authorization.k8s.io \"rb\" is invalid: roleRef: Invalid value:"),
        (format!("{}/s-service", path("v1", "services")), json!({"spec": {"clusterIP": "10.96.0.2", "clusterIPs": ["10.96.0.2"]}}),
         "Service \"s-service\" is invalid: spec.clusterIPs[0]: Invalid value:"),
    ];
    for (item, patch, message) in refused {
        let r = merge_patch(&http, &item, patch).await;
        let body = r.json();
        assert_eq!(r.status, 422, "{item}: {body}");
        let got = body["message"].as_str().unwrap_or("");
        assert!(got.starts_with(message), "{item}: {got}");
    }
    let allowed = [
        (
            format!("{}/s-pod", path("v1", "pods")),
            json!({"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}], "activeDeadlineSeconds": 60}}),
        ),
        (
            format!("{}/s-statefulset", path("apps/v1", "statefulsets")),
            json!({"spec": {"replicas": 3, "minReadySeconds": 2}}),
        ),
        (
            format!("{rbs}/rb"),
            json!({"metadata": {"labels": {"a": "b"}}}),
        ),
    ];
    for (item, patch) in allowed {
        // Strategic merge, as kubectl patches: a container is merged by its name.
        let smp = "application/strategic-merge-patch+json";
        let r = send(&http, Method::PATCH, &item, Some(smp), &patch).await;
        assert_eq!(
            r.status,
            200,
            "{item}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    h.shutdown().await;
}

/// Spec: a LIST asked for in protobuf first is a `<Kind>List` message that decodes to the JSON
/// list; a custom resource's list (no protobuf message) is answered in JSON.
#[tokio::test]
async fn lists_asked_for_in_protobuf_decode_to_the_json_lists() {
    let h = Emulator::builder().start().await.unwrap();
    let http = Http::new(h.base_url());
    create_namespace(&http, NS).await;
    for c in cases() {
        send(
            &http,
            Method::POST,
            &c.collection,
            Some("application/json"),
            &c.create,
        )
        .await;
    }
    let proto = "application/vnd.kubernetes.protobuf, application/json";
    for c in cases() {
        let json = http.get(&c.collection).await.json();
        let r = http.get_with_accept(&c.collection, proto).await;
        assert_eq!(
            r.headers["content-type"], "application/vnd.kubernetes.protobuf",
            "{}",
            c.folder
        );
        let decoded = kwh_emulator::protobuf::decode(&r.body).unwrap();
        // A protobuf list's items carry no apiVersion and kind (nor do a real server's JSON
        // lists'; the emulator's do).
        let mut json = json;
        for item in json["items"].as_array_mut().into_iter().flatten() {
            if let Some(o) = item.as_object_mut() {
                o.remove("apiVersion");
                o.remove("kind");
            }
        }
        if decoded != json {
            let mut out = Vec::new();
            differences("", &json, &decoded, &mut out);
            panic!("{}: the protobuf list differs: {out:?}", c.folder);
        }
    }
    h.shutdown().await;
}

/// Spec: `/openapi/v2` in JSON holds every built-in kind's schema as Swagger 2.0 definitions
/// (references under `#/definitions/`); asked for in kubectl's protobuf form, it is gnostic's
/// `Document` (kubectl reads it: `tests/emulator_kubectl.rs`); another media type is 406.
#[tokio::test]
async fn openapi_v2_in_json_and_in_protobuf_has_every_kind() {
    let h = Emulator::builder().start().await.unwrap();
    let http = Http::new(h.base_url());
    let doc = http.get("/openapi/v2").await.json();
    assert_eq!(doc["swagger"], "2.0");
    let d = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        d["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
    );
    // v2 puts a reference beside its description, where v3 wraps it in an `allOf`.
    assert_eq!(
        d["properties"]["spec"]["$ref"],
        "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
    );
    assert!(d["properties"]["spec"]["description"].is_string());
    assert!(d["properties"]["spec"].get("allOf").is_none());
    assert!(doc["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"].is_object());
    assert!(!doc.to_string().contains("#/components/"));
    let pb = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let r = http.get_with_accept("/openapi/v2", pb).await;
    assert_eq!(r.status, 200);
    // Answered under the spelling Go's media-type parser accepts, as kube-openapi does.
    assert_eq!(
        r.headers["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    // swagger = 1 "2.0" first; the definitions' names are in it.
    assert!(r.body.starts_with(b"\x0a\x032.0"));
    let needle = b"io.k8s.api.apps.v1.DeploymentSpec";
    assert!(r.body.windows(needle.len()).any(|w| w == needle));
    assert_eq!(
        http.get_with_accept("/openapi/v2", "text/plain")
            .await
            .status,
        406
    );
    h.shutdown().await;
}
