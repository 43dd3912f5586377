//! The `host` binary's plugin commands: `inspect`, `rbac`, and refusals that exit non-zero.

mod support;

use std::process::Output;
use std::time::Duration;

use support::guests::guest;
use support::process::{HostProcess, Stream, WAIT};

const T: Duration = Duration::from_secs(120);

async fn host(args: &[&std::ffi::OsStr]) -> Output {
    let cache = std::env::temp_dir().join("kube-wasm-host-test-cache");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_host"));
    cmd.args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("RUST_LOG", "error")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true);
    tokio::time::timeout(T, cmd.output())
        .await
        .expect("host finishes")
        .expect("host runs")
}

/// Runs the host with `args`, expects it to fail, and gives its stderr.
async fn refused(args: &[&std::ffi::OsStr]) -> String {
    let out = host(args).await;
    assert!(!out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// `line` as a JSON object; panics naming the line otherwise.
fn json_object(line: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(v) if v.is_object() => v,
        _ => panic!("not a JSON object: {line:?}"),
    }
}

/// Every line as a JSON object (see [`json_object`]); empty lines are not allowed either.
fn json_objects<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<serde_json::Value> {
    lines.map(json_object).collect()
}

#[tokio::test]
async fn inspect_prints_the_manifest() {
    let copier = guest("copier");
    let out = host(&[os("inspect"), copier.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let v: yaml_serde::Value = yaml_serde::from_slice(&out.stdout).expect("YAML");
    assert_eq!(v["name"], "copier");
    assert_eq!(v["workers"], 2);
    assert_eq!(v["watches"][0]["kind"], "ConfigMap");
    assert_eq!(v["writes"][0]["verbs"][0], "patch");
    assert_eq!(v["writes"][0]["verbs"][1], "delete");
    assert!(
        v["watches"][0].get("indexes").is_none(),
        "no indexes declared"
    );
}

#[tokio::test]
async fn inspect_prints_declared_indexes() {
    let indexer = guest("indexer");
    let out = host(&[os("inspect"), indexer.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let v: yaml_serde::Value = yaml_serde::from_slice(&out.stdout).expect("YAML");
    let index = &v["watches"][0]["indexes"][0];
    assert_eq!(index["name"], "refs");
    assert_eq!(index["paths"][0], "data.ref");
    assert_eq!(index["namespaced"], true);
}

#[tokio::test]
async fn rbac_prints_a_least_privilege_role_and_binding() {
    let copier = guest("copier");
    let getter = guest("getter");
    let out = host(&[os("rbac"), copier.as_os_str(), getter.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let docs: Vec<yaml_serde::Value> = yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    assert_eq!(docs[0]["kind"], "ClusterRole");
    let rules = docs[0]["rules"].as_sequence().expect("rules");
    assert_eq!(rules.len(), 1, "{text}");
    assert_eq!(rules[0]["resources"][0], "configmaps");
    let verbs: Vec<&str> = rules[0]["verbs"]
        .as_sequence()
        .expect("verbs")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    // `create` with `patch`: server-side apply of an object that does not exist yet is
    // authorized as create too (rbac-403-apply-that-creates-with-patch-only); the output says so.
    assert_eq!(verbs, ["create", "delete", "get", "list", "patch", "watch"]);
    assert!(
        text.starts_with(kwh_plugin::rbac::APPLY_CREATES_NOTE),
        "{text}"
    );
    assert_eq!(docs[1]["kind"], "ClusterRoleBinding");

    // With the host confined to one namespace, every plugin's watches and (namespaced) writes
    // are too: a Role and RoleBinding there, no cluster-wide grant.
    let out = host(&[
        os("rbac"),
        os("--namespace"),
        os("team"),
        copier.as_os_str(),
        getter.as_os_str(),
    ])
    .await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let docs: Vec<yaml_serde::Value> = yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    let kinds: Vec<_> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["Role", "RoleBinding"], "{text}");
    assert_eq!(docs[0]["metadata"]["namespace"], "team");
    assert_eq!(docs[0]["rules"][0]["resources"][0], "configmaps");
    assert_eq!(docs[1]["roleRef"]["kind"], "Role");
}

/// The rules of a `host rbac` output, as (apiGroup, resource, verbs).
fn rules_of(stdout: &[u8]) -> Vec<(String, String, Vec<String>)> {
    let text = String::from_utf8_lossy(stdout);
    let mut out = Vec::new();
    for d in yaml_serde::Deserializer::from_str(&text) {
        let v: yaml_serde::Value = serde::Deserialize::deserialize(d).expect("YAML");
        for r in v["rules"].as_sequence().into_iter().flatten() {
            let s = |x: &yaml_serde::Value| x.as_str().unwrap_or_default().to_string();
            let verbs = r["verbs"]
                .as_sequence()
                .into_iter()
                .flatten()
                .map(s)
                .collect();
            out.push((s(&r["apiGroups"][0]), s(&r["resources"][0]), verbs));
        }
    }
    out
}

/// The documents of a `host rbac` output, as JSON.
fn docs_of(stdout: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(stdout);
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect()
}

/// (kind, namespace) of each document.
fn placed(docs: &[serde_json::Value]) -> Vec<(String, String)> {
    docs.iter()
        .map(|d| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (s(&d["kind"]), s(&d["metadata"]["namespace"]))
        })
        .collect()
}

#[tokio::test]
async fn rbac_grants_leases_only_when_leader_election_or_sharding_is_asked_for() {
    use serde_json::json;
    let copier = guest("copier");
    let pair = |k: &str, ns: &str| (k.to_string(), ns.to_string());

    // Without either flag: no Role and no rule on Leases.
    let out = host(&[os("rbac"), copier.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let docs = docs_of(&out.stdout);
    assert_eq!(
        placed(&docs),
        [pair("ClusterRole", ""), pair("ClusterRoleBinding", "")]
    );
    assert!(
        !rules_of(&out.stdout).iter().any(|(_, r, _)| r == "leases"),
        "{docs:?}"
    );

    // Leader election: a Role in the service account's namespace (the pod's, the run's
    // default lease namespace), with create, and get and update on the one Lease, and the new
    // leader's Event on it.
    let out = host(&[
        os("rbac"),
        os("--leader-elect"),
        os("--service-account-namespace"),
        os("ops"),
        copier.as_os_str(),
    ])
    .await;
    assert!(out.status.success(), "{out:?}");
    let docs = docs_of(&out.stdout);
    assert_eq!(
        placed(&docs),
        [
            pair("ClusterRole", ""),
            pair("ClusterRoleBinding", ""),
            pair("Role", "ops"),
            pair("RoleBinding", "ops"),
        ]
    );
    assert_eq!(
        docs[2]["rules"],
        json!([
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["kube-wasm-host"], "verbs": ["get", "update", "watch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"],
             "verbs": ["create", "patch"]},
        ])
    );
    assert!(
        docs[0]["rules"]
            .as_array()
            .is_some_and(|r| r.iter().all(|r| r["resources"][0] != "leases")),
        "nothing on Leases cluster-wide: {docs:?}"
    );
    assert_eq!(
        docs[3]["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kube-wasm-host", "namespace": "ops"}])
    );

    // Sharding, in a namespace and under a lease name of its own.
    let out = host(&[
        os("rbac"),
        os("--shards"),
        os("--leader-elect-namespace"),
        os("coordination"),
        os("--leader-elect-lease-name"),
        os("copiers"),
        copier.as_os_str(),
    ])
    .await;
    assert!(out.status.success(), "{out:?}");
    let docs = docs_of(&out.stdout);
    assert_eq!(docs[2]["kind"], "Role");
    assert_eq!(docs[2]["metadata"]["namespace"], "coordination");
    assert_eq!(
        docs[2]["rules"],
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["create", "delete", "get", "list", "update", "watch"]}])
    );
    assert_eq!(docs[3]["subjects"][0]["namespace"], "kube-system");

    // The lease settings alone grant nothing, so they are refused rather than ignored; so is
    // a name no Lease can have.
    let out = host(&[
        os("rbac"),
        os("--leader-elect-namespace"),
        os("ops"),
        copier.as_os_str(),
    ])
    .await;
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--leader-elect-namespace") && stderr.contains("--leader-elect"),
        "{stderr}"
    );
    let out = host(&[
        os("rbac"),
        os("--leader-elect"),
        os("--leader-elect-lease-name"),
        os("Kube_Wasm"),
        copier.as_os_str(),
    ])
    .await;
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lease name \"Kube_Wasm\": not a Lease name"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test]
async fn rbac_resolves_custom_kinds_from_crd_files_and_warns_when_it_must_guess() {
    let plugin = support::guests::example("namespace-defaults");
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/namespace-defaults/crd.yaml");
    let group = "defaults.kube-wasm.dev";

    let out = host(&[os("rbac"), os("--crd"), crd.as_os_str(), plugin.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rules = rules_of(&out.stdout);
    let rule = |g: &str, r: &str| {
        rules
            .iter()
            .find(|(rg, rr, _)| rg == g && rr == r)
            .map(|(_, _, v)| v.join(","))
    };
    assert_eq!(
        rule(group, "namespacedefaults").as_deref(),
        Some("create,get,list,patch,watch"),
        "{rules:?}"
    );
    assert_eq!(
        rule(group, "namespacedefaults/status").as_deref(),
        Some("patch,update")
    );
    // Built-in kinds come from the API server's own resource list.
    assert_eq!(rule("", "namespaces").as_deref(), Some("get,list,watch"));
    assert_eq!(
        rule("", "resourcequotas").as_deref(),
        Some("create,delete,get,list,patch,watch")
    );

    // Without the CRD the kind can only be guessed: the output says so on stderr.
    let out = host(&[os("rbac"), plugin.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kind NamespaceDefaults (defaults.kube-wasm.dev/v1alpha1) is not built in")
            && stderr.contains("\"namespacedefaultses\""),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // With a cluster that does not serve the kind yet, the CRD file still defines it (RBAC is
    // often applied before the CRD); without the file the cluster's 404 is the error.
    let em = support::cluster::emulator().await;
    let kubeconfig = support::temp_dir("rbac-kubeconfig").join("kubeconfig");
    em.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let out = host(&[
        os("rbac"),
        os("--kubeconfig"),
        kubeconfig.as_os_str(),
        os("--crd"),
        crd.as_os_str(),
        plugin.as_os_str(),
    ])
    .await;
    assert!(out.status.success(), "{out:?}");
    let from_cluster = rules_of(&out.stdout);
    assert_eq!(from_cluster, rules, "the same rules as offline");
    let stderr = refused(&[
        os("rbac"),
        os("--kubeconfig"),
        kubeconfig.as_os_str(),
        plugin.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains("kind NamespaceDefaults (defaults.kube-wasm.dev/v1alpha1)")
            && stderr.contains("404"),
        "{stderr}"
    );
    em.shutdown().await;

    // A CRD file that is not one is refused in one line naming it.
    let dir = support::temp_dir("rbac");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {group: g}\n").expect("write");
    let stderr = refused(&[os("rbac"), os("--crd"), bad.as_os_str(), plugin.as_os_str()]).await;
    assert!(
        stderr.contains(&format!("CRD file {}", bad.display()))
            && stderr.contains("spec.names: Required value"),
        "{stderr}"
    );
}

#[tokio::test]
async fn no_plugin_or_only_broken_plugins_exit_non_zero_with_one_clear_line() {
    let out = host(&[]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plugin given"));

    let dir = support::temp_dir("cli");
    let junk = dir.join("junk.wasm");
    std::fs::write(&junk, b"not wasm at all").expect("write");
    let out = host(&[os("--emulator"), os("--plugin"), junk.as_os_str()]).await;
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = format!("plugin {}: not a WebAssembly file", junk.display());
    assert!(stderr.contains(&line), "{stderr}");
    assert!(stderr.contains("no plugin could be started"), "{stderr}");
    // stderr is a pipe here, as under a supervisor writing a log file: no colour codes.
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");

    let out = host(&[os("inspect"), junk.as_os_str()]).await;
    assert!(!out.status.success());

    // JSON logs: every line on either stream is a JSON object, the final error included.
    let out = host(&[
        os("--log-format"),
        os("json"),
        os("--emulator"),
        os("--plugin"),
        junk.as_os_str(),
    ])
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let objects = json_objects(stdout.lines().chain(stderr.lines()));
    assert!(
        objects.len() >= 3,
        "announcements and errors: {stdout}{stderr}"
    );
    let last = stderr.lines().last().map(json_object).expect("a last line");
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("error: no plugin could be started")),
        "{stderr}"
    );

    // A config file with an unknown key is refused, naming the file.
    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "reconcileDeadlineMs: 500\nbogus: 1\n").expect("write");
    let stderr = refused(&[
        os("--config"),
        cfg.as_os_str(),
        os("--plugin"),
        junk.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains(&format!("config {}", cfg.display())),
        "{stderr}"
    );
    assert!(stderr.contains("bogus"), "{stderr}");

    // Quarantine limits come from the file too, and inconsistent ones are refused up front.
    std::fs::write(
        &cfg,
        "quarantineFailures: 3\nquarantineWindowSeconds: 30\nquarantineCooldownMs: 5000\nquarantineMaxCooldownMs: 1000\nhandlerAttempts: 2\n",
    )
    .expect("write");
    let stderr = refused(&[
        os("--config"),
        cfg.as_os_str(),
        os("--plugin"),
        junk.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains("maximum cool-down (1s) is shorter than its first one (5s)"),
        "{stderr}"
    );
    // A flag overrides the file.
    let out = host(&[
        os("--config"),
        cfg.as_os_str(),
        os("--quarantine-max-cooldown-ms"),
        os("60000"),
        os("--emulator"),
        os("--plugin"),
        junk.as_os_str(),
    ])
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no plugin could be started"),
        "the limits were accepted; only the plugin is bad: {stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The election's flags and config keys are checked before anything starts: timings that could
/// let two leaders act at once, an unreadable duration, a leader-only plugin in a sharded host
/// without an election; each is one line naming what is wrong.
#[tokio::test]
async fn election_settings_are_checked_up_front_with_one_clear_line() {
    let dir = support::temp_dir("cli-election");
    let noop = support::guests::guest("noop");
    let stderr = refused(&[
        os("--emulator"),
        os("--plugin"),
        noop.as_os_str(),
        os("--leader-elect"),
        os("--leader-elect-lease-duration"),
        os("10s"),
        os("--leader-elect-renew-deadline"),
        os("10s"),
    ])
    .await;
    assert!(
        stderr.contains("leader election: the lease duration (10s) must be longer than the renew deadline (10s)"),
        "{stderr}"
    );
    let stderr = refused(&[
        os("--plugin"),
        noop.as_os_str(),
        os("--leader-elect-retry-period"),
        os("2 seconds"),
    ])
    .await;
    assert!(
        stderr.contains("--leader-elect-retry-period") && stderr.contains("invalid duration"),
        "{stderr}"
    );

    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "leaderElect: true\nleaderElectRenewDeadline: soon\n").expect("write");
    let stderr = refused(&[
        os("--config"),
        cfg.as_os_str(),
        os("--plugin"),
        noop.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains(&format!("config {}", cfg.display()))
            && stderr.contains("leaderElectRenewDeadline")
            && stderr.contains("invalid duration \"soon\""),
        "{stderr}"
    );

    let plugins = dir.join("plugins.yaml");
    let entry = serde_json::json!([{"module": noop, "leaderOnly": true}]);
    std::fs::write(&plugins, entry.to_string()).expect("write");
    let stderr = refused(&[
        os("--emulator"),
        os("--plugins"),
        plugins.as_os_str(),
        os("--shards"),
    ])
    .await;
    assert!(
        stderr.contains("is leaderOnly: with --shards it needs --leader-elect"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--log-format json` over a whole run: the emulator and metrics announcements on stdout, the
/// host's logs, a plugin failing to load, a guest's own stdout and stderr, the shutdown: every
/// line on either stream is one JSON object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_make_every_line_of_a_run_a_json_object() {
    let dir = support::temp_dir("json");
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\n",
    )
    .expect("seed");
    let junk = dir.join("junk.wasm");
    std::fs::write(&junk, b"not wasm at all").expect("write");
    let getter = guest("getter");
    let mut host = HostProcess::spawn(
        [
            os("--log-format"),
            os("json"),
            os("--emulator"),
            seed.as_os_str(),
            os("--plugin"),
            getter.as_os_str(),
            os("--plugin"),
            junk.as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
        ],
        "info",
    );
    host.line("running; SIGINT or SIGTERM stops").await;
    // The guest prints this to its stdout while reconciling the seeded object's key.
    host.line("reconciling added-").await;
    host.line("stderr line for added-").await;
    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
    let by_stream = |s: Stream| {
        host.seen
            .iter()
            .filter(|l| l.stream == s)
            .map(|l| json_object(&l.text))
            .collect::<Vec<_>>()
    };
    let (out, err) = (by_stream(Stream::Stdout), by_stream(Stream::Stderr));
    let message = |v: &serde_json::Value| v["fields"]["message"].as_str().unwrap_or("").to_string();
    let stdout: Vec<_> = out.iter().map(message).collect();
    assert_eq!(
        stdout,
        ["emulator listening", "kubeconfig written", "metrics served"],
        "{}",
        host.log()
    );
    assert!(out[0]["fields"]["url"]
        .as_str()
        .is_some_and(|u| u.starts_with("http://127.0.0.1:")));
    assert!(out[2]["fields"]["url"]
        .as_str()
        .is_some_and(|u| u.ends_with("/metrics")));
    let has = |target: &str, text: &str| {
        err.iter()
            .any(|v| v["target"] == target && message(v).contains(text))
    };
    assert!(
        has("plugin::stdout", "reconciling added-"),
        "{}",
        host.log()
    );
    assert!(
        has("plugin::stderr", "stderr line for added-"),
        "{}",
        host.log()
    );
    assert!(
        err.iter().any(|v| v["level"] == "ERROR"
            && message(v).contains(&format!(
                "plugin {}: not a WebAssembly file",
                junk.display()
            ))),
        "{}",
        host.log()
    );
    assert!(has("host", "signal received"), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// Seeds `default/grow` and `default/stall`: `hungry` reconciles `grow` until the memory cap
/// stops it and loops in `on-add` of `stall`; `looper` loops in every reconcile.
fn limits_seed(dir: &std::path::Path) -> std::path::PathBuf {
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: grow, namespace: default}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stall, namespace: default}\n",
    )
    .expect("seed");
    seed
}

/// Runs `looper` and `hungry` on a seeded emulator with `args` added, and checks that the
/// reconcile deadline, the handler deadline and the memory cap the host enforces are the given
/// ones. The reconcile deadline must show within 8 s of the start, before the 10 s default
/// could; the logged values tell the configured limits from the defaults (1 s, 64 MiB).
async fn expect_limits(
    args: &[&std::ffi::OsStr],
    seed: &std::path::Path,
    reconcile: &str,
    handler: &str,
    memory_bytes: usize,
) {
    let looper = guest("looper");
    let hungry = guest("hungry");
    let mut all: Vec<&std::ffi::OsStr> = args.to_vec();
    all.extend([
        os("--emulator"),
        seed.as_os_str(),
        os("--plugin"),
        looper.as_os_str(),
        os("--plugin"),
        hungry.as_os_str(),
        os("--grace-period"),
        os("5"),
    ]);
    let mut host = HostProcess::spawn(all, "info");
    host.line("running; SIGINT or SIGTERM stops").await;
    let reconcile_line = format!("error=deadline exceeded after {reconcile}");
    let handler_line = format!("error=deadline exceeded after {handler}");
    let memory_line = format!("error=memory limit of {memory_bytes} bytes exceeded");
    let (mut r, mut h, mut m) = (false, false, false);
    let all_seen = host
        .line_where(Duration::from_secs(8), |l| {
            let t = &l.text;
            r |= t.contains("plugin=looper") && t.contains(&reconcile_line);
            h |= t.contains("plugin=hungry") && t.contains(&handler_line);
            m |= t.contains("plugin=hungry") && t.contains(&memory_line);
            r && h && m
        })
        .await;
    assert!(
        all_seen.is_some(),
        "reconcile {r}, handler {h}, memory {m}; saw:\n{}",
        host.log()
    );
    host.sigterm();
    host.exit(WAIT).await;
    // No call ran under another limit (a default, or the value the flags override).
    for l in &host.seen {
        let t = &l.text;
        if let Some((_, after)) = t.split_once("error=deadline exceeded after ") {
            let expected = if t.contains("plugin=looper") {
                reconcile
            } else {
                handler
            };
            assert!(after.starts_with(expected), "{t}");
        }
        if t.contains("error=memory limit of ") {
            assert!(t.contains(&memory_line), "{t}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_from_the_config_file_take_effect_at_run_time() {
    let dir = support::temp_dir("limits-file");
    let seed = limits_seed(&dir);
    let cfg = dir.join("host.yaml");
    std::fs::write(
        &cfg,
        "reconcileDeadlineMs: 300\nhandlerDeadlineMs: 200\nmemoryMb: 8\n",
    )
    .expect("write");
    expect_limits(
        &[os("--config"), cfg.as_os_str()],
        &seed,
        "300ms",
        "200ms",
        8 << 20,
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_flags_take_effect_at_run_time_over_the_config_file() {
    let dir = support::temp_dir("limits-flags");
    let seed = limits_seed(&dir);
    let cfg = dir.join("host.yaml");
    std::fs::write(
        &cfg,
        "reconcileDeadlineMs: 300\nhandlerDeadlineMs: 200\nmemoryMb: 8\n",
    )
    .expect("write");
    expect_limits(
        &[
            os("--config"),
            cfg.as_os_str(),
            os("--reconcile-deadline-ms"),
            os("400"),
            os("--handler-deadline-ms"),
            os("250"),
            os("--memory-mb"),
            os("16"),
        ],
        &seed,
        "400ms",
        "250ms",
        16 << 20,
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `copier` needs three instances (two workers and its dispatcher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_instances_from_the_config_file_and_the_flag_take_effect_at_run_time() {
    let copier = guest("copier");
    let dir = support::temp_dir("max-instances");
    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "maxInstances: 2\n").expect("write");
    let refused = |limit: u32| {
        format!(
            "plugin {}: instance limit of {limit} reached",
            copier.display()
        )
    };

    let out = host(&[
        os("--config"),
        cfg.as_os_str(),
        os("--emulator"),
        os("--plugin"),
        copier.as_os_str(),
    ])
    .await;
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&refused(2)), "{stderr}");

    let out = host(&[
        os("--config"),
        cfg.as_os_str(),
        os("--max-instances"),
        os("1"),
        os("--emulator"),
        os("--plugin"),
        copier.as_os_str(),
    ])
    .await;
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&refused(1)), "{stderr}");

    // A flag large enough lets it start, over the file's smaller value.
    let mut host = HostProcess::spawn(
        [
            os("--config"),
            cfg.as_os_str(),
            os("--max-instances"),
            os("3"),
            os("--emulator"),
            os("--plugin"),
            copier.as_os_str(),
        ],
        "info",
    );
    host.line("running; SIGINT or SIGTERM stops").await;
    assert!(host.saw("plugin started plugin=copier"), "{}", host.log());
    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// `--namespace N` (or `namespace: N` in the config file) confines watches that name no
/// namespace, at run time: `copier` logs `event add ns/name` for every ConfigMap it is told
/// about, and copies it in the same namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_confines_the_watches_at_run_time() {
    use kwh_client::client::WriteParams;
    use kwh_client::ApiResource;
    let copier = guest("copier");
    let dir = support::temp_dir("namespace");
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: seed-other, namespace: other}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: seed-team, namespace: team}\n",
    )
    .expect("seed");
    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "namespace: team\n").expect("write");
    let cm = ApiResource::new("v1", "ConfigMap", "configmaps", true);
    for confine in [
        [os("--namespace"), os("team")],
        [os("--config"), cfg.as_os_str()],
    ] {
        let mut args = confine.to_vec();
        args.extend([
            os("--emulator"),
            seed.as_os_str(),
            os("--plugin"),
            copier.as_os_str(),
        ]);
        let mut host = HostProcess::spawn(args, "info");
        let (_, kubeconfig) = host.emulator().await;
        host.line("running; SIGINT or SIGTERM stops").await;
        let client = support::process::client(&kubeconfig);
        let create = |ns: &'static str, name: &'static str| {
            let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns}});
            let client = client.clone();
            let cm = cm.clone();
            async move {
                client
                    .create(
                        &cm,
                        Some(ns),
                        body.to_string().into(),
                        &WriteParams::default(),
                    )
                    .await
                    .expect("create");
            }
        };
        // In this order: a watch of every namespace would deliver `other/late` first, and the
        // plugin handles its notifications in order.
        create("other", "late").await;
        create("team", "late").await;
        host.line("event add team/late").await;
        let copied = tokio::time::timeout(Duration::from_secs(20), async {
            while client.get(&cm, Some("team"), "late-copy").await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(copied.is_ok(), "team/late was copied: {}", host.log());
        assert!(host.saw("event add team/seed-team"), "{}", host.log());
        assert!(
            !host.saw("other/"),
            "nothing of namespace other reached the plugin: {}",
            host.log()
        );
        for name in ["seed-other-copy", "late-copy"] {
            let e = client
                .get(&cm, Some("other"), name)
                .await
                .expect_err("no copy in namespace other");
            assert_eq!(e.code(), Some(404), "{e}");
        }
        host.sigterm();
        let status = host.exit(WAIT).await;
        assert!(status.success(), "{}", host.log());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// One good and one bad plugin: without fail-fast the good one runs and the bad one is an error
/// line; with `--fail-fast` (or `failFast: true` in the config file) the host exits non-zero
/// with the bad plugin's one line as its only output on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_from_the_flag_or_the_config_file_stops_at_a_bad_plugin() {
    let good = guest("noop");
    let badkind = guest("badkind");
    let badlabel = guest("badlabel");
    let kind_error = format!(
        "plugin {}: cannot resolve kind Widget (example.com/v1)",
        badkind.display()
    );
    let label_error = format!(
        "plugin {}: invalid manifest: watch 0: unparsable label selector",
        badlabel.display()
    );

    for bad in [&badkind, &badlabel] {
        let mut host = HostProcess::spawn(
            [
                os("--emulator"),
                os("--plugin"),
                good.as_os_str(),
                os("--plugin"),
                bad.as_os_str(),
            ],
            "info",
        );
        host.line("running; SIGINT or SIGTERM stops").await;
        assert!(host.saw("plugin started plugin=noop"), "{}", host.log());
        let error = if bad == &badkind {
            &kind_error
        } else {
            &label_error
        };
        let errors: Vec<_> = host
            .seen
            .iter()
            .filter(|l| l.text.contains("ERROR"))
            .collect();
        if bad == &badkind {
            // Not served yet is not an error: the plugin waits for its kind, said once.
            assert!(errors.is_empty(), "{}", host.log());
            let waits: Vec<_> = host
                .seen
                .iter()
                .filter(|l| l.text.contains("plugin waits to start"))
                .collect();
            assert_eq!(waits.len(), 1, "{}", host.log());
            assert!(
                waits[0].text.contains("WARN")
                    && waits[0]
                        .text
                        .contains("cannot resolve kind Widget (example.com/v1)"),
                "{}",
                host.log()
            );
        } else {
            assert_eq!(errors.len(), 1, "{}", host.log());
            assert!(errors[0].text.contains(error.as_str()), "{}", host.log());
        }
        host.sigterm();
        let status = host.exit(WAIT).await;
        assert!(status.success(), "{}", host.log());
    }

    let only_line = |out: &Output, error: &str| {
        assert!(!out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].starts_with(&format!("error: {error}")), "{stderr}");
    };
    let out = host(&[
        os("--fail-fast"),
        os("--emulator"),
        os("--plugin"),
        good.as_os_str(),
        os("--plugin"),
        badkind.as_os_str(),
    ])
    .await;
    only_line(&out, &kind_error);

    let dir = support::temp_dir("fail-fast");
    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "failFast: true\n").expect("write");
    let out = host(&[
        os("--config"),
        cfg.as_os_str(),
        os("--emulator"),
        os("--plugin"),
        good.as_os_str(),
        os("--plugin"),
        badlabel.as_os_str(),
    ])
    .await;
    only_line(&out, &label_error);
    let _ = std::fs::remove_dir_all(dir);
}

/// An API server that is not up when the host starts (spec 1.8's refused connection at the
/// very first request): the host does not exit, it says once that the plugin waits, is unready
/// meanwhile, and starts the plugin by itself once the server answers discovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_comes_up_after_the_host_is_waited_for() {
    let copier = guest("copier");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = support::temp_dir("late-server");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .expect("kubeconfig");
    let mut host = HostProcess::spawn(
        [
            os("--kubeconfig"),
            kubeconfig.as_os_str(),
            os("--plugin"),
            copier.as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
        ],
        "info",
    );
    let waits = host.line("plugin waits to start").await;
    assert!(
        waits.contains("WARN") && waits.contains("cannot connect to"),
        "{}",
        host.log()
    );
    let addr = host.ops_addr().await;
    let (code, body) = support::cluster::http_get(&addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with(
            "plugin copier: not started: cannot resolve kind ConfigMap (v1): cannot connect to"
        ),
        "{body}"
    );

    let em = kwh_emulator::Emulator::builder()
        .port(port)
        .start()
        .await
        .expect("the API server comes up");
    host.line("plugin started plugin=copier").await;
    let ready = support::cluster::get_until(&addr, "/readyz", WAIT, |code, _| code == 200)
        .await
        .expect("ready once started");
    assert_eq!(ready.1, "ok\n");
    em.create(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "late", "namespace": "default"}, "data": {"v": "1"}}))
        .expect("create");
    assert!(
        support::cluster::eventually(WAIT, || em
            .get("v1", "ConfigMap", Some("default"), "late-copy")
            .is_some())
        .await,
        "the plugin reconciles: {}",
        host.log()
    );
    let waits = host
        .seen
        .iter()
        .filter(|l| l.text.contains("plugin waits to start"))
        .count();
    assert_eq!(waits, 1, "one line, not one per retry: {}", host.log());
    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
    em.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `--worker-threads` and `workerThreads` size the runtime (one by default: the main thread
/// alone runs it), as `/statusz` says; out of range (or a bad `--wakeup-batching`) is one line naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_threads_from_the_flag_or_the_config_file_size_the_runtime() {
    let noop = guest("noop");
    let dir = support::temp_dir("worker-threads");
    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "workerThreads: 2\n").expect("write");
    for (extra, want) in [
        (
            vec![],
            serde_json::json!({"flavor": "current_thread", "threads": 1}),
        ),
        (
            vec![os("--config"), cfg.as_os_str()],
            serde_json::json!({"flavor": "multi_thread", "threads": 2}),
        ),
        (
            vec![
                os("--config"),
                cfg.as_os_str(),
                os("--worker-threads"),
                os("3"),
            ],
            serde_json::json!({"flavor": "multi_thread", "threads": 3}),
        ),
    ] {
        let mut args = vec![
            os("--emulator"),
            os("--plugin"),
            noop.as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
        ];
        args.extend(extra.iter().copied());
        let mut host = HostProcess::spawn(args, "info");
        let addr = host.ops_addr().await;
        host.line("running; SIGINT or SIGTERM stops").await;
        let (code, body) = support::cluster::http_get(&addr, "/statusz").await;
        assert_eq!(code, 200, "{body}");
        let status: serde_json::Value = serde_json::from_str(&body).expect("statusz is JSON");
        assert_eq!(status["runtime"], want, "{extra:?}");
        host.sigterm();
        host.exit(WAIT).await;
    }

    std::fs::write(&cfg, "workerThreads: 0\n").expect("write");
    let stderr = refused(&[
        os("--config"),
        cfg.as_os_str(),
        os("--plugin"),
        noop.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains(&format!("config {}", cfg.display())) && stderr.contains("workerThreads"),
        "{stderr}"
    );
    let stderr = refused(&[
        os("--worker-threads"),
        os("257"),
        os("--plugin"),
        noop.as_os_str(),
    ])
    .await;
    assert!(stderr.contains("--worker-threads"), "{stderr}");

    // The wake-up batching window: a duration, at most 100 ms.
    let stderr = refused(&[
        os("--wakeup-batching"),
        os("1s"),
        os("--plugin"),
        noop.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains("--wakeup-batching: 1s is longer than 100ms"),
        "{stderr}"
    );
    std::fs::write(&cfg, "wakeupBatching: soon\n").expect("write");
    let stderr = refused(&[
        os("--config"),
        cfg.as_os_str(),
        os("--plugin"),
        noop.as_os_str(),
    ])
    .await;
    assert!(
        stderr.contains(&format!("config {}: wakeupBatching", cfg.display()))
            && stderr.contains("invalid duration \"soon\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--list-page-size N` (or `listPageSize: N` in the config file) pages an informer's relist
/// at its resourceVersion (client-go's `WatchListPageSize`, spec 1.3): after an in-stream 410,
/// ten ConfigMaps (five seeded, and the `kube-root-ca.crt` the namespace controller puts in each
/// of the five namespaces) in pages of two are five LIST requests, where by default the relist
/// is one.
/// The first list (RV 0) is one request either way: the watch cache ignores the limit. Counted
/// by the emulator (`requests.list` of `/_emulator/stats`); the one informer (`noop` watches
/// ConfigMaps) is the host's only lister.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_page_size_pages_the_informers_lists() {
    let noop = guest("noop");
    let dir = support::temp_dir("list-page-size");
    let seed = dir.join("seed.yaml");
    let objects: Vec<String> = (0..5)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: team}}\n"
            )
        })
        .collect();
    std::fs::write(&seed, objects.join("---\n")).expect("seed");
    let cfg = dir.join("host.yaml");
    std::fs::write(&cfg, "listPageSize: 2\n").expect("write");
    for (pages, extra) in [
        (1, vec![]),
        (5, vec![os("--list-page-size"), os("2")]),
        (5, vec![os("--config"), cfg.as_os_str()]),
    ] {
        let mut args = extra.clone();
        args.extend([
            os("--emulator"),
            seed.as_os_str(),
            os("--plugin"),
            noop.as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
        ]);
        let mut host = HostProcess::spawn(args, "info");
        let (url, kubeconfig) = host.emulator().await;
        let addr = host.ops_addr().await;
        // Ready: the informer's cache synced, so its whole list was read.
        support::cluster::get_until(&addr, "/readyz", WAIT, |code, _| code == 200)
            .await
            .expect("ready");
        let emulator = url.trim_start_matches("http://").to_string();
        let stats = || async {
            let (_, body) = support::cluster::try_http_get(&emulator, "/_emulator/stats")
                .await
                .expect("stats");
            serde_json::from_str::<serde_json::Value>(&body).expect("stats JSON")
        };
        assert_eq!(stats().await["requests"]["list"], 1, "{extra:?}");
        let kick = serde_json::json!({"injectExpired": true}).to_string();
        support::process::client(&kubeconfig)
            .request_raw(
                http::Method::POST,
                "/_emulator/faults",
                Some((kick.into(), "application/json")),
            )
            .await
            .expect("fault posted");
        // The relist is done once the second watch is open (after the reflector's backoff).
        let deadline = std::time::Instant::now() + WAIT;
        let after = loop {
            let s = stats().await;
            if s["requests"]["watch"] == 2 && s["openWatches"]["/configmaps"] == 1 {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{extra:?}: no relist: {s}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(after["faults"]["expired"], 1, "{after}");
        assert_eq!(after["requests"]["list"], 1 + pages, "{extra:?}: {after}");
        host.sigterm();
        let status = host.exit(WAIT).await;
        assert!(status.success(), "{}", host.log());
    }
    let _ = std::fs::remove_dir_all(dir);
}
