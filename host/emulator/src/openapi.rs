//! OpenAPI v3: the root index and, per group/version, the schemas of its kinds (every field,
//! with its description: what `kubectl explain` prints) and one PATCH operation per kind that
//! declares the `fieldValidation` query parameter.
//!
//! Why the operation: `kubectl create -f` / `apply` validate by default (`--validate=strict`).
//! They first ask OpenAPI v3 whether the server validates fields itself; declaring the parameter
//! is enough for kubectl to leave validation to the server, as it does with a real one.
//! `/openapi/v2` is the same schemas in one Swagger 2.0 document, in JSON (the form tools other
//! than kubectl read) or in gnostic's protobuf (the form kubectl reads v2 in: `kubectl explain
//! --output plaintext-openapiv2`, and validation against servers without v3).

mod gnostic;
mod schemas;

use http::{Response, StatusCode};
use serde_json::{json, Map, Value};

use super::response::{self, Body};
use super::Shared;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group/version documents.
pub(crate) fn root(shared: &Shared) -> Response<Body> {
    let mut paths = Map::new();
    let rv = shared.store.current_rv();
    for d in shared.registry.all() {
        let p = gv_path(&d.group, &d.version);
        paths.entry(p.clone()).or_insert_with(
            || json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={rv:016X}")}),
        );
    }
    response::value(StatusCode::OK, &json!({"paths": paths}))
}

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/{g}/{v}`.
pub(crate) fn group_version(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let mut paths = Map::new();
    let defs: Vec<_> = shared
        .registry
        .all()
        .into_iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if defs.is_empty() {
        return response::status(&response::no_route());
    }
    let prefix = gv_path(group, version);
    let kinds: Vec<(String, String, String)> = defs
        .iter()
        .filter(|d| d.builtin)
        .map(|d| (d.group.clone(), d.version.clone(), d.kind.clone()))
        .collect();
    let custom: Vec<String> = defs
        .iter()
        .filter(|d| !d.builtin)
        .map(|d| format!("{}.{}", d.plural, d.group))
        .collect();
    for d in defs {
        let p = if d.namespaced {
            format!("/{prefix}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
        } else {
            format!("/{prefix}/{}/{{name}}", d.plural)
        };
        let op = json!({
            "operationId": format!("patch{}", d.kind),
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}
            ],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": d.group, "version": d.version, "kind": d.kind}
        });
        paths.insert(p, json!({"patch": op}));
    }
    let doc: Value = json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.26.1"},
        "paths": paths,
        "components": {"schemas": component_schemas(shared, version, &kinds, &custom)}
    });
    response::value(StatusCode::OK, &doc)
}

/// The schemas of a group-version: its built-in kinds' from the API's message table, and each
/// custom resource's from its CRD (`crds`: the CRDs' names) at `version`.
fn component_schemas(
    shared: &Shared,
    version: &str,
    kinds: &[(String, String, String)],
    crds: &[String],
) -> Map<String, Value> {
    let mut out = schemas::for_kinds(kinds);
    for name in crds {
        let Some(crd) = shared
            .store
            .get("apiextensions.k8s.io/customresourcedefinitions", name)
            .and_then(|o| o.to_value().ok())
        else {
            continue;
        };
        let versions: Vec<String> = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
            .filter(|v| v == version)
            .collect();
        for v in versions {
            if let Some((n, s)) = schemas::custom_resource(&crd, &v) {
                out.insert(n, s);
            }
        }
    }
    out
}

/// `/openapi/v2`: every built-in kind's schema and every custom resource's, as Swagger 2.0
/// `definitions`, in JSON or (asked for first) gnostic's protobuf; 406 for anything else.
pub(crate) fn v2(shared: &Shared, accept: &str) -> Response<Body> {
    let protobuf = gnostic::wanted(accept);
    let json_ok = accept.is_empty()
        || accept.split(',').any(|r| {
            matches!(
                r.split(';').next().unwrap_or("").trim(),
                "application/json" | "*/*" | "application/*"
            )
        });
    if !json_ok && !protobuf {
        // As kube-openapi answers a media type it does not serve.
        return response::base(StatusCode::NOT_ACCEPTABLE, "text/plain", Body::Full(None));
    }
    let defs = shared.registry.all();
    let kinds: Vec<(String, String, String)> = defs
        .iter()
        .filter(|d| d.builtin)
        .map(|d| (d.group.clone(), d.version.clone(), d.kind.clone()))
        .collect();
    let mut definitions = schemas::for_kinds(&kinds);
    for d in defs.iter().filter(|d| !d.builtin) {
        let crds = [format!("{}.{}", d.plural, d.group)];
        definitions.extend(component_schemas(shared, &d.version, &[], &crds));
    }
    let doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.26.1"},
        "paths": {},
        "definitions": definitions,
    });
    // The same schemas; v2 names another definition under `#/definitions/`, and puts a
    // reference beside its description (v3 wraps it in an `allOf`, its siblings being ignored).
    let mut doc = doc;
    unwrap_single_refs(&mut doc);
    // And an IntOrString is a string of format int-or-string (v3 adds its oneOf).
    let int_or_string = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
    if let Some(d) = doc["definitions"]
        .get_mut(int_or_string)
        .and_then(Value::as_object_mut)
    {
        d.remove("x-kubernetes-int-or-string");
        d.insert("type".into(), "string".into());
    }
    let text = doc
        .to_string()
        .replace("#/components/schemas/", "#/definitions/");
    if protobuf {
        if let Ok(doc) = serde_json::from_str::<Value>(&text) {
            let body = Body::Full(Some(bytes::Bytes::from(gnostic::document(&doc))));
            return response::base(StatusCode::OK, gnostic::MEDIA_TYPE, body);
        }
    }
    response::json(StatusCode::OK, text)
}

/// `{"allOf": [{"$ref": R}], …}` made `{"$ref": R, …}` throughout, as Swagger 2.0 documents
/// (kube-openapi's v2) write a described reference; a v3 `default: {}` beside it goes too.
fn unwrap_single_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let single = m
                .get("allOf")
                .and_then(Value::as_array)
                .filter(|a| a.len() == 1)
                .and_then(|a| a[0].get("$ref"))
                .cloned();
            if let Some(r) = single {
                m.remove("allOf");
                m.remove("default");
                m.insert("$ref".into(), r);
            }
            for child in m.values_mut() {
                unwrap_single_refs(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(unwrap_single_refs),
        _ => {}
    }
}
