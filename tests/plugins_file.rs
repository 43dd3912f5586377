//! The plugins file (`host --plugins FILE`, or `plugins:` of `--config`) through the real
//! binary: each plugin's own limits, namespace and configuration take effect for that plugin
//! alone, and a bad file is one line naming the file, the plugin and the key, before anything
//! starts.

mod support;

use std::path::{Path, PathBuf};

use kwh_client::client::WriteParams;
use kwh_client::{ApiResource, Client};
use support::cluster::http_get;
use support::guests::{guest, rebuilt as guest_rebuilt};
use support::process::{HostProcess, WAIT};

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// Copies of the test guest `portion` (named `portion-00`) in `dir`, one per suffix, each named
/// `portion-<suffix>`: a plugin's name comes from its code alone, and two plugins may not share
/// one. The placeholder occurs once, in a data segment.
fn portions(dir: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    let bytes = std::fs::read(guest("portion")).expect("read guest");
    let placeholder = b"portion-00";
    let at: Vec<usize> = bytes
        .windows(placeholder.len())
        .enumerate()
        .filter(|(_, w)| *w == placeholder)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the name placeholder occurs once");
    suffixes
        .iter()
        .map(|s| {
            assert_eq!(s.len(), 2, "fixed width");
            let mut b = bytes.clone();
            let end = at[0] + placeholder.len();
            b[end - 2..end].copy_from_slice(s.as_bytes());
            let p = dir.join(format!("portion-{s}.wasm"));
            std::fs::write(&p, b).expect("write");
            p
        })
        .collect()
}

/// Two copies of one guest from one file, one capped at 16 MiB and one at 64 MiB (the global
/// cap is 8 MiB): the same 32 MiB reconcile is stopped by the first cap and not by the second.
/// Each plugin's configuration and limits show in `/statusz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_plugin_runs_under_its_own_memory_cap_and_carries_its_config() {
    let dir = support::temp_dir("plugins-memory");
    portions(&dir, &["16", "64"]);
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: take-32, namespace: default}\n",
    )
    .expect("seed");
    let plugins = dir.join("plugins.yaml");
    // Relative modules: they resolve against the file's directory, not the working directory.
    std::fs::write(
        &plugins,
        "- module: portion-16.wasm\n  memoryMb: 16\n  config: {role: small}\n\
         - module: portion-64.wasm\n  memoryMb: 64\n  workers: 2\n  maxQueuedKeys: 5000\n  \
           logLinesPerSecond: 0\n  \
           config: {role: large, names: [a, b]}\n",
    )
    .expect("plugins file");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--memory-mb"),
            os("8"),
            os("--max-queued-keys"),
            os("123"),
            os("--log-lines-per-second"),
            os("250"),
            // The failing key is retried; a quarantine would only hide the cap's repeats.
            os("--quarantine-failures"),
            os("0"),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
            os("--emulator"),
            seed.as_os_str(),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    );
    let addr = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    let capped = format!("error=memory limit of {} bytes exceeded", 16 << 20);
    let (mut small_stopped, mut large_done) = (false, false);
    let seen = host
        .line_where(WAIT, |l| {
            let t = &l.text;
            small_stopped |= t.contains("plugin=portion-16") && t.contains(&capped);
            large_done |=
                t.contains("portion-64") && t.contains("allocated 32 MiB for default/take-32");
            small_stopped && large_done
        })
        .await;
    assert!(
        seen.is_some(),
        "16 MiB stopped {small_stopped}, 64 MiB done {large_done}; saw:\n{}",
        host.log()
    );

    let (code, body) = http_get(&addr, "/statusz").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("statusz is JSON");
    let plugins = status["plugins"].as_array().expect("plugins");
    let by_name = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {body}"))
            .clone()
    };
    let (small, large) = (by_name("portion-16"), by_name("portion-64"));
    assert_eq!(small["config"], serde_json::json!({"role": "small"}));
    assert_eq!(
        large["config"],
        serde_json::json!({"role": "large", "names": ["a", "b"]})
    );
    assert_eq!(small["limits"]["memoryBytes"], 16 << 20);
    assert_eq!(large["limits"]["memoryBytes"], 64 << 20);
    // Unset keys take the global values; `workers` overrides the manifest's one.
    assert_eq!(small["limits"]["handlerDeadlineMs"], 1000);
    assert_eq!(small["limits"]["maxQueuedKeys"], 123);
    assert_eq!(large["limits"]["maxQueuedKeys"], 5000);
    assert_eq!(small["limits"]["logLinesPerSecond"], 250);
    assert_eq!(large["limits"]["logLinesPerSecond"], 0);
    assert_eq!(small["workers"], 1);
    assert_eq!(large["workers"], 2);

    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
    // No call of either plugin ran under another cap (the global 8 MiB, or the other's).
    for l in &host.seen {
        let t = &l.text;
        if t.contains("error=memory limit of ") {
            assert!(
                t.contains("plugin=portion-16") && t.contains(&capped),
                "{t}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin's `namespace` confines its watches alone: with `--namespace other`, the plugin whose
/// entry says `team` sees only `team`, the one that says nothing sees only `other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_s_namespace_confines_that_plugin_alone() {
    let dir = support::temp_dir("plugins-namespace");
    portions(&dir, &["01", "02"]);
    let plugins = dir.join("plugins.yaml");
    std::fs::write(
        &plugins,
        "- module: portion-01.wasm\n  namespace: team\n- module: portion-02.wasm\n",
    )
    .expect("plugins file");
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n",
    )
    .expect("seed");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--namespace"),
            os("other"),
            os("--emulator"),
            seed.as_os_str(),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    );
    let (_, kubeconfig) = host.emulator().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    let client = support::process::client(&kubeconfig);
    let cm = ApiResource::new("v1", "ConfigMap", "configmaps", true);
    // In this order: each plugin has one watch and one worker, so one that watched every
    // namespace would reconcile `other/a` before `team/b` (portion-01), or `team/b` before
    // `other/c` (portion-02).
    for (ns, name) in [("other", "a"), ("team", "b"), ("other", "c")] {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}});
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
    let (mut team, mut other) = (false, false);
    let seen = host
        .line_where(WAIT, |l| {
            let t = &l.text;
            team |= t.contains("plugin=portion-01") && t.contains("reconciled team/b");
            other |= t.contains("plugin=portion-02") && t.contains("reconciled other/c");
            team && other
        })
        .await;
    assert!(
        seen.is_some(),
        "team {team}, other {other}; saw:\n{}",
        host.log()
    );
    for l in &host.seen {
        let t = &l.text;
        assert!(
            !(t.contains("plugin=portion-01") && t.contains("reconciled other/")),
            "{t}"
        );
        assert!(
            !(t.contains("plugin=portion-02") && t.contains("reconciled team/")),
            "{t}"
        );
    }
    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin's `maxInstances` bounds its own instances: `portion` needs two (a worker and its
/// dispatcher), so the plugin allowed one is refused, naming its file, and the other starts
/// under the global value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_s_max_instances_bounds_that_plugin_alone() {
    let dir = support::temp_dir("plugins-instances");
    let copies = portions(&dir, &["01", "02"]);
    let plugins = dir.join("plugins.yaml");
    std::fs::write(
        &plugins,
        "- module: portion-01.wasm\n  maxInstances: 1\n- module: portion-02.wasm\n",
    )
    .expect("plugins file");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--max-instances"),
            os("2"),
            os("--emulator"),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    );
    host.line("running; SIGINT or SIGTERM stops").await;
    assert!(
        host.saw(&format!(
            "plugin {}: instance limit of 1 reached",
            copies[0].display()
        )),
        "{}",
        host.log()
    );
    assert!(
        host.saw("plugin started plugin=portion-02"),
        "{}",
        host.log()
    );
    assert!(
        !host.saw("plugin started plugin=portion-01"),
        "{}",
        host.log()
    );
    host.sigterm();
    let status = host.exit(WAIT).await;
    assert!(status.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs the binary to its exit with info logs.
async fn host_output(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(support::host_bin());
    cmd.args(args)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("kube-wasm-host-test-cache"),
        )
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true);
    tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("host finishes")
        .expect("host runs")
}

/// An unknown key, a limit out of range, a module that is not there, in the plugins file or in
/// the config file's `plugins:`: one line naming the file, the plugin and the key, exit
/// non-zero, and nothing starts (no emulator, no plugin loaded), though the first plugin is good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_plugins_file_is_one_line_and_nothing_starts() {
    let dir = support::temp_dir("plugins-bad");
    let good = guest("noop");
    let file = dir.join("plugins.yaml");
    let config = dir.join("host.yaml");
    let first = format!("- module: {}\n", good.display());
    // The second plugin, the one in error, is named by its index and module as written.
    let cases = [
        ("  bogus: 1\n", "unknown field `bogus`"),
        (
            "  memoryMb: 5000\n",
            "memoryMb: 5000 is out of range (1..=4096)",
        ),
        (
            "  handlerDeadlineMs: 0\n",
            "handlerDeadlineMs: 0 is out of range (1..=3600000)",
        ),
    ];
    for (key, want) in cases {
        let second = format!("- module: {}\n{key}", good.display());
        std::fs::write(&file, format!("{first}{second}")).expect("write");
        let mut config_text = String::from("plugins:\n");
        for l in format!("{first}{second}").lines() {
            config_text.push_str(&format!("  {l}\n"));
        }
        std::fs::write(&config, config_text).expect("write");
        for (flag, path, what) in [
            ("--plugins", &file, "plugins file"),
            ("--config", &config, "config"),
        ] {
            let out = host_output(&[os(flag), path.as_os_str(), os("--emulator")]).await;
            assert!(!out.status.success(), "{out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            let line = stderr.lines().next().unwrap_or_default();
            let named = format!("{what} {}: ", path.display());
            assert!(line.contains(&named), "{line}");
            let named_plugin = format!("{named}plugin 1 ({}): {want}", good.display());
            assert!(line.contains(&named_plugin), "{line}");
            assert!(stdout.is_empty(), "no emulator started: {stdout}");
        }
    }

    // A module that is not there is refused before the good one loads.
    std::fs::write(&file, format!("{first}- module: gone.wasm\n")).expect("write");
    let out = host_output(&[os("--plugins"), file.as_os_str(), os("--emulator")]).await;
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(&format!(
            "plugins file {}: plugin 1 (gone.wasm): module: {} is not a file",
            file.display(),
            dir.join("gone.wasm").display()
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // Not YAML, or not a list.
    for (text, want) in [
        ("- module: [\n", "plugins file"),
        ("module: noop.wasm\n", "expected a list of plugins"),
    ] {
        std::fs::write(&file, text).expect("write");
        let out = host_output(&[os("--plugins"), file.as_os_str(), os("--emulator")]).await;
        assert!(!out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains(&format!("plugins file {}", file.display())),
            "{stderr}"
        );
        assert!(stderr.contains(want), "{stderr}");
    }

    // The global flags take the same ranges.
    let out = host_output(&[os("--memory-mb"), os("0"), os("--plugin"), good.as_os_str()]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("0 is out of range (1..=4096)"),
        "{out:?}"
    );
    // So do the config file's global keys, named with the file.
    std::fs::write(&config, "memoryMb: 0\n").expect("write");
    let out = host_output(&[
        os("--config"),
        config.as_os_str(),
        os("--plugin"),
        good.as_os_str(),
    ])
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "config {}: memoryMb: 0 is out of range (1..=4096)",
            config.display()
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `host rbac --plugins FILE` places each plugin where it runs: one with its own `namespace`
/// gets a Role and RoleBinding there, one without (and without `--namespace`) the ClusterRole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_from_a_plugins_file_gives_each_plugin_its_own_namespace() {
    let dir = support::temp_dir("plugins-rbac");
    portions(&dir, &["01", "02"]);
    let plugins = dir.join("plugins.yaml");
    std::fs::write(
        &plugins,
        "- module: portion-01.wasm\n  namespace: team\n- module: portion-02.wasm\n",
    )
    .expect("plugins file");
    let out = host_output(&[os("rbac"), os("--plugins"), plugins.as_os_str()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let placed: Vec<(String, String)> = stdout
        .split("\n---")
        .filter_map(|d| yaml_serde::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v.is_object())
        .map(|v| {
            (
                v["kind"].as_str().unwrap_or("").to_owned(),
                v["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let placed: Vec<(&str, &str)> = placed
        .iter()
        .map(|(k, n)| (k.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        placed,
        [
            ("ClusterRole", ""),
            ("ClusterRoleBinding", ""),
            ("Role", "team"),
            ("RoleBinding", "team"),
        ],
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The plugins-file entry of the `reviser` guest at `revision`, its log lines unthrottled.
fn reviser_entry(revision: &str) -> String {
    format!("- module: reviser.wasm\n  logLinesPerSecond: 0\n  config: {{revision: {revision}}}\n")
}

/// A host watching `plugins` every 200 ms with a compile cache of its own (which loads
/// compiled is part of what the live-edit test checks), on an emulator.
fn spawn_watching_host(plugins: &Path, cache: &Path) -> HostProcess {
    HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            // A cache of its own: which loads compiled is part of what this test checks.
            os("--cache-dir"),
            cache.as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
            os("--emulator"),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    )
}

/// Creates an empty ConfigMap `default/<name>`: each one is a reconcile to look for.
async fn create_configmap(client: &Client, name: &str) {
    let cm = ApiResource::new("v1", "ConfigMap", "configmaps", true);
    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}});
    client
        .create(
            &cm,
            Some("default"),
            body.to_string().into(),
            &WriteParams::default(),
        )
        .await
        .expect("create");
}

/// The informers' list counter summed over every plugin in `/statusz`: a restart would move it.
fn informer_relists(status: &serde_json::Value) -> u64 {
    status["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["informers"].as_array().cloned().unwrap_or_default())
        .map(|i| i["relists"].as_u64().expect("relists"))
        .sum::<u64>()
}

/// `/statusz` of the host at `addr`, checked to answer 200 and parsed.
async fn statusz(addr: &str) -> serde_json::Value {
    let (code, body) = http_get(addr, "/statusz").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).expect("statusz is JSON")
}

/// A configuration the guest refuses is one line, and revision b carries on: still ready,
/// `/statusz` and `/readyz` say what failed, and nothing relisted.
async fn a_refused_revision_keeps_b_running(
    host: &mut HostProcess,
    client: &Client,
    addr: &str,
    plugins: &Path,
    relists_before: u64,
) {
    std::fs::write(plugins, reviser_entry("bad")).expect("edit");
    let refused = host.line("revision bad is refused").await;
    assert!(
        refused.contains("plugin reviser keeps its running revision"),
        "{refused}"
    );
    create_configmap(client, "three").await;
    host.line("REV b reconcile default/three").await;
    let status = statusz(addr).await;
    let p = &status["plugins"][0];
    assert_eq!(p["revision"], 2, "{status}");
    let failed = p["failedRevision"]["error"].as_str().unwrap_or_default();
    assert!(failed.contains("revision bad is refused"), "{status}");
    // Still ready (the last good revision runs), and /readyz says what failed.
    let (code, ready) = http_get(addr, "/readyz").await;
    assert_eq!(code, 200, "{ready}");
    assert!(ready.starts_with("ok\n"), "{ready}");
    assert!(
        ready.contains("plugin reviser: revision 2 runs; a new revision (")
            && ready.contains("revision bad is refused"),
        "{ready}"
    );
    assert_eq!(
        informer_relists(&statusz(addr).await),
        relists_before,
        "nothing relisted"
    );
}

/// After the rollback: revision 4 runs config a with the first module's digest again, the
/// rebuilt module's digest differs, and no revision failed.
fn assert_rolled_back_history(status: &serde_json::Value) {
    let p = &status["plugins"][0];
    assert_eq!(p["revision"], 4, "{status}");
    let history: Vec<_> = p["revisions"]
        .as_array()
        .expect("revisions")
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64(),
                r["digest"].as_str(),
                r["config"]["revision"].as_str(),
            )
        })
        .collect();
    assert_eq!(history.len(), 4, "{status}");
    assert_eq!(history[0].0, Some(4));
    assert_eq!(history[0].2, Some("a"));
    assert_eq!(
        history[0].1, history[3].1,
        "the first module's digest again"
    );
    assert_ne!(
        history[1].1, history[0].1,
        "the rebuilt module's digest differs"
    );
    assert!(p["failedRevision"].is_null(), "{status}");
}

/// The plugins file is watched (issue "Plugins as managed workloads"): an edit upgrades a
/// running plugin in place, a broken revision is one line and the running one carries on, and
/// an entry taken out removes its plugin, all without a restart (the informers' list counter
/// in `/statusz` does not move).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_of_the_plugins_file_upgrade_and_remove_plugins_without_a_restart() {
    let dir = support::temp_dir("plugins-live");
    let module = dir.join("reviser.wasm");
    std::fs::copy(guest("reviser"), &module).expect("copy guest");
    let plugins = dir.join("plugins.yaml");
    std::fs::write(&plugins, reviser_entry("a")).expect("plugins file");
    let mut host = spawn_watching_host(&plugins, &dir.join("cache"));
    let (_, kubeconfig) = host.emulator().await;
    let addr = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    let client = support::process::client(&kubeconfig);

    create_configmap(&client, "one").await;
    host.line("REV a reconcile default/one").await;
    let relists_before = informer_relists(&statusz(&addr).await);

    // Upgrade: the same module with another configuration.
    std::fs::write(&plugins, reviser_entry("b")).expect("edit");
    host.line("plugin 0 (").await;
    assert!(host.saw(") upgraded"), "{}", host.log());
    create_configmap(&client, "two").await;
    host.line("REV b reconcile default/two").await;
    assert!(!host.saw("REV a reconcile default/two"), "{}", host.log());

    // A configuration the guest refuses: one line, b carries on.
    a_refused_revision_keeps_b_running(&mut host, &client, &addr, &plugins, relists_before).await;

    // A file that no longer parses: one line, every plugin kept as it runs.
    std::fs::write(&plugins, "- module: [\n").expect("edit");
    host.line("the running plugins are kept as they are").await;
    assert_eq!(statusz(&addr).await["plugins"][0]["revision"], 2);

    // A rebuilt module (another digest), then back to the first one: a rollback loads the
    // first module from the compile cache, no compile.
    guest_rebuilt(&module, &dir.join("reviser2.wasm"));
    std::fs::write(
        &plugins,
        reviser_entry("c").replace("reviser.wasm", "reviser2.wasm"),
    )
    .expect("edit");
    host.line("reviser2.wasm) upgraded").await;
    create_configmap(&client, "four").await;
    host.line("REV c reconcile default/four").await;
    std::fs::write(&plugins, reviser_entry("a")).expect("edit");
    // The second upgrade to reviser.wasm (lines already seen count, so count them).
    let mut n = 0;
    let rolled_back = host
        .line_where(WAIT, |l| {
            n += usize::from(l.text.contains("reviser.wasm) upgraded"));
            n == 2
        })
        .await;
    assert!(rolled_back.is_some(), "{}", host.log());
    create_configmap(&client, "five").await;
    host.line("REV a reconcile default/five").await;
    assert_rolled_back_history(&statusz(&addr).await);
    // Two compiles in the whole run, one per module: the rollback compiled nothing.
    let compiles = host.lines_mentioning(&["component=\"compiled in"]).len();
    assert_eq!(compiles, 2, "{}", host.log());

    // Taken out of the file: removed, and the host runs on with no plugin.
    std::fs::write(&plugins, "[]\n").expect("edit");
    host.line("plugin removed").await;
    let status = statusz(&addr).await;
    assert_eq!(
        status["plugins"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    assert!(!host.has_exited(), "the host runs on");
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
}

/// A `leaderOnly` plugin added to the watched file of a sharded host without an election is
/// refused in one line, as it is at start: no replica leads there, so it would never run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_only_plugin_added_live_to_a_sharded_host_without_an_election_is_refused() {
    let dir = support::temp_dir("plugins-live-leader-only");
    let module = dir.join("reviser.wasm");
    std::fs::copy(guest("reviser"), &module).expect("copy guest");
    let plugins = dir.join("plugins.yaml");
    let entry = "- module: reviser.wasm\n  config: {revision: a}\n";
    std::fs::write(&plugins, entry).expect("plugins file");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            os("--shards"),
            os("--emulator"),
        ],
        "info",
    );
    host.emulator().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    std::fs::write(&plugins, format!("{entry}  leaderOnly: true\n")).expect("edit");
    let line = host
        .line("leaderOnly: with --shards it needs --leader-elect")
        .await;
    assert!(
        line.contains("plugin reviser keeps its running revision"),
        "{line}"
    );
    assert!(!host.has_exited());
    host.sigterm();
    host.exit(WAIT).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugin whose configuration its `validate-config` refuses does not vanish: `/statusz`
/// lists it as `failed` with the reason, `plugin_failed_to_start` counts it, `/readyz` notes
/// it (the other plugin runs, so the host is ready); once the entry is fixed it starts and the
/// failure is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_configuration_is_refused_is_listed_as_failed_until_fixed() {
    let dir = support::temp_dir("plugins-refused");
    std::fs::copy(guest("reviser"), dir.join("reviser.wasm")).expect("copy guest");
    let plugins = dir.join("plugins.yaml");
    let file = |revision: &str| {
        format!(
            "- module: reviser.wasm\n  config: {{revision: ok, name: other}}\n\
             - module: reviser.wasm\n  config: {{revision: {revision}}}\n"
        )
    };
    std::fs::write(&plugins, file("bad")).expect("plugins file");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
            os("--emulator"),
        ],
        "info",
    );
    let addr = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    let statusz = || async {
        let (code, body) = http_get(&addr, "/statusz").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("statusz JSON")
    };
    let v = statusz().await;
    let failed: Vec<&serde_json::Value> = v["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["state"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["name"], "reviser", "the file's stem: {v}");
    assert!(
        failed[0]["reason"].as_str().is_some_and(
            |r| r.contains("configuration refused by the plugin: revision bad is refused")
        ),
        "{v}"
    );
    let (_, metrics) = http_get(&addr, "/metrics").await;
    assert!(
        metrics.contains("plugin_failed_to_start{plugin=\"reviser\"} 1\n")
            && metrics.contains("plugin_failed_to_start{plugin=\"other\"} 0\n"),
        "{metrics}"
    );
    let ready = support::cluster::get_until(&addr, "/readyz", WAIT, |code, _| code == 200)
        .await
        .expect("the other plugin runs: ready");
    assert!(
        ready.1.contains("plugin reviser (") && ready.1.contains("failed to start"),
        "{}",
        ready.1
    );

    // Fixed: it starts, and the failure is gone.
    std::fs::write(&plugins, file("good")).expect("edit");
    host.line(") added").await;
    let v = statusz().await;
    let states: Vec<(&str, &str)> = v["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["name"].as_str()?, p["state"].as_str()?)))
        .collect();
    assert_eq!(
        states,
        [("other", "running"), ("reviser", "running")],
        "{v}"
    );
    host.sigterm();
    host.exit(WAIT).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Polls `/statusz` until the plugin's shadow counts a difference; its `shadow` section.
async fn wait_for_a_shadow_difference(addr: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, body) = http_get(addr, "/statusz").await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("statusz JSON");
        let s = v["plugins"][0]["shadow"].clone();
        if s["differences"].as_u64() >= Some(1) {
            break s;
        }
        assert!(tokio::time::Instant::now() < deadline, "no difference: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `host shadow report` against the host at `addr` groups the differences by kind of change:
/// one group, the test's ConfigMap among its objects (with the `kube-root-ca.crt` of each
/// namespace, as the shadow reaches them).
async fn assert_shadow_report_groups_the_patch(addr: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let out = tokio::process::Command::new(support::host_bin())
            .args(["shadow", "report", "--url", &format!("http://{addr}")])
            .output()
            .await
            .expect("host shadow report runs");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(report.contains("plugin reviser: shadow "), "{report}");
        let groups: Vec<&str> = report
            .lines()
            .filter(|l| l.starts_with("  patch ConfigMap "))
            .collect();
        assert_eq!(groups.len(), 1, "one kind of change: {report}");
        assert!(
            groups[0].starts_with("  patch ConfigMap /metadata/annotations/reviser~1revision: "),
            "{report}"
        );
        if groups[0].contains("default/one") {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{report}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Polls `default/<name>` until revision b's annotation is on it: the promoted shadow writes.
async fn wait_annotated_by_b(client: &Client, cm: &ApiResource, name: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let o = client.get(cm, Some("default"), name).await.expect("get");
        let v: serde_json::Value = serde_json::from_slice(o.raw()).expect("JSON");
        if v["metadata"]["annotations"]["reviser/revision"] == "b" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never annotated by b: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A plugins-file entry's `shadow:` through the binary (issue "Shadow runs"): the shadow runs
/// beside the plugin, its writes are compared and never made, `/statusz` shows its differences
/// with their patches, and `promote: true` makes it the plugin (an upgrade, no relist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_in_the_plugins_file_is_compared_then_promoted_by_hand() {
    let dir = support::temp_dir("plugins-shadow");
    std::fs::copy(guest("reviser"), dir.join("reviser.wasm")).expect("copy guest");
    let plugins = dir.join("plugins.yaml");
    let entry = |promote: bool| {
        format!(
            "- module: reviser.wasm\n  logLinesPerSecond: 0\n  config: {{revision: a, annotate: true}}\n  \
             shadow:\n    module: reviser.wasm\n    config: {{revision: b, annotate: true}}\n    \
             promote: {promote}\n"
        )
    };
    std::fs::write(&plugins, entry(false)).expect("plugins file");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
            os("--emulator"),
        ],
        "info",
    );
    let (_, kubeconfig) = host.emulator().await;
    let addr = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    host.line("shadow revision started").await;
    let client = support::process::client(&kubeconfig);
    let cm = ApiResource::new("v1", "ConfigMap", "configmaps", true);
    create_configmap(&client, "one").await;
    host.line("REV b reconcile default/one").await;
    let shadow = wait_for_a_shadow_difference(&addr).await;
    assert_eq!(
        shadow["lastDifferences"][0]["patch"][0]["value"], "b",
        "{shadow}"
    );
    // `host shadow report` groups them by kind of change.
    assert_shadow_report_groups_the_patch(&addr).await;
    let stored = client.get(&cm, Some("default"), "one").await.expect("get");
    let stored: serde_json::Value = serde_json::from_slice(stored.raw()).expect("JSON");
    assert_eq!(
        stored["metadata"]["annotations"]["reviser/revision"], "a",
        "only the live revision's write reached the object"
    );

    // Promoted by hand: the shadow's configuration runs as the plugin; its writes are made.
    std::fs::write(&plugins, entry(true)).expect("edit");
    host.line(") upgraded").await;
    create_configmap(&client, "two").await;
    wait_annotated_by_b(&client, &cm, "two").await;
    let (_, body) = http_get(&addr, "/statusz").await;
    let v: serde_json::Value = serde_json::from_str(&body).expect("statusz JSON");
    assert!(
        v["plugins"][0]["shadow"].is_null(),
        "no shadow after the promotion: {v}"
    );
    host.sigterm();
    host.exit(WAIT).await;
    let _ = std::fs::remove_dir_all(dir);
}
