//! The TokenRequest API (`POST …/serviceaccounts/{name}/token`): what `kubectl create token`
//! calls, answered as kube-apiserver answers it (sample `tokenrequest-create`).
//!
//! Why: a test gives the host exactly a ServiceAccount's rights the way a cluster does, by a
//! token issued for the account that RBAC bindings name.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::authn::UserInfo;
use super::response::{self, Body};
use super::router::ResourceRequest;
use super::{write, Shared};
use crate::kube::Status;

/// The lifetime a request that names none gets (the API server's default).
const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// A token for the existing ServiceAccount `namespace/name` (404 otherwise).
pub(crate) fn issue(
    shared: &Shared,
    namespace: &str,
    name: &str,
    ttl: Duration,
) -> Result<String, Status> {
    let def = write::def_for(shared, "v1", "ServiceAccount")?;
    write::get(shared, &def, Some(namespace), name)?;
    let user = UserInfo::service_account(namespace, name);
    Ok(match &shared.auth {
        Some(tokens) => tokens.issue(user, ttl),
        // Nothing checks tokens then; hand out one of the same shape all the same.
        None => format!("emulator.{}", super::util::new_uid().replace('-', "")),
    })
}

/// Answers a TokenRequest. The body's `spec.expirationSeconds` is read from JSON; a protobuf
/// body (kubectl's typed client sends one) gets the default lifetime.
pub(crate) fn request(
    shared: &Shared,
    r: &ResourceRequest,
    content_type: &str,
    body: &Bytes,
) -> Result<Response<Body>, Status> {
    let namespace = r.namespace.as_deref().unwrap_or("default");
    let name = r.name.as_deref().unwrap_or("");
    let ttl = if content_type.starts_with("application/json") || content_type.is_empty() {
        serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.pointer("/spec/expirationSeconds").and_then(Value::as_u64))
            .map_or(DEFAULT_TTL, Duration::from_secs)
    } else {
        DEFAULT_TTL
    };
    let token = issue(shared, namespace, name, ttl)?;
    let now = shared.now_rfc3339();
    let expires = super::util::parse_rfc3339(&now)
        .map(|t| super::util::rfc3339(t.saturating_add(ttl.as_secs())))
        .unwrap_or_default();
    let doc = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": now},
        "spec": {
            "audiences": ["https://kubernetes.default.svc"],
            "expirationSeconds": ttl.as_secs(),
            "boundObjectRef": null
        },
        "status": {"token": token, "expirationTimestamp": expires}
    });
    Ok(response::value(StatusCode::CREATED, &doc))
}
