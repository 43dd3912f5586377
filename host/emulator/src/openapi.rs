//! A minimal OpenAPI v3 surface: the root index and, per group/version, one PATCH operation per
//! kind that declares the `fieldValidation` query parameter.
//!
//! Why not 404: `kubectl create -f` / `apply` validate by default (`--validate=strict`). They
//! first ask OpenAPI v3 whether the server validates fields itself; when v3 is missing they
//! fall back to OpenAPI v2 to validate client-side and fail if that is missing too. Declaring
//! the parameter is enough for kubectl to leave validation to the server. These documents carry
//! no schemas, so `kubectl explain` does not work; `/openapi/v2` answers 404.

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
        "components": {"schemas": {}}
    });
    response::value(StatusCode::OK, &doc)
}
