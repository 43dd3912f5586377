//! The review APIs a client asks about itself: `SelfSubjectAccessReview` (what `kubectl auth
//! can-i` posts) and `SelfSubjectReview` (`kubectl auth whoami`), answered as kube-apiserver
//! answers them (samples `selfsubjectaccessreview-allowed` / `-denied`).
//!
//! Why: a controller (or a test) can ask the emulator what its identity may do, and gets the
//! same answer, reason included, that the RBAC in the store gives its requests. Neither object
//! is stored; the answer is the request with its status filled in.

use http::{Response, StatusCode};
use serde_json::{json, Map, Value};

use super::authn::{UserInfo, MASTERS};
use super::authz::{self, Attributes, Decision};
use super::fields::{self, FieldSet, ManagedEntry};
use super::response::{self, Body, FieldError};
use super::{encode, Shared};
use kwh_client::Status;

/// Who is asking, as the review handlers see it.
pub(crate) enum Asker<'a> {
    /// Authorization is on: the authenticated user.
    User(&'a UserInfo),
    /// Authorization is off: everything is allowed; `token` says whether the emulator's one
    /// bearer token was required (and so shown), which identifies the kubeconfig's admin.
    Anyone { token: bool },
}

/// A `SelfSubjectAccessReview`: whether the asker may do what `spec.resourceAttributes` or
/// `spec.nonResourceAttributes` describe.
pub(crate) fn self_subject_access_review(
    shared: &Shared,
    asker: &Asker<'_>,
    request: &Value,
    manager: &str,
) -> Result<Response<Body>, Status> {
    const KIND: &str = "SelfSubjectAccessReview";
    const GROUP: &str = "authorization.k8s.io";
    let spec = request.get("spec");
    let attributes = |key: &str, names: &[&str]| -> Option<Map<String, Value>> {
        let given = spec?.get(key)?.as_object()?;
        Some(
            names
                .iter()
                .filter_map(|n| {
                    let v = given.get(*n)?.as_str().filter(|s| !s.is_empty())?;
                    Some(((*n).to_owned(), Value::String(v.to_owned())))
                })
                .collect(),
        )
    };
    let resource = attributes(
        "resourceAttributes",
        &[
            "namespace",
            "verb",
            "group",
            "version",
            "resource",
            "subresource",
            "name",
        ],
    );
    let non_resource = attributes("nonResourceAttributes", &["path", "verb"]);
    let invalid = |e: FieldError| response::invalid(KIND, GROUP, "", &[e]);
    fn s<'m>(m: &'m Map<String, Value>, k: &str) -> &'m str {
        m.get(k).and_then(Value::as_str).unwrap_or("")
    }
    let (attrs, spec_out) = match (&resource, &non_resource) {
        (Some(r), None) => (
            Attributes::Resource {
                verb: s(r, "verb"),
                group: s(r, "group"),
                resource: s(r, "resource"),
                subresource: Some(s(r, "subresource")).filter(|x| !x.is_empty()),
                namespace: Some(s(r, "namespace")).filter(|x| !x.is_empty()),
                name: Some(s(r, "name")).filter(|x| !x.is_empty()),
            },
            json!({"resourceAttributes": r}),
        ),
        (None, Some(n)) => (
            Attributes::NonResource {
                verb: s(n, "verb"),
                path: s(n, "path"),
            },
            json!({"nonResourceAttributes": n}),
        ),
        (None, None) => {
            return Err(invalid(FieldError {
                reason: "FieldValueInvalid",
                field: "spec.resourceAttributes".into(),
                detail: "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
            }))
        }
        (Some(_), Some(n)) => {
            return Err(invalid(FieldError {
                reason: "FieldValueInvalid",
                field: "spec.nonResourceAttributes".into(),
                detail: format!(
                    "Invalid value: authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}: cannot be specified in combination with resourceAttributes",
                    s(n, "path"),
                    s(n, "verb")
                ),
            }))
        }
    };
    let decision = match asker {
        Asker::User(user) => authz::authorize(shared, user, &attrs),
        Asker::Anyone { .. } => Decision {
            allowed: true,
            reason: String::new(),
        },
    };
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = Value::String(decision.reason);
    }
    let answer = json!({
        "kind": KIND,
        "apiVersion": format!("{GROUP}/v1"),
        "metadata": answer_metadata(shared, &format!("{GROUP}/v1"), request, None, manager, None),
        "spec": spec_out,
        "status": status,
    });
    Ok(created(&answer))
}

/// A `SelfSubjectReview`: the asker's user name, uid and groups.
pub(crate) fn self_subject_review(shared: &Shared, asker: &Asker<'_>) -> Response<Body> {
    let admin;
    let anonymous;
    let user = match asker {
        Asker::User(u) => *u,
        Asker::Anyone { token: true } => {
            admin = UserInfo::new("admin", &[MASTERS]);
            &admin
        }
        Asker::Anyone { token: false } => {
            anonymous = UserInfo::anonymous();
            &anonymous
        }
    };
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = Value::String(user.uid.clone());
    }
    created(&json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": shared.now_rfc3339()},
        "status": {"userInfo": info},
    }))
}

/// 201 with `v` in the API server's member order.
pub(crate) fn created(v: &Value) -> Response<Body> {
    match encode::to_vec(v) {
        Ok(b) => response::json(StatusCode::CREATED, b),
        Err(e) => response::status(&response::internal(&e.to_string())),
    }
}

/// `metadata` of an object the server answers without storing it (a TokenRequest, an access
/// review) of `api_version`: the request's own metadata, `creationTimestamp` (`null` when `created` is none, as
/// Go writes an unset time), and one managedFields entry for the fields the request set, as the
/// real server's field manager records a create (`subresource` for a request to one).
pub(crate) fn answer_metadata(
    shared: &Shared,
    api_version: &str,
    request: &Value,
    created: Option<&str>,
    manager: &str,
    subresource: Option<&str>,
) -> Value {
    let mut meta = request
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    meta.remove("managedFields");
    meta.insert(
        "creationTimestamp".into(),
        created.map_or(Value::Null, |t| Value::String(t.to_owned())),
    );
    let mut out = json!({"metadata": Value::Object(meta)});
    let fields = owned_fields(request);
    if !fields.is_empty() {
        let entry = ManagedEntry {
            manager: manager.to_owned(),
            operation: "Update".into(),
            api_version: api_version.to_owned(),
            time: Some(shared.now_rfc3339()),
            subresource: subresource.map(str::to_owned),
            fields,
        };
        fields::write_managed(&mut out, vec![entry]);
    }
    out["metadata"].take()
}

/// The fields a request sets, as the field manager sees a create: those that differ from the
/// kind's zero value (so `false`, `0`, `""` and empty objects own nothing). The optional
/// structs of these kinds (`spec.resourceAttributes`, `spec.nonResourceAttributes`,
/// `spec.boundObjectRef`) are members in their own right, as a pointer that was nil is.
fn owned_fields(request: &Value) -> FieldSet {
    const OPTIONAL_STRUCTS: [&str; 3] = [
        "resourceAttributes",
        "nonResourceAttributes",
        "boundObjectRef",
    ];
    let mut trimmed = request.clone();
    if let Some(m) = trimmed.as_object_mut() {
        // Status is the server's to fill in.
        m.remove("status");
    }
    drop_zero_values(&mut trimmed);
    let mut set: FieldSet = fields::object_fields(&trimmed, true).into_keys().collect();
    if let Some(spec) = trimmed.get("spec").and_then(Value::as_object) {
        for key in OPTIONAL_STRUCTS {
            if spec.contains_key(key) {
                set.insert(vec![fields::field_elem("spec"), fields::field_elem(key)]);
            }
        }
    }
    set
}

/// Removes members whose value is a zero value, children first.
fn drop_zero_values(v: &mut Value) {
    if let Value::Object(m) = v {
        for c in m.values_mut() {
            drop_zero_values(c);
        }
        m.retain(|_, c| !is_zero(c));
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_fields_are_what_the_request_set_with_optional_structs_as_members() {
        let ssar = json!({"apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview", "metadata": {},
            "spec": {"resourceAttributes": {"namespace": "ns", "verb": "get", "group": "",
                "resource": "configmaps"}},
            "status": {"allowed": false}});
        assert_eq!(
            fields::to_fields_v1(&owned_fields(&ssar)),
            json!({"f:spec": {"f:resourceAttributes": {".": {}, "f:namespace": {},
                "f:resource": {}, "f:verb": {}}}})
        );
        let token = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600, "audiences": []}});
        assert_eq!(
            fields::to_fields_v1(&owned_fields(&token)),
            json!({"f:spec": {"f:expirationSeconds": {}}})
        );
        let nothing = json!({"apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview", "metadata": {}, "status": {"userInfo": {}}});
        assert!(owned_fields(&nothing).is_empty());
    }
}
