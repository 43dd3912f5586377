//! The deployment artifacts in `deploy/`: the Dockerfile (checked statically: no image can be
//! built in a test), the manifests' consistency with it and with one another, the committed RBAC
//! (what `host rbac` prints now for the ConfigMap's plugins and the Deployment's flags, so it
//! cannot go stale), and every manifest applied with the real `kubectl apply --server-side -k`
//! to an emulator enforcing RBAC, read back with `kubectl get -o json` and compared with what
//! was written; then the ServiceAccount's token does what the host does with its Lease.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use serde_json::{json, Value};
use support::kubectl::kubectl;

/// The namespace everything is deployed in, the ServiceAccount's and the pod's.
const NS: &str = "kube-wasm-host";

fn deploy_dir() -> PathBuf {
    support::guests::repo_root().join("deploy")
}

fn read(name: &str) -> String {
    let path = deploy_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_docs(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The one document of `name`.
fn doc(name: &str) -> Value {
    let mut d = yaml_docs(&read(name));
    assert_eq!(d.len(), 1, "{name} holds one object");
    d.remove(0)
}

/// The files the kustomization in `dir` (relative to deploy/) lists, those of the
/// kustomizations it names expanded in place, as paths relative to deploy/.
fn kustomized_in(dir: &str) -> Vec<String> {
    let at = |r: &str| {
        let p = std::path::Path::new(dir).join(r);
        // `..` folded, so that `wasmcontrollers/../common` reads as `common`.
        let mut parts: Vec<String> = Vec::new();
        for c in p.components() {
            match c {
                std::path::Component::ParentDir => {
                    parts.pop();
                }
                std::path::Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
                _ => {}
            }
        }
        parts.join("/")
    };
    let k = doc(&at("kustomization.yaml"));
    let mut out = Vec::new();
    for r in k["resources"].as_array().expect("resources") {
        let r = at(r.as_str().expect("a path"));
        if deploy_dir().join(&r).is_dir() {
            out.extend(kustomized_in(&r));
        } else {
            out.push(r);
        }
    }
    out
}

/// The files `kubectl apply -k deploy/` applies.
fn kustomized() -> Vec<String> {
    kustomized_in("")
}

// ----- the Dockerfile -----

/// One stage of a Dockerfile: its base, its name and its instructions (keyword, arguments),
/// continuation lines joined, comments dropped.
#[derive(Debug)]
struct Stage {
    base: String,
    name: String,
    instructions: Vec<(String, String)>,
}

impl Stage {
    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(k, _)| k == keyword)
            .map(|(_, a)| a.as_str())
            .collect()
    }

    fn one(&self, keyword: &str) -> &str {
        match self.all(keyword)[..] {
            [a] => a,
            ref all => panic!("stage {}: one {keyword}, not {all:?}", self.name),
        }
    }
}

/// The global `ARG`s (before the first `FROM`) and the stages.
fn dockerfile() -> (Vec<String>, Vec<Stage>) {
    let text = read("Dockerfile");
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head.trim());
                current.push(' ');
            }
            None => {
                current.push_str(t);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    let (mut args, mut stages) = (Vec::new(), Vec::<Stage>::new());
    for line in lines {
        let (keyword, rest) = line.split_once(' ').unwrap_or((&line, ""));
        let (keyword, rest) = (keyword.to_ascii_uppercase(), rest.trim().to_string());
        if keyword == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let [base, as_, name] = words[..] else {
                panic!("every stage is named: FROM {rest}")
            };
            assert!(as_.eq_ignore_ascii_case("as"), "FROM {rest}");
            stages.push(Stage {
                base: base.to_string(),
                name: name.to_string(),
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push((keyword, rest));
        } else {
            assert_eq!(keyword, "ARG", "only ARGs before the first FROM");
            args.push(rest);
        }
    }
    (args, stages)
}

/// `uid:gid` of a `USER`, both numeric and not root: a name cannot be checked by the kubelet
/// against `runAsNonRoot`.
fn non_root_user(user: &str) -> (u32, u32) {
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    let (uid, gid): (u32, u32) = (
        uid.parse().expect("a numeric uid"),
        gid.parse().expect("a numeric gid"),
    );
    assert!(uid != 0 && gid != 0, "USER {user} is root");
    (uid, gid)
}

/// `(source, destination)` of a `COPY --from=STAGE SRC DEST`.
fn copy_from<'a>(stage: &'a Stage, from: &str) -> Vec<(&'a str, &'a str)> {
    stage
        .all("COPY")
        .into_iter()
        .filter_map(|c| {
            let words: Vec<&str> = c.split_whitespace().collect();
            match words[..] {
                [flag, src, dest] if flag == format!("--from={from}") => Some((src, dest)),
                _ => None,
            }
        })
        .collect()
}

/// Whether `version` (`1.95`, `1.85.0`) is at least `min`.
fn at_least(version: &str, min: &str) -> bool {
    let parts =
        |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().expect("a number")).collect() };
    let (mut v, mut m) = (parts(version), parts(min));
    v.resize(3, 0);
    m.resize(3, 0);
    v >= m
}

#[test]
fn the_dockerfile_builds_the_host_in_release_and_runs_only_the_binary_as_a_non_root_user() {
    let (args, stages) = dockerfile();
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["build", "plugins-build", "plugins", "host"]);
    let stage = |n: &str| stages.iter().find(|s| s.name == n).expect("stage");

    // The build stage: the workspace's `host`, in release mode, from the lock file, without
    // the emulator and the harness (the default features), with a Rust new enough for the
    // workspace (wasmtime wants more than its rust-version says).
    let build = stage("build");
    assert!(
        build.all("RUN").iter().any(|r| r
            .contains("cargo build --release --locked -p host --bin host --no-default-features")
            && r.contains("target/release/host /out/host")),
        "{build:?}"
    );
    let rust = args
        .iter()
        .find_map(|a| a.strip_prefix("RUST_VERSION="))
        .expect("ARG RUST_VERSION=");
    assert_eq!(build.base, "rust:${RUST_VERSION}-bookworm");
    let manifest = std::fs::read_to_string(support::guests::repo_root().join("Cargo.toml"))
        .expect("Cargo.toml");
    let workspace_rust = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"');
    assert!(at_least(rust, workspace_rust), "{rust} < {workspace_rust}");
    assert!(
        at_least(rust, "1.95"),
        "wasmtime 48 needs Rust 1.95: {rust}"
    );

    // The runtime stage, the default target: the binary and nothing else (no RUN: the base
    // has no shell, and nothing is made writable), as a numeric non-root user; the binary is
    // the entrypoint. Its glibc is Debian 12's, as the build stage's is.
    let host = stages.last().expect("a stage");
    assert_eq!(host.name, "host");
    assert_eq!(host.base, "gcr.io/distroless/cc-debian12:nonroot");
    assert!(host.all("RUN").is_empty(), "{host:?}");
    assert!(host.all("VOLUME").is_empty(), "no image volume: {host:?}");
    assert_eq!(
        copy_from(host, "build"),
        [("/out/host", "/usr/local/bin/host")]
    );
    assert_eq!(host.all("COPY").len(), 1, "{host:?}");
    non_root_user(host.one("USER"));
    let entrypoint: Vec<String> =
        serde_json::from_str(host.one("ENTRYPOINT")).expect("ENTRYPOINT in exec form");
    assert_eq!(entrypoint, ["/usr/local/bin/host"]);
    assert!(
        host.all("CMD").is_empty(),
        "the Deployment gives the arguments"
    );

    // The plugins image: the example components under /plugins, as a non-root user too.
    let plugins = stage("plugins");
    assert_eq!(
        copy_from(plugins, "plugins-build"),
        [("/out/", "/plugins/")]
    );
    non_root_user(plugins.one("USER"));
    assert!(
        stage("plugins-build").all("RUN").iter().any(|r| r
            .contains("--target wasm32-wasip2 --manifest-path examples/Cargo.toml")
            && r.contains("-p config-reloader -p janitor")),
        "{:?}",
        stage("plugins-build")
    );

    // The context leaves build outputs out.
    let ignore = std::fs::read_to_string(support::guests::repo_root().join(".dockerignore"))
        .expect(".dockerignore");
    let ignored: Vec<&str> = ignore.lines().map(str::trim).collect();
    assert!(
        ignored.contains(&"target") && ignored.contains(&"**/target"),
        "{ignore}"
    );
}

// ----- the manifests, statically -----

fn deployment() -> Value {
    doc("common/deployment.yaml")
}

fn container<'a>(d: &'a Value, list: &str, name: &str) -> &'a Value {
    d["spec"]["template"]["spec"][list]
        .as_array()
        .expect(list)
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{list} {name}"))
}

/// The value of `--flag=value` among `args`.
fn flag<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    let prefix = format!("--{name}=");
    args.as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(prefix.as_str()))
}

/// The volume mounted at `path` in `c`, and whether read-only.
fn mounted<'a>(d: &'a Value, c: &Value, path: &str) -> (&'a Value, bool) {
    let m = c["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("a mount at {path}"));
    let v = d["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == m["name"])
        .expect("the mounted volume");
    (v, m["readOnly"] == true)
}

#[test]
fn the_kustomizations_list_every_manifest_each_in_the_one_namespace() {
    // Each kustomization lists every manifest of its directory (and names other directories).
    for dir in ["", "common", "crds", "wasmcontrollers"] {
        let mut files: Vec<String> = std::fs::read_dir(deploy_dir().join(dir))
            .expect("deploy/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .map(|n| {
                if dir.is_empty() {
                    n
                } else {
                    format!("{dir}/{n}")
                }
            })
            .collect();
        files.sort();
        let mut listed: Vec<String> = kustomized_in(dir)
            .into_iter()
            .filter(|f| std::path::Path::new(f).parent() == Some(std::path::Path::new(dir)))
            .collect();
        listed.sort();
        assert_eq!(listed, files, "deploy/{dir}");
    }
    for f in kustomized()
        .into_iter()
        .chain(kustomized_in("wasmcontrollers"))
    {
        for d in yaml_docs(&read(&f)) {
            let ns = d["metadata"]["namespace"].as_str();
            match d["kind"].as_str() {
                Some("Namespace") => assert_eq!(d["metadata"]["name"], NS),
                Some(
                    "ClusterRole"
                    | "ClusterRoleBinding"
                    | "CustomResourceDefinition"
                    | "WasmController",
                ) => assert_eq!(ns, None, "{d}"),
                _ => assert_eq!(ns, Some(NS), "{f}: {d}"),
            }
        }
    }
}

#[test]
fn the_deployment_runs_two_hardened_replicas_with_leader_election_on_the_metrics_port() {
    let d = deployment();
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(
        pod["serviceAccountName"],
        doc("common/serviceaccount.yaml")["metadata"]["name"]
    );
    let host = container(&d, "containers", "host");
    let args = &host["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--leader-elect")),
        "{args}"
    );

    let (_, stages) = dockerfile();
    runs_hardened_as_the_images_user(&d, &stages);

    // The one writable path the host has is its compile cache, an emptyDir: both --cache-dir
    // and the image's default ($XDG_CACHE_HOME/kube-wasm-host) lie there.
    let cache = flag(args, "cache-dir").expect("--cache-dir");
    let (volume, read_only) = mounted(&d, host, cache);
    assert!(volume["emptyDir"].is_object() && !read_only, "{volume}");
    let host_stage = stages.last().expect("the host stage");
    let xdg = host_stage
        .all("ENV")
        .iter()
        .find_map(|e| e.strip_prefix("XDG_CACHE_HOME="))
        .expect("ENV XDG_CACHE_HOME=");
    assert_eq!(format!("{xdg}/kube-wasm-host"), cache);

    // The plugins: an emptyDir the init container fills from the plugins image (where the
    // Dockerfile puts them) and the host reads; the plugins file from the ConfigMap names
    // modules in it.
    let init = container(&d, "initContainers", "plugins");
    let (volume, read_only) = mounted(&d, host, "/var/lib/kube-wasm-host/plugins");
    assert!(volume["emptyDir"].is_object() && read_only, "{volume}");
    let (init_volume, read_only) = mounted(&d, init, "/var/lib/kube-wasm-host/plugins");
    assert!(init_volume == volume && !read_only);
    assert_eq!(
        init["command"],
        json!([
            "sh",
            "-c",
            "cp /plugins/*.wasm /var/lib/kube-wasm-host/plugins/"
        ])
    );
    let plugins_file = flag(args, "plugins").expect("--plugins");
    let (dir, file) = plugins_file.rsplit_once('/').expect("a path");
    let (volume, read_only) = mounted(&d, host, dir);
    let cm = doc("configmap.yaml");
    assert_eq!(volume["configMap"]["name"], cm["metadata"]["name"]);
    assert!(read_only);
    let modules = plugin_modules(&cm, file);
    assert_eq!(
        modules,
        [
            "/var/lib/kube-wasm-host/plugins/config_reloader.wasm",
            "/var/lib/kube-wasm-host/plugins/janitor.wasm"
        ]
    );

    probes_use_the_metrics_port_the_service_targets(&d);
}

/// The deployment test's security checks, apart to keep it short.
fn runs_hardened_as_the_images_user(d: &Value, stages: &[Stage]) {
    let pod = &d["spec"]["template"]["spec"];
    let host = container(d, "containers", "host");
    // The pod runs as the images' user, non-root, with the runtime's seccomp profile; every
    // container without privileges, capabilities or a writable root filesystem.
    let image_user = |name: &str| {
        non_root_user(
            stages
                .iter()
                .find(|s| s.name == name)
                .expect("stage")
                .one("USER"),
        )
    };
    assert_eq!(image_user("host"), image_user("plugins"));
    let (uid, gid) = image_user("host");
    let sc = &pod["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(
        (sc["runAsUser"].as_u64(), sc["runAsGroup"].as_u64()),
        (Some(uid.into()), Some(gid.into()))
    );
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    for c in [
        host,
        container(d, "initContainers", "plugins"),
        container(d, "initContainers", "compile"),
    ] {
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{c}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{c}");
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{c}");
        assert!(c["resources"]["requests"]["memory"].is_string(), "{c}");
        assert!(c["resources"]["limits"]["memory"].is_string(), "{c}");
    }
    assert_eq!(
        host["resources"],
        json!({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}})
    );
}

/// The deployment test's probe and Service checks, apart to keep it short.
fn probes_use_the_metrics_port_the_service_targets(d: &Value) {
    let host = container(d, "containers", "host");
    let args = &host["args"];
    // Probes on the named metrics port, which --metrics-addr serves and the Service targets.
    let port = &host["ports"][0];
    assert_eq!(port["name"], "metrics");
    let metrics_port = flag(args, "metrics-addr")
        .and_then(|a| a.rsplit_once(':'))
        .map(|(_, p)| p.parse::<u64>().expect("a port"));
    assert_eq!(port["containerPort"].as_u64(), metrics_port);
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        assert_eq!(
            host[probe]["httpGet"],
            json!({"path": path, "port": "metrics"}),
            "{probe}"
        );
    }
    let svc = doc("common/service.yaml");
    assert_eq!(
        svc["spec"]["selector"],
        d["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"],
        d["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
}

#[test]
fn an_init_container_compiles_the_plugins_into_the_hosts_cache_before_the_host_starts() {
    let d = deployment();
    let pod = &d["spec"]["template"]["spec"];
    let inits: Vec<&str> = pod["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    // After the plugins are copied in: init containers run in order.
    assert_eq!(inits, ["plugins", "compile"]);
    let host = container(&d, "containers", "host");
    let compile = container(&d, "initContainers", "compile");
    // The same image, so the same binary and engine settings: the same cache keys.
    assert_eq!(compile["image"], host["image"]);
    assert!(
        compile["command"].is_null(),
        "the image's entrypoint, `host`"
    );
    let args = &compile["args"];
    assert_eq!(args[0], "compile", "{args}");
    // The host's cache, writable, and the host's plugins file: every module the host will
    // load is compiled, from the same paths.
    let cache = flag(args, "cache-dir").expect("--cache-dir");
    assert_eq!(Some(cache), flag(&host["args"], "cache-dir"));
    let (volume, read_only) = mounted(&d, compile, cache);
    assert_eq!(volume, mounted(&d, host, cache).0);
    assert!(!read_only);
    let plugins_file = flag(args, "plugins").expect("--plugins");
    assert_eq!(Some(plugins_file), flag(&host["args"], "plugins"));
    let (dir, _) = plugins_file.rsplit_once('/').expect("a path");
    let (volume, read_only) = mounted(&d, compile, dir);
    assert_eq!(volume, mounted(&d, host, dir).0);
    assert!(read_only);
    let (volume, read_only) = mounted(&d, compile, "/var/lib/kube-wasm-host/plugins");
    assert_eq!(
        volume,
        mounted(&d, host, "/var/lib/kube-wasm-host/plugins").0
    );
    assert!(read_only);
    assert_eq!(
        compile["resources"]["limits"]["memory"], host["resources"]["limits"]["memory"],
        "the examples compile within the host's own limit"
    );
}

/// The `module`s of the plugins file `key` in the ConfigMap `cm`.
fn plugin_modules(cm: &Value, key: &str) -> Vec<String> {
    let text = cm["data"][key].as_str().expect("the plugins file");
    let list: Vec<Value> = yaml_serde::from_str(text).expect("a YAML list");
    list.iter()
        .map(|p| p["module"].as_str().expect("module").to_string())
        .collect()
}

// ----- the committed RBAC -----

/// The `host rbac` arguments the manifests imply: the ServiceAccount, and every lease flag of
/// the Deployment's that `host rbac` takes too.
fn rbac_flags() -> Vec<String> {
    let sa = doc("common/serviceaccount.yaml");
    let mut flags = vec![
        "--service-account-namespace".to_string(),
        sa["metadata"]["namespace"]
            .as_str()
            .expect("ns")
            .to_string(),
        "--service-account".to_string(),
        sa["metadata"]["name"].as_str().expect("name").to_string(),
    ];
    let d = deployment();
    for a in container(&d, "containers", "host")["args"]
        .as_array()
        .expect("args")
    {
        let a = a.as_str().expect("a string");
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        if matches!(
            name,
            "--leader-elect"
                | "--shards"
                | "--leader-elect-namespace"
                | "--leader-elect-lease-name"
        ) {
            flags.push(a.to_string());
        }
    }
    flags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_rbac_is_what_host_rbac_prints_for_the_deployed_plugins() {
    // The ConfigMap's plugins file, its modules (container paths) replaced by the examples they
    // are built from.
    let cm = doc("configmap.yaml");
    let text = cm["data"]["plugins.yaml"].as_str().expect("plugins file");
    let mut list: Vec<Value> = yaml_serde::from_str(text).expect("a YAML list");
    for p in &mut list {
        let module = p["module"].as_str().expect("module").to_string();
        let stem = module
            .rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".wasm"))
            .expect("a .wasm");
        let example = stem.replace('_', "-");
        let built = tokio::task::spawn_blocking(move || support::guests::example(&example))
            .await
            .expect("the build does not panic");
        p["module"] = built.display().to_string().into();
    }
    let dir = support::temp_dir("deploy-rbac");
    let file = dir.join("plugins.yaml");
    std::fs::write(&file, yaml_serde::to_string(&list).expect("YAML")).expect("write");

    let flags = rbac_flags();
    assert!(flags.iter().any(|f| f == "--leader-elect"), "{flags:?}");
    let out = tokio::process::Command::new(support::host_bin())
        .arg("rbac")
        .arg("--plugins")
        .arg(&file)
        .args(&flags)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("kube-wasm-host-test-cache"),
        )
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("host rbac runs");
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let committed = read("common/rbac.yaml");
    assert!(
        committed == printed,
        "deploy/common/rbac.yaml is not what `host rbac` prints now; regenerate it (README, \"Running in \
         a cluster\"):\n  host rbac {} <the examples' .wasm files> > deploy/common/rbac.yaml\n--- \
         printed:\n{printed}",
        flags.join(" ")
    );
    // The Lease rules are in it, in the pods' namespace.
    let role = yaml_docs(&committed)
        .into_iter()
        .find(|d| d["kind"] == "Role")
        .expect("a Role for the Lease");
    assert_eq!(role["metadata"]["namespace"], NS);
    assert!(
        role["rules"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["resources"] == json!(["leases"]))),
        "{role}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

// ----- applied with kubectl -----

/// `written` is in `read`: every field written has the same value there (lists element by
/// element); what the server added is not looked at.
fn assert_accepted(written: &Value, read: &Value, at: &str) {
    match (written, read) {
        (Value::Object(w), Value::Object(r)) => {
            for (k, v) in w {
                let at = format!("{at}.{k}");
                match r.get(k) {
                    Some(rv) => assert_accepted(v, rv, &at),
                    None => panic!("{at}: written {v}, read back without it"),
                }
            }
        }
        (Value::Array(w), Value::Array(r)) => {
            assert_eq!(w.len(), r.len(), "{at}: {written} read back as {read}");
            for (i, (w, r)) in w.iter().zip(r).enumerate() {
                assert_accepted(w, r, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(written, read, "{at}"),
    }
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_manifest_is_applied_server_side_and_read_back_as_written() {
    let em = kwh_emulator::Emulator::builder()
        .tls(true)
        .authorize(true)
        .start()
        .await
        .expect("emulator starts");
    let dir = support::temp_dir("deploy-kubectl");
    em.write_kubeconfig(dir.join("kubeconfig"))
        .expect("kubeconfig");
    let deploy = deploy_dir().display().to_string();

    let (ok, out, err) = kubectl(&dir, &["apply", "--server-side", "-k", &deploy]).await;
    assert!(ok, "kubectl apply: {err}\n{out}");
    let applied = out.lines().count();
    let written: usize = kustomized().iter().map(|f| yaml_docs(&read(f)).len()).sum();
    assert_eq!(applied, written, "one line per object: {out}");
    assert!(
        out.lines().all(|l| l.ends_with(" serverside-applied")),
        "{out}"
    );

    every_object_reads_back_as_written(&dir).await;
    the_fields_that_matter_read_back(&dir).await;

    // Applying again changes nothing and is not refused.
    let (ok, out, err) = kubectl(&dir, &["apply", "--server-side", "-k", &deploy]).await;
    assert!(ok, "a second apply: {err}\n{out}");

    the_service_account_may_do_what_the_host_does(&em, &dir).await;

    em.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Each manifest's objects read back with `kubectl get -f`, apart to keep the test short.
async fn every_object_reads_back_as_written(dir: &Path) {
    for f in kustomized() {
        let path = deploy_dir().join(&f).display().to_string();
        let (ok, out, err) = kubectl(
            dir,
            &["get", "-f", &path, "-o", "json", "--show-managed-fields"],
        )
        .await;
        assert!(ok, "kubectl get -f {f}: {err}");
        let got: Value = serde_json::from_str(&out).expect("JSON");
        let got = match got["kind"].as_str() {
            Some("List") => got["items"].as_array().expect("items").clone(),
            _ => vec![got],
        };
        let docs = yaml_docs(&read(&f));
        assert_eq!(got.len(), docs.len(), "{f}");
        for (w, r) in docs.iter().zip(&got) {
            let what = format!("{f}: {} {}", w["kind"], w["metadata"]["name"]);
            assert_accepted(w, r, &what);
            // Written by this apply, as this field manager.
            assert!(
                r["metadata"]["managedFields"].as_array().is_some_and(|m| m
                    .iter()
                    .any(|m| m["manager"] == "kubectl" && m["operation"] == "Apply")),
                "{what}: {}",
                r["metadata"]
            );
        }
    }
}

/// The Deployment's and the Role's key fields read back by name, apart to keep the test short.
async fn the_fields_that_matter_read_back(dir: &Path) {
    // The fields that matter, read back in so many words.
    let (ok, out, err) = kubectl(
        dir,
        &[
            "get",
            "deployment",
            "kube-wasm-host",
            "-n",
            NS,
            "-o",
            "json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let d: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    let host = &pod["containers"][0];
    assert!(
        host["args"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--leader-elect")),
        "{host}"
    );
    assert_eq!(host["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(host["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(host["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let volumes: Vec<&str> = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(volumes, ["config", "plugins", "cache"]);
    let inits: Vec<&str> = pod["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(inits, ["plugins", "compile"]);
    assert_eq!(
        pod["initContainers"][1]["securityContext"]["readOnlyRootFilesystem"],
        true
    );
    let (ok, out, err) = kubectl(
        dir,
        &["get", "role", "kube-wasm-host", "-n", NS, "-o", "json"],
    )
    .await;
    assert!(ok, "{err}");
    let role: Value = serde_json::from_str(&out).expect("JSON");
    let committed = yaml_docs(&read("common/rbac.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "Role")
        .expect("Role");
    assert_eq!(role["rules"], committed["rules"]);
}

/// The ServiceAccount's token making the host's calls, apart to keep the test short.
async fn the_service_account_may_do_what_the_host_does(em: &EmulatorHandle, dir: &Path) {
    // The host's ServiceAccount, bound as the manifests bind it, may do its Lease calls in
    // its namespace and read what its plugins watch, and no more than that.
    let token = em
        .issue_service_account_token(NS, "kube-wasm-host", Duration::from_secs(600))
        .expect("token");
    let config = kwh_client::Config::from_kubeconfig_str(
        &em.kubeconfig_with_token(&token),
        dir,
        &kwh_client::config::KubeconfigOptions::default(),
    )
    .expect("kubeconfig");
    let client = kwh_client::Client::new(config).expect("client");
    let call = |method: http::Method, path: String, body: Option<Value>| {
        let client = client.clone();
        async move {
            let body = body.map(|b| (bytes::Bytes::from(b.to_string()), "application/json"));
            client.request_raw(method, &path, body).await
        }
    };
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-wasm-host", "namespace": NS},
        "spec": {"holderIdentity": "kube-wasm-host-0", "leaseDurationSeconds": 15}});
    call(http::Method::POST, leases.clone(), Some(lease))
        .await
        .expect("create the Lease");
    call(http::Method::GET, format!("{leases}/kube-wasm-host"), None)
        .await
        .expect("get the Lease");
    call(http::Method::GET, "/api/v1/configmaps".into(), None)
        .await
        .expect("list what a plugin watches");
    let refused = call(http::Method::GET, leases, None)
        .await
        .expect_err("no list of Leases for leader election");
    assert_eq!(refused.status().map(|s| s.code), Some(403), "{refused}");
}

// ----- deploy/wasmcontrollers/: plugins from WasmController resources and a registry -----

/// What `kubectl kustomize deploy/wasmcontrollers` renders.
async fn wasmcontrollers_rendered(dir: &Path) -> Vec<Value> {
    let path = deploy_dir().join("wasmcontrollers").display().to_string();
    let (ok, out, err) = kubectl(dir, &["kustomize", &path]).await;
    assert!(ok, "kubectl kustomize: {err}");
    yaml_docs(&out)
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasmcontrollers_variant_is_the_deployment_without_a_plugins_file_or_init_containers() {
    let dir = support::temp_dir("deploy-variant");
    let docs = wasmcontrollers_rendered(&dir).await;
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(!kinds.contains(&"ConfigMap"), "no plugins file: {kinds:?}");
    assert!(kinds.contains(&"CustomResourceDefinition"), "{kinds:?}");
    // The same Deployment as deploy/'s but for what the plugins file and its init containers
    // needed: the args, the mounts and the volumes.
    let got = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment")
        .clone();
    let mut want = deployment();
    let pod = &mut want["spec"]["template"]["spec"];
    pod.as_object_mut()
        .expect("pod spec")
        .remove("initContainers");
    pod["volumes"] = json!([{"name": "cache", "emptyDir": {"sizeLimit": "256Mi"}}]);
    let host = &mut pod["containers"][0];
    host["volumeMounts"] = json!([{"name": "cache", "mountPath": "/var/cache/kube-wasm-host"}]);
    host["args"] = got["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert_eq!(got, want);
    let args = &want["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--plugins-from-cluster")
                && a.iter().any(|x| x == "--leader-elect")
                && !a
                    .iter()
                    .any(|x| x.as_str().is_some_and(|x| x.starts_with("--plugins=")))),
        "{args}"
    );
    assert_eq!(flag(args, "cache-dir"), Some("/var/cache/kube-wasm-host"));
    // Each example resource names its module by registry reference.
    let controllers: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "WasmController")
        .collect();
    assert_eq!(controllers.len(), 2);
    for c in controllers {
        let module = c["spec"]["module"].as_str().expect("module");
        kwh_oci::Reference::parse(module).unwrap_or_else(|e| panic!("{e}"));
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasmcontrollers_rbac_is_what_host_rbac_prints_for_the_resources() {
    let out = tokio::process::Command::new(support::host_bin())
        .args([
            "rbac",
            "--plugins-from-cluster",
            "--role-name",
            "kube-wasm-host-wasmcontrollers",
        ])
        .args(&rbac_flags()[..4])
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("host rbac runs");
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        read("wasmcontrollers/rbac.yaml") == printed,
        "deploy/wasmcontrollers/rbac.yaml is not what `host rbac` prints now; regenerate it:\n  \
         host rbac --plugins-from-cluster --role-name kube-wasm-host-wasmcontrollers {} > \
         deploy/wasmcontrollers/rbac.yaml\n--- printed:\n{printed}",
        rbac_flags()[..4].join(" ")
    );
}

#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasmcontrollers_variant_is_applied_server_side() {
    let em = kwh_emulator::Emulator::builder()
        .tls(true)
        .authorize(true)
        .start()
        .await
        .expect("emulator starts");
    let dir = support::temp_dir("deploy-variant-apply");
    em.write_kubeconfig(dir.join("kubeconfig"))
        .expect("kubeconfig");
    let path = deploy_dir().join("wasmcontrollers").display().to_string();
    // The CRD first, as a real cluster needs it established before its resources are applied.
    let crds = deploy_dir().join("crds").display().to_string();
    let (ok, out, err) = kubectl(&dir, &["apply", "--server-side", "-k", &crds]).await;
    assert!(ok, "kubectl apply -k crds: {err}\n{out}");
    let (ok, out, err) = kubectl(&dir, &["apply", "--server-side", "-k", &path]).await;
    assert!(ok, "kubectl apply: {err}\n{out}");
    let rendered = wasmcontrollers_rendered(&dir).await;
    assert_eq!(
        out.lines().count(),
        rendered.len(),
        "one line per object: {out}"
    );
    let (ok, out, err) = kubectl(&dir, &["get", "wasmcontrollers", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "wasmcontroller.kube-wasm.dev/config-reloader",
            "wasmcontroller.kube-wasm.dev/janitor"
        ]
    );
    em.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
