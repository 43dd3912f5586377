//! The TokenRequest API (`POST …/serviceaccounts/{name}/token`): what `kubectl create token`
//! calls, answered as kube-apiserver answers it (sample `tokenrequest-create`).
//!
//! Why: a test gives the host exactly a ServiceAccount's rights the way a cluster does, by a
//! token issued for the account that RBAC bindings name.

use std::time::Duration;

use http::Response;
use serde_json::{json, Value};

use super::authn::UserInfo;
use super::request::ResourceRequest;
use super::response::{self, Body, FieldError};
use super::{reviews, write, Shared};
use kwh_client::Status;

/// The lifetime a request that names none gets (the API server's default).
const DEFAULT_TTL_SECS: i64 = 3600;
/// The shortest lifetime the API server issues.
const MIN_TTL_SECS: i64 = 600;
/// The longest lifetime the API server accepts (2^32 seconds).
const MAX_TTL_SECS: i64 = 1 << 32;
/// The audience of tokens whose request names none (the API server's own).
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc";

/// A token for the existing ServiceAccount `namespace/name` (404 otherwise), authenticating as
/// `system:serviceaccount:{namespace}:{name}` with the account's uid.
pub(crate) fn issue(
    shared: &Shared,
    namespace: &str,
    name: &str,
    ttl: Duration,
) -> Result<String, Status> {
    let def = write::def_for(shared, "v1", "ServiceAccount")?;
    let sa = write::get(shared, &def, Some(namespace), name)?;
    let user = UserInfo::service_account(namespace, name).with_uid(sa.uid());
    Ok(match &shared.auth {
        Some(tokens) => tokens.issue(user, ttl),
        // Nothing checks tokens then; hand out one of the same shape all the same.
        None => format!("emulator.{}", super::util::new_uid().replace('-', "")),
    })
}

/// Answers a TokenRequest whose body (`request`, decoded to JSON) asks for
/// `spec.expirationSeconds` (default 3600, at least 600) and `spec.audiences`.
pub(crate) fn request(
    shared: &Shared,
    r: &ResourceRequest,
    request: &Value,
    manager: &str,
) -> Result<Response<Body>, Status> {
    let namespace = r.namespace.as_deref().unwrap_or("default");
    let name = r.name.as_deref().unwrap_or("");
    let spec = request.get("spec");
    let secs = match spec.and_then(|s| s.get("expirationSeconds")) {
        None | Some(Value::Null) => DEFAULT_TTL_SECS,
        Some(v) => v.as_i64().ok_or_else(|| {
            response::bad_request("spec.expirationSeconds: expected an integer".to_owned())
        })?,
    };
    let too = match secs {
        s if s < MIN_TTL_SECS => Some("may not specify a duration less than 10 minutes"),
        s if s > MAX_TTL_SECS => Some("may not specify a duration larger than 2^32 seconds"),
        _ => None,
    };
    if let Some(why) = too {
        return Err(response::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            "",
            &[FieldError {
                reason: "FieldValueInvalid",
                field: "spec.expirationSeconds".into(),
                detail: format!("Invalid value: {secs}: {why}"),
            }],
        ));
    }
    let audiences = match spec
        .and_then(|s| s.get("audiences"))
        .and_then(Value::as_array)
    {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!([DEFAULT_AUDIENCE]),
    };
    let bound = spec
        .and_then(|s| s.get("boundObjectRef"))
        .cloned()
        .unwrap_or(Value::Null);
    // Within [600, 2^32] the lifetime is positive.
    let ttl = Duration::from_secs(secs.unsigned_abs());
    let token = issue(shared, namespace, name, ttl)?;
    let now = shared.now_rfc3339();
    let expires = super::util::parse_rfc3339(&now)
        .map(|t| super::util::rfc3339(t.saturating_add(ttl.as_secs())))
        .unwrap_or_default();
    // What the field manager sees: the request after defaulting, named after the account.
    let mut defaulted = request.clone();
    if let Some(obj) = defaulted.as_object_mut() {
        obj.insert(
            "metadata".into(),
            json!({"name": name, "namespace": namespace}),
        );
        obj.insert(
            "spec".into(),
            json!({"audiences": audiences, "expirationSeconds": secs, "boundObjectRef": bound}),
        );
        // The default audience is the server's, not the request's.
        if spec.and_then(|s| s.get("audiences")).is_none() {
            obj["spec"]["audiences"] = json!([]);
        }
    }
    let doc = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": reviews::answer_metadata(
            shared,
            "authentication.k8s.io/v1",
            &defaulted,
            Some(&now),
            manager,
            Some("token"),
        ),
        "spec": {
            "audiences": audiences,
            "expirationSeconds": secs,
            "boundObjectRef": bound
        },
        "status": {"token": token, "expirationTimestamp": expires}
    });
    Ok(reviews::created(&doc))
}
