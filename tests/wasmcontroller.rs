//! Plugins from the cluster (`host --plugins-from-cluster`, issue "Plugins as managed
//! workloads"): `WasmController` resources applied, changed and deleted with the real kubectl
//! add, upgrade and remove plugins while the host runs, and the status the host writes is what
//! `kubectl get` and `kubectl describe` show: ready, revision, digest, the failed revision.

mod support;

use std::path::Path;

use support::guests::guest;
use support::kubectl::{kubectl, kubectl_until, status_of};
use support::process::{HostProcess, WAIT};

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// `custom-columns=NAME:.metadata.name,…` with the CRD's `additionalPrinterColumns`.
fn printer_columns(crd: &Path) -> String {
    let text = std::fs::read_to_string(crd).expect("CRD");
    let v: serde_json::Value = yaml_serde::from_str(&text).expect("CRD YAML");
    let cols = v["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns");
    assert_eq!(
        cols.iter()
            .map(|c| c["name"].as_str().unwrap_or(""))
            .collect::<Vec<_>>(),
        ["Ready", "Revision", "Digest", "Age"],
        "the columns the issue names"
    );
    let mut out = "custom-columns=NAME:.metadata.name".to_owned();
    for c in cols {
        let name = c["name"].as_str().expect("name").to_uppercase();
        out.push_str(&format!(
            ",{name}:{}",
            c["jsonPath"].as_str().expect("jsonPath")
        ));
    }
    out
}

fn wasmcontroller(module: &Path, revision: &str) -> String {
    format!(
        "apiVersion: kube-wasm.dev/v1alpha1\nkind: WasmController\nmetadata:\n  name: reviser\n\
         spec:\n  module: {}\n  logLinesPerSecond: 0\n  config:\n    revision: {revision}\n",
        module.display()
    )
}

/// `kubectl ARGS` in `dir`, which must succeed.
async fn kubectl_ok(dir: &Path, args: &[&str]) {
    let (ok, out, err) = kubectl(dir, args).await;
    assert!(ok, "{out}{err}");
}

/// Writes the `reviser` resource at `revision` to its own file and applies it.
async fn apply_revision(dir: &Path, module: &Path, revision: &str) {
    let file = dir.join(format!("wc-{revision}.yaml"));
    std::fs::write(&file, wasmcontroller(module, revision)).expect("write");
    kubectl_ok(dir, &["apply", "-f", &file.display().to_string()]).await;
}

/// Waits for the `reviser` row of `kubectl get -o <columns>` to show everything in `want`.
async fn reviser_row(dir: &Path, columns: &str, want: &'static [&'static str]) -> String {
    kubectl_until(dir, &["get", "wasmcontrollers", "-o", columns], WAIT, |l| {
        l.starts_with("reviser") && want.iter().all(|w| l.contains(w))
    })
    .await
    .unwrap_or_else(|out| panic!("no row with {want:?}:\n{out}"))
    .0
}

/// The digest column of a printed row.
fn row_digest(row: &str) -> Option<String> {
    row.split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .map(str::to_owned)
}

/// A configuration the guest refuses: revision 1 runs on, the reason and a `RevisionFailed`
/// Event in describe.
async fn a_refused_configuration_leaves_revision_1_running(
    dir: &Path,
    module: &Path,
    columns: &str,
) {
    apply_revision(dir, module, "bad").await;
    let (line, out) = kubectl_until(dir, &["describe", "wasmcontroller", "reviser"], WAIT, |l| {
        l.contains("revision bad is refused")
    })
    .await
    .unwrap_or_else(|out| panic!("no failure in describe:\n{out}"));
    assert!(out.contains("PreviousRevisionRunning"), "{line}\n{out}");
    // And an Event on it, which describe lists (the host writes Events on its own time).
    kubectl_until(dir, &["describe", "wasmcontroller", "reviser"], WAIT, |l| {
        l.contains("Warning") && l.contains("RevisionFailed")
    })
    .await
    .unwrap_or_else(|out| panic!("no RevisionFailed Event in describe:\n{out}"));
    reviser_row(dir, columns, &["True", " 1 "]).await;
}

/// A revision that traps while it is instantiated (in `validate-config`): revision 2 runs on.
async fn a_trapping_revision_leaves_revision_2_running(dir: &Path, module: &Path, columns: &str) {
    let trapping = dir.join("wc-trap.yaml");
    std::fs::write(&trapping, wasmcontroller(module, "b") + "    trap: true\n").expect("write");
    kubectl_ok(dir, &["apply", "-f", &trapping.display().to_string()]).await;
    let (line, out) = kubectl_until(dir, &["describe", "wasmcontroller", "reviser"], WAIT, |l| {
        l.contains("validate-config failed: guest trapped")
    })
    .await
    .unwrap_or_else(|out| panic!("no trap in describe:\n{out}"));
    assert!(out.contains("PreviousRevisionRunning"), "{line}\n{out}");
    reviser_row(dir, columns, &["True", " 2 "]).await;
}

/// A second resource whose module names the same plugin is refused (one plugin, one source)
/// and revision 2 runs on; the second resource is deleted again.
async fn a_second_resource_for_the_same_plugin_is_refused(
    dir: &Path,
    module: &Path,
    columns: &str,
) {
    let copy = dir.join("wc-copy.yaml");
    std::fs::write(
        &copy,
        wasmcontroller(module, "c").replace("name: reviser\n", "name: reviser-copy\n"),
    )
    .expect("write");
    kubectl_ok(dir, &["apply", "-f", &copy.display().to_string()]).await;
    kubectl_until(
        dir,
        &["describe", "wasmcontroller", "reviser-copy"],
        WAIT,
        |l| l.contains("already run by WasmController reviser"),
    )
    .await
    .unwrap_or_else(|out| panic!("no refusal in describe:\n{out}"));
    reviser_row(dir, columns, &["True", " 2 "]).await;
    kubectl_ok(dir, &["delete", "-f", &copy.display().to_string()]).await;
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasmcontrollers_add_upgrade_and_remove_plugins_and_carry_their_status() {
    let dir = support::temp_dir("wasmcontroller");
    let module = dir.join("reviser.wasm");
    std::fs::copy(guest("reviser"), &module).expect("copy guest");
    let crd = support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml");
    let (mut host, _) = spawn_cluster_host(&dir).await;
    // The CRD's printer columns, as custom columns: a real API server renders them from the
    // CRD; the emulator renders no CRD's columns, so kubectl evaluates the same paths here.
    let columns = printer_columns(&crd);

    // Added: Ready, revision 1, its digest; its reconciles run.
    apply_revision(&dir, &module, "a").await;
    let row = reviser_row(&dir, &columns, &["True", " 1 ", "sha256:"]).await;
    kubectl_ok(&dir, &["create", "configmap", "one"]).await;
    host.line("REV a reconcile default/one").await;

    // A configuration the guest refuses: revision 1 runs on, the reason in describe.
    a_refused_configuration_leaves_revision_1_running(&dir, &module, &columns).await;

    // Upgraded: revision 2, the same digest (only the configuration changed).
    apply_revision(&dir, &module, "b").await;
    let upgraded = reviser_row(&dir, &columns, &["True", " 2 "]).await;
    assert_eq!(row_digest(&upgraded), row_digest(&row), "{row}\n{upgraded}");
    kubectl_ok(&dir, &["create", "configmap", "two"]).await;
    host.line("REV b reconcile default/two").await;
    let status = status_of(&dir, "wasmcontroller", "reviser").await;
    assert_eq!(status["plugin"], "reviser", "{status}");
    assert!(status["failedRevision"].is_null(), "{status}");
    assert_eq!(status["observedGeneration"], 3, "{status}");

    // A revision that traps while it is instantiated (in `validate-config`): revision 2 runs on.
    a_trapping_revision_leaves_revision_2_running(&dir, &module, &columns).await;

    // A second resource whose module names the same plugin is refused: one plugin, one source.
    a_second_resource_for_the_same_plugin_is_refused(&dir, &module, &columns).await;

    // Deleted: the plugin is removed, the host runs on.
    kubectl_ok(&dir, &["delete", "wasmcontroller", "reviser"]).await;
    host.line("WasmController reviser deleted: plugin removed")
        .await;
    assert!(!host.has_exited(), "the host runs on");
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
}

/// With `--shards` every member runs every plugin and the leader writes the resources' status:
/// without an election there is none, which is one line at start, not status never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_hosts_need_an_election_to_take_plugins_from_the_cluster() {
    let out = tokio::process::Command::new(support::host_bin())
        .args(["--plugins-from-cluster", "--shards", "--emulator"])
        .output()
        .await
        .expect("host runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--plugins-from-cluster with --shards needs --leader-elect"),
        "{stderr}"
    );
}

/// Keeps the reviser off the `kube-root-ca.crt` of each namespace (the namespace controller's),
/// so the test's ConfigMap is the only one it writes.
const NOT_CA: &str = "fieldSelector: metadata.name!=kube-root-ca.crt";

/// A `WasmController`'s `shadow:` (issue "Shadow runs"): the shadow runs beside the plugin and
/// the resource's status carries what its writes would have done, with their patches.
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasmcontrollers_shadow_reports_its_differences_in_status() {
    let dir = support::temp_dir("wasmcontroller-shadow");
    let module = dir.join("reviser.wasm");
    std::fs::copy(guest("reviser"), &module).expect("copy guest");
    let (mut host, _) = spawn_cluster_host(&dir).await;
    let m = module.display();
    support::kubectl::apply_yaml(
        &dir,
        "wc",
        &format!(
            "apiVersion: kube-wasm.dev/v1alpha1\nkind: WasmController\nmetadata:\n  name: reviser\n\
             spec:\n  module: {m}\n  logLinesPerSecond: 0\n  config: {{revision: a, annotate: true, {NOT_CA}}}\n  \
             shadow:\n    module: {m}\n    config: {{revision: b, annotate: true, {NOT_CA}}}\n"
        ),
    )
    .await;
    host.line("shadow revision started").await;
    let (ok, out, err) = kubectl(&dir, &["create", "configmap", "one"]).await;
    assert!(ok, "{out}{err}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let shadow = loop {
        let s = status_of(&dir, "wasmcontroller", "reviser").await;
        if s["shadow"]["differences"].as_u64() >= Some(1) {
            break s["shadow"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no difference in status: {s}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(shadow["lastDifferences"][0]["name"], "one", "{shadow}");
    assert_eq!(
        shadow["lastDifferences"][0]["patch"][0]["value"], "b",
        "{shadow}"
    );
    let (ok, annotation, err) = kubectl(
        &dir,
        &[
            "get",
            "configmap",
            "one",
            "-o",
            "jsonpath={.metadata.annotations.reviser/revision}",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(annotation, "a", "only the live revision wrote");
    // An Event for the new kind of difference on the object, and on the resource.
    kubectl_until(&dir, &["describe", "configmap", "one"], WAIT, |l| {
        l.contains("Warning") && l.contains("ShadowDifference")
    })
    .await
    .unwrap_or_else(|out| panic!("no ShadowDifference Event on the ConfigMap:\n{out}"));
    kubectl_until(
        &dir,
        &["describe", "wasmcontroller", "reviser"],
        WAIT,
        |l| l.contains("ShadowDifference"),
    )
    .await
    .unwrap_or_else(|out| panic!("no ShadowDifference Event on the resource:\n{out}"));
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
}

/// A `--plugins-from-cluster` host on its emulator (the CRD applied), serving `/statusz`; its
/// kubeconfig copied into `dir` for kubectl, and the address of its operations endpoints.
async fn spawn_cluster_host(dir: &Path) -> (HostProcess, String) {
    let crd = support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml");
    let mut host = HostProcess::spawn(
        [
            os("--plugins-from-cluster"),
            os("--emulator"),
            crd.as_os_str(),
            os("--cache-dir"),
            dir.join("cache").as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    );
    let (_, kubeconfig) = host.emulator().await;
    std::fs::copy(&kubeconfig, dir.join("kubeconfig")).expect("kubeconfig");
    let addr = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    (host, addr)
}

/// The names of the plugins `/statusz` lists, in order.
async fn plugin_names(addr: &str) -> Vec<String> {
    let (code, body) = support::cluster::http_get(addr, "/statusz").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("statusz is JSON");
    v["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until `/statusz` lists exactly the plugins `want`.
async fn plugins_become(host: &HostProcess, addr: &str, want: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let names = plugin_names(addr).await;
        if names == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "plugins {names:?}, not {want:?}:\n{}",
            host.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A new generation whose module names another plugin (issue "Revisions change hands exactly",
/// defect 2): the new plugin starts and the old one is removed, so the objects are reconciled by
/// one plugin only; deleting the resource then stops the new one.
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_that_names_another_plugin_replaces_the_old_one() {
    let dir = support::temp_dir("wasmcontroller-rename");
    let module = dir.join("reviser.wasm");
    std::fs::copy(guest("reviser"), &module).expect("copy guest");
    let (mut host, addr) = spawn_cluster_host(&dir).await;

    apply_revision(&dir, &module, "a").await;
    host.line("WasmController reviser generation 1 applied")
        .await;
    plugins_become(&host, &addr, &["reviser"]).await;

    // Generation 2 names plugin `renamed`.
    let file = dir.join("wc-renamed.yaml");
    std::fs::write(&file, wasmcontroller(&module, "b") + "    name: renamed\n").expect("write");
    kubectl_ok(&dir, &["apply", "-f", &file.display().to_string()]).await;
    // The old plugin is removed: one plugin reconciles the objects.
    plugins_become(&host, &addr, &["renamed"]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = status_of(&dir, "wasmcontroller", "reviser").await;
        if status["plugin"] == "renamed" && status["observedGeneration"] == 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    kubectl_ok(&dir, &["create", "configmap", "after-rename"]).await;
    host.line("REV b reconcile default/after-rename").await;
    assert!(
        !host.saw("REV a reconcile default/after-rename"),
        "{}",
        host.log()
    );

    // Deleted: the plugin it runs now is removed, and nothing runs.
    kubectl_ok(&dir, &["delete", "wasmcontroller", "reviser"]).await;
    host.line("WasmController reviser deleted: plugin removed")
        .await;
    plugins_become(&host, &addr, &[]).await;
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// A `WasmController` named `name` whose module is `module`.
fn resource_of(name: &str, module: &str, revision: &str) -> String {
    format!(
        "apiVersion: kube-wasm.dev/v1alpha1\nkind: WasmController\nmetadata:\n  name: {name}\n\
         spec:\n  module: {module}\n  logLinesPerSecond: 0\n  config:\n    revision: {revision}\n"
    )
}

/// A registry that never answers holds up only its own resource (issue "Revisions change hands
/// exactly", defect 7): another resource starts while that pull is still in flight (its
/// connection open, nothing logged about it); a resource whose next generation is being pulled
/// keeps its running revision and status; and deleting a resource cancels its pull.
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_never_answers_holds_up_no_other_resource() {
    let dir = support::temp_dir("wasmcontroller-stalled");
    let module = dir.join("reviser.wasm");
    std::fs::copy(guest("reviser"), &module).expect("copy guest");
    let registry = support::stalled_registry::StalledRegistry::start().await;
    let (mut host, addr) = spawn_cluster_host(&dir).await;

    // `stuck`'s pull reaches the registry and waits for an answer that never comes.
    let stuck = format!("oci://{}/team/stuck:v1", registry.host());
    support::kubectl::apply_yaml(&dir, "stuck", &resource_of("stuck", &stuck, "s")).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while registry.accepted() < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pull reached the registry"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Another resource starts meanwhile.
    apply_revision(&dir, &module, "a").await;
    host.line("WasmController reviser generation 1 applied")
        .await;
    plugins_become(&host, &addr, &["reviser"]).await;
    assert!(
        registry.is_open(0) && !host.saw("WasmController stuck"),
        "reviser started only after stuck's pull ended:\n{}",
        host.log()
    );

    // A generation whose pull stalls: the running revision and its status stay.
    let next = format!("oci://{}/team/next:v2", registry.host());
    support::kubectl::apply_yaml(&dir, "reviser-next", &resource_of("reviser", &next, "b")).await;
    while registry.accepted() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no second pull");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let status = status_of(&dir, "wasmcontroller", "reviser").await;
    assert_eq!(status["observedGeneration"], 1, "{status}");
    assert_eq!(status["plugin"], "reviser", "{status}");
    assert!(status["failedRevision"].is_null(), "{status}");
    kubectl_ok(&dir, &["create", "configmap", "during-pull"]).await;
    host.line("REV a reconcile default/during-pull").await;
    assert_eq!(plugin_names(&addr).await, ["reviser"]);

    // Deleting a resource cancels its pull: the registry sees the connection go.
    kubectl_ok(&dir, &["delete", "wasmcontroller", "stuck"]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while registry.is_open(0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stuck's pull goes on"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    kubectl_ok(&dir, &["delete", "wasmcontroller", "reviser"]).await;
    host.line("WasmController reviser deleted: plugin removed")
        .await;
    while registry.is_open(1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reviser's pull goes on"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    plugins_become(&host, &addr, &[]).await;
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}
