//! The real `kubectl` against the emulator: discovery, create/get/label/select/delete, watch,
//! patch and apply, on ConfigMaps, Deployments and a CRD-defined resource, over plain HTTP and
//! over TLS with a bearer token. Skipped (with a message) when `kubectl` is not installed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kwh_emulator::{Emulator, EmulatorHandle};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const DEADLINE: Duration = Duration::from_secs(60);

struct Kube {
    handle: EmulatorHandle,
    dir: PathBuf,
}

impl Kube {
    async fn start(tls: bool, token: Option<&str>) -> Self {
        Self::with(Emulator::builder().tls(tls).token(token.map(str::to_owned))).await
    }

    /// As `host emulator` runs: namespaces get their default ServiceAccount and root CA.
    async fn cluster() -> Self {
        Self::with(Emulator::builder().namespace_controller(true)).await
    }

    async fn with(builder: kwh_emulator::EmulatorBuilder) -> Self {
        let handle = builder.start().await.unwrap();
        let dir = std::env::temp_dir().join(format!(
            "host-emulator-kubectl-{}-{}",
            std::process::id(),
            handle.addr().port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        handle.write_kubeconfig(dir.join("kubeconfig")).unwrap();
        Kube { handle, dir }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("HOME", &self.dir)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .arg("--request-timeout=20s")
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Run kubectl; returns (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::time::timeout(DEADLINE, self.cmd(args).output())
            .await
            .expect("kubectl timed out")
            .expect("kubectl did not start");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{err}\n{out}");
        out
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a).await).unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    async fn stop(self) {
        self.handle.clone().shutdown().await;
    }
}

impl Drop for Kube {
    // Also on a failed assertion: no kubeconfig or cache directory is left behind.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const CONFIGMAPS: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: one
  labels: {app: web}
data: {k: v1}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: two
  labels: {app: db}
data: {k: v2}
";

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: c
        image: nginx:1
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
    subresources: {status: {}}
";

const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  labels: {tier: gold}
spec: {size: 3}
";

fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    n.sort();
    n
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmaps_create_get_label_select_delete() {
    let k = Kube::start(false, None).await;
    let f = k.file("cms.yaml", CONFIGMAPS);
    let out = k.ok(&["create", "-f", &f]).await;
    assert!(
        out.contains("configmap/one created") && out.contains("configmap/two created"),
        "{out}"
    );
    let table = k.ok(&["get", "configmaps"]).await;
    assert!(
        table.starts_with("NAME") && table.contains("one") && table.contains("two"),
        "{table}"
    );
    let one = k.json(&["get", "configmap", "one"]).await;
    assert_eq!(one["data"]["k"], "v1");
    assert!(one["metadata"]["uid"].is_string() && one["metadata"]["resourceVersion"].is_string());
    k.ok(&["label", "configmap", "two", "tier=backend"]).await;
    assert_eq!(
        names(&k.json(&["get", "cm", "--selector", "tier=backend"]).await),
        ["two"]
    );
    assert_eq!(
        names(
            &k.json(&["get", "cm", "-l", "app in (web,db),tier!=backend"])
                .await
        ),
        ["one"]
    );
    assert_eq!(names(&k.json(&["get", "cm", "-l", "!tier"]).await), ["one"]);
    assert_eq!(
        names(
            &k.json(&["get", "cm", "--field-selector", "metadata.name=two"])
                .await
        ),
        ["two"]
    );
    let (ok, _, err) = k.run(&["create", "-f", &f]).await;
    assert!(
        !ok && err.contains("AlreadyExists") || err.contains("already exists"),
        "{err}"
    );
    k.ok(&["delete", "configmap", "one"]).await;
    assert_eq!(names(&k.json(&["get", "cm"]).await), ["two"]);
    let (ok, _, err) = k.run(&["get", "cm", "one"]).await;
    assert!(!ok && err.contains("not found"), "{err}");
    k.ok(&["delete", "cm", "-l", "app=db"]).await;
    assert!(names(&k.json(&["get", "cm"]).await).is_empty());
    k.stop().await;
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_generators_send_protobuf_that_is_decoded() {
    let k = Kube::start(false, None).await;
    k.ok(&["create", "namespace", "gen"]).await;
    k.ok(&[
        "create",
        "configmap",
        "c",
        "-n",
        "gen",
        "--from-literal=a=b",
    ])
    .await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "s",
        "-n",
        "gen",
        "--from-literal=p=q",
    ])
    .await;
    k.ok(&["create", "serviceaccount", "robot", "-n", "gen"])
        .await;
    let cm = k.json(&["get", "cm", "c", "-n", "gen"]).await;
    assert_eq!(cm["data"]["a"], "b");
    // The protobuf body carries an empty generateName; the API server omits empty strings.
    assert!(cm["metadata"].get("generateName").is_none(), "{cm}");
    let s = k.json(&["get", "secret", "s", "-n", "gen"]).await;
    assert_eq!(s["data"]["p"], "cQ==");
    // Its body's type is empty; the API server defaults a Secret's type to Opaque.
    assert_eq!(s["type"], "Opaque", "{s}");
    // Every built-in kind's protobuf decodes: a Deployment, defaulted as the server does.
    k.ok(&[
        "create",
        "deployment",
        "d",
        "--image=nginx:1.27",
        "-n",
        "gen",
    ])
    .await;
    let d = k.json(&["get", "deployment", "d", "-n", "gen"]).await;
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate", "{d}");
    assert_eq!(d["metadata"]["generation"], 1);
    k.ok(&["delete", "namespace", "gen"]).await;
    let (ok, _, _) = k.run(&["get", "cm", "c", "-n", "gen"]).await;
    assert!(!ok);
    k.stop().await;
}

/// Spec: kubectl's everyday commands work against the emulator as against a real server (the
/// emulator's README lists what answers as a server without a controller-manager would).
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everyday_commands_work_as_on_a_real_server() {
    let k = Kube::cluster().await;
    k.ok(&["create", "deployment", "web", "--image=nginx:1.27"])
        .await;
    k.ok(&["run", "p1", "--image=busybox:1.36", "--", "sleep", "3600"])
        .await;
    let pod = k.json(&["get", "pod", "p1"]).await;
    assert_eq!(pod["spec"]["serviceAccountName"], "default", "{pod}");
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        json!(["sleep", "3600"])
    );
    k.ok(&["expose", "deployment", "web", "--port=80"]).await;
    let svc = k.json(&["get", "service", "web"]).await;
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.")),
        "{svc}"
    );
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(svc["spec"]["selector"], json!({"app": "web"}));
    k.ok(&["scale", "deployment", "web", "--replicas=3"]).await;
    k.ok(&[
        "wait",
        "--for=jsonpath={.spec.replicas}=3",
        "deployment/web",
        "--timeout=20s",
    ])
    .await;
    let d = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(d["metadata"]["generation"], 2, "scaling changes the spec");
    k.ok(&["rollout", "restart", "deployment", "web"]).await;
    let d = k.json(&["get", "deployment", "web"]).await;
    let restarted =
        &d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"];
    assert!(restarted.is_string(), "{d}");
    assert_eq!(d["metadata"]["generation"], 3);
    // The server's table printers: the columns a real server prints.
    let table = k.ok(&["get", "deployment,service,pod"]).await;
    for column in [
        "UP-TO-DATE",
        "AVAILABLE",
        "CLUSTER-IP",
        "PORT(S)",
        "80/TCP",
        "RESTARTS",
        "Pending",
    ] {
        assert!(table.contains(column), "{column}: {table}");
    }
    k.ok(&["label", "pod", "p1", "tier=a"]).await;
    k.ok(&["annotate", "pod", "p1", "note=x"]).await;
    let pod = k.json(&["get", "pods", "-l", "tier=a"]).await;
    assert_eq!(pod["items"][0]["metadata"]["annotations"]["note"], "x");
    // No controller-manager: nothing makes the Deployment Available, as on a server without one.
    let (ok, _, err) = k
        .run(&[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "--timeout=1s",
        ])
        .await;
    assert!(!ok && err.contains("timed out"), "{err}");
    let explained = k
        .ok(&["explain", "deployment.spec.strategy.rollingUpdate"])
        .await;
    assert!(explained.contains("maxSurge"), "{explained}");
    // The same from OpenAPI v2, which kubectl reads only in gnostic's protobuf form.
    let explained = k
        .ok(&[
            "explain",
            "deployment.spec.strategy.rollingUpdate",
            "--output",
            "plaintext-openapiv2",
        ])
        .await;
    for line in [
        "RESOURCE: rollingUpdate <Object>",
        "maxSurge\t<string>",
        "maxUnavailable\t<string>",
    ] {
        assert!(explained.contains(line), "{line}: {explained}");
    }
    assert_eq!(
        k.ok(&["auth", "can-i", "create", "deployments"])
            .await
            .trim(),
        "yes"
    );
    // An Event's table is the server's: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE.
    let event = k.file(
        "event.yaml",
        "apiVersion: v1\nkind: Event\nmetadata: {name: e1}\ntype: Warning\nreason: Probed\nmessage: probe failed\ninvolvedObject: {kind: Pod, name: p1, namespace: default}\n",
    );
    k.ok(&["create", "-f", &event]).await;
    let events = k.ok(&["get", "events"]).await;
    for cell in [
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "MESSAGE",
        "Warning",
        "Probed",
        "pod/p1",
        "probe failed",
    ] {
        assert!(events.contains(cell), "{cell}: {events}");
    }
    k.ok(&["delete", "event", "e1"]).await;
    // Nothing here records Events (no scheduler, no kubelet): the listing is empty, not an error.
    let (ok, out, err) = k.run(&["events", "--for", "pod/p1"]).await;
    assert!(
        ok && format!("{out}{err}").contains("No events found"),
        "{out}{err}"
    );
    k.stop().await;
}

/// Spec: a client that asks for protobuf first (kubectl's typed clients do) is answered in
/// protobuf, and kubectl decodes each answer into the object the server stores: what `create
/// -o json` prints from the protobuf answer is what `get -o json` prints from the JSON one.
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_answers_decode_in_kubectl_to_the_stored_objects() {
    let k = Kube::cluster().await;
    let creates: [(&[&str], &str); 5] = [
        (
            &[
                "create",
                "deployment",
                "web",
                "--image=nginx:1.27",
                "--replicas=0",
            ],
            "deployment/web",
        ),
        (
            &[
                "run",
                "p1",
                "--image=busybox",
                "--labels=a=b",
                "--",
                "sleep",
                "9",
            ],
            "pod/p1",
        ),
        (
            &["create", "service", "clusterip", "svc", "--tcp=80:8080"],
            "service/svc",
        ),
        (
            &["create", "secret", "generic", "s", "--from-literal=k=v"],
            "secret/s",
        ),
        (
            &[
                "create",
                "cronjob",
                "cj",
                "--image=busybox",
                "--schedule=*/5 * * * *",
            ],
            "cronjob/cj",
        ),
    ];
    let mut asked = 0;
    for (args, object) in creates {
        // The flags go before a `--` (what follows it is the container's command).
        let at = args.iter().position(|x| *x == "--").unwrap_or(args.len());
        let mut a = args[..at].to_vec();
        a.extend(["-o", "json", "-v=8"]);
        a.extend(&args[at..]);
        let (ok, out, err) = k.run(&a).await;
        assert!(ok, "{args:?}: {err}");
        // Where kubectl asks for protobuf first (its typed generators; `run` asks for JSON),
        // the answer is protobuf.
        if err.contains("Accept: application/vnd.kubernetes.protobuf") {
            asked += 1;
            assert!(
                err.contains("Content-Type: application/vnd.kubernetes.protobuf"),
                "{args:?}: {err}"
            );
        }
        let created: Value = serde_json::from_str(&out).unwrap();
        let stored = k.json(&["get", object]).await;
        assert_eq!(created, stored, "{object}");
    }
    assert!(asked >= 3, "kubectl asked for protobuf {asked} times");
    k.stop().await;
}

/// Spec: `kubectl diff` shows what an apply would change (a server-side dry run), and `apply
/// --prune` deletes what a label selects and the files no longer hold.
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_and_apply_with_prune() {
    let k = Kube::cluster().await;
    let two = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: {set: demo}}\ndata: {k: \"1\"}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, labels: {set: demo}}\ndata: {k: \"1\"}\n";
    let all = k.file("two.yaml", two);
    k.ok(&["apply", "-f", &all]).await;
    let changed = k.file("changed.yaml", &two.replace("k: \"1\"", "k: \"2\""));
    // diff exits 1 when there are differences.
    let (ok, out, err) = k.run(&["diff", "-f", &changed]).await;
    assert!(!ok && out.contains("+  k: \"2\""), "{out}{err}");
    assert_eq!(
        k.json(&["get", "cm", "a"]).await["data"]["k"],
        "1",
        "diff changed nothing"
    );
    let one = k.file("one.yaml", two.split("---").next().unwrap_or_default());
    let out = k
        .ok(&["apply", "-f", &one, "--prune", "-l", "set=demo"])
        .await;
    assert!(out.contains("configmap/b pruned"), "{out}");
    let names: Vec<String> = k.json(&["get", "cm", "-l", "set=demo"]).await["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, ["a"]);
    k.stop().await;
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_and_api_versions() {
    let k = Kube::start(false, None).await;
    let v = k.ok(&["api-versions"]).await;
    for gv in [
        "v1",
        "apps/v1",
        "coordination.k8s.io/v1",
        "rbac.authorization.k8s.io/v1",
        "apiextensions.k8s.io/v1",
    ] {
        assert!(v.lines().any(|l| l == gv), "{gv} missing from\n{v}");
    }
    let r = k.ok(&["api-resources"]).await;
    for res in [
        "configmaps",
        "deployments",
        "leases",
        "customresourcedefinitions",
        "clusterroles",
    ] {
        assert!(
            r.lines().any(|l| l.starts_with(res)),
            "{res} missing from\n{r}"
        );
    }
    k.stop().await;
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_over_tls_with_token_patch_and_apply() {
    let k = Kube::start(true, Some("s3cret")).await;
    web_is_patched_merge_json_and_strategic(&k).await;
    api_is_applied_client_side(&k).await;
    ssa_is_applied_server_side(&k).await;
    k.ok(&["delete", "deploy", "web", "api", "ssa"]).await;
    assert!(names(&k.json(&["get", "deploy"]).await).is_empty());
    k.stop().await;
}

/// The patch steps of the Deployment test (`web`), apart to keep it short.
async fn web_is_patched_merge_json_and_strategic(k: &Kube) {
    let f = k.file("deploy.yaml", DEPLOYMENT);
    k.ok(&["create", "-f", &f]).await;
    let d = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(d["metadata"]["generation"], 1);
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/patched","value":"json"}]"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ])
    .await;
    let d = k.json(&["get", "deploy", "web"]).await;
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["spec"]["paused"], true);
    assert_eq!(d["metadata"]["labels"]["patched"], "json");
    assert_eq!(
        d["metadata"]["generation"], 3,
        "two spec changes bump generation twice"
    );
}

/// The client-side apply steps of the Deployment test (`api`), apart to keep it short.
async fn api_is_applied_client_side(k: &Kube) {
    // Client-side apply keeps the last-applied annotation; a second apply is a no-op.
    let a = k.file(
        "applied.yaml",
        &DEPLOYMENT.replace("name: web\n  labels", "name: api\n  labels"),
    );
    k.ok(&["apply", "-f", &a]).await;
    let api = k.json(&["get", "deploy", "api"]).await;
    assert!(
        api["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    let out = k.ok(&["apply", "-f", &a]).await;
    assert!(out.contains("unchanged"), "{out}");
    let b = k.file(
        "applied2.yaml",
        &std::fs::read_to_string(&a)
            .unwrap()
            .replace("replicas: 1", "replicas: 4"),
    );
    k.ok(&["apply", "-f", &b]).await;
    assert_eq!(
        k.json(&["get", "deploy", "api"]).await["spec"]["replicas"],
        4
    );
}

/// The server-side apply steps of the Deployment test (`ssa`), apart to keep it short.
async fn ssa_is_applied_server_side(k: &Kube) {
    // Server-side apply creates and updates.
    let s = k.file(
        "ssa.yaml",
        &DEPLOYMENT.replace("name: web\n  labels", "name: ssa\n  labels"),
    );
    k.ok(&["apply", "--server-side", "-f", &s]).await;
    assert_eq!(
        k.json(&["get", "deploy", "ssa"]).await["spec"]["replicas"],
        1
    );
    // Strategic merge keys containers by name: patching one keeps the other.
    k.ok(&["patch", "deploy", "ssa", "--type=json", "-p",
        r#"[{"op":"add","path":"/spec/template/spec/containers/-","value":{"name":"side","image":"busybox"}}]"#]).await;
    k.ok(&[
        "patch",
        "deploy",
        "ssa",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}}}"#,
    ])
    .await;
    let d = k.json(&["get", "deploy", "ssa"]).await;
    let images: Vec<&str> = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(images, ["nginx:2", "busybox"]);
    // Another manager changing an owned field conflicts unless it forces.
    let other = k.file(
        "ssa-other.yaml",
        &std::fs::read_to_string(&s)
            .unwrap()
            .replace("replicas: 1", "replicas: 6"),
    );
    let (ok, _, err) = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &other,
        ])
        .await;
    assert!(!ok && err.contains("conflict"), "{err}");
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &other,
    ])
    .await;
    assert_eq!(
        k.json(&["get", "deploy", "ssa"]).await["spec"]["replicas"],
        6
    );
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_lifecycle() {
    let k = Kube::start(false, None).await;
    let crd = k.file("crd.yaml", CRD);
    k.ok(&["create", "-f", &crd]).await;
    assert!(k
        .ok(&["api-resources", "--api-group=example.com"])
        .await
        .contains("widgets"));
    let w = k.file("w.yaml", WIDGET);
    k.ok(&["create", "-f", &w]).await;
    let got = k.json(&["get", "widget", "w1"]).await;
    assert_eq!(
        (
            got["spec"]["size"].as_i64(),
            got["metadata"]["generation"].as_i64()
        ),
        (Some(3), Some(1))
    );
    assert!(k.ok(&["get", "wd"]).await.contains("w1"));
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":4}}"#,
    ])
    .await;
    assert_eq!(k.json(&["get", "widget", "w1"]).await["spec"]["size"], 4);
    // Strategic merge is not supported for custom resources (spec 6.11).
    let (ok, _, err) = k
        .run(&[
            "patch",
            "widget",
            "w1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"size":5}}"#,
        ])
        .await;
    assert!(
        !ok && err.contains("UnsupportedMediaType")
            || err.contains("unknown format")
            || err.contains("not supported"),
        "{err}"
    );
    assert_eq!(
        names(&k.json(&["get", "widgets", "-l", "tier=gold"]).await),
        ["w1"]
    );
    k.ok(&["delete", "-f", &crd]).await;
    let (ok, _, err) = k.run(&["get", "widgets"]).await;
    assert!(!ok, "widgets must be gone with their CRD: {err}");
    k.stop().await;
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_sees_added_modified_deleted() {
    let k = Kube::start(false, None).await;
    let mut child = k
        .cmd(&[
            "get",
            "configmaps",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Wait until kubectl's watch is open before writing.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while k
        .handle
        .stats()
        .open_watches
        .get("/configmaps")
        .copied()
        .unwrap_or(0)
        == 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubectl never opened its watch"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w", "namespace": "default"}, "data": {"k": "1"}});
    let created = k.handle.create(cm).unwrap();
    let mut changed = created.clone();
    changed["data"]["k"] = "2".into();
    k.handle.update(changed).unwrap();
    k.handle
        .delete("v1", "ConfigMap", Some("default"), "w")
        .unwrap();
    // kubectl prints one JSON document per event (compact, one line each in 1.32); parse
    // whenever the accumulated text is a whole document.
    let mut types = Vec::new();
    let mut doc = String::new();
    let mut lines = BufReader::new(stdout).lines();
    let read = async {
        while let Ok(Some(line)) = lines.next_line().await {
            doc.push_str(&line);
            doc.push('\n');
            if let Ok(v) = serde_json::from_str::<Value>(&doc) {
                doc.clear();
                types.push(v["type"].as_str().unwrap_or("").to_owned());
                if types.len() == 3 {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("kubectl printed no events in time");
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    let _ = child.kill().await;
    k.stop().await;
}

#[allow(dead_code)]
fn _unused(_: &Path) {}

/// Where `CI` is set, the kubectl tests above must run, not be ignored: a build without kubectl
/// fails here instead of passing with them skipped.
#[test]
fn kubectl_is_present_where_ci_is_set() {
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
    assert!(
        cfg!(kubectl) || !ci,
        "CI is set but kubectl was not found when the tests were built: install kubectl"
    );
}
