//! What a request asks for, as kube-apiserver's authorization sees it: parsed from the method,
//! the path and the query alone, the way its `RequestInfoFactory` does, before any routing.
//!
//! Why not from the router's match: the real server authorizes before it knows whether a
//! resource exists, so a request for a resource nobody may read is 403 even when the resource
//! is not served (a CRD not installed yet), not 404; and it names things the way the path
//! does: `GET /api/v1/namespaces/x` is a `get` of `namespaces` *in the namespace* `x`, a list
//! whose field selector pins `metadata.name` is a request for that one name (so
//! `resourceNames` can allow it), and a subresource the emulator does not serve is still
//! `resource/subresource` to RBAC.

use http::Method;

use super::authz::Attributes;
use super::request::Query;
use kwh_client::selector::FieldSelector;

/// Path prefixes under which resources are served (`/api` holds only the core group).
const API_PREFIXES: [&str; 2] = ["api", "apis"];
/// Verbs that may lead a resource path (`/api/v1/watch/namespaces/…`).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Subresources of a namespace that are not resources of their own.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The authorizer's view of one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// False for discovery, version, health, OpenAPI and unknown paths.
    pub resource_request: bool,
    /// `get`, `list`, `watch`, `create`, … for resources; the lowercase method otherwise.
    pub verb: String,
    /// The decoded path, as a refusal of a non-resource request names it.
    pub path: String,
    pub group: String,
    pub version: String,
    /// "" when the request is not in a namespace.
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

impl RequestInfo {
    /// Parses a request: `path` is the decoded path, `segs` its non-empty segments.
    pub fn parse(method: &Method, path: &str, segs: &[String], query: &Query) -> Self {
        let mut info = RequestInfo {
            verb: method.as_str().to_ascii_lowercase(),
            path: path.to_owned(),
            ..RequestInfo::default()
        };
        let mut parts: &[String] = segs;
        if parts.len() < 3 || !API_PREFIXES.contains(&parts[0].as_str()) {
            return info;
        }
        let grouped = parts[0] == "apis";
        parts = &parts[1..];
        if grouped {
            if parts.len() < 3 {
                return info;
            }
            info.group.clone_from(&parts[0]);
            parts = &parts[1..];
        }
        info.resource_request = true;
        info.version.clone_from(&parts[0]);
        parts = &parts[1..];

        let first = parts.first().map(String::as_str).unwrap_or("");
        if SPECIAL_VERBS.contains(&first) {
            info.verb = first.to_owned();
            parts = &parts[1..];
        } else {
            info.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_owned();
        }

        if parts.first().map(String::as_str) == Some("namespaces") {
            if let Some(ns) = parts.get(1) {
                info.namespace.clone_from(ns);
                // `namespaces/{ns}/{resource}/…` is that resource in the namespace;
                // `namespaces/{ns}` and `namespaces/{ns}/status` are the namespace itself.
                if parts
                    .get(2)
                    .is_some_and(|p| !NAMESPACE_SUBRESOURCES.contains(&p.as_str()))
                {
                    parts = &parts[2..];
                }
            }
        }
        let no_subresource = info.verb == "proxy";
        if let Some(r) = parts.first() {
            info.resource.clone_from(r);
        }
        if let Some(n) = parts.get(1) {
            info.name.clone_from(n);
        }
        if !no_subresource {
            if let Some(s) = parts.get(2) {
                info.subresource.clone_from(s);
            }
        }

        if info.name.is_empty() && info.verb == "get" {
            info.verb = if query.is_watch() { "watch" } else { "list" }.to_owned();
            if let Some(name) = selected_name(query.get("fieldSelector")) {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_owned();
        }
        info
    }

    /// The attributes RBAC matches its rules against.
    pub fn attributes(&self) -> Attributes<'_> {
        if !self.resource_request {
            return Attributes::NonResource {
                verb: &self.verb,
                path: &self.path,
            };
        }
        fn some(s: &str) -> Option<&str> {
            (!s.is_empty()).then_some(s)
        }
        Attributes::Resource {
            verb: &self.verb,
            group: &self.group,
            resource: &self.resource,
            subresource: some(&self.subresource),
            namespace: some(&self.namespace),
            name: some(&self.name),
        }
    }
}

/// The name a list or watch is confined to by `metadata.name=x` in its field selector, when it
/// is usable as a path segment (not `.`, `..`, nor containing `/` or `%`).
fn selected_name(selector: Option<&str>) -> Option<String> {
    let selector = FieldSelector::parse(selector?).ok()?;
    let name = selector
        .requirements()
        .iter()
        .find(|r| &*r.field == "metadata.name" && !r.negated)?
        .value
        .to_string();
    let usable = !matches!(name.as_str(), "." | "..") && !name.contains(['/', '%']);
    usable.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: Method, path_and_query: &str) -> RequestInfo {
        let (path, q) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let segs: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        RequestInfo::parse(&method, path, &segs, &Query::parse(q))
    }

    /// (verb, group, namespace, resource, subresource, name)
    fn fields(i: &RequestInfo) -> (&str, &str, &str, &str, &str, &str) {
        (
            &i.verb,
            &i.group,
            &i.namespace,
            &i.resource,
            &i.subresource,
            &i.name,
        )
    }

    #[test]
    fn resource_paths_parse_as_the_api_server_parses_them() {
        let cases = [
            (
                Method::GET,
                "/api/v1/configmaps",
                ("list", "", "", "configmaps", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?watch=1",
                ("watch", "", "ns", "configmaps", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/ns/configmaps",
                ("watch", "", "ns", "configmaps", "", ""),
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/ns/deployments/web/status",
                ("patch", "apps", "ns", "deployments", "status", "web"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/serviceaccounts/sa/token",
                ("create", "", "ns", "serviceaccounts", "token", "sa"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/configmaps",
                ("deletecollection", "", "ns", "configmaps", "", ""),
            ),
            // A namespace is requested in itself.
            (
                Method::GET,
                "/api/v1/namespaces/ns",
                ("get", "", "ns", "namespaces", "", "ns"),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/ns/finalize",
                ("update", "", "ns", "namespaces", "finalize", "ns"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces",
                ("list", "", "", "namespaces", "", ""),
            ),
            // Not served, still a resource to the authorizer.
            (
                Method::GET,
                "/apis/example.com/v1/widgets",
                ("list", "example.com", "", "widgets", "", ""),
            ),
            (
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                (
                    "create",
                    "authorization.k8s.io",
                    "",
                    "selfsubjectaccessreviews",
                    "",
                    "",
                ),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Done",
                ("list", "", "ns", "configmaps", "", "one"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%21%3Done",
                ("list", "", "ns", "configmaps", "", ""),
            ),
        ];
        for (method, path, want) in cases {
            let info = parse(method, path);
            assert!(info.resource_request, "{path}");
            assert_eq!(fields(&info), want, "{path}");
        }
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource_requests_with_the_method_as_verb() {
        for (method, path) in [
            (Method::GET, "/api"),
            (Method::GET, "/api/v1"),
            (Method::GET, "/apis/apps/v1"),
            (Method::GET, "/version"),
            (Method::GET, "/openapi/v3/apis/apps/v1"),
            (Method::POST, "/logs/x"),
        ] {
            let info = parse(method.clone(), path);
            assert!(!info.resource_request, "{path}");
            assert_eq!(info.verb, method.as_str().to_ascii_lowercase());
            assert_eq!(
                info.attributes(),
                Attributes::NonResource {
                    verb: &info.verb,
                    path
                }
            );
        }
    }
}
