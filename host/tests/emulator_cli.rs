//! `host emulator` as a process: the first stdout lines, seeding, the admin fault path, and a
//! clean stop on SIGINT (Ctrl-C).

mod emulator_common;

use std::process::Stdio;
use std::time::Duration;

use emulator_common::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_host"))
        .arg("emulator")
        .arg("--seed")
        .arg(&seed)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(STEP, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let second = tokio::time::timeout(STEP, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let base = first
        .strip_prefix("listening on ")
        .expect(&first)
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert_eq!(second, format!("kubeconfig: {}", kubeconfig.display()));
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(kc.contains(&format!("server: {base}")));

    let http = Http::new(base);
    let list = http.get("/api/v1/namespaces/demo/configmaps").await.json();
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
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
