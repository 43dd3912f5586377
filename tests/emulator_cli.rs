//! `host emulator` as a process: the first stdout lines, seeding, the admin fault path, and a
//! clean stop on SIGINT (Ctrl-C).

#[path = "../host/emulator/tests/emulator_common/mod.rs"]
mod emulator_common;

use std::process::Stdio;
use std::time::Duration;

use emulator_common::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// `host emulator ARGS… --kubeconfig KUBECONFIG` as a child; returns it with the base URL and
/// the second stdout line (the kubeconfig announcement), both read within the step deadline.
async fn spawn_emulator(
    args: &[&std::ffi::OsStr],
    kubeconfig: &std::path::Path,
) -> (tokio::process::Child, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_host"))
        .arg("emulator")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = Vec::new();
    for _ in 0..2 {
        let line = tokio::time::timeout(STEP, lines.next_line()).await;
        next.push(line.unwrap().unwrap().expect("a line"));
    }
    let (first, second) = (next[0].clone(), next[1].clone());
    let base = first
        .strip_prefix("listening on ")
        .expect(&first)
        .to_owned();
    (child, base, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_seeds_serves_admin_and_stops_on_sigint() {
    let dir = std::env::temp_dir().join(format!("host-emulator-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b, namespace: demo}\n",
    )
    .unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let (mut child, base, second) =
        spawn_emulator(&["--seed".as_ref(), seed.as_os_str()], &kubeconfig).await;
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert_eq!(second, format!("kubeconfig: {}", kubeconfig.display()));
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(kc.contains(&format!("server: {base}")));

    let http = Http::new(base);
    let list = http.get("/api/v1/namespaces/demo/configmaps").await.json();
    let mut names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    names.sort();
    // The seeds, and the CA bundle the namespace controller puts in every namespace.
    assert_eq!(names, ["a", "b", "kube-root-ca.crt"]);
    let r = http
        .post(
            "/_emulator/faults",
            &json!({"failNext": {"count": 1, "code": 429, "retryAfter": 2}}),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = http.get("/api/v1/namespaces/demo/configmaps").await;
    assert_eq!(
        (
            r.status.as_u16(),
            r.headers["retry-after"].to_str().unwrap()
        ),
        (429, "2")
    );
    let stats = http.get("/_emulator/stats").await.json();
    assert_eq!(stats["requests"]["list"], 2);
    // Where faults took effect, for a test in another process to confirm them.
    assert_eq!(stats["faults"]["tooManyRequests"], 1);
    assert_eq!(stats["faults"]["listsExpired"], 0);
    // A failure for some verbs only: the others pass.
    let r = http
        .post(
            "/_emulator/faults",
            &json!({"failNext": {"count": 1, "code": 410, "verbs": ["list"]}}),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = http.get("/api/v1/namespaces/demo/configmaps/a").await;
    assert_eq!(r.status, 200, "a GET passes a failure for LISTs");
    let r = http.get("/api/v1/namespaces/demo/configmaps").await;
    assert_eq!(
        (r.status.as_u16(), &r.json()["reason"]),
        (410, &json!("Expired"))
    );
    let stats = http.get("/_emulator/stats").await.json();
    assert_eq!(stats["faults"]["listsExpired"], 1);
    assert_eq!(
        http.post(
            "/_emulator/faults",
            &json!({"failNext": {"count": 1, "code": 500, "verbs": ["lists"]}})
        )
        .await
        .status,
        400,
        "an unknown verb is refused"
    );
    assert_eq!(
        http.post("/_emulator/faults", &json!({"bogus": 1}))
            .await
            .status,
        400
    );

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("emulator did not stop on SIGINT")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `host emulator --token-auth-file`: the file's tokens authenticate as its users and groups,
/// RBAC decides (a user without bindings is refused as the real server refuses, a group in
/// `system:masters` is not), and the written kubeconfig is an admin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_gives_users_and_groups_and_rbac_decides() {
    let dir = std::env::temp_dir().join(format!("host-emulator-cli-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        "# token,user,uid,groups\nt-nobody,nobody,1\nt-root,root,2,\"ops,system:masters\"\n",
    )
    .unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let (mut child, base, _) = spawn_emulator(
        &["--token-auth-file".as_ref(), tokens.as_os_str()],
        &kubeconfig,
    )
    .await;
    let as_user = |token: &str| {
        let mut h = Http::new(base.clone());
        h.token = Some(token.to_owned());
        h
    };
    let r = as_user("t-nobody")
        .get("/api/v1/namespaces/default/configmaps")
        .await;
    assert_eq!(r.status.as_u16(), 403);
    assert_eq!(
        r.json()["message"],
        "configmaps is forbidden: User \"nobody\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    let r = as_user("t-root")
        .get("/api/v1/namespaces/default/configmaps")
        .await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(as_user("t-other").get("/api").await.status.as_u16(), 401);
    // Without a token: anonymous, refused.
    assert_eq!(
        Http::new(base.clone()).get("/api").await.status.as_u16(),
        403
    );
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    let admin = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(|t| t.trim_matches('"').to_owned())
        .expect("the kubeconfig has the admin token");
    assert_eq!(
        as_user(&admin).get("/api/v1/secrets").await.status.as_u16(),
        200
    );

    // A malformed file is one line naming it, and nothing starts.
    std::fs::write(&tokens, "only-a-token\n").unwrap();
    let out = tokio::time::timeout(
        STEP,
        Command::new(env!("CARGO_BIN_EXE_host"))
            .arg("emulator")
            .arg("--token-auth-file")
            .arg(&tokens)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("token file {}: line 1:", tokens.display())),
        "{stderr}"
    );
    child.start_kill().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
