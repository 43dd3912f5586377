//! Tests of the PATCH engines (spec 6.11).

use serde_json::{json, Value};

use super::*;

const DEPLOYMENT: Option<(&str, &str)> = Some(("apps", "Deployment"));
const CONFIGMAP: Option<(&str, &str)> = Some(("", "ConfigMap"));
const NOW: &str = "2026-11-22T03:04:17Z";

fn patch(current: &Value, ty: PatchType, body: Value, builtin: Option<(&str, &str)>) -> Value {
    apply_patch(current, ty, body.to_string().as_bytes(), builtin).expect("patch applies")
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n", "finalizers": ["a.io/x"],
                     "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "K", "apiVersion": "v1"}]},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {"spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1",
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 80}, {"containerPort": 443}],
                     "volumeMounts": [{"mountPath": "/a", "name": "va"}],
                     "args": ["-x", "-y"]},
                    {"name": "side", "image": "busybox"}
                ],
                "volumes": [{"name": "va", "emptyDir": {}}],
                "tolerations": [{"key": "k1", "operator": "Exists"}],
                "imagePullSecrets": [{"name": "s1"}]
            }}
        }
    })
}

fn containers(d: &Value) -> &Vec<Value> {
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
}

// ---- content types (spec 6.11) ----

#[test]
fn content_types_spec_6_11() {
    use PatchType::*;
    assert_eq!(
        PatchType::from_content_type("application/json-patch+json"),
        Some(Json)
    );
    assert_eq!(
        PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
        Some(Merge)
    );
    assert_eq!(
        PatchType::from_content_type("Application/Strategic-Merge-Patch+JSON"),
        Some(StrategicMerge)
    );
    assert_eq!(
        PatchType::from_content_type("application/apply-patch+yaml"),
        Some(Apply)
    );
    assert_eq!(PatchType::from_content_type("application/json"), None);
    assert_eq!(PatchType::from_content_type(""), None);
    for ty in [Json, Merge, StrategicMerge, Apply] {
        assert_eq!(PatchType::from_content_type(ty.content_type()), Some(ty));
    }
}

#[test]
fn strategic_merge_on_a_custom_resource_is_415_spec_6_11() {
    let cr = json!({"apiVersion": "example.com/v1", "kind": "W", "spec": {"a": 1}});
    let err = apply_patch(
        &cr,
        PatchType::StrategicMerge,
        b"{\"spec\":{\"a\":2}}",
        None,
    )
    .expect_err("refused");
    assert_eq!(err, PatchError::UnsupportedMediaType { builtin: false });
    let st = err.to_status("widgets", "w");
    assert_eq!(
        (st.code, st.reason.as_str(), st.status.as_str()),
        (415, "UnsupportedMediaType", "Failure")
    );
    assert_eq!(
        st.message,
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    // The same patch works as a merge patch.
    let merged = patch(&cr, PatchType::Merge, json!({"spec": {"a": 2}}), None);
    assert_eq!(merged["spec"]["a"], 2);
}

// ---- JSON patch ----

#[test]
fn json_patch_applies_operations_in_order() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1", "b": "2"}});
    let out = patch(
        &cm,
        PatchType::Json,
        json!([
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "x"},
            {"op": "remove", "path": "/data/b"},
            {"op": "add", "path": "/metadata", "value": {"labels": {"l": "v"}}},
            {"op": "copy", "from": "/data/a", "path": "/data/c"}
        ]),
        CONFIGMAP,
    );
    assert_eq!(out["data"], json!({"a": "x", "c": "x"}));
    assert_eq!(out["metadata"]["labels"]["l"], "v");
}

#[test]
fn json_patch_that_cannot_apply_is_422_and_changes_nothing() {
    let cm = json!({"data": {"a": "1"}});
    for ops in [
        json!([{"op": "test", "path": "/data/a", "value": "2"}]),
        json!([{"op": "remove", "path": "/data/missing"}]),
        json!([{"op": "replace", "path": "/nope/x", "value": 1}]),
    ] {
        let err = apply_patch(&cm, PatchType::Json, ops.to_string().as_bytes(), CONFIGMAP)
            .expect_err("fails");
        let st = err.to_status("configmaps", "c");
        assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"), "{ops}");
        let causes = st.details.expect("details").causes;
        assert_eq!(causes.len(), 1);
        assert!(!causes[0].message.is_empty());
    }
}

#[test]
fn malformed_bodies_are_400_never_panics() {
    let cm = json!({"data": {}});
    let bodies: [&[u8]; 4] = [b"", b"{", b"not json", b"\xff\xfe"];
    for body in bodies {
        for ty in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
            let err = apply_patch(&cm, ty, body, CONFIGMAP).expect_err("malformed");
            assert_eq!(err.code(), 400, "{ty:?} {body:?}: {err}");
            let st = err.to_status("configmaps", "c");
            assert_eq!(st.reason, "BadRequest");
            assert!(!st.message.is_empty());
        }
        let err = server_side_apply(None, body, "m", false, CONFIGMAP, NOW).expect_err("malformed");
        assert_eq!(err.code(), 400, "apply {body:?}: {err}");
    }
    // Not a list of operations: 400. A list holding a malformed operation: 422, as the
    // server only finds those while applying.
    for ops in [&br#"{"op":1}"#[..], br#"[1]"#, br#"[null]"#] {
        let err = apply_patch(&cm, PatchType::Json, ops, CONFIGMAP).expect_err("malformed");
        assert_eq!(err.code(), 400, "{err}");
    }
    for ops in [&br#"[{"op":"jump","path":"/a"}]"#[..], br#"[{"op":"add"}]"#] {
        let err = apply_patch(&cm, PatchType::Json, ops, CONFIGMAP).expect_err("invalid op");
        assert_eq!(err.code(), 422, "{err}");
    }
    // A null strategic merge or JSON patch changes nothing.
    assert_eq!(
        apply_patch(&cm, PatchType::Json, b"null", CONFIGMAP).expect("no-op"),
        cm
    );
    assert_eq!(
        apply_patch(&cm, PatchType::StrategicMerge, b"null", CONFIGMAP).expect("no-op"),
        cm
    );
    // A patch that leaves something other than an object is refused too.
    let err = apply_patch(&cm, PatchType::Merge, b"[1]", CONFIGMAP).expect_err("not an object");
    assert_eq!(err.code(), 400);
    let err = apply_patch(&cm, PatchType::StrategicMerge, b"[1]", CONFIGMAP).expect_err("array");
    assert_eq!(err.code(), 400);
}

#[test]
fn apply_needs_a_field_manager_422_on_patch_options() {
    let err = apply_patch(&json!({}), PatchType::Apply, b"{}", CONFIGMAP).expect_err("refused");
    assert_eq!(err.code(), 422);
    let err = server_side_apply(
        None,
        b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\"}",
        "",
        false,
        CONFIGMAP,
        NOW,
    )
    .expect_err("no manager");
    let st = err.to_status("configmaps", "c");
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        st.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let wire = serde_json::to_value(&st).expect("serialises");
    assert_eq!(
        wire["details"],
        json!({"group": "meta.k8s.io", "kind": "PatchOptions",
               "causes": [{"reason": "FieldValueRequired",
                           "message": "Required value: is required for apply patch",
                           "field": "fieldManager"}]})
    );
}

#[test]
fn patch_options_are_validated_like_the_server() {
    assert!(validate_patch_options(PatchType::Merge, None, false).is_ok());
    assert!(validate_patch_options(PatchType::Apply, Some("kubectl"), true).is_ok());
    let err = validate_patch_options(PatchType::Merge, Some("m"), true).expect_err("force");
    assert_eq!(
        err.to_string(),
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    let long = "m".repeat(FIELD_MANAGER_MAX_LENGTH + 1);
    let err = validate_patch_options(PatchType::Json, Some(&long), false).expect_err("long");
    assert_eq!(err.code(), 422);
    assert!(err
        .to_string()
        .contains("Too long: must have at most 128 bytes"));
    let err =
        validate_patch_options(PatchType::Apply, Some("a\u{0}b"), false).expect_err("control");
    assert!(
        err.to_string()
            .contains("invalid character U+0000 (at position 1)"),
        "{err}"
    );
    // Several problems are listed together.
    let err = validate_patch_options(PatchType::Merge, Some(&long), true).expect_err("two");
    assert!(err.to_string().contains(": [force: Forbidden"), "{err}");
}

// ---- JSON merge patch ----

#[test]
fn merge_patch_rfc7396() {
    let d = deployment();
    let out = patch(
        &d,
        PatchType::Merge,
        json!({"metadata": {"labels": {"x": "y"}, "finalizers": null},
               "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "only"}]}}}}),
        DEPLOYMENT,
    );
    assert_eq!(out["spec"]["replicas"], 3);
    assert_eq!(out["metadata"]["labels"]["x"], "y");
    assert!(out["metadata"].get("finalizers").is_none());
    // Lists are replaced, even keyed ones.
    assert_eq!(containers(&out), &vec![json!({"name": "only"})]);
    // Untouched fields stay.
    assert_eq!(out["spec"]["strategy"], d["spec"]["strategy"]);
}

// ---- strategic merge patch ----

#[test]
fn strategic_merge_merges_keyed_lists_by_their_keys() {
    let d = deployment();
    let out = patch(
        &d,
        PatchType::StrategicMerge,
        json!({"spec": {"template": {"spec": {
            "containers": [
                {"name": "web", "image": "nginx:2",
                 "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                 "ports": [{"containerPort": 443, "name": "https"}, {"containerPort": 8080}],
                 "volumeMounts": [{"mountPath": "/b", "name": "vb"}],
                 "args": ["-z"]},
                {"name": "new", "image": "alpine"}
            ],
            "volumes": [{"name": "vb", "emptyDir": {}}],
            "tolerations": [{"key": "k2", "operator": "Exists"}],
            "imagePullSecrets": [{"name": "s2"}]
        }}}}),
        DEPLOYMENT,
    );
    // Patch items keep the patch's order; server-only items keep their place relative to them.
    let cs = containers(&out);
    assert_eq!(cs.len(), 3);
    assert_eq!(cs[0]["name"], "web");
    assert_eq!(cs[0]["image"], "nginx:2");
    assert_eq!(cs[1]["name"], "new");
    assert_eq!(cs[2], json!({"name": "side", "image": "busybox"}));
    assert_eq!(
        cs[0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}])
    );
    assert_eq!(
        cs[0]["ports"],
        json!([{"containerPort": 80}, {"containerPort": 443, "name": "https"}, {"containerPort": 8080}])
    );
    assert_eq!(
        cs[0]["volumeMounts"],
        json!([{"mountPath": "/b", "name": "vb"}, {"mountPath": "/a", "name": "va"}])
    );
    // Lists without a merge strategy are replaced.
    assert_eq!(cs[0]["args"], json!(["-z"]));
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(
        spec["tolerations"],
        json!([{"key": "k2", "operator": "Exists"}])
    );
    assert_eq!(spec["volumes"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        spec["imagePullSecrets"],
        json!([{"name": "s2"}, {"name": "s1"}])
    );
}

#[test]
fn strategic_merge_metadata_lists() {
    let d = deployment();
    let out = patch(
        &d,
        PatchType::StrategicMerge,
        json!({"metadata": {
            "finalizers": ["b.io/y", "a.io/x"],
            "ownerReferences": [{"uid": "u1", "name": "renamed"},
                                {"uid": "u2", "name": "o2", "kind": "K", "apiVersion": "v1"}]
        }}),
        DEPLOYMENT,
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["b.io/y", "a.io/x"]));
    let owners = out["metadata"]["ownerReferences"]
        .as_array()
        .expect("owners");
    assert_eq!(owners.len(), 2);
    assert_eq!(owners[0]["name"], "renamed");
    assert_eq!(owners[0]["kind"], "K");
}

#[test]
fn strategic_merge_service_ports_key_on_port() {
    let svc = json!({"apiVersion": "v1", "kind": "Service",
                     "spec": {"selector": {"app": "a"},
                              "ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
    let out = patch(
        &svc,
        PatchType::StrategicMerge,
        json!({"spec": {"selector": {"tier": "web"}, "ports": [{"port": 80, "targetPort": 9090}]}}),
        Some(("", "Service")),
    );
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
    );
    assert_eq!(out["spec"]["selector"], json!({"app": "a", "tier": "web"}));
}

#[test]
fn strategic_merge_patch_directives() {
    let d = deployment();
    let out = patch(
        &d,
        PatchType::StrategicMerge,
        json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"]},
            "spec": {
                "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
                "template": {"spec": {
                    "containers": [
                        {"name": "side", "$patch": "delete"},
                        {"name": "web", "env": [{"name": "A", "$patch": "delete"}],
                         "resources": {"$patch": "replace", "limits": {"cpu": "1"}}}
                    ],
                    "volumes": [{"$patch": "replace"}, {"name": "only", "emptyDir": {}}]
                }}
            }
        }),
        DEPLOYMENT,
    );
    assert_eq!(out["metadata"]["finalizers"], json!([]));
    assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    let cs = containers(&out);
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0]["env"], json!([{"name": "B", "value": "2"}]));
    // A `$patch` map under a key the object lacks is dropped, as the server does.
    assert!(cs[0].get("resources").is_none());
    assert_eq!(
        out["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "only", "emptyDir": {}}])
    );
    // No directive is ever stored.
    assert!(!out.to_string().contains('$'), "{out}");

    // `$patch: replace` on a map, `$patch: delete` of a map, null deletes a field.
    let out = patch(
        &d,
        PatchType::StrategicMerge,
        json!({"spec": {"strategy": {"$patch": "delete"}, "replicas": null,
                        "template": {"$patch": "replace", "metadata": {"labels": {"a": "b"}}}}}),
        DEPLOYMENT,
    );
    assert_eq!(
        out["spec"]["strategy"],
        json!({}),
        "delete empties a map field"
    );
    assert!(out["spec"].get("replicas").is_none());
    assert_eq!(
        out["spec"]["template"],
        json!({"metadata": {"labels": {"a": "b"}}})
    );
}

#[test]
fn strategic_merge_set_element_order_as_kubectl_apply_sends_it() {
    let d = deployment();
    // The shape of a client-side `kubectl apply` patch: the last-applied annotation, the
    // final order of the containers, and only the changed container.
    let out = patch(
        &d,
        PatchType::StrategicMerge,
        json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"},
                         "$setElementOrder/finalizers": ["a.io/x"]},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "web"}],
                "containers": [{"name": "side", "image": "busybox:2"}]
            }}}
        }),
        DEPLOYMENT,
    );
    let names: Vec<&str> = containers(&out)
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["side", "web"]);
    assert_eq!(containers(&out)[0]["image"], "busybox:2");
    assert_eq!(
        out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
        "{}\n"
    );
    assert!(!out.to_string().contains("$setElementOrder"));

    // Primitive lists are ordered by value.
    let out = patch(
        &out,
        PatchType::StrategicMerge,
        json!({"metadata": {"$setElementOrder/finalizers": ["c.io/z", "a.io/x"],
                            "finalizers": ["c.io/z"]}}),
        DEPLOYMENT,
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["c.io/z", "a.io/x"]));
}

#[test]
fn strategic_merge_errors_look_like_the_servers() {
    let d = deployment();
    // An item of a keyed list without its merge key: the real server answers 500, no reason.
    let err = apply_patch(
        &d,
        PatchType::StrategicMerge,
        br#"{"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}"#,
        DEPLOYMENT,
    )
    .expect_err("missing merge key");
    let st = err.to_status("deployments", "d");
    assert_eq!(st.code, 500);
    assert!(
        st.message
            .contains("does not contain declared merge key: name"),
        "{}",
        st.message
    );

    // The patch sets a key `$retainKeys` does not list: 422.
    let err = apply_patch(
        &d,
        PatchType::StrategicMerge,
        br#"{"spec":{"strategy":{"$retainKeys":["type"],"type":"Recreate","rollingUpdate":null}}}"#,
        DEPLOYMENT,
    )
    .expect_err("retainKeys mismatch");
    assert_eq!(err.code(), 422);

    // Unknown `$patch` values and malformed directives: 400.
    for body in [
        r#"{"spec":{"$patch":"explode"}}"#,
        r#"{"spec":{"$retainKeys":"type"}}"#,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":"a"}}"#,
        r#"{"spec":{"$setElementOrder/containers":{}}}"#,
    ] {
        let err = apply_patch(&d, PatchType::StrategicMerge, body.as_bytes(), DEPLOYMENT)
            .expect_err(body);
        assert_eq!(err.code(), 400, "{body}: {err}");
    }
}

// ---- server-side apply ----

fn ssa(
    current: Option<&Value>,
    body: &str,
    manager: &str,
    force: bool,
) -> Result<Value, PatchError> {
    server_side_apply(current, body.as_bytes(), manager, force, CONFIGMAP, NOW)
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or("").to_owned(),
                e["operation"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

const CM_YAML: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: c
  namespace: n
  labels:
    app: demo
data:
  a: '1'
  b: '2'
";

#[test]
fn apply_creates_the_object_with_an_apply_entry() {
    let out = ssa(None, CM_YAML, "kubectl", false).expect("created");
    assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(out["metadata"]["name"], "c");
    assert_eq!(
        out["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": NOW,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}},
                         "f:metadata": {"f:labels": {"f:app": {}}}}
        }])
    );
}

#[test]
fn apply_accepts_json_bodies() {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                      "data": {"k": "v"}})
    .to_string();
    let out = ssa(None, &body, "m", false).expect("created");
    assert_eq!(out["data"]["k"], "v");
    // JSON with tabs and a key longer than YAML's 1024-character implicit-key limit.
    let long_key = "k".repeat(2000);
    let body = format!(
        "{{\t\"apiVersion\":\"v1\",\t\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c\"}},\"data\":{{\"{long_key}\":\"v\"}}}}"
    );
    let out = ssa(None, &body, "m", false).expect("created from JSON");
    assert_eq!(out["data"][long_key.as_str()], "v");
    // Flow-style YAML that is not JSON still parses.
    let out = ssa(
        None,
        "{apiVersion: v1, kind: ConfigMap, data: {k: v}}",
        "m",
        false,
    )
    .expect("flow YAML");
    assert_eq!(out["data"]["k"], "v");
}

#[test]
fn reapply_updates_values_and_removes_fields_it_no_longer_applies() {
    let v1 = ssa(None, CM_YAML, "kubectl", false).expect("created");
    let v2 = ssa(
        Some(&v1),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: changed\n",
        "kubectl",
        false,
    )
    .expect("re-applied");
    assert_eq!(
        v2["data"],
        json!({"a": "changed"}),
        "b and the label are dropped"
    );
    assert!(v2["metadata"]
        .get("labels")
        .is_none_or(|l| l.as_object().is_some_and(|m| m.is_empty())));
    assert_eq!(
        v2["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
}

#[test]
fn omitted_fields_stay_when_another_manager_owns_them() {
    let v1 = ssa(None, CM_YAML, "kubectl", false).expect("created");
    // Another applier sets b to the same value: shared ownership, no conflict.
    let v2 = ssa(
        Some(&v1),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  b: '2'\n",
        "other",
        false,
    )
    .expect("shared");
    let v3 = ssa(
        Some(&v2),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: '1'\n",
        "kubectl",
        false,
    )
    .expect("re-applied");
    assert_eq!(v3["data"], json!({"a": "1", "b": "2"}));
    // An applier does not own the labels map itself, so dropping its last label leaves it empty.
    assert_eq!(v3["metadata"]["labels"], json!({}));
    assert_eq!(
        managers(&v3),
        vec![
            ("kubectl".into(), "Apply".into()),
            ("other".into(), "Apply".into())
        ]
    );
}

#[test]
fn apply_conflicts_with_another_managers_field_is_409() {
    let mut v1 = ssa(None, CM_YAML, "kubectl", false).expect("created");
    // A controller changes `a` with an ordinary update and so takes it over.
    let old = v1.clone();
    v1["data"]["a"] = json!("controller");
    crate::fields::record_update(Some(&old), &mut v1, "ctrl", "Update", None, NOW);

    let err = ssa(Some(&v1), CM_YAML, "kubectl", false).expect_err("conflict");
    assert_eq!(
        err,
        PatchError::Conflicts(vec![Conflict {
            manager: "\"ctrl\" using v1".into(),
            field: ".data.a".into()
        }])
    );
    let st = err.to_status("configmaps", "c");
    assert_eq!(
        (st.code, st.reason.as_str(), st.status.as_str()),
        (409, "Conflict", "Failure")
    );
    assert_eq!(
        st.message,
        "Apply failed with 1 conflict: conflict with \"ctrl\" using v1: .data.a"
    );
    let causes = st.details.clone().expect("details").causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].message, "conflict with \"ctrl\" using v1");
    assert_eq!(causes[0].field, ".data.a");
    // The serialised Status has the server's shape.
    let wire = serde_json::to_value(&st).expect("serialises");
    assert_eq!(
        wire["details"],
        json!({"causes": [{"reason": "FieldManagerConflict",
                           "message": "conflict with \"ctrl\" using v1",
                           "field": ".data.a"}]})
    );

    // Applying the value the controller set is not a conflict.
    let same = CM_YAML.replace("a: '1'", "a: controller");
    assert!(ssa(Some(&v1), &same, "kubectl", false).is_ok());
}

#[test]
fn several_conflicts_are_listed_per_manager() {
    let v1 = ssa(None, CM_YAML, "one", false).expect("created");
    let err = ssa(
        Some(&v1),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: x\n  b: y\n",
        "two",
        false,
    )
    .expect_err("conflicts");
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"one\":\n- .data.a\n- .data.b"
    );
    let st = err.to_status("configmaps", "c");
    assert_eq!(st.details.expect("details").causes.len(), 2);
}

#[test]
fn forced_apply_moves_ownership() {
    let v1 = ssa(None, CM_YAML, "one", false).expect("created");
    let v2 = ssa(
        Some(&v1),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: forced\n",
        "two",
        true,
    )
    .expect("forced");
    assert_eq!(v2["data"], json!({"a": "forced", "b": "2"}));
    let mf = v2["metadata"]["managedFields"].as_array().expect("entries");
    let fields_of = |m: &str| {
        mf.iter()
            .find(|e| e["manager"] == m)
            .map(|e| e["fieldsV1"].clone())
            .expect("entry")
    };
    assert_eq!(fields_of("two"), json!({"f:data": {"f:a": {}}}));
    assert_eq!(
        fields_of("one"),
        json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
    );
    // Now "one" re-applying its old value conflicts with "two".
    let err = ssa(Some(&v2), CM_YAML, "one", false).expect_err("conflict");
    assert_eq!(err.code(), 409);
}

#[test]
fn apply_merges_keyed_lists_and_removes_dropped_items() {
    let dep = |containers: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n{containers}"
        )
    };
    let two = dep(
        "      - name: web\n        image: nginx\n      - name: side\n        image: busybox\n",
    );
    let v1 =
        server_side_apply(None, two.as_bytes(), "mgr", false, DEPLOYMENT, NOW).expect("created");
    // Another manager adds a container through an update.
    let mut v2 = v1.clone();
    v2["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .expect("list")
        .push(json!({"name": "injected", "image": "proxy"}));
    crate::fields::record_update(Some(&v1), &mut v2, "webhook", "Update", None, NOW);

    let one = dep("      - name: web\n        image: nginx:2\n");
    let v3 = server_side_apply(Some(&v2), one.as_bytes(), "mgr", false, DEPLOYMENT, NOW)
        .expect("applied");
    let names: Vec<&str> = containers(&v3)
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["web", "injected"],
        "side is dropped, the webhook's stays"
    );
    assert_eq!(containers(&v3)[0]["image"], "nginx:2");
    let mgr = v3["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == "mgr"))
        .expect("mgr entry");
    assert_eq!(
        mgr["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"],
        json!({"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}})
    );
}

#[test]
fn apply_preconditions_and_refusals() {
    let v1 = ssa(None, CM_YAML, "m", false).expect("created");
    let mut cur = v1.clone();
    cur["metadata"]["resourceVersion"] = json!("7");
    let stale = CM_YAML.replace(
        "  namespace: n\n",
        "  namespace: n\n  resourceVersion: '6'\n",
    );
    let err = ssa(Some(&cur), &stale, "m", false).expect_err("stale");
    let st = err.to_status("configmaps", "c");
    assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        st.message,
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let fresh = CM_YAML.replace(
        "  namespace: n\n",
        "  namespace: n\n  resourceVersion: '7'\n",
    );
    assert!(ssa(Some(&cur), &fresh, "m", false).is_ok());

    for body in [
        "kind: ConfigMap\nmetadata:\n  name: c\n",
        "apiVersion: v1\nmetadata:\n  name: c\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  managedFields: []\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: 3\n",
        "- a\n- b\n",
        "a: 1\n---\nb: 2\n",
        "apiVersion: v1\nkind: ConfigMap\ndata: {a: [unclosed\n",
    ] {
        let err = ssa(None, body, "m", false).expect_err(body);
        assert_eq!(err.code(), 400, "{body}: {err}");
    }
}

#[test]
fn apply_to_the_status_subresource_changes_only_status() {
    let cur = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
                     "spec": {"size": 1}});
    let out = server_side_apply_subresource(
        Some(&cur),
        b"apiVersion: example.com/v1\nkind: W\nmetadata:\n  name: w\nspec:\n  size: 9\nstatus:\n  ready: true\n",
        "ctl",
        false,
        None,
        NOW,
        Some("status"),
    )
    .expect("applied");
    assert_eq!(out["spec"]["size"], 1);
    assert_eq!(out["status"]["ready"], true);
    assert_eq!(out["metadata"]["managedFields"][0]["subresource"], "status");
    assert_eq!(
        out["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:status": {".": {}, "f:ready": {}}})
    );
}

#[test]
fn every_error_maps_to_its_status_code() {
    let cases = [
        (
            PatchError::UnsupportedMediaType { builtin: true },
            415,
            "UnsupportedMediaType",
        ),
        (PatchError::BadRequest("x".into()), 400, "BadRequest"),
        (PatchError::Unprocessable("x".into()), 422, "Invalid"),
        (PatchError::Internal("x".into()), 500, ""),
        (
            PatchError::TooManyOperations(10_001),
            413,
            "RequestEntityTooLarge",
        ),
        (PatchError::Conflicts(vec![]), 409, "Conflict"),
        (PatchError::StaleResourceVersion, 409, "Conflict"),
    ];
    for (err, code, reason) in cases {
        let st = err.to_status("configmaps", "c");
        assert_eq!((st.code, st.reason.as_str()), (code, reason), "{err:?}");
        assert_eq!(err.code(), code);
        assert_eq!(st.kind, "Status");
        assert_eq!(st.status, "Failure");
    }
    assert!(PatchError::UnsupportedMediaType { builtin: true }
        .to_string()
        .contains("application/strategic-merge-patch+json"));
}

#[test]
fn first_apply_to_an_untracked_object_conflicts_with_before_first_apply() {
    let seeded = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "c", "namespace": "n"},
                        "data": {"a": "seeded", "b": "2"}});
    let err = ssa(Some(&seeded), CM_YAML, "kubectl", false).expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.a"
    );
    let out = ssa(Some(&seeded), CM_YAML, "kubectl", true).expect("forced");
    assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        managers(&out),
        vec![
            ("kubectl".into(), "Apply".into()),
            (BEFORE_FIRST_APPLY.into(), "Update".into())
        ]
    );
}

#[test]
fn conflicts_with_several_managers_are_grouped_and_sorted() {
    let c = |m: &str, f: &str| Conflict {
        manager: m.into(),
        field: f.into(),
    };
    let err = PatchError::Conflicts(vec![
        c("\"zed\"", ".data.a"),
        c("\"amy\" using v1", ".data.b"),
        c("\"zed\"", ".data.c"),
    ]);
    assert_eq!(
        err.to_string(),
        "Apply failed with 3 conflicts: conflicts with \"amy\" using v1:\n- .data.b\nconflicts with \"zed\":\n- .data.a\n- .data.c"
    );
    let causes = err
        .to_status("configmaps", "c")
        .details
        .expect("details")
        .causes;
    assert_eq!(causes.len(), 3);
    assert_eq!(causes[1].message, "conflict with \"amy\" using v1");
}

#[test]
fn json_patch_operation_count_is_bounded() {
    let cm = json!({"data": {}});
    let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
        .map(|i| json!({"op": "add", "path": format!("/data/k{i}"), "value": "v"}))
        .collect();
    let body = serde_json::to_vec(&ops).expect("serialises");
    let err = apply_patch(&cm, PatchType::Json, &body, CONFIGMAP).expect_err("too many");
    assert_eq!(
        err,
        PatchError::TooManyOperations(MAX_JSON_PATCH_OPERATIONS + 1)
    );
    assert_eq!(
        err.to_status("configmaps", "c").message,
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    let out = apply_patch(
        &cm,
        PatchType::Json,
        &serde_json::to_vec(&ops[..3]).expect("ok"),
        CONFIGMAP,
    )
    .expect("within the bound");
    assert_eq!(out["data"].as_object().map(|m| m.len()), Some(3));
}

// ---- differential tests against kubectl's own patch code ----

/// Runs `kubectl patch --local`, which applies a patch with the same library the API server
/// uses, and returns its result. The tests that call it are ignored where kubectl was not
/// found at build time (`cfg(kubectl)`, see host/build.rs).
fn kubectl_patch(obj: &Value, ty: &str, patch: &Value) -> Result<Value, String> {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!(
        "patch-oracle-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("obj.json");
    std::fs::File::create(&file)
        .and_then(|mut f| f.write_all(obj.to_string().as_bytes()))
        .map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new("kubectl");
    cmd.env("KUBECONFIG", dir.join("none"))
        .arg("patch")
        .arg("-f")
        .arg(&file)
        .args(["--local", "-o", "json", "--type", ty, "-p"])
        .arg(patch.to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    let out = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("kubectl patch --local finishes within 60 s");
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.map_err(|e| format!("cannot run kubectl: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

fn strategic_cases() -> Vec<(&'static str, Value, Value)> {
    let mut cases = merge_cases();
    cases.extend(order_cases());
    cases
}

/// Merges of keyed lists, maps and metadata, with and without directives.
fn merge_cases() -> Vec<(&'static str, Value, Value)> {
    let d = deployment();
    vec![
        (
            "keyed lists merge",
            d.clone(),
            json!({"spec": {"template": {"spec": {
            "containers": [{"name": "web", "image": "nginx:2",
                            "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                            "ports": [{"containerPort": 443, "name": "https"}, {"containerPort": 8080}],
                            "volumeMounts": [{"mountPath": "/b", "name": "vb"}],
                            "args": ["-z"]},
                           {"name": "new", "image": "alpine", "resources": null}],
            "volumes": [{"name": "vb", "emptyDir": {}}],
            "tolerations": [{"key": "k2", "operator": "Exists"}],
            "imagePullSecrets": [{"name": "s2"}]}}}}),
        ),
        (
            "metadata lists",
            d.clone(),
            json!({"metadata": {
            "finalizers": ["b.io/y", "a.io/x"],
            "ownerReferences": [{"uid": "u1", "name": "renamed"},
                                {"uid": "u2", "name": "o2", "kind": "K", "apiVersion": "v1"}]}}),
        ),
        (
            "directives",
            d.clone(),
            json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"]},
            "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"},
                     "template": {"spec": {
                         "containers": [{"name": "side", "$patch": "delete"},
                                        {"name": "web", "env": [{"name": "A", "$patch": "delete"}],
                                         "resources": {"$patch": "replace", "limits": {"cpu": "1"}}}],
                         "volumes": [{"$patch": "replace"}, {"name": "only", "emptyDir": {}}]}}}}),
        ),
        (
            "map delete and replace",
            d.clone(),
            json!({"spec": {
            "strategy": {"$patch": "delete"}, "replicas": null,
            "template": {"$patch": "replace", "metadata": {"labels": {"a": "b"}}}}}),
        ),
        (
            "kubectl apply shape",
            d.clone(),
            json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "web"}],
                "containers": [{"name": "side", "image": "busybox:2"}]}}}}),
        ),
    ]
}

/// `$setElementOrder`, primitive lists and Service ports.
fn order_cases() -> Vec<(&'static str, Value, Value)> {
    let d = deployment();
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                     "spec": {"selector": {"app": "a"},
                              "ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
    let abc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "a", "image": "1"},
                                             {"name": "b", "image": "2"},
                                             {"name": "c", "image": "3"}]}});
    vec![
        (
            "primitive order",
            d.clone(),
            json!({"metadata": {
            "$setElementOrder/finalizers": ["c.io/z", "a.io/x"], "finalizers": ["c.io/z"]}}),
        ),
        (
            "service ports",
            svc,
            json!({"spec": {"selector": {"tier": "web"},
                                               "ports": [{"port": 80, "targetPort": 9090}]}}),
        ),
        (
            "order with server-only items",
            abc.clone(),
            json!({"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
            "containers": [{"name": "a", "image": "1b"}]}}),
        ),
        (
            "new items and order",
            abc,
            json!({"spec": {
            "$setElementOrder/containers": [{"name": "n"}, {"name": "b"}, {"name": "a"}, {"name": "c"}],
            "containers": [{"name": "n", "image": "9"}]}}),
        ),
        (
            "primitive delete and add",
            d.clone(),
            json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": ["a.io/x"], "finalizers": ["n.io/1", "n.io/2"]}}),
        ),
        (
            "order with deletions",
            d.clone(),
            json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"name": "side", "$patch": "delete"}]}}}}),
        ),
        (
            "replace emptying a list",
            d.clone(),
            json!({"spec": {"template": {"spec": {
            "volumes": [{"$patch": "replace"}], "tolerations": null}}}}),
        ),
        (
            "new item with nested directives",
            d.clone(),
            json!({"spec": {"template": {"spec": {
            "containers": [{"name": "x", "image": "i", "env": [{"name": "Q", "$patch": "delete"}, {"name": "R", "value": "r"}]}]}}}}),
        ),
        (
            "pod status conditions",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "status": {"conditions": [{"type": "Ready", "status": "False"},
                                      {"type": "Initialized", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"},
                                          {"type": "PodScheduled", "status": "True"}]}}),
        ),
        (
            "selector key deletion",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"selector": {"app": "a", "tier": "t"}}}),
            json!({"spec": {"selector": {"app": null, "new": "n"}}}),
        ),
        (
            "volume retainKeys",
            d,
            json!({"spec": {"template": {"spec": {
            "volumes": [{"$retainKeys": ["configMap", "name"], "name": "va",
                         "configMap": {"name": "cm"}}]}}}}),
        ),
    ]
}

fn as_server_decodes(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, c| !c.is_null() && !k.starts_with('$'));
            m.values_mut().for_each(as_server_decodes);
        }
        Value::Array(a) => a.iter_mut().for_each(as_server_decodes),
        _ => {}
    }
}

/// Strategic merge agrees with kubectl's implementation of it, list order included
/// (spec 6.11).
#[test]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
fn strategic_merge_matches_kubectl() {
    for (name, obj, p) in strategic_cases() {
        let mut expected = kubectl_patch(&obj, "strategic", &p)
            .unwrap_or_else(|e| panic!("{name}: kubectl failed: {e}"));
        // kubectl keeps a new list item verbatim; the server's typed decode then drops its
        // nulls and `$` keys, which is what the emulator stores.
        as_server_decodes(&mut expected);
        let ours = patch(&obj, PatchType::StrategicMerge, p.clone(), DEPLOYMENT);
        assert!(
            ours == expected,
            "case {name:?}, patch {p}\nours:    {ours:#}\nkubectl: {expected:#}"
        );
    }
}

#[test]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
fn merge_and_json_patch_match_kubectl() {
    let d = deployment();
    let cases = [
        (
            "merge",
            PatchType::Merge,
            json!({"metadata": {"labels": {"x": "y"}, "finalizers": null},
                                            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "only"}]}}}}),
        ),
        (
            "json",
            PatchType::Json,
            json!([
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "x", "image": "y"}},
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "move", "from": "/spec/strategy", "path": "/spec/oldStrategy"}]),
        ),
    ];
    for (ty_name, ty, p) in cases {
        let expected = kubectl_patch(&d, ty_name, &p)
            .unwrap_or_else(|e| panic!("{ty_name}: kubectl failed: {e}"));
        assert_eq!(patch(&d, ty, p.clone(), DEPLOYMENT), expected, "{ty_name}");
    }
}

#[test]
fn apply_refuses_keyed_list_items_without_their_key() {
    let body = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  namespace: n\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        ports:\n        - containerPort: 80\n      - image: nameless\n";
    let err = server_side_apply(None, body.as_bytes(), "m", false, DEPLOYMENT, NOW)
        .expect_err("missing key");
    let st = err.to_status("deployments", "d");
    assert_eq!(st.code, 500);
    assert_eq!(
        st.message,
        "failed to create typed patch object (n/d; apps/v1, Kind=Deployment): .spec.template.spec.containers: element 1: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)"
    );
    // A port without protocol is fine: protocol defaults to TCP.
    let ok = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        ports:\n        - containerPort: 80\n";
    assert!(server_side_apply(None, ok.as_bytes(), "m", false, DEPLOYMENT, NOW).is_ok());
    // Repeated keys are refused too.
    let dup = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: a\n  - name: a\n";
    let err = server_side_apply(None, dup.as_bytes(), "m", false, Some(("", "Pod")), NOW)
        .expect_err("duplicate");
    assert!(
        err.to_string()
            .ends_with(".spec.containers: duplicate entries for key [name=\"a\"]"),
        "{err}"
    );
    // Custom resources have no keyed lists.
    let cr = "apiVersion: example.com/v1\nkind: W\nmetadata:\n  name: w\nspec:\n  containers:\n  - image: x\n";
    assert!(server_side_apply(None, cr.as_bytes(), "m", false, None, NOW).is_ok());
}

#[test]
fn main_resource_apply_ignores_status_when_the_kind_has_a_status_subresource_spec_6_12() {
    let cur = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
                     "spec": {"size": 1}, "status": {"ready": false}});
    let body = b"apiVersion: example.com/v1\nkind: W\nmetadata:\n  name: w\nspec:\n  size: 2\nstatus:\n  ready: true\n";
    let req = ApplyRequest {
        current: Some(&cur),
        body,
        field_manager: "m",
        // The object has no managedFields: it belongs to before-first-apply.
        force: true,
        builtin: None,
        now: NOW,
        subresource: None,
        ignore_status: true,
    };
    let out = server_side_apply_with(&req).expect("applied");
    assert_eq!(out["spec"]["size"], 2);
    assert_eq!(out["status"]["ready"], false);
    let owned = &out["metadata"]["managedFields"];
    let mine = owned
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == "m"))
        .expect("entry");
    assert!(mine["fieldsV1"].get("f:status").is_none(), "{mine}");
    // Without the flag, status is applied like any field.
    let out = server_side_apply_with(&ApplyRequest {
        ignore_status: false,
        ..req
    })
    .expect("applied");
    assert_eq!(out["status"]["ready"], true);
}

#[test]
fn tricky_json_patch_operations_fail_cleanly() {
    let doc = json!({"a": [], "b": {"c": 1}, "d": [1, 2]});
    for op in [
        json!({"op": "remove", "path": "/a/-"}),
        json!({"op": "remove", "path": "/d/-"}),
        json!({"op": "move", "from": "/a/-", "path": "/x"}),
        json!({"op": "move", "from": "/b", "path": "/b/c/d"}),
        json!({"op": "copy", "from": "/nope", "path": "/x"}),
        json!({"op": "replace", "path": "/d/99", "value": 1}),
        json!({"op": "add", "path": "/d/-1", "value": 1}),
        json!({"op": "add", "path": "/d/01", "value": 1}),
        json!({"op": "test", "path": "/b/c/~2", "value": 1}),
        json!({"op": "add", "path": "no-slash", "value": 1}),
        json!({"op": "remove", "path": ""}),
    ] {
        let body = serde_json::to_vec(&[&op]).expect("serialises");
        let err = apply_patch(&doc, PatchType::Json, &body, CONFIGMAP).expect_err("fails");
        assert!(matches!(err.code(), 400 | 422), "{op}: {err}");
    }
    // Replacing the whole document with a non-object is refused.
    let err = apply_patch(
        &doc,
        PatchType::Json,
        br#"[{"op":"replace","path":"","value":3}]"#,
        CONFIGMAP,
    )
    .expect_err("not an object");
    assert_eq!(err.code(), 400);
}

#[test]
fn reapplying_the_same_configuration_changes_nothing() {
    let v1 = ssa(None, CM_YAML, "kubectl", false).expect("created");
    let again = server_side_apply(
        Some(&v1),
        CM_YAML.as_bytes(),
        "kubectl",
        false,
        CONFIGMAP,
        "2030-01-01T00:00:00Z",
    )
    .expect("re-applied");
    assert_eq!(
        again, v1,
        "a no-op apply leaves the object identical, time included"
    );
    // A real change moves the time.
    let changed = server_side_apply(
        Some(&v1),
        CM_YAML.replace("b: '2'", "b: '3'").as_bytes(),
        "kubectl",
        false,
        CONFIGMAP,
        "2030-01-01T00:00:00Z",
    )
    .expect("applied");
    assert_eq!(
        changed["metadata"]["managedFields"][0]["time"],
        "2030-01-01T00:00:00Z"
    );
}

#[test]
fn apply_leaves_server_set_metadata_alone() {
    let mut cur = ssa(None, CM_YAML, "kubectl", false).expect("created");
    cur["metadata"]["creationTimestamp"] = json!("2026-11-22T03:04:17Z");
    cur["metadata"]["uid"] = json!("u-1");
    let body = CM_YAML.replace(
        "  namespace: n\n",
        "  namespace: n\n  creationTimestamp: null\n  uid: other\n",
    );
    let out = ssa(Some(&cur), &body, "kubectl", false).expect("applied");
    assert_eq!(out["metadata"]["creationTimestamp"], "2026-11-22T03:04:17Z");
    assert_eq!(out["metadata"]["uid"], "u-1");
}

/// Found by the fuzz target `apply`: a `null` inside a map the configuration brings new was
/// stored (on create), while the same `null` under an existing map removes the field, so
/// applying the same configuration twice changed the object. A `null` is never stored.
#[test]
fn apply_never_stores_a_null_and_reapplying_changes_nothing() {
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: n\nRata:\n  k:\n  keep: 1\nlist: [{a: null, b: 2}]\n";
    for current in [
        None,
        Some(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "managedFields": []}, "Rata": {"old": 1}}),
        ),
    ] {
        let first = ssa(current.as_ref(), body, "m", false).unwrap();
        assert_eq!(first["Rata"]["keep"], 1, "{first}");
        assert!(first["Rata"].get("k").is_none(), "{first}");
        assert_eq!(first["list"], json!([{"b": 2}]), "{first}");
        let again = ssa(Some(&first), body, "m", false).unwrap();
        assert_eq!(again, first);
    }
}
