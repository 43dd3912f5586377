//! Events: one storage, two API views, against the real kube-apiserver's recorded answers
//! (`tests/fixtures/events/`). An Event created through `events.k8s.io/v1` answers as recorded
//! (spec 6.1 paths), its series merge patch too (spec 6.11), and the same object read through
//! core `v1` is the recorded core view; lists (spec 6.2), watches (spec 6.3) and field
//! selectors (spec 6.10) of either view see the writes of both, with one resourceVersion
//! sequence; invalid Events are refused with the server's 422s; and the real `kubectl events`
//! and `kubectl describe` show an Event written through `events.k8s.io/v1`.

mod emulator_common;

use std::path::PathBuf;
use std::time::Duration;

use emulator_common::{assert_head_matches_text, kubectl, run, Http};
use http::{Method, StatusCode};
use kwh_emulator::{Emulator, EmulatorHandle};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Value};

const NS: &str = "rbac-samples";
const NAME: &str = "exists.17b0c0ffee000001";
const EVENTS_V1: &str = "/apis/events.k8s.io/v1/namespaces/rbac-samples/events";
const CORE: &str = "/api/v1/namespaces/rbac-samples/events";
const MERGE: &str = "application/merge-patch+json";

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/events")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).expect("fixture is JSON")
}

/// An emulator with the recording's namespace and ConfigMap `exists`; returns the ConfigMap's
/// uid too.
async fn setup() -> (EmulatorHandle, Http, String) {
    let em = Emulator::builder().start().await.expect("starts");
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .expect("ns");
    let cm = em
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "exists", "namespace": NS}, "data": {"a": "1"}}))
        .expect("cm");
    let uid = cm["metadata"]["uid"].as_str().expect("uid").to_owned();
    let http = Http::h2(em.base_url());
    (em, http, uid)
}

/// Replaces what differs per run (uid, resourceVersion, timestamps the server sets) with
/// placeholders.
fn without_run_values(mut v: Value) -> Value {
    for p in [
        "/metadata/uid",
        "/metadata/resourceVersion",
        "/metadata/creationTimestamp",
    ] {
        if let Some(x) = v.pointer_mut(p).filter(|x| x.is_string()) {
            *x = json!("<varies>");
        }
    }
    if let Some(entries) = v
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        for e in entries {
            e["time"] = json!("<varies>");
        }
    }
    v
}

/// A JSON document's member names in the order they were written, all the way down: what
/// `serde_json::Value` (sorted keys) cannot show.
#[derive(Debug, PartialEq)]
enum Members {
    Object(Vec<(String, Members)>),
    Array(Vec<Members>),
    Scalar,
}

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Members>()? {
                    out.push((k, v));
                }
                Ok(Members::Object(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = a.next_element::<Members>()? {
                    out.push(v);
                }
                Ok(Members::Array(out))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Members, E> {
                Ok(Members::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Members, E> {
                Ok(Members::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Members, E> {
                Ok(Members::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Members, E> {
                Ok(Members::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Members, E> {
                Ok(Members::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Members, E> {
                Ok(Members::Scalar)
            }
        }
        d.deserialize_any(V)
    }
}

fn members(json: &[u8]) -> Members {
    serde_json::from_slice(json).expect("JSON")
}

/// The answer equals the recorded one, run values aside, member order included.
fn assert_answers_as_recorded(name: &str, status: StatusCode, r: &emulator_common::Resp) {
    assert_eq!(
        r.status,
        status,
        "{name}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_head_matches_text(
        name,
        &fixture(&format!("{name}.headers.txt")),
        r.status,
        &r.headers,
    );
    let recorded = fixture(&format!("{name}.json"));
    assert_eq!(
        without_run_values(r.json()),
        without_run_values(serde_json::from_str(&recorded).expect("fixture")),
        "{name}"
    );
    assert_eq!(
        members(&r.body),
        members(recorded.as_bytes()),
        "{name}: member order"
    );
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion")
}

/// The recorded create, PATCH and core read, in order, as the recording made them (with the
/// field manager `curl`).
#[tokio::test]
async fn events_k8s_io_create_and_series_patch_and_core_read_answer_as_recorded() {
    let (em, http, _) = setup().await;
    let r = http
        .send(
            Method::POST,
            &format!("{EVENTS_V1}?fieldManager=curl"),
            Some("application/json"),
            fixture("ev.request.json").as_bytes(),
        )
        .await;
    assert_answers_as_recorded("event-create-events-k8s-io-v1", StatusCode::CREATED, &r);
    let created = r.json();

    let r = http
        .patch(
            &format!("{EVENTS_V1}/{NAME}?fieldManager=curl"),
            MERGE,
            fixture("evseries.request.json").trim(),
        )
        .await;
    assert_answers_as_recorded("event-series-patch-events-k8s-io-v1", StatusCode::OK, &r);
    let patched = r.json();
    assert_eq!(patched["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        rv(&patched),
        rv(&created) + 1,
        "one write, one resourceVersion"
    );

    // The same object through core v1: one storage, two views.
    let r = http.get(&format!("{CORE}/{NAME}")).await;
    assert_answers_as_recorded("event-same-object-read-as-core-v1", StatusCode::OK, &r);
    let core = r.json();
    assert_eq!(core["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(rv(&core), rv(&patched));
    // And through events.k8s.io/v1 again: what the patch answered.
    let r = http.get(&format!("{EVENTS_V1}/{NAME}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), patched);

    // Lists of both views (spec 6.2) hold the one object, each in its view.
    for (path, kind, api_version, item) in [
        (CORE, "EventList", "v1", &core),
        (EVENTS_V1, "EventList", "events.k8s.io/v1", &patched),
    ] {
        let r = http.get(path).await;
        assert_eq!(r.status, StatusCode::OK);
        let list = r.json();
        assert_eq!(
            (list["kind"].as_str(), list["apiVersion"].as_str()),
            (Some(kind), Some(api_version))
        );
        // Items of a built-in kind's list come without kind and apiVersion, as the server's.
        let mut item = item.clone();
        if let Some(m) = item.as_object_mut() {
            m.remove("kind");
            m.remove("apiVersion");
        }
        assert_eq!(list["items"], json!([item]), "{path}");
    }
    // The handle reads either view too.
    let via_handle = em
        .get("events.k8s.io/v1", "Event", Some(NS), NAME)
        .expect("found");
    assert_eq!(via_handle, patched);
    assert_eq!(em.list("v1", "Event", Some(NS)), vec![core.clone()]);
    em.shutdown().await;
}

/// Writes through one view are the other's: an Event created through core v1 (the old kind,
/// with `source` and `count`) reads through `events.k8s.io/v1` with the deprecated fields, an
/// update through core v1 is seen through `events.k8s.io/v1`, and a delete through
/// `events.k8s.io/v1` removes it from both.
#[tokio::test]
async fn writes_through_either_view_are_seen_through_the_other() {
    let (em, http, uid) = setup().await;
    let old_style = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "exists.old", "namespace": NS},
        "involvedObject": {"kind": "ConfigMap", "namespace": NS, "name": "exists", "uid": uid,
            "apiVersion": "v1"},
        "reason": "Synced", "message": "synced", "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2026-11-24T22:59:40Z", "lastTimestamp": "2026-11-24T22:59:48Z",
        "count": 3});
    let r = http.post(CORE, &old_style).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let created = r.json();
    // The core view in its Go encoding: eventTime null, reporting fields empty, in order.
    assert_eq!(created["eventTime"], Value::Null);
    assert_eq!(created["reportingComponent"], "");
    assert_eq!(created["reportingInstance"], "");
    let r = http.get(&format!("{EVENTS_V1}/exists.old")).await;
    assert_eq!(r.status, StatusCode::OK);
    let v1 = r.json();
    assert_eq!(
        without_run_values(v1.clone()),
        without_run_values(json!({"kind": "Event", "apiVersion": "events.k8s.io/v1",
            "metadata": created["metadata"].clone(),
            "eventTime": null,
            "reason": "Synced",
            "regarding": old_style["involvedObject"].clone(),
            "note": "synced", "type": "Normal",
            "deprecatedSource": {"component": "kubelet", "host": "node-1"},
            "deprecatedFirstTimestamp": "2026-11-24T22:59:40Z",
            "deprecatedLastTimestamp": "2026-11-24T22:59:48Z",
            "deprecatedCount": 3}))
    );
    let Members::Object(order) = members(&r.body) else {
        panic!("an object")
    };
    let order: Vec<&str> = order.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        order,
        [
            "kind",
            "apiVersion",
            "metadata",
            "eventTime",
            "reason",
            "regarding",
            "note",
            "type",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount"
        ]
    );

    // An update through core v1 (the old recorder bumps count and lastTimestamp).
    let r = http
        .patch(
            &format!("{CORE}/exists.old"),
            MERGE,
            r#"{"count":4,"lastTimestamp":"2026-11-24T23:00:00Z"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    let bumped = r.json();
    let r = http.get(&format!("{EVENTS_V1}/exists.old")).await;
    let v1 = r.json();
    assert_eq!(v1["deprecatedCount"], 4);
    assert_eq!(v1["deprecatedLastTimestamp"], "2026-11-24T23:00:00Z");
    assert_eq!(rv(&v1), rv(&bumped));
    // A PUT through events.k8s.io/v1 of what it read changes nothing; one that changes the
    // deprecated count is refused (only the series may change through it).
    let r = http.put(&format!("{EVENTS_V1}/exists.old"), &v1).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(
        rv(&r.json()),
        rv(&bumped),
        "no change, no new resourceVersion"
    );
    let mut recounted = v1.clone();
    recounted["deprecatedCount"] = 5.into();
    let r = http
        .put(&format!("{EVENTS_V1}/exists.old"), &recounted)
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "Event \"exists.old\" is invalid: count: Invalid value: 5: field is immutable"
    );

    // A delete through events.k8s.io/v1 answers as the server does for built-in kinds, and
    // the object is gone from both views.
    let r = http.delete(&format!("{EVENTS_V1}/exists.old")).await;
    assert_eq!(r.status, StatusCode::OK);
    let status = r.json();
    assert_eq!(status["status"], "Success");
    assert_eq!(
        status["details"],
        json!({"name": "exists.old", "group": "events.k8s.io", "kind": "events",
            "uid": created["metadata"]["uid"]})
    );
    assert_eq!(
        http.get(&format!("{CORE}/exists.old")).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        http.get(&format!("{EVENTS_V1}/exists.old")).await.status,
        StatusCode::NOT_FOUND
    );
    em.shutdown().await;
}

/// Field selectors (spec 6.10): core v1 events by `involvedObject.*`, `reason`, `type`,
/// `source` and `reportingComponent` find an Event created through `events.k8s.io/v1`;
/// `events.k8s.io/v1` takes its own labels (`regarding.*`, `reportingController`), as the
/// server's field label conversions say, and refuses the other view's with 400.
#[tokio::test]
async fn field_selectors_of_both_views_find_events_of_both() {
    let (em, http, uid) = setup().await;
    let mut ev = fixture_json("ev.request.json");
    ev["regarding"]["uid"] = uid.clone().into();
    let r = http.post(EVENTS_V1, &ev).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let other = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "other", "namespace": NS},
        "involvedObject": {"kind": "Pod", "namespace": NS, "name": "p"},
        "reason": "Started", "type": "Warning", "source": {"component": "kubelet"}});
    assert_eq!(http.post(CORE, &other).await.status, StatusCode::CREATED);

    let names = |path: String| {
        let http = http.clone();
        async move {
            let r = http.get(&path).await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {:?}", r.json());
            r.json()["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned())
                .collect::<Vec<_>>()
        }
    };
    let sel = |base: &str, s: &str| {
        format!(
            "{base}?fieldSelector={}",
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
        )
    };
    // What `kubectl describe configmap exists` asks for.
    let describe = format!(
        "involvedObject.name=exists,involvedObject.namespace={NS},involvedObject.kind=ConfigMap,involvedObject.uid={uid}"
    );
    for (selector, want) in [
        (describe.as_str(), vec![NAME]),
        ("reason=Expired,type=Normal", vec![NAME]),
        ("type=Warning", vec!["other"]),
        ("source=janitor", vec![NAME]),
        ("source=kubelet", vec!["other"]),
        ("reportingComponent=janitor", vec![NAME]),
        ("involvedObject.kind!=ConfigMap", vec!["other"]),
        (
            "involvedObject.apiVersion=v1,involvedObject.fieldPath=",
            vec![NAME],
        ),
    ] {
        assert_eq!(names(sel(CORE, selector)).await, want, "core {selector}");
    }
    for (selector, want) in [
        ("regarding.name=exists,regarding.kind=ConfigMap", vec![NAME]),
        (&*format!("regarding.uid={uid}"), vec![NAME]),
        ("reportingController=janitor,reason=Expired", vec![NAME]),
        ("type=Warning,source=kubelet", vec!["other"]),
        ("metadata.name=other", vec!["other"]),
    ] {
        assert_eq!(names(sel(EVENTS_V1, selector)).await, want, "v1 {selector}");
    }
    for (base, selector) in [
        (EVENTS_V1, "involvedObject.name=exists"),
        (CORE, "regarding.name=exists"),
        (CORE, "reportingController=janitor"),
    ] {
        let r = http.get(&sel(base, selector)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{base} {selector}");
        let label = selector.split('=').next().unwrap_or("");
        assert_eq!(
            r.json()["message"],
            format!("field label not supported: {label}")
        );
    }
    em.shutdown().await;
}

/// Watches (spec 6.3) of either view see the writes of both, each object in the watcher's
/// view, with the same resourceVersions; a watch with a field selector of `events.k8s.io/v1`
/// sees only its Events.
#[tokio::test]
async fn watches_of_either_view_see_the_writes_of_both() {
    let (em, http, uid) = setup().await;
    let from = em.current_resource_version();
    let (st, _, mut core) = http
        .watch(&format!("{CORE}?watch=1&resourceVersion={from}"))
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _, mut v1) = http
        .watch(&format!("{EVENTS_V1}?watch=1&resourceVersion={from}"))
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _, mut selected) = http
        .watch(&format!(
            "{EVENTS_V1}?watch=1&resourceVersion={from}&fieldSelector=regarding.kind%3DPod"
        ))
        .await;
    assert_eq!(st, StatusCode::OK);
    let within = Duration::from_secs(5);

    // Created through events.k8s.io/v1: the core watcher gets the core view.
    let mut ev = fixture_json("ev.request.json");
    ev["regarding"]["uid"] = uid.into();
    let r = http.post(EVENTS_V1, &ev).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let created = r.json();
    let e = core.next_within(within).await.expect("an event");
    assert_eq!(e["type"], "ADDED");
    let o = &e["object"];
    assert_eq!(
        (o["apiVersion"].as_str(), o["kind"].as_str()),
        (Some("v1"), Some("Event"))
    );
    assert_eq!(o["message"], ev["note"]);
    assert_eq!(o["involvedObject"], ev["regarding"]);
    assert_eq!(o["reportingComponent"], "janitor");
    assert!(o.get("note").is_none() && o.get("regarding").is_none());
    assert_eq!(rv(o), rv(&created));
    let e = v1.next_within(within).await.expect("an event");
    assert_eq!(e["type"], "ADDED");
    assert_eq!(
        e["object"], created,
        "the events.k8s.io watcher sees what the POST answered"
    );

    // Created through core v1: the events.k8s.io watchers get the events.k8s.io view.
    let pod_event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "pod-event", "namespace": NS},
        "involvedObject": {"kind": "Pod", "namespace": NS, "name": "p"},
        "reason": "Started", "message": "started", "type": "Normal",
        "source": {"component": "kubelet"}, "count": 1});
    let r = http.post(CORE, &pod_event).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let core_created = r.json();
    let e = core.next_within(within).await.expect("an event");
    assert_eq!(
        (e["type"].as_str(), &e["object"]),
        (Some("ADDED"), &core_created)
    );
    for w in [&mut v1, &mut selected] {
        let e = w.next_within(within).await.expect("an event");
        assert_eq!(e["type"], "ADDED");
        let o = &e["object"];
        assert_eq!(o["apiVersion"], "events.k8s.io/v1");
        assert_eq!(o["note"], "started");
        assert_eq!(o["regarding"], pod_event["involvedObject"]);
        assert_eq!(o["deprecatedSource"], json!({"component": "kubelet"}));
        assert_eq!(o["deprecatedCount"], 1);
        assert_eq!(rv(o), rv(&core_created));
    }

    // The series patch through events.k8s.io/v1 and a delete through core v1.
    let r = http
        .patch(
            &format!("{EVENTS_V1}/{NAME}"),
            MERGE,
            fixture("evseries.request.json").trim(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let patched = r.json();
    let e = core.next_within(within).await.expect("an event");
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["series"], patched["series"]);
    let e = v1.next_within(within).await.expect("an event");
    assert_eq!(
        (e["type"].as_str(), &e["object"]),
        (Some("MODIFIED"), &patched)
    );
    let r = http.delete(&format!("{CORE}/pod-event")).await;
    assert_eq!(r.status, StatusCode::OK);
    for w in [&mut core, &mut v1, &mut selected] {
        let e = w.next_within(within).await.expect("an event");
        assert_eq!(e["type"], "DELETED");
        assert_eq!(e["object"]["metadata"]["name"], "pod-event");
    }
    assert!(
        v1.quiet_for(Duration::from_millis(300)).await,
        "nothing else"
    );
    em.shutdown().await;
}

/// A refusal's causes: (reason, field) each.
type Causes = Vec<(&'static str, &'static str)>;

/// Creates through `events.k8s.io/v1` are validated as kube-apiserver's `ValidateEventCreate`
/// does, and refused with its 422 wording (the fields named as in core v1, kind `Event`);
/// updates through it may change the series only.
#[tokio::test]
async fn invalid_events_are_refused_in_the_servers_words() {
    let (em, http, _) = setup().await;
    let valid = fixture_json("ev.request.json");
    for (body, message, causes) in invalid_creates(&valid) {
        let r = http.post(EVENTS_V1, &body).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
        let s = r.json();
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["code"], 422);
        assert_eq!(s["message"], message);
        assert_eq!(s["details"]["kind"], "Event");
        assert!(s["details"].get("group").is_none(), "{s}");
        assert_eq!(s["details"]["name"], body["metadata"]["name"]);
        let got: Vec<(&str, &str)> = s["details"]["causes"]
            .as_array()
            .expect("causes")
            .iter()
            .map(|c| {
                (
                    c["reason"].as_str().unwrap_or(""),
                    c["field"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(got, causes, "{message}");
    }
    assert!(
        em.list("v1", "Event", Some(NS)).is_empty(),
        "nothing stored"
    );

    // Through core v1 the old rules only: an Event without eventTime needs no reporting
    // fields, but its namespace must be its object's.
    let old = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "old", "namespace": NS},
        "involvedObject": {"kind": "ConfigMap", "namespace": "other", "name": "x"},
        "reason": "R", "message": "m"});
    let r = http.post(CORE, &old).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "Event \"old\" is invalid: involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"
    );

    updates_may_change_the_series_only(&http, &valid).await;
    em.shutdown().await;
}

/// The refused creates of [`invalid_events_are_refused_in_the_servers_words`], a table apart
/// to keep the test short: each body (`valid` changed), the message and the causes expected.
fn invalid_creates(valid: &Value) -> Vec<(Value, String, Causes)> {
    let with = |name: &str, f: &dyn Fn(&mut Value)| {
        let mut v = valid.clone();
        v["metadata"]["name"] = name.into();
        f(&mut v);
        v
    };
    let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    vec![
        (
            with("no-controller", &|v| {
                v.as_object_mut().map(|m| m.remove("reportingController"));
            }),
            format!("Event \"no-controller\" is invalid: [reportingController: Required value, reportingController: Invalid value: \"\": name part must be non-empty, reportingController: Invalid value: \"\": {name_part}]"),
            vec![
                ("FieldValueRequired", "reportingController"),
                ("FieldValueInvalid", "reportingController"),
                ("FieldValueInvalid", "reportingController"),
            ],
        ),
        (
            with("long-note", &|v| v["note"] = "x".repeat(1025).into()),
            "Event \"long-note\" is invalid: message: Invalid value: \"\": can have at most 1024 characters".into(),
            vec![("FieldValueInvalid", "message")],
        ),
        (
            with("no-time", &|v| {
                v.as_object_mut().map(|m| m.remove("eventTime"));
            }),
            "Event \"no-time\" is invalid: eventTime: Required value".into(),
            vec![("FieldValueRequired", "eventTime")],
        ),
        (
            with("info", &|v| {
                v["type"] = "Info".into();
                v["reportingInstance"] = "i".repeat(129).into();
            }),
            "Event \"info\" is invalid: [reportingInstance: Invalid value: \"\": can have at most 128 characters, type: Invalid value: \"\": has invalid value: Info]".into(),
            vec![("FieldValueInvalid", "reportingInstance"), ("FieldValueInvalid", "type")],
        ),
        (
            with("bad-series", &|v| {
                v["series"] = json!({"count": 1});
                v["deprecatedCount"] = 2.into();
                v.as_object_mut().map(|m| m.remove("action"));
            }),
            "Event \"bad-series\" is invalid: [action: Required value, series.count: Invalid value: \"\": should be at least 2, series.lastObservedTime: Required value, count: Invalid value: \"\": needs to be unset]".into(),
            vec![
                ("FieldValueRequired", "action"),
                ("FieldValueInvalid", "series.count"),
                ("FieldValueRequired", "series.lastObservedTime"),
                ("FieldValueInvalid", "count"),
            ],
        ),
        (
            with("nowhere", &|v| {
                v["regarding"].as_object_mut().map(|m| m.remove("namespace"));
            }),
            "Event \"nowhere\" is invalid: involvedObject.namespace: Invalid value: \"\": does not match event.namespace".into(),
            vec![("FieldValueInvalid", "involvedObject.namespace")],
        ),
    ]
}

/// The update checks of [`invalid_events_are_refused_in_the_servers_words`], apart to keep
/// the test short: `valid` is created, then patched through either view.
async fn updates_may_change_the_series_only(http: &Http, valid: &Value) {
    // Updates through events.k8s.io/v1 may change the series, not the rest.
    assert_eq!(
        http.post(EVENTS_V1, valid).await.status,
        StatusCode::CREATED
    );
    let path = format!("{EVENTS_V1}/{NAME}");
    let r = http.patch(&path, MERGE, r#"{"note":"rewritten"}"#).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "Event \"exists.17b0c0ffee000001\" is invalid: message: Invalid value: \"rewritten\": field is immutable"
    );
    let r = http
        .patch(
            &path,
            MERGE,
            r#"{"series":{"count":1,"lastObservedTime":"2026-11-24T22:59:49.000000Z"}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "Event \"exists.17b0c0ffee000001\" is invalid: series.count: Invalid value: \"\": should be at least 2"
    );
    // Through core v1 the message may change (legacy rules only).
    let r = http
        .patch(
            &format!("{CORE}/{NAME}"),
            MERGE,
            r#"{"message":"rewritten"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(http.get(&path).await.json()["note"], "rewritten");
}

/// `now` as a `MicroTime` (six fraction digits, UTC).
fn micro_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    let secs = kwh_emulator::util::rfc3339(d.as_secs());
    format!("{}.{:06}Z", secs.trim_end_matches('Z'), d.subsec_micros())
}

/// A table kubectl printed, from the line starting with `header` on: each line's columns
/// (split where two or more spaces are), with the ages in `age_columns` (which depend on the
/// clock) replaced by `<age>` (`8s` → `<age>`, `0s (x2 over 0s)` → `<age> (x2 over <age>)`).
fn table(text: &str, header: &str, age_columns: &[usize]) -> Vec<Vec<String>> {
    let start = text
        .lines()
        .position(|l| l.trim_start().starts_with(header))
        .unwrap_or_else(|| panic!("no {header:?} in:\n{text}"));
    text.lines()
        .skip(start)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<String> = l
                .trim()
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            cells
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    if !age_columns.contains(&i) {
                        return c;
                    }
                    let age = |s: &str| {
                        let digits = s.trim_end_matches(['s', 'm', 'h', 'd']);
                        if !digits.is_empty() && digits.chars().all(|d| d.is_ascii_digit()) {
                            "<age>".to_owned()
                        } else {
                            s.to_owned()
                        }
                    };
                    match c.split_once(" (x") {
                        Some((last, rest)) => {
                            let (count, over) = rest.split_once(" over ").unwrap_or((rest, ""));
                            format!(
                                "{} (x{count} over {})",
                                age(last),
                                age(over.trim_end_matches(')'))
                            )
                        }
                        None => age(&c),
                    }
                })
                .collect()
        })
        .collect()
}

/// The real kubectl reads Events through core v1: `kubectl describe configmap` shows the Event
/// created through `events.k8s.io/v1` in its Events section (From is the reporting
/// controller; kubectl selects by `involvedObject.uid`, so the Event names the ConfigMap's
/// uid), and `kubectl events` lists it with its series count after the series patch, as the
/// recorded outputs show.
#[tokio::test]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn kubectl_describe_and_events_show_an_event_created_through_events_k8s_io() {
    let (em, http, uid) = setup().await;
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "host-emulator-events-{}-{}",
        std::process::id(),
        em.addr().port()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let kc = dir.join("kubeconfig");
    em.write_kubeconfig(&kc).expect("kubeconfig");

    let mut ev = fixture_json("ev.request.json");
    ev["regarding"]["uid"] = uid.into();
    ev["eventTime"] = micro_now().into();
    let r = http.post(EVENTS_V1, &ev).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());

    let (ok, out, err) = run(&mut kubectl(
        &dir,
        &kc,
        &["describe", "configmap", "exists", "-n", NS],
    ))
    .await;
    assert!(ok, "kubectl describe: {err}");
    assert_eq!(
        table(&out, "Events:", &[2]),
        table(&fixture("kubectl-describe-output.txt"), "Events:", &[2]),
        "{out}"
    );

    let series = json!({"series": {"count": 2, "lastObservedTime": micro_now()}});
    let r = http
        .patch(&format!("{EVENTS_V1}/{NAME}"), MERGE, &series.to_string())
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    let (ok, out, err) = run(&mut kubectl(&dir, &kc, &["events", "-n", NS])).await;
    assert!(ok, "kubectl events: {err}");
    let printed = table(&out, "LAST SEEN", &[0]);
    assert_eq!(
        printed,
        table(&fixture("kubectl-events-output.txt"), "LAST SEEN", &[0]),
        "{out}"
    );
    assert_eq!(printed[1][0], "<age> (x2 over <age>)");
    // The describe after the patch counts the series too.
    let (ok, out, err) = run(&mut kubectl(
        &dir,
        &kc,
        &["describe", "configmap", "exists", "-n", NS],
    ))
    .await;
    assert!(ok, "kubectl describe: {err}");
    assert_eq!(
        table(&out, "Events:", &[2])[3][2],
        "<age> (x2 over <age>)",
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    em.shutdown().await;
}
