//! `scripts/demo`, the README's main job, as a newcomer runs it (issue "The front door", 5):
//! once the host is ready it prints the three kubectl commands to try, and each shows what the
//! script says it will: the ConfigMap change rolls `web`, the Event config-reloader recorded,
//! and janitor deleting an object whose time to live has passed. The host and the examples
//! are the ones the tests built (`HOST_BIN`, `WASM_DIR`), not a release build.

mod support;

use std::time::Duration;

use support::guests::{example, repo_root};
use support::kubectl::{kubectl, kubectl_until};
use support::process::{HostProcess, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn the_demo_prints_three_commands_that_show_what_it_says() {
    let reloader = example("config-reloader");
    let wasm_dir = reloader
        .parent()
        .expect("the examples' directory")
        .to_path_buf();
    assert!(example("janitor").starts_with(&wasm_dir), "one directory");
    let mut command = tokio::process::Command::new("sh");
    command
        .arg(repo_root().join("scripts/demo"))
        .env("HOST_BIN", support::host_bin())
        .env("WASM_DIR", &wasm_dir);
    #[cfg(unix)]
    command.process_group(0);
    let mut demo = HostProcess::spawn_command(command, "info");
    demo.line("== The host is ready").await;
    let export = demo.line("export KUBECONFIG=").await;
    let kubeconfig = export
        .split_once("export KUBECONFIG=")
        .map(|(_, p)| p.trim().to_owned())
        .expect("a path");
    demo.line("Ctrl-C stops the host.").await;
    let dir = support::temp_dir("demo");
    std::fs::copy(&kubeconfig, dir.join("kubeconfig")).expect("the printed kubeconfig");
    // Each command the script prints, run as printed.
    for cmd in [
        "kubectl patch configmap web-config --type merge",
        "kubectl get deployment web -o jsonpath=",
        "kubectl events --for deployment/web",
        "kubectl events --for configmap/tmp",
        "kubectl create configmap tmp && kubectl annotate configmap tmp janitor/ttl=10s",
        "kubectl get configmap tmp",
    ] {
        assert!(demo.saw(cmd), "the demo prints {cmd:?}:\n{}", demo.log());
    }

    // 1. The change rolls web: a config hash appears in its pod template.
    let (ok, _, err) = kubectl(
        &dir,
        &[
            "patch",
            "configmap",
            "web-config",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"LOG_LEVEL":"debug"}}"#,
        ],
    )
    .await;
    assert!(ok, "{err}");
    kubectl_until(
        &dir,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.metadata.annotations}{\"\\n\"}",
        ],
        WAIT,
        |l| l.contains("config-reloader/config-hash"),
    )
    .await
    .expect("web rolled");
    // 2. The Event on the Deployment.
    let (line, _) = kubectl_until(&dir, &["events", "--for", "deployment/web"], WAIT, |l| {
        l.contains("ConfigChanged")
    })
    .await
    .expect("the ConfigChanged Event");
    assert!(
        line.contains("Normal")
            && line.contains("ConfigMap web-config changed: rolling to config hash"),
        "{line}"
    );
    // 3. janitor deletes the expired object.
    for args in [
        &["create", "configmap", "tmp"][..],
        &["annotate", "configmap", "tmp", "janitor/ttl=10s"][..],
    ] {
        let (ok, _, err) = kubectl(&dir, args).await;
        assert!(ok, "{args:?}: {err}");
    }
    let (ok, out, _) = kubectl(&dir, &["get", "configmap", "tmp"]).await;
    assert!(ok && out.contains("tmp"), "there at first: {out}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (ok, _, err) = kubectl(&dir, &["get", "configmap", "tmp"]).await;
        if !ok && err.contains("NotFound") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tmp never deleted: {err}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    kubectl_until(&dir, &["events", "--for", "configmap/tmp"], WAIT, |l| {
        l.contains("Expired")
    })
    .await
    .expect("the Expired Event");

    // Ctrl-C's signal stops the host, and the script with it.
    demo.sigterm_group();
    demo.exit(WAIT).await;
    let _ = std::fs::remove_dir_all(dir);
}
