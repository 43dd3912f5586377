//! RBAC authorization, evaluated at request time from the Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings in the store, with refusals worded as kube-apiserver words them.
//!
//! Why in the emulator: a host that lacks a right works against an emulator that allows
//! everything and fails on every real cluster. With authorization on, a test runs the host with
//! exactly the RBAC `host rbac` prints and sees the same 403s a cluster would answer (the
//! recorded ones are in the API server samples). Aggregated ClusterRoles are not evaluated.

use serde_json::Value;

use super::authn::{UserInfo, MASTERS};
use super::store::key_of;
use super::Shared;
use crate::kube::error::StatusDetails;
use crate::kube::Status;

const RBAC: &str = "rbac.authorization.k8s.io";

/// What a request asks to do, as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes<'a> {
    /// A request for a resource (collection, object or subresource).
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    },
    /// Discovery, version, health, OpenAPI.
    NonResource { verb: &'a str, path: &'a str },
}

/// Whether `user` may do what `attrs` describes.
pub(crate) fn allowed(shared: &Shared, user: &UserInfo, attrs: &Attributes<'_>) -> bool {
    if user.in_group(MASTERS) {
        return true;
    }
    if let Attributes::NonResource { path, .. } = attrs {
        // The bootstrap roles: system:public-info-viewer (everyone) and system:discovery /
        // system:basic-user (every authenticated user).
        let public = ["/version", "/healthz", "/livez", "/readyz"];
        if public
            .iter()
            .any(|p| path == p || path.starts_with(&format!("{p}/")))
        {
            return true;
        }
        let discovery = ["/api", "/apis", "/openapi"];
        if user.is_authenticated()
            && discovery
                .iter()
                .any(|p| path == p || path.starts_with(&format!("{p}/")))
        {
            return true;
        }
    }
    let request_ns = match attrs {
        Attributes::Resource { namespace, .. } => *namespace,
        Attributes::NonResource { .. } => None,
    };
    // ClusterRoleBindings grant their ClusterRole everywhere.
    for b in objects(shared, "clusterrolebindings", "") {
        if binds(&b, user, None) && role_allows(shared, &b, None, attrs) {
            return true;
        }
    }
    // RoleBindings grant their Role or ClusterRole in their own namespace only.
    if let Some(ns) = request_ns {
        for b in objects(shared, "rolebindings", &format!("{ns}/")) {
            if binds(&b, user, Some(ns)) && role_allows(shared, &b, Some(ns), attrs) {
                return true;
            }
        }
    }
    false
}

/// Every stored object of an RBAC resource under `prefix`, as JSON.
fn objects(shared: &Shared, plural: &str, prefix: &str) -> Vec<Value> {
    let (_, items) = shared.store.snapshot(&format!("{RBAC}/{plural}"), prefix);
    items.iter().filter_map(|o| o.to_value().ok()).collect()
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Whether one of the binding's subjects is `user` (a ServiceAccount subject without a
/// namespace takes the binding's).
fn binds(binding: &Value, user: &UserInfo, binding_ns: Option<&str>) -> bool {
    let subjects = binding.get("subjects").and_then(Value::as_array);
    subjects.into_iter().flatten().any(|s| {
        let name = str_at(s, "name");
        match str_at(s, "kind") {
            "User" => user.name == name,
            "Group" => user.in_group(name),
            "ServiceAccount" => {
                let ns = match str_at(s, "namespace") {
                    "" => binding_ns.unwrap_or(""),
                    ns => ns,
                };
                user.name == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

/// Whether the role the binding refers to has a rule allowing `attrs`.
fn role_allows(shared: &Shared, binding: &Value, ns: Option<&str>, attrs: &Attributes<'_>) -> bool {
    let Some(role_ref) = binding.get("roleRef") else {
        return false;
    };
    let name = str_at(role_ref, "name");
    let (plural, key) = match (str_at(role_ref, "kind"), ns) {
        ("ClusterRole", _) => ("clusterroles", key_of(None, name)),
        ("Role", Some(ns)) => ("roles", key_of(Some(ns), name)),
        _ => return false,
    };
    let Some(role) = shared
        .store
        .get(&format!("{RBAC}/{plural}"), &key)
        .and_then(|o| o.to_value().ok())
    else {
        return false;
    };
    let rules = role.get("rules").and_then(Value::as_array);
    rules.into_iter().flatten().any(|r| rule_allows(r, attrs))
}

fn strings(rule: &Value, key: &str) -> Vec<String> {
    rule.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// One PolicyRule against the request, as the RBAC authorizer matches them.
fn rule_allows(rule: &Value, attrs: &Attributes<'_>) -> bool {
    let verbs = strings(rule, "verbs");
    let verb = match attrs {
        Attributes::Resource { verb, .. } | Attributes::NonResource { verb, .. } => *verb,
    };
    if !verbs.iter().any(|v| v == "*" || v == verb) {
        return false;
    }
    match attrs {
        Attributes::NonResource { path, .. } => strings(rule, "nonResourceURLs").iter().any(|u| {
            u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
        }),
        Attributes::Resource {
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let groups = strings(rule, "apiGroups");
            if !groups.iter().any(|g| g == "*" || g == group) {
                return false;
            }
            let combined = match subresource {
                Some(s) => format!("{resource}/{s}"),
                None => (*resource).to_owned(),
            };
            let resources = strings(rule, "resources");
            let resource_ok = resources.iter().any(|r| {
                r == "*" || *r == combined || subresource.is_some_and(|s| *r == format!("*/{s}"))
            });
            if !resource_ok {
                return false;
            }
            let names = strings(rule, "resourceNames");
            names.is_empty() || name.is_some_and(|n| names.iter().any(|x| x == n))
        }
    }
}

/// `resource.group` (`configmaps`, `deployments.apps`), as a refusal names it.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// The 403 for a refused request, worded as kube-apiserver's authorization filter words it:
/// `configmaps "x" is forbidden: User "u" cannot get resource "configmaps" in API group "" in
/// the namespace "ns"` (`at the cluster scope` without a namespace).
pub fn forbidden(user: &UserInfo, attrs: &Attributes<'_>) -> Status {
    match attrs {
        Attributes::NonResource { verb, path } => forbidden_status(
            "",
            "",
            None,
            &format!("User {:?} cannot {verb} path {path:?}", user.name),
        ),
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let what = match subresource {
                Some(s) => format!("{resource}/{s}"),
                None => (*resource).to_owned(),
            };
            let scope = match namespace {
                Some(ns) => format!("in the namespace {ns:?}"),
                None => "at the cluster scope".to_owned(),
            };
            forbidden_status(
                group,
                resource,
                *name,
                &format!(
                    "User {:?} cannot {verb} resource {what:?} in API group {group:?} {scope}",
                    user.name
                ),
            )
        }
    }
}

/// The 403 for a server-side apply that would create its object without the `create` right:
/// the real server gives no reason after `is forbidden: ` (sample
/// rbac-403-apply-that-creates-with-patch-only).
pub fn apply_create_forbidden(group: &str, resource: &str, name: &str) -> Status {
    forbidden_status(group, resource, Some(name), "")
}

fn forbidden_status(group: &str, resource: &str, name: Option<&str>, why: &str) -> Status {
    let message = match (resource.is_empty(), name) {
        (true, _) => format!("forbidden: {why}"),
        (false, Some(n)) => format!("{} {n:?} is forbidden: {why}", qualified(group, resource)),
        (false, None) => format!("{} is forbidden: {why}", qualified(group, resource)),
    };
    let mut s = Status::failure(403, "Forbidden", message);
    s.details = Some(StatusDetails {
        name: name.unwrap_or("").to_owned(),
        group: group.to_owned(),
        kind: resource.to_owned(),
        ..StatusDetails::default()
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res<'a>(
        verb: &'a str,
        resource: &'a str,
        sub: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes::Resource {
            verb,
            group: "",
            resource,
            subresource: sub,
            namespace: Some("ns"),
            name,
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let rule = json!({"apiGroups": [""], "resources": ["configmaps", "pods/status"],
            "verbs": ["get", "patch"]});
        assert!(rule_allows(
            &rule,
            &res("get", "configmaps", None, Some("a"))
        ));
        assert!(!rule_allows(&rule, &res("list", "configmaps", None, None)));
        assert!(!rule_allows(&rule, &res("get", "secrets", None, None)));
        assert!(rule_allows(
            &rule,
            &res("patch", "pods", Some("status"), Some("p"))
        ));
        assert!(
            !rule_allows(&rule, &res("patch", "pods", None, Some("p"))),
            "status only"
        );
        assert!(!rule_allows(
            &rule,
            &res("get", "configmaps", Some("status"), None)
        ));
        let named = json!({"apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": ["one"], "verbs": ["*"]});
        assert!(rule_allows(
            &named,
            &res("delete", "configmaps", None, Some("one"))
        ));
        assert!(!rule_allows(
            &named,
            &res("delete", "configmaps", None, Some("two"))
        ));
        assert!(!rule_allows(&named, &res("list", "configmaps", None, None)));
        let wild = json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["update"]});
        assert!(rule_allows(
            &wild,
            &res("update", "pods", Some("status"), Some("p"))
        ));
        assert!(!rule_allows(&wild, &res("update", "pods", None, Some("p"))));
        let urls = json!({"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]});
        let get = |path| Attributes::NonResource { verb: "get", path };
        assert!(rule_allows(&urls, &get("/metrics")));
        assert!(rule_allows(&urls, &get("/logs/a")));
        assert!(!rule_allows(&urls, &get("/metricsx")));
    }

    #[test]
    fn refusals_are_worded_as_the_recorded_samples() {
        let nobody = UserInfo::new("nobody", &[]);
        let list_all = Attributes::Resource {
            verb: "list",
            group: "",
            resource: "configmaps",
            subresource: None,
            namespace: None,
            name: None,
        };
        let s = forbidden(&nobody, &list_all);
        assert_eq!(
            s.message,
            "configmaps is forbidden: User \"nobody\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
        );
        let d = s.details.expect("details");
        assert_eq!(
            (d.kind.as_str(), d.name.as_str(), d.group.as_str()),
            ("configmaps", "", "")
        );
        let status = Attributes::Resource {
            verb: "patch",
            group: "apps",
            resource: "deployments",
            subresource: Some("status"),
            namespace: Some("default"),
            name: Some("web"),
        };
        assert_eq!(
            forbidden(&nobody, &status).message,
            "deployments.apps \"web\" is forbidden: User \"nobody\" cannot patch resource \"deployments/status\" in API group \"apps\" in the namespace \"default\""
        );
        let s = apply_create_forbidden("", "configmaps", "new-one");
        assert_eq!(s.message, "configmaps \"new-one\" is forbidden: ");
        assert_eq!(s.reason, "Forbidden");
        assert_eq!(s.code, 403);
    }
}
