//! RBAC authorization, evaluated at request time from the Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings in the store, with refusals worded as kube-apiserver words them.
//!
//! Why in the emulator: a host that lacks a right works against an emulator that allows
//! everything and fails on every real cluster. With authorization on, a test runs the host with
//! exactly the RBAC `host rbac` prints and sees the same 403s a cluster would answer (the
//! recorded ones are in the API server samples). Aggregated ClusterRoles are not evaluated.
//!
//! The evaluation follows the real RBAC authorizer: members of `system:masters` are allowed
//! without a look at RBAC; otherwise ClusterRoleBindings are visited first, then the
//! RoleBindings of the request's namespace, and the first rule that allows the request decides
//! (its binding is the `reason` an access review reports). A binding that names the user but
//! refers to a role that does not exist is an error that a refusal then reports after its
//! message (`…: RBAC: role.rbac.authorization.k8s.io "x" not found`). What real clusters
//! grant through bootstrap roles (discovery, health and version to everyone, self access reviews
//! to authenticated users, everything to `system:masters`) is seeded as those roles and bindings
//! (`seed_bootstrap_policy`), so `kubectl get clusterroles` shows them as on a cluster.

use serde_json::{json, Value};

use super::authn::{UserInfo, AUTHENTICATED, MASTERS, UNAUTHENTICATED};
use super::store::key_of;
use super::{write, Shared};
use kwh_client::error::StatusDetails;
use kwh_client::Status;

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

/// The authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Allowed: the binding that allowed it (empty for `system:masters`). Refused: the errors
    /// met on the way (bindings to missing roles), empty when there were none.
    pub reason: String,
}

/// Whether `user` may do what `attrs` describes.
pub(crate) fn allowed(shared: &Shared, user: &UserInfo, attrs: &Attributes<'_>) -> bool {
    authorize(shared, user, attrs).allowed
}

/// The decision on `attrs` for `user`, with its reason.
pub(crate) fn authorize(shared: &Shared, user: &UserInfo, attrs: &Attributes<'_>) -> Decision {
    if user.in_group(MASTERS) {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let mut errors: Vec<String> = Vec::new();
    let allow = |source: String| Decision {
        allowed: true,
        reason: format!("RBAC: allowed by {source}"),
    };
    // ClusterRoleBindings grant their ClusterRole everywhere.
    for b in objects(shared, "clusterrolebindings", "") {
        let Some(subject) = applying_subject(&b, user, "") else {
            continue;
        };
        match role_rules(shared, &b, "") {
            Err(e) => errors.push(e),
            Ok(rules) if rules.iter().any(|r| rule_allows(r, attrs)) => {
                return allow(format!(
                    "ClusterRoleBinding {:?} of {} {:?} to {}",
                    str_at(&b["metadata"], "name"),
                    str_at(&b["roleRef"], "kind"),
                    str_at(&b["roleRef"], "name"),
                    describe_subject(subject, "")
                ));
            }
            Ok(_) => {}
        }
    }
    // RoleBindings grant their Role or ClusterRole in their own namespace only.
    let request_ns = match attrs {
        Attributes::Resource { namespace, .. } => namespace.unwrap_or(""),
        Attributes::NonResource { .. } => "",
    };
    if !request_ns.is_empty() {
        for b in objects(shared, "rolebindings", &format!("{request_ns}/")) {
            let Some(subject) = applying_subject(&b, user, request_ns) else {
                continue;
            };
            match role_rules(shared, &b, request_ns) {
                Err(e) => errors.push(e),
                Ok(rules) if rules.iter().any(|r| rule_allows(r, attrs)) => {
                    return allow(format!(
                        "RoleBinding {:?} of {} {:?} to {}",
                        format!("{}/{request_ns}", str_at(&b["metadata"], "name")),
                        str_at(&b["roleRef"], "kind"),
                        str_at(&b["roleRef"], "name"),
                        describe_subject(subject, request_ns)
                    ));
                }
                Ok(_) => {}
            }
        }
    }
    Decision {
        allowed: false,
        reason: if errors.is_empty() {
            String::new()
        } else {
            format!("RBAC: {}", aggregate(errors))
        },
    }
}

/// Several errors as Kubernetes' error aggregate prints them: one as is, more de-duplicated in
/// brackets.
fn aggregate(mut errors: Vec<String>) -> String {
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Every stored object of an RBAC resource under `prefix`, as JSON.
fn objects(shared: &Shared, plural: &str, prefix: &str) -> Vec<Value> {
    let (_, items) = shared.store.snapshot(&format!("{RBAC}/{plural}"), prefix);
    items.iter().filter_map(|o| o.to_value().ok()).collect()
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The first of the binding's subjects that is `user`, as RBAC's `appliesTo` finds it (a
/// ServiceAccount subject without a namespace takes the binding's, `binding_ns`).
fn applying_subject<'b>(
    binding: &'b Value,
    user: &UserInfo,
    binding_ns: &str,
) -> Option<&'b Value> {
    let subjects = binding.get("subjects").and_then(Value::as_array)?;
    subjects.iter().find(|s| {
        let name = str_at(s, "name");
        match str_at(s, "kind") {
            "User" => user.name == name,
            "Group" => user.in_group(name),
            "ServiceAccount" => {
                let ns = match str_at(s, "namespace") {
                    "" => binding_ns,
                    ns => ns,
                };
                !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

/// A subject as the RBAC authorizer's reasons name it: `User "u"`, `Group "g"`,
/// `ServiceAccount "name/namespace"`.
fn describe_subject(subject: &Value, binding_ns: &str) -> String {
    let (kind, name) = (str_at(subject, "kind"), str_at(subject, "name"));
    if kind == "ServiceAccount" {
        let ns = match str_at(subject, "namespace") {
            "" => binding_ns,
            ns => ns,
        };
        format!("{kind} {:?}", format!("{name}/{ns}"))
    } else {
        format!("{kind} {name:?}")
    }
}

/// The rules of the role the binding refers to (a Role in `binding_ns`, else a ClusterRole);
/// the error the real resolver reports when it does not exist.
fn role_rules(shared: &Shared, binding: &Value, binding_ns: &str) -> Result<Vec<Value>, String> {
    let role_ref = &binding["roleRef"];
    let name = str_at(role_ref, "name");
    let (plural, singular, key) = match str_at(role_ref, "kind") {
        "ClusterRole" => ("clusterroles", "clusterrole", key_of(None, name)),
        "Role" => ("roles", "role", key_of(Some(binding_ns), name)),
        other => return Err(format!("unsupported role reference kind: {other:?}")),
    };
    let role = shared
        .store
        .get(&format!("{RBAC}/{plural}"), &key)
        .and_then(|o| o.to_value().ok())
        .ok_or_else(|| format!("{singular}.{RBAC} {name:?} not found"))?;
    Ok(role
        .get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
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
            u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
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
/// the namespace "ns"` (`at the cluster scope` without a namespace), followed by `: {reason}`
/// when the authorizer gave one ([`Decision::reason`]).
pub fn forbidden(user: &UserInfo, attrs: &Attributes<'_>, reason: &str) -> Status {
    let with_reason = |why: String| {
        if reason.is_empty() {
            why
        } else {
            format!("{why}: {reason}")
        }
    };
    match attrs {
        Attributes::NonResource { verb, path } => forbidden_status(
            "",
            "",
            None,
            &with_reason(format!("User {:?} cannot {verb} path {path:?}", user.name)),
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
                &with_reason(format!(
                    "User {:?} cannot {verb} resource {what:?} in API group {group:?} {scope}",
                    user.name
                )),
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
    let message = match (group.is_empty() && resource.is_empty(), name) {
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

/// What every cluster with RBAC on starts with, as objects: `cluster-admin` bound to
/// `system:masters`; `system:discovery` (discovery and OpenAPI documents) and
/// `system:basic-user` (self access reviews) bound to `system:authenticated`;
/// `system:public-info-viewer` (health and version) bound to everyone. Rules as kube-apiserver's
/// bootstrap policy writes them.
pub(crate) fn seed_bootstrap_policy(shared: &Shared) -> Result<(), Status> {
    let get = json!(["get"]);
    let public_urls = json!(["/healthz", "/livez", "/readyz", "/version", "/version/"]);
    let roles = [
        (
            "cluster-admin",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            vec![MASTERS],
        ),
        (
            "system:discovery",
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
                "verbs": get}]),
            vec![AUTHENTICATED],
        ),
        (
            "system:basic-user",
            json!([{"apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                    "verbs": ["create"]}]),
            vec![AUTHENTICATED],
        ),
        (
            "system:public-info-viewer",
            json!([{"nonResourceURLs": public_urls, "verbs": get}]),
            vec![AUTHENTICATED, UNAUTHENTICATED],
        ),
    ];
    let rbac = format!("{RBAC}/v1");
    for (name, rules, groups) in roles {
        let bootstrap = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
        write::create_value(
            shared,
            json!({"apiVersion": rbac, "kind": "ClusterRole",
                "metadata": {"name": name, "labels": bootstrap,
                    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "rules": rules}),
            "emulator",
        )?;
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g}))
            .collect();
        write::create_value(
            shared,
            json!({"apiVersion": rbac, "kind": "ClusterRoleBinding",
                "metadata": {"name": name, "labels": bootstrap,
                    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
                "subjects": subjects}),
            "emulator",
        )?;
    }
    Ok(())
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
        let s = forbidden(&nobody, &list_all, "");
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
            forbidden(&nobody, &status, "").message,
            "deployments.apps \"web\" is forbidden: User \"nobody\" cannot patch resource \"deployments/status\" in API group \"apps\" in the namespace \"default\""
        );
        let s = apply_create_forbidden("", "configmaps", "new-one");
        assert_eq!(s.message, "configmaps \"new-one\" is forbidden: ");
        assert_eq!(s.reason, "Forbidden");
        assert_eq!(s.code, 403);
    }

    #[test]
    fn a_refusal_carries_the_authorizers_reason_after_its_message() {
        let nobody = UserInfo::new("nobody", &[]);
        let get = Attributes::Resource {
            verb: "get",
            group: "",
            resource: "configmaps",
            subresource: None,
            namespace: Some("ns"),
            name: Some("a"),
        };
        assert_eq!(
            forbidden(&nobody, &get, "RBAC: role.rbac.authorization.k8s.io \"gone\" not found")
                .message,
            "configmaps \"a\" is forbidden: User \"nobody\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"ns\": RBAC: role.rbac.authorization.k8s.io \"gone\" not found"
        );
        let anon = UserInfo::anonymous();
        let path = Attributes::NonResource {
            verb: "get",
            path: "/api",
        };
        let s = forbidden(&anon, &path, "");
        assert_eq!(
            s.message,
            "forbidden: User \"system:anonymous\" cannot get path \"/api\""
        );
        assert_eq!(s.details, Some(StatusDetails::default()), "details: {{}}");
    }

    fn rbac(shared: &Shared, v: Value) {
        write::create_value(shared, v, "test").expect("created");
    }

    /// Decisions and their reasons as the RBAC authorizer words them: which binding allowed,
    /// ClusterRoleBindings first, the bootstrap roles for discovery and self reviews, and the
    /// errors of bindings to missing roles (de-duplicated, bracketed when several).
    #[test]
    fn decisions_name_the_binding_that_allowed_or_the_errors_met() {
        let shared = Shared::in_process(None).expect("shared");
        seed_bootstrap_policy(&shared).expect("bootstrap");
        let v1 = "rbac.authorization.k8s.io/v1";
        rbac(
            &shared,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
        );
        rbac(
            &shared,
            json!({"apiVersion": v1, "kind": "Role", "metadata": {"name": "r", "namespace": "ns"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        );
        rbac(
            &shared,
            json!({"apiVersion": v1, "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "ns"},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "name": "other"},
                    {"kind": "ServiceAccount", "name": "sa"}]}),
        );
        let sa = UserInfo::service_account("ns", "sa");
        let get = |ns| Attributes::Resource {
            verb: "get",
            group: "",
            resource: "configmaps",
            subresource: None,
            namespace: ns,
            name: Some("a"),
        };
        assert_eq!(
            authorize(&shared, &sa, &get(Some("ns"))),
            Decision {
                allowed: true,
                reason: "RBAC: allowed by RoleBinding \"b/ns\" of Role \"r\" to ServiceAccount \"sa/ns\"".into()
            }
        );
        assert!(!allowed(&shared, &sa, &get(Some("other"))));
        assert!(!allowed(&shared, &sa, &get(None)));
        let masters = UserInfo::new("root", &[MASTERS]);
        assert_eq!(
            authorize(&shared, &masters, &get(None)),
            Decision {
                allowed: true,
                reason: String::new()
            },
            "system:masters bypasses RBAC: no reason"
        );
        let discovery = Attributes::NonResource {
            verb: "get",
            path: "/apis/apps/v1",
        };
        assert_eq!(
            authorize(&shared, &sa, &discovery).reason,
            "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""
        );
        assert!(!allowed(&shared, &UserInfo::anonymous(), &discovery));
        let version = Attributes::NonResource {
            verb: "get",
            path: "/version",
        };
        assert!(allowed(&shared, &UserInfo::anonymous(), &version));
        let review = Attributes::Resource {
            verb: "create",
            group: "authorization.k8s.io",
            resource: "selfsubjectaccessreviews",
            subresource: None,
            namespace: None,
            name: None,
        };
        assert!(allowed(&shared, &sa, &review));
        assert!(!allowed(&shared, &UserInfo::anonymous(), &review));

        // Bindings that name the user but refer to missing roles: errors, reported once each.
        for (name, kind, role) in [("m1", "Role", "gone"), ("m2", "ClusterRole", "gone")] {
            rbac(
                &shared,
                json!({"apiVersion": v1, "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": "ns"},
                    "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
                    "subjects": [{"kind": "User", "name": "ghost"}]}),
            );
        }
        rbac(
            &shared,
            json!({"apiVersion": v1, "kind": "ClusterRoleBinding", "metadata": {"name": "m3"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "gone"},
                "subjects": [{"kind": "User", "name": "ghost"}]}),
        );
        let ghost = UserInfo::new("ghost", &[]);
        assert_eq!(
            authorize(&shared, &ghost, &get(Some("ns"))),
            Decision {
                allowed: false,
                reason: "RBAC: [clusterrole.rbac.authorization.k8s.io \"gone\" not found, role.rbac.authorization.k8s.io \"gone\" not found]".into()
            }
        );
        assert_eq!(
            authorize(&shared, &ghost, &get(None)).reason,
            "RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found"
        );
        assert_eq!(authorize(&shared, &sa, &get(Some("other"))).reason, "");
    }
}
