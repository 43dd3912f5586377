//! The emulator with authorization on, against the real kube-apiserver's recorded answers
//! (`apiserver-samples/rbac-leases-events/`): the same RBAC set up as in the recording (the
//! ServiceAccount `rbac-samples:patcher` bound to a Role with get, list, watch and patch on
//! configmaps; the user `nobody` with no bindings) must give byte-for-byte the same 403 Status
//! bodies (spec 6.5), the apply-create rule included; then system:masters, RoleBindings to
//! ClusterRoles, resourceNames, and the real `kubectl create token` / `kubectl get`.

mod emulator_common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use emulator_common::{assert_head_matches, sample_json, Http};
use host::emulator::authn::UserInfo;
use host::emulator::{Emulator, EmulatorHandle};
use http::{Method, StatusCode};
use serde_json::{json, Value};

const NS: &str = "rbac-samples";
const DEADLINE: Duration = Duration::from_secs(60);

/// An authorizing emulator with the recording's objects and RBAC; returns it with clients for
/// the admin, `patcher` (a ServiceAccount token) and `nobody`.
async fn recorded_setup() -> (EmulatorHandle, Http, Http, Http) {
    recorded_setup_with(false).await
}

/// [`recorded_setup`], over TLS when `tls` (kubectl sends a bearer token only over TLS; the
/// plain-HTTP clients returned are then of no use).
async fn recorded_setup_with(tls: bool) -> (EmulatorHandle, Http, Http, Http) {
    let em = Emulator::builder()
        .tls(tls)
        .authorize(true)
        .user_token("nobody-token", UserInfo::new("nobody", &[]))
        .start()
        .await
        .expect("starts");
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .expect("ns");
    em.create(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "patcher", "namespace": NS}}))
        .expect("sa");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "cm-patcher", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "patch"]}]}),
    )
    .expect("role");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "cm-patcher", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-patcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "patcher", "namespace": NS}]}),
    )
    .expect("binding");
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "exists", "namespace": NS}, "data": {"a": "1"}}))
        .expect("cm");
    let mut admin = Http::h2(em.base_url());
    admin.token = em
        .kubeconfig()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(|t| t.trim_matches('"').to_owned());
    assert!(
        admin.token.is_some(),
        "the kubeconfig carries the admin token"
    );
    let mut patcher = Http::h2(em.base_url());
    patcher.token = Some(
        em.issue_service_account_token(NS, "patcher", Duration::from_secs(3600))
            .expect("token"),
    );
    let mut nobody = Http::h2(em.base_url());
    nobody.token = Some("nobody-token".into());
    (em, admin, patcher, nobody)
}

fn sample(name: &str) -> Value {
    sample_json(&format!("rbac-leases-events/{name}.json"))
}

/// Who sends what, and the sample the answer must equal.
type Case<'a> = (&'a Http, Method, String, Option<&'a str>, Value, &'a str);

#[tokio::test]
async fn spec_6_5_refusals_match_the_recorded_403_bodies() {
    let (em, _admin, patcher, nobody) = recorded_setup().await;
    let cases: [Case<'_>; 5] = [
        (
            &nobody,
            Method::GET,
            "/api/v1/configmaps".into(),
            None,
            Value::Null,
            "rbac-403-list-all-namespaces",
        ),
        (
            &nobody,
            Method::GET,
            format!("/api/v1/namespaces/{NS}/configmaps/exists"),
            None,
            Value::Null,
            "rbac-403-get-namespaced",
        ),
        (
            &nobody,
            Method::GET,
            format!("/api/v1/namespaces/{NS}/configmaps?watch=1"),
            None,
            Value::Null,
            "rbac-403-watch",
        ),
        (
            &patcher,
            Method::POST,
            format!("/api/v1/namespaces/{NS}/configmaps"),
            Some("application/json"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "created", "namespace": NS}}),
            "rbac-403-create-without-create-verb",
        ),
        (
            &patcher,
            Method::DELETE,
            format!("/api/v1/namespaces/{NS}/configmaps/exists"),
            None,
            Value::Null,
            "rbac-403-delete-without-delete-verb",
        ),
    ];
    for (client, method, path, ct, body, name) in cases {
        let body = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(&body).expect("json")
        };
        let r = client.send(method, &path, ct, &body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{name}");
        assert_head_matches(&format!("rbac-leases-events/{name}"), r.status, &r.headers);
        assert_eq!(r.json(), sample(name), "{name}");
    }
    // The first capture's 403 (a list in namespace "samples" as nobody), body and head.
    let r = nobody.get("/api/v1/namespaces/samples/configmaps").await;
    assert_head_matches("error-403-forbidden", r.status, &r.headers);
    assert_eq!(r.json(), sample_json("error-403-forbidden.json"));
    // The refused watch sent no stream: a plain Status, before any event.
    em.shutdown().await;
}

#[tokio::test]
async fn an_apply_that_creates_needs_create_as_well_as_patch() {
    let (em, _admin, patcher, _nobody) = recorded_setup().await;
    let apply = |name: &str| {
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"{NS}\"}},\"data\":{{\"k\":\"v\"}}}}"
        )
    };
    let ct = "application/apply-patch+yaml";
    let r = patcher
        .patch(
            &format!("/api/v1/namespaces/{NS}/configmaps/new-one?fieldManager=t&force=true"),
            ct,
            &apply("new-one"),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Refused by the handler, not the authorization filter: no x-content-type-options.
    assert_head_matches(
        "rbac-leases-events/rbac-403-apply-that-creates-with-patch-only",
        r.status,
        &r.headers,
    );
    assert_eq!(
        r.json(),
        sample("rbac-403-apply-that-creates-with-patch-only")
    );
    assert!(em.get("v1", "ConfigMap", Some(NS), "new-one").is_none());
    // The same apply to an existing object needs patch only.
    let r = patcher
        .patch(
            &format!("/api/v1/namespaces/{NS}/configmaps/exists?fieldManager=t&force=true"),
            ct,
            &apply("exists"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_head_matches(
        "rbac-leases-events/rbac-200-apply-existing-with-patch-only",
        r.status,
        &r.headers,
    );
    assert_eq!(r.json()["data"]["k"], "v");
    // With create granted as well, the apply creates.
    let mut role = em
        .get(
            "rbac.authorization.k8s.io/v1",
            "Role",
            Some(NS),
            "cm-patcher",
        )
        .expect("role");
    role["rules"][0]["verbs"] = json!(["get", "list", "watch", "patch", "create"]);
    em.update(role).expect("role updated");
    let r = patcher
        .patch(
            &format!("/api/v1/namespaces/{NS}/configmaps/new-one?fieldManager=t&force=true"),
            ct,
            &apply("new-one"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    em.shutdown().await;
}

#[tokio::test]
async fn bindings_scope_and_names_and_masters_bypass() {
    let (em, admin, patcher, nobody) = recorded_setup().await;
    // The admin (system:masters) may do anything; discovery is open to authenticated users.
    let r = admin.get("/api/v1/secrets").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(nobody.get("/apis").await.status, StatusCode::OK);
    assert_eq!(nobody.get("/version").await.status, StatusCode::OK);
    let anonymous = Http::new(em.base_url());
    let r = anonymous.get("/api").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    let mut wrong = Http::new(em.base_url());
    wrong.token = Some("no-such-token".into());
    let r = wrong.get("/api/v1/configmaps").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json(), sample_json("error-401-unauthorized.json"));

    // The Role grants in its namespace only.
    assert_eq!(
        patcher
            .get(&format!("/api/v1/namespaces/{NS}/configmaps"))
            .await
            .status,
        StatusCode::OK
    );
    let r = patcher.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A RoleBinding to a ClusterRole grants it in the binding's namespace only; resourceNames
    // limit it to the named objects.
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "secret-reader"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
            "resourceNames": ["one"]}]}),
    )
    .expect("clusterrole");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "nobody-secrets", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "secret-reader"},
        "subjects": [{"kind": "User", "name": "nobody"}]}),
    )
    .expect("binding");
    for (ns, name) in [(NS, "one"), (NS, "two"), ("default", "one")] {
        em.create(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns}}))
            .expect("secret");
    }
    let get = |ns: &str, name: &str| format!("/api/v1/namespaces/{ns}/secrets/{name}");
    assert_eq!(nobody.get(&get(NS, "one")).await.status, StatusCode::OK);
    assert_eq!(
        nobody.get(&get(NS, "two")).await.status,
        StatusCode::FORBIDDEN
    );
    let r = nobody.get(&get("default", "one")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "secrets \"one\" is forbidden: User \"nobody\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    // A ClusterRoleBinding grants across namespaces and at the cluster scope, to a group.
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "cm-lister"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .expect("clusterrole");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "sa-cm-lister"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "cm-lister"},
        "subjects": [{"kind": "Group", "name": format!("system:serviceaccounts:{NS}")}]}),
    )
    .expect("binding");
    assert_eq!(
        patcher.get("/api/v1/configmaps").await.status,
        StatusCode::OK
    );
    // A status subresource is its own resource to RBAC.
    let r = patcher
        .patch(
            &format!("/api/v1/namespaces/{NS}/configmaps/exists/status"),
            "application/merge-patch+json",
            "{}",
        )
        .await;
    assert_ne!(
        r.status,
        StatusCode::FORBIDDEN,
        "configmaps have no status: 404"
    );
    em.shutdown().await;
}

fn kubectl(
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("kubectl");
    c.env("KUBECONFIG", kubeconfig)
        .env("HOME", dir)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .arg("--request-timeout=20s")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

async fn run(c: &mut tokio::process::Command) -> (bool, String, String) {
    let out = tokio::time::timeout(DEADLINE, c.output())
        .await
        .expect("kubectl in time")
        .expect("kubectl runs (it is installed here and on CI)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The real kubectl: `kubectl create token` (the TokenRequest API) as the admin, then `kubectl
/// get` with that token, allowed and refused as the Role says, the refusal as kubectl prints it.
#[tokio::test]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn kubectl_create_token_then_get_with_it_is_authorized_by_rbac() {
    let (em, _admin, _patcher, _nobody) = recorded_setup_with(true).await;
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "host-emulator-authz-{}-{}",
        std::process::id(),
        em.addr().port()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let admin_kc = dir.join("admin");
    em.write_kubeconfig(&admin_kc).expect("kubeconfig");
    let (ok, token, err) = run(&mut kubectl(
        &dir,
        &admin_kc,
        &["create", "token", "patcher", "-n", NS],
    ))
    .await;
    assert!(ok, "kubectl create token: {err}");
    let token = token.trim();
    assert!(!token.is_empty());
    let sa_kc = dir.join("patcher");
    std::fs::write(&sa_kc, em.kubeconfig_with_token(token)).expect("kubeconfig");
    let (ok, out, err) = run(&mut kubectl(
        &dir,
        &sa_kc,
        &["get", "configmaps", "-n", NS, "-o", "name"],
    ))
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("configmap/exists"), "{out}");
    let (ok, _, err) = run(&mut kubectl(&dir, &sa_kc, &["get", "secrets", "-n", NS])).await;
    assert!(!ok);
    assert!(
        err.contains("secrets is forbidden: User \"system:serviceaccount:rbac-samples:patcher\" cannot list resource \"secrets\" in API group \"\" in the namespace \"rbac-samples\""),
        "{err}"
    );
    // A token for an account that does not exist is refused.
    let (ok, _, err) = run(&mut kubectl(
        &dir,
        &admin_kc,
        &["create", "token", "ghost", "-n", NS],
    ))
    .await;
    assert!(!ok);
    assert!(err.contains("not found"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    em.shutdown().await;
}
