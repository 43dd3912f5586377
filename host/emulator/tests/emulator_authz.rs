//! The emulator with authorization on, against the real kube-apiserver's recorded answers
//! (`apiserver-samples/rbac-leases-events/`): the same RBAC set up as in the recording (the
//! ServiceAccount `rbac-samples:patcher` bound by the RoleBinding `patcher-cm` to the Role
//! `cm-patch-only`, with get, list, watch and patch on configmaps; the user `nobody` with no
//! bindings) must give the same 403 Status bodies (spec 6.5), the apply-create rule included,
//! the same TokenRequest and SelfSubjectAccessReview answers; then system:masters, RoleBindings
//! to ClusterRoles, resourceNames, requests named from the path alone (spec 6.1), refusals
//! with the authorizer's reason, the token file, and the real `kubectl create token`, `kubectl
//! get`, `kubectl auth can-i` and `kubectl auth whoami`.

mod emulator_common;

use std::path::PathBuf;
use std::time::Duration;

use emulator_common::{assert_head_matches, kubectl, run, sample_json, Http};
use http::{Method, StatusCode};
use kwh_emulator::authn::UserInfo;
use kwh_emulator::{Emulator, EmulatorHandle};
use serde_json::{json, Value};

const NS: &str = "rbac-samples";

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
        "metadata": {"name": "cm-patch-only", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "patch"]}]}),
    )
    .expect("role");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "patcher-cm", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-patch-only"},
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
            "cm-patch-only",
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
    // A subresource is its own resource to RBAC: patch on configmaps does not reach
    // configmaps/status (authorized before routing, so 403 although configmaps have none).
    let status = format!("/api/v1/namespaces/{NS}/configmaps/exists/status");
    let r = patcher
        .patch(&status, "application/merge-patch+json", "{}")
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "configmaps \"exists\" is forbidden: User \"system:serviceaccount:rbac-samples:patcher\" cannot patch resource \"configmaps/status\" in API group \"\" in the namespace \"rbac-samples\""
    );
    // `*/status` grants the status of everything; the emulator then routes (404: none here).
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "status-patcher"},
        "rules": [{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]}]}),
    )
    .expect("clusterrole");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "patcher-status", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "status-patcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "patcher", "namespace": NS}]}),
    )
    .expect("binding");
    let r = patcher
        .patch(&status, "application/merge-patch+json", "{}")
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    em.shutdown().await;
}

/// Replaces what differs per run (the issued token, timestamps) with placeholders.
fn without_run_values(mut v: Value) -> Value {
    for p in [
        "/status/token",
        "/status/expirationTimestamp",
        "/metadata/creationTimestamp",
    ] {
        if let Some(x) = v.pointer_mut(p).filter(|x| x.is_string()) {
            *x = json!("<varies>");
        }
    }
    if let Some(entries) = v
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        for e in entries {
            e["time"] = json!("<varies>");
        }
    }
    v
}

fn request_body(name: &str) -> Vec<u8> {
    emulator_common::sample(&format!("rbac-leases-events/{name}.request.json")).into_bytes()
}

/// The TokenRequest answer (head and body) equals the recorded one, the issued token
/// and timestamps aside; the token expires `expirationSeconds` after creation and works.
#[tokio::test]
async fn token_request_answers_as_recorded_and_its_token_authenticates() {
    let (em, admin, _patcher, nobody) = recorded_setup().await;
    // The recording was made with curl, recorded as the field manager "curl".
    let path = format!("/api/v1/namespaces/{NS}/serviceaccounts/patcher/token?fieldManager=curl");
    let r = admin
        .send(
            Method::POST,
            &path,
            Some("application/json"),
            &request_body("tr"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_head_matches(
        "rbac-leases-events/tokenrequest-create",
        r.status,
        &r.headers,
    );
    let got = r.json();
    let created = got["metadata"]["creationTimestamp"].as_str().expect("set");
    let expires = got["status"]["expirationTimestamp"].as_str().expect("set");
    let secs = |t: &str| {
        kwh_emulator::util::parse_rfc3339(t).unwrap_or_else(|| panic!("not RFC 3339: {t}"))
    };
    assert_eq!(secs(expires) - secs(created), 3600);
    assert_eq!(
        without_run_values(got.clone()),
        without_run_values(sample("tokenrequest-create"))
    );
    // The token is the ServiceAccount's: what its Role allows, and nothing else.
    let mut sa = Http::new(em.base_url());
    sa.token = got["status"]["token"].as_str().map(str::to_owned);
    let r = sa.get(&format!("/api/v1/namespaces/{NS}/configmaps")).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = sa.get(&format!("/api/v1/namespaces/{NS}/secrets")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "secrets is forbidden: User \"system:serviceaccount:rbac-samples:patcher\" cannot list resource \"secrets\" in API group \"\" in the namespace \"rbac-samples\""
    );

    // No such ServiceAccount: 404; a lifetime under ten minutes: 422; an expired token: 401.
    let r = admin
        .post(
            &format!("/api/v1/namespaces/{NS}/serviceaccounts/ghost/token"),
            &json!({"spec": {}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["message"], "serviceaccounts \"ghost\" not found");
    let r = admin
        .post(
            &format!("/api/v1/namespaces/{NS}/serviceaccounts/patcher/token"),
            &json!({"spec": {"expirationSeconds": 60}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
    let mut expired = Http::new(em.base_url());
    expired.token = Some(
        em.issue_service_account_token(NS, "patcher", Duration::ZERO)
            .expect("token"),
    );
    let r = expired
        .get(&format!("/api/v1/namespaces/{NS}/configmaps"))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // Issuing needs the create right on serviceaccounts/token.
    let r = nobody
        .post(
            &format!("/api/v1/namespaces/{NS}/serviceaccounts/patcher/token"),
            &json!({"spec": {}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "serviceaccounts \"patcher\" is forbidden: User \"nobody\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"rbac-samples\""
    );
    em.shutdown().await;
}

/// `kubectl auth can-i`'s SelfSubjectAccessReview, denied and allowed, answers as recorded:
/// the allowed one names the RoleBinding, Role and subject that allowed it.
#[tokio::test]
async fn self_subject_access_reviews_answer_as_recorded() {
    let (em, admin, patcher, nobody) = recorded_setup().await;
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews?fieldManager=curl";
    for (body, name) in [
        ("ssar", "selfsubjectaccessreview-denied"),
        ("ssar2", "selfsubjectaccessreview-allowed"),
    ] {
        let r = patcher
            .send(
                Method::POST,
                path,
                Some("application/json"),
                &request_body(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{name}: {:?}", r.json());
        assert_head_matches(&format!("rbac-leases-events/{name}"), r.status, &r.headers);
        assert_eq!(
            without_run_values(r.json()),
            without_run_values(sample(name)),
            "{name}"
        );
    }
    let review = |attrs: Value| {
        json!({"apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview", "spec": attrs})
    };
    // The admin is allowed by system:masters, which gives no reason.
    let r = admin
        .post(
            path,
            &review(json!({"resourceAttributes": {"verb": "delete", "resource": "nodes"}})),
        )
        .await;
    assert_eq!(r.json()["status"], json!({"allowed": true}));
    // Discovery is allowed to every authenticated user by a bootstrap ClusterRoleBinding.
    let r = nobody
        .post(
            path,
            &review(json!({"nonResourceAttributes": {"verb": "get", "path": "/apis"}})),
        )
        .await;
    assert_eq!(
        r.json()["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""})
    );
    // Exactly one of the two attribute sets.
    let r = nobody.post(path, &review(json!({}))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
    );
    // Without credentials even the review is refused.
    let anonymous = Http::new(em.base_url());
    let r = anonymous.post(path, &review(json!({}))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    em.shutdown().await;
}

/// Requests are authorized from their path alone (spec 6.1), before the emulator knows whether
/// it serves the resource; a refusal carries the authorizer's reason after its message.
#[tokio::test]
async fn spec_6_1_requests_are_named_from_the_path_and_refusals_carry_the_reason() {
    let (em, admin, _patcher, nobody) = recorded_setup().await;
    // A namespace is requested in itself.
    let r = nobody.get(&format!("/api/v1/namespaces/{NS}")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "namespaces \"rbac-samples\" is forbidden: User \"nobody\" cannot get resource \"namespaces\" in API group \"\" in the namespace \"rbac-samples\""
    );
    // A resource nobody serves: 403 for whoever may not, 404 only for whoever may.
    let widgets = "/apis/example.com/v1/namespaces/rbac-samples/widgets";
    let r = nobody.get(widgets).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "widgets.example.com is forbidden: User \"nobody\" cannot list resource \"widgets\" in API group \"example.com\" in the namespace \"rbac-samples\"",
            "reason": "Forbidden", "details": {"group": "example.com", "kind": "widgets"},
            "code": 403})
    );
    assert_eq!(admin.get(widgets).await.status, StatusCode::NOT_FOUND);
    // A list pinned to one name by its field selector is a request for that name, which
    // resourceNames can allow.
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "one-cm", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"],
            "resourceNames": ["exists"]}]}),
    )
    .expect("role");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "nobody-one-cm", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "one-cm"},
        "subjects": [{"kind": "User", "name": "nobody"}]}),
    )
    .expect("binding");
    let list = format!("/api/v1/namespaces/{NS}/configmaps");
    let r = nobody
        .get(&format!("{list}?fieldSelector=metadata.name%3Dexists"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["items"][0]["metadata"]["name"], "exists");
    assert_eq!(nobody.get(&list).await.status, StatusCode::FORBIDDEN);
    // A binding to a role that does not exist: the refusal says so, as RBAC reports it.
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "dangling", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gone"},
        "subjects": [{"kind": "User", "name": "nobody"}]}),
    )
    .expect("binding");
    let r = nobody.get(&format!("{list}/exists-not")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "configmaps \"exists-not\" is forbidden: User \"nobody\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"rbac-samples\": RBAC: role.rbac.authorization.k8s.io \"gone\" not found"
    );
    // Credentials that are not a bearer token are no credentials: anonymous, not 401.
    let basic = Http::new(em.base_url());
    let req = http::Request::builder()
        .uri(format!(
            "{}/api/v1/namespaces/{NS}/configmaps",
            em.base_url()
        ))
        .header("authorization", "Basic dXNlcjpwdw==")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let r = basic.send_req(req).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        r.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("User \"system:anonymous\"")),
        "{:?}",
        r.json()
    );
    em.shutdown().await;
}

/// A token file in kube-apiserver's format (the builder's `token_auth_file`, `host emulator
/// --token-auth-file`) turns authorization on by itself; its users have their groups, which
/// bindings can name.
#[tokio::test]
async fn token_file_users_and_their_groups_are_authorized_by_group_bindings() {
    let dir =
        std::env::temp_dir().join(format!("host-emulator-authz-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("tokens.csv");
    std::fs::write(
        &file,
        "# token,user,uid,groups\nt-alice,alice,1001,\"dev,ops\"\nt-bob,bob,1002\n",
    )
    .expect("token file");
    let em = Emulator::builder()
        .token_auth_file(&file)
        .start()
        .await
        .expect("starts");
    em.create(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ops-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "cluster-admin"},
        "subjects": [{"kind": "Group", "name": "ops"}]}),
    )
    .expect("binding");
    let client = |token: &str| {
        let mut c = Http::new(em.base_url());
        c.token = Some(token.to_owned());
        c
    };
    assert_eq!(
        client("t-alice").get("/api/v1/secrets").await.status,
        StatusCode::OK
    );
    assert_eq!(
        client("t-bob").get("/api/v1/secrets").await.status,
        StatusCode::FORBIDDEN
    );
    let r = client("t-alice")
        .post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        r.json()["status"],
        json!({"userInfo": {"username": "alice", "uid": "1001",
            "groups": ["dev", "ops", "system:authenticated"]}})
    );
    // The kubeconfig is still the admin's.
    let mut admin = Http::new(em.base_url());
    admin.token = em
        .kubeconfig()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(|t| t.trim_matches('"').to_owned());
    assert_eq!(admin.get("/api/v1/secrets").await.status, StatusCode::OK);
    em.shutdown().await;

    // An unreadable file stops the start, naming the line.
    std::fs::write(&file, "only-a-token\n").expect("token file");
    let err = Emulator::builder()
        .token_auth_file(&file)
        .start()
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("line 1: expected token,user,uid[,\"groups\"]"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The real kubectl: `kubectl create token` (the TokenRequest API) as the admin, then `kubectl
/// get`, `kubectl auth can-i` and `kubectl auth whoami` with that token, allowed and refused as
/// the Role says, the refusal as kubectl prints it. kubectl sends the TokenRequest and both
/// reviews as protobuf.
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
    // `kubectl auth can-i` (a SelfSubjectAccessReview in protobuf) answers as the Role says.
    for (args, allowed) in [
        (
            &["auth", "can-i", "patch", "configmaps", "-n", NS][..],
            true,
        ),
        (
            &["auth", "can-i", "create", "configmaps", "-n", NS][..],
            false,
        ),
        (&["auth", "can-i", "list", "configmaps", "-A"][..], false),
    ] {
        let (ok, out, err) = run(&mut kubectl(&dir, &sa_kc, args)).await;
        assert_eq!(ok, allowed, "{args:?}: {out}{err}");
        assert_eq!(out.trim(), if allowed { "yes" } else { "no" }, "{args:?}");
    }
    // `kubectl auth whoami` (a SelfSubjectReview): the account's user, uid and groups.
    let (ok, out, err) = run(&mut kubectl(
        &dir,
        &sa_kc,
        &["auth", "whoami", "-o", "json"],
    ))
    .await;
    assert!(ok, "{err}");
    let review: Value = serde_json::from_str(&out).expect("whoami JSON");
    let sa = em
        .get("v1", "ServiceAccount", Some(NS), "patcher")
        .expect("sa");
    assert_eq!(
        review["status"]["userInfo"],
        json!({"username": "system:serviceaccount:rbac-samples:patcher",
            "uid": sa["metadata"]["uid"],
            "groups": ["system:serviceaccounts", "system:serviceaccounts:rbac-samples",
                "system:authenticated"]})
    );
    // `--duration` reaches the server in the protobuf body.
    let (ok, out, err) = run(&mut kubectl(
        &dir,
        &admin_kc,
        &[
            "create",
            "token",
            "patcher",
            "-n",
            NS,
            "--duration=10m",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    ))
    .await;
    assert!(ok, "{err}");
    let tr: Value = serde_json::from_str(&out).expect("TokenRequest JSON");
    assert_eq!(tr["spec"]["expirationSeconds"], 600, "{tr}");
    assert_eq!(tr["metadata"]["managedFields"][0]["manager"], "kubectl");
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
