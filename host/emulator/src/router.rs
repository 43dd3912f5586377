//! Request routing: authentication, injected failures, path → (resource, namespace, name,
//! subresource) and method → verb (spec 6.1).

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;
use tracing::{debug, Instrument};

use super::accept::{self, Representation};
use super::authn::UserInfo;
use super::authz::{self, Attributes};
use super::request::{Query, ResourceRequest};
use super::request_info::RequestInfo;
use super::response::{self, Body};
use super::reviews::{self, Asker};
use super::{discovery, list, openapi, watch, write, Shared};
use kwh_client::Status;

/// Largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

enum Route {
    Version,
    Health,
    ApiVersions,
    CoreResources,
    Groups,
    Group(String),
    GroupResources(String, String),
    Resource(ResourceRequest),
    /// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`.
    SelfSubjectAccessReview,
    /// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`.
    SelfSubjectReview,
    Admin(Vec<String>),
    OpenApiRoot,
    OpenApiV2,
    OpenApiGroupVersion(String, String),
    NotFound,
}

fn route(shared: &Shared, segs: &[String]) -> Route {
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["api"] => Route::ApiVersions,
        ["api", "v1"] => Route::CoreResources,
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group((*g).to_owned()),
        ["apis", g, v] => Route::GroupResources((*g).to_owned(), (*v).to_owned()),
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3", "api", v] => Route::OpenApiGroupVersion(String::new(), (*v).to_owned()),
        ["openapi", "v3", "apis", g, v] => {
            Route::OpenApiGroupVersion((*g).to_owned(), (*v).to_owned())
        }
        ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] => {
            Route::SelfSubjectAccessReview
        }
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] => Route::SelfSubjectReview,
        ["api", "v1", rest @ ..] => resource_route(shared, "", "v1", rest),
        ["apis", g, v, rest @ ..] => resource_route(shared, g, v, rest),
        ["_emulator", rest @ ..] if shared.admin => {
            Route::Admin(rest.iter().map(|x| (*x).to_owned()).collect())
        }
        _ => Route::NotFound,
    }
}

fn resource_route(shared: &Shared, g: &str, v: &str, rest: &[&str]) -> Route {
    if let ["watch", tail @ ..] = rest {
        return match resource_route(shared, g, v, tail) {
            Route::Resource(r) if r.name.is_none() => Route::Resource(ResourceRequest {
                watch_path: true,
                ..r
            }),
            _ => Route::NotFound,
        };
    }
    let find = |r: &str| shared.registry.find(g, v, r);
    let req = |def, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(ResourceRequest {
            def,
            namespace: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
            watch_path: false,
        })
    };
    if let ["namespaces", ns, res, tail @ ..] = rest {
        if let Some(def) = find(res).filter(|d| d.namespaced) {
            return match tail {
                [] => req(def, Some(ns), None, None),
                [name] => req(def, Some(ns), Some(name), None),
                [name, "status"] if def.status => req(def, Some(ns), Some(name), Some("status")),
                [name, "scale"] if super::scale::has_scale(&def) => {
                    req(def, Some(ns), Some(name), Some("scale"))
                }
                [name, "token"] if def.group.is_empty() && def.plural == "serviceaccounts" => {
                    req(def, Some(ns), Some(name), Some("token"))
                }
                _ => Route::NotFound,
            };
        }
    }
    match rest {
        [res] => match find(res) {
            Some(def) => req(def, None, None, None),
            None => Route::NotFound,
        },
        [res, name] => match find(res).filter(|d| !d.namespaced) {
            Some(def) => req(def, None, Some(name), None),
            None => Route::NotFound,
        },
        [res, name, "status"] => match find(res).filter(|d| !d.namespaced && d.status) {
            Some(def) => req(def, None, Some(name), Some("status")),
            None => Route::NotFound,
        },
        _ => Route::NotFound,
    }
}

fn verb(method: &Method, r: &ResourceRequest, q: &Query) -> &'static str {
    match (method, r.name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if q.is_watch() || r.watch_path => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::POST, true) if r.subresource.as_deref() == Some("token") => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "other",
    }
}

/// Who is asking: `Ok(None)` when authorization is off and the request may proceed,
/// `Ok(Some(user))` when it is on, `Err(())` for a missing or wrong token (401).
fn authenticate(shared: &Shared, req: &Request<Incoming>) -> Result<Option<UserInfo>, ()> {
    let header = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Some(tokens) = &shared.auth {
        return tokens.authenticate(header).map(Some).ok_or(());
    }
    let Some(token) = &shared.token else {
        return Ok(None);
    };
    let ok = header
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == token);
    if ok {
        Ok(None)
    } else {
        Err(())
    }
}

/// Serve one request.
pub(crate) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    // The agent tells a simulation's replicas apart (fields are only read when the span is
    // enabled).
    let span = tracing::debug_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        agent = req
            .headers()
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    );
    async move {
        let resp = serve(shared, req).await;
        debug!(status = resp.status().as_u16(), "answered");
        resp
    }
    .instrument(span)
    .await
}

async fn serve(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let Ok(user) = authenticate(&shared, &req) else {
        shared.counters.count("other");
        return response::status(&response::unauthorized());
    };
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let q = Query::parse(req.uri().query());
    let route = route(&shared, &segs);
    if let Route::Admin(rest) = route {
        let body = match read_body(req).await {
            Ok(b) => b,
            Err(s) => return response::status(&s),
        };
        return super::admin::admin(&shared, &method, &rest, &body);
    }
    let v = match &route {
        Route::Resource(r) => verb(&method, r, &q),
        Route::SelfSubjectAccessReview | Route::SelfSubjectReview => "create",
        _ => "other",
    };
    shared.counters.count(v);
    if let Some(user) = &user {
        let decoded = percent_decode_str(&path).decode_utf8_lossy();
        let info = RequestInfo::parse(&method, &decoded, &segs, &q);
        if let Some(refused) = authorize(&shared, user, &info) {
            return refused;
        }
    }
    if let Some(failed) = inject_faults(&shared, v).await {
        return failed;
    }
    // TokenRequests and the access reviews are created, never read.
    let post_only = matches!(
        route,
        Route::SelfSubjectAccessReview | Route::SelfSubjectReview
    ) || matches!(&route, Route::Resource(r) if r.subresource.as_deref() == Some("token"));
    if post_only && method != Method::POST {
        return response::status(&response::method_not_allowed());
    }
    let heads = Heads::of(&req);
    let manager =
        || super::fields::manager_or_user_agent(q.get("fieldManager"), Some(&heads.user_agent));
    match route {
        Route::Version => discovery::version(),
        Route::Health => response::text(StatusCode::OK, "ok"),
        Route::ApiVersions => discovery::api_versions(&shared),
        Route::CoreResources => discovery::resources(&shared, "", "v1"),
        Route::Groups => discovery::groups(&shared),
        Route::Group(g) => discovery::group(&shared, &g),
        Route::GroupResources(g, v) => discovery::resources(&shared, &g, &v),
        Route::OpenApiRoot => openapi::root(&shared),
        Route::OpenApiV2 => openapi::v2(&shared, &heads.accept),
        Route::OpenApiGroupVersion(g, v) => openapi::group_version(&shared, &g, &v),
        Route::NotFound | Route::Admin(_) => response::status(&response::no_route()),
        Route::Resource(r) if r.subresource.as_deref() == Some("token") => {
            match read_json(req, &heads.content_type).await {
                Ok(body) => super::token::request(&shared, &r, &body, &manager())
                    .unwrap_or_else(|s| response::status(&s)),
                Err(s) => response::status(&s),
            }
        }
        Route::SelfSubjectAccessReview | Route::SelfSubjectReview => {
            let asker = match &user {
                Some(u) => Asker::User(u),
                None => Asker::Anyone {
                    token: shared.token.is_some(),
                },
            };
            let body = match read_json(req, &heads.content_type).await {
                Ok(b) => b,
                Err(s) => return response::status(&s),
            };
            if matches!(route, Route::SelfSubjectReview) {
                return reviews::self_subject_review(&shared, &asker);
            }
            reviews::self_subject_access_review(&shared, &asker, &body, &manager())
                .unwrap_or_else(|s| response::status(&s))
        }
        Route::Resource(r) => {
            let body = match resource_body(req, &method, &heads.content_type).await {
                Ok(b) => b,
                Err(s) => return response::status(&s),
            };
            let manager = manager();
            let asked = Asked {
                r: &r,
                verb: v,
                q: &q,
                heads: &heads,
                user: user.as_ref(),
                manager: &manager,
                body: &body,
            };
            resource(&shared, asked)
                .await
                .unwrap_or_else(|s| response::status(&s))
        }
    }
}

/// The headers a handler reads, as text (empty when absent or not text).
struct Heads {
    accept: String,
    content_type: String,
    user_agent: String,
}

impl Heads {
    fn of(req: &Request<Incoming>) -> Heads {
        let text = |name| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        Heads {
            accept: text(http::header::ACCEPT),
            content_type: text(http::header::CONTENT_TYPE),
            user_agent: text(http::header::USER_AGENT),
        }
    }
}

/// Authorized from the path alone, before routing matters, as kube-apiserver does: the 403
/// when `user` may not.
fn authorize(shared: &Shared, user: &UserInfo, info: &RequestInfo) -> Option<Response<Body>> {
    let attrs = info.attributes();
    let decision = authz::authorize(shared, user, &attrs);
    if decision.allowed {
        return None;
    }
    debug!(user = %user.name, reason = %decision.reason, "forbidden");
    let mut r = response::status(&authz::forbidden(user, &attrs, &decision.reason));
    // kube-apiserver's authorization filter adds it; refusals from handlers (the apply that
    // creates) do not.
    r.headers_mut().insert(
        "x-content-type-options",
        http::HeaderValue::from_static("nosniff"),
    );
    Some(r)
}

/// The delay and the failure injected for the verb `v`, if any (`/_emulator/faults`).
async fn inject_faults(shared: &Shared, v: &str) -> Option<Response<Body>> {
    if let Some(by) = shared.faults.take_delay(v) {
        debug!(?by, verb = v, "injected delay");
        tokio::time::sleep(by).await;
    }
    let f = shared.faults.take_failure(v);
    if f.is_none() {
        shared.faults.take_lag(v);
    }
    let f = f?;
    debug!(code = f.code, verb = v, "injected failure");
    Some(response::status(&match f.code {
        429 => response::too_many_requests(f.retry_after),
        // As kube-apiserver words a too old resourceVersion: clients act on the reason.
        410 => response::expired("too old resource version: injected failure"),
        c => {
            let mut s = Status::failure(
                c,
                "InternalError",
                "Internal error occurred: injected failure",
            );
            s.code = c;
            s
        }
    }))
}

/// A resource request's body: read for the verbs that carry one, and as JSON for POST and PUT.
async fn resource_body(
    req: Request<Incoming>,
    method: &Method,
    content_type: &str,
) -> Result<Bytes, Status> {
    match *method {
        Method::POST | Method::PUT => body_to_json(content_type, read_body(req).await?),
        Method::PATCH | Method::DELETE => read_body(req).await,
        _ => Ok(Bytes::new()),
    }
}

/// What a request for a resource asks, once read.
struct Asked<'a> {
    r: &'a ResourceRequest,
    verb: &'static str,
    q: &'a Query,
    heads: &'a Heads,
    user: Option<&'a UserInfo>,
    manager: &'a str,
    body: &'a Bytes,
}

/// A request for a resource, by its verb.
async fn resource(shared: &Arc<Shared>, a: Asked<'_>) -> Result<Response<Body>, Status> {
    let (r, q, body) = (a.r, a.q, a.body);
    // The options kind a verb's query is checked as (its `dryRun` refused by that name).
    let options = match a.verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        "delete" | "deletecollection" => "DeleteOptions",
        _ => "",
    };
    let w = write::WriteOpts {
        manager: a.manager,
        dry_run: !options.is_empty() && write::dry_run(q.get("dryRun"), options)?,
        apply: false,
    };
    if r.subresource.as_deref() == Some("scale") {
        let scale = match a.verb {
            "get" => super::scale::get(shared, r),
            "update" => super::scale::write(shared, r, None, body, w),
            "patch" => super::scale::write(shared, r, Some(&a.heads.content_type), body, w),
            _ => Err(response::method_not_allowed()),
        };
        return scale.map(|v| response::value(StatusCode::OK, &v));
    }
    match a.verb {
        "list" => {
            shared.faults.before_list(&r.def.store_key).await;
            list::list(shared, r, q, &a.heads.accept)
        }
        "watch" => Ok(watch::watch(shared, r, q, &a.heads.accept)),
        "get" => get(shared, r, &a.heads.accept),
        "create" => write::create(shared, r, body, w)
            .map(|o| object(StatusCode::CREATED, &o, &a.heads.accept)),
        "update" => {
            write::update(shared, r, body, w).map(|o| object(StatusCode::OK, &o, &a.heads.accept))
        }
        "patch" if apply_would_create_unauthorized(shared, a.user, r, &a.heads.content_type) => {
            Err(authz::apply_create_forbidden(
                &r.def.group,
                &r.def.plural,
                r.name.as_deref().unwrap_or(""),
            ))
        }
        "patch" => write::patch(
            shared,
            r,
            &a.heads.content_type,
            body,
            w,
            write::PatchQuery {
                field_manager: q.get("fieldManager"),
                force: q.flag("force"),
                force_given: q.get("force").is_some(),
            },
        )
        .map(|(code, o)| object(code, &o, &a.heads.accept)),
        "delete" => write::delete_request(shared, r, q, body),
        "deletecollection" => write::delete_collection(shared, r, q, body),
        _ => Err(response::method_not_allowed()),
    }
}

/// One object, as the client's `Accept` asks: the object, a Table or its metadata.
fn get(shared: &Shared, r: &ResourceRequest, accept: &str) -> Result<Response<Body>, Status> {
    let o = write::get(
        shared,
        &r.def,
        r.namespace.as_deref(),
        r.name.as_deref().unwrap_or(""),
    )?;
    Ok(match accept::negotiate(accept, accept::Read::Single) {
        Representation::Table => {
            let rv = o.resource_version().parse().unwrap_or(0);
            let printer = super::printers::Printer::of(shared, &r.def);
            let t = list::table_json(std::slice::from_ref(&o), rv, None, None, &printer);
            response::json(StatusCode::OK, t)
        }
        Representation::Metadata(v) => {
            response::json(StatusCode::OK, list::metadata_json(o.raw(), v))
        }
        Representation::Object => object(StatusCode::OK, &o, accept),
    })
}

/// An object as the client's `Accept` asks: protobuf when it asks for that first and the kind
/// has a protobuf message (built-in kinds), else JSON.
fn object(code: StatusCode, o: &kwh_client::object::Object, accept: &str) -> Response<Body> {
    if accept::prefers_protobuf(accept) {
        if let Some(b) = o.to_value().ok().and_then(|v| super::protobuf::encode(&v)) {
            return response::base(
                code,
                "application/vnd.kubernetes.protobuf",
                Body::Full(Some(Bytes::from(b))),
            );
        }
    }
    response::json(code, o.raw_bytes())
}

/// A server-side apply of an object that does not exist yet is authorized as `create` too,
/// after `patch` passed; true when the user may not create it.
fn apply_would_create_unauthorized(
    shared: &Shared,
    user: Option<&UserInfo>,
    r: &ResourceRequest,
    content_type: &str,
) -> bool {
    let Some(user) = user else { return false };
    if !content_type.starts_with("application/apply-patch") || r.subresource.is_some() {
        return false;
    }
    let name = r.name.as_deref().unwrap_or("");
    if write::get(shared, &r.def, r.namespace.as_deref(), name).is_ok() {
        return false;
    }
    let create = Attributes::Resource {
        verb: "create",
        group: &r.def.group,
        resource: &r.def.plural,
        subresource: None,
        namespace: r.namespace.as_deref(),
        name: Some(name),
    };
    !authz::allowed(shared, user, &create)
}

/// The body of a POST to a virtual resource (TokenRequest, access reviews) as a JSON value, in
/// any format [`body_to_json`] reads; an empty body is an empty object.
async fn read_json(
    req: Request<Incoming>,
    content_type: &str,
) -> Result<serde_json::Value, Status> {
    let body = read_body(req).await?;
    if body.is_empty() {
        return Ok(serde_json::json!({}));
    }
    let json = body_to_json(content_type, body)?;
    serde_json::from_slice(&json)
        .map_err(|e| response::bad_request(format!("cannot decode the request body: {e}")))
}

/// POST/PUT bodies as JSON: JSON as is, YAML converted, the protobuf kubectl's generators send
/// decoded where supported; anything else is 415.
fn body_to_json(ct: &str, body: Bytes) -> Result<Bytes, Status> {
    match ct.split(';').next().unwrap_or("").trim() {
        "" | "application/json" | "*/*" => Ok(body),
        "application/yaml" => yaml_to_json(&body),
        "application/vnd.kubernetes.protobuf" => match super::protobuf::decode(&body) {
            Ok(v) => serde_json::to_vec(&v)
                .map(Bytes::from)
                .map_err(|e| response::bad_request(e.to_string())),
            Err(super::protobuf::ProtoError::Unsupported(_)) => Err(unsupported_body(ct)),
            Err(e) => Err(response::bad_request(e.to_string())),
        },
        _ => Err(unsupported_body(ct)),
    }
}

fn yaml_to_json(body: &[u8]) -> Result<Bytes, Status> {
    let v: serde_json::Value =
        yaml_serde::from_slice(body).map_err(|e| response::bad_request(format!("yaml: {e}")))?;
    serde_json::to_vec(&v)
        .map(Bytes::from)
        .map_err(|e| response::bad_request(e.to_string()))
}

/// 415 for a POST/PUT body the emulator cannot decode (protobuf, CBOR).
fn unsupported_body(ct: &str) -> Status {
    Status::failure(
        415,
        "UnsupportedMediaType",
        format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {ct:?})"),
    )
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, Status> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(Status::failure(
            413,
            "RequestEntityTooLarge",
            format!("cannot read request body: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_flags_and_watch_values() {
        let q = Query::parse(Some("watch=1&allowWatchBookmarks=true&labelSelector=a%3Db"));
        assert!(q.is_watch());
        assert!(q.flag("allowWatchBookmarks"));
        assert_eq!(q.get("labelSelector"), Some("a=b"));
        assert!(!Query::parse(Some("watch=false")).is_watch());
        assert!(!Query::parse(Some("watch=0")).is_watch());
        assert!(!Query::parse(None).is_watch());
    }
}
