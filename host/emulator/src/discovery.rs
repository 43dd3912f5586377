//! Discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{g}`, `/apis/{g}/{v}`),
//! generated from the registry so CRD-defined resources appear and disappear with their CRD.
//!
//! Why only the legacy format: kubectl and client-go ask for aggregated discovery first
//! (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,…`) and fall
//! back to these documents when the answer's content type is plain `application/json`.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::response::{self, Body};
use super::Shared;

/// `/version`, as kube-apiserver v1.26.1 answers (with this emulator's build date).
pub fn version() -> Response<Body> {
    response::value(
        StatusCode::OK,
        &json!({
            "major": "1",
            "minor": "26",
            "gitVersion": "v1.26.1",
            "gitCommit": "8f94681cd294aa8cfd3407b8191f6c70214973a4",
            "gitTreeState": "clean",
            "buildDate": "2023-01-18T15:51:25Z",
            "goVersion": "go1.19.5",
            "compiler": "gc",
            "platform": "linux/amd64"
        }),
    )
}

/// `/api`: APIVersions.
pub(crate) fn api_versions(shared: &Shared) -> Response<Body> {
    response::value(
        StatusCode::OK,
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}
            ]
        }),
    )
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0].clone()})
}

/// `/apis`: APIGroupList.
pub(crate) fn groups(shared: &Shared) -> Response<Body> {
    let groups: Vec<Value> = shared
        .registry
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    response::value(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

/// `/apis/{g}`: APIGroup, or 404.
pub(crate) fn group(shared: &Shared, name: &str) -> Response<Body> {
    match shared.registry.groups().iter().find(|(g, _)| g == name) {
        Some((g, vs)) => {
            let mut doc = group_doc(g, vs);
            if let Some(m) = doc.as_object_mut() {
                m.insert("kind".into(), "APIGroup".into());
                m.insert("apiVersion".into(), "v1".into());
            }
            response::value(StatusCode::OK, &doc)
        }
        None => response::status(&response::no_route()),
    }
}

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/api/v1` or `/apis/{g}/{v}`: APIResourceList, or 404 when nothing is served there.
pub(crate) fn resources(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let mut list = Vec::new();
    for d in shared
        .registry
        .all()
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        let verbs: Vec<&str> = if d.plural == "namespaces" {
            ALL_VERBS
                .iter()
                .copied()
                .filter(|v| *v != "deletecollection")
                .collect()
        } else {
            ALL_VERBS.to_vec()
        };
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": verbs,
        });
        if let Some(m) = r.as_object_mut() {
            if !d.short_names.is_empty() {
                m.insert("shortNames".into(), json!(d.short_names));
            }
            if !d.categories.is_empty() {
                m.insert("categories".into(), json!(d.categories));
            }
        }
        list.push(r);
        if d.status {
            list.push(json!({
                "name": format!("{}/status", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if super::scale::has_scale(d) {
            list.push(json!({
                "name": format!("{}/scale", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if list.is_empty() {
        return response::status(&response::no_route());
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut doc = json!({"kind": "APIResourceList", "groupVersion": gv, "resources": list});
    if !group.is_empty() {
        if let Some(m) = doc.as_object_mut() {
            m.insert("apiVersion".into(), "v1".into());
        }
    }
    response::value(StatusCode::OK, &doc)
}
