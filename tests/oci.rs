//! Modules from OCI registries (issue "Plugins as managed workloads"), against a real registry
//! on loopback (Debian's `docker-registry`), alone, behind Basic authentication, and behind a
//! gate that asks for Bearer tokens: `host push` in both layouts, pulls verified against their
//! digests and cached by digest, credentials from a Docker config file, and a plugins file whose
//! `oci://` module is upgraded when its tag moves and rolled back by digest with no request.

#[path = "support/registry.rs"]
mod registry;
mod support;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kwh_oci::{BlobStore, Credentials, OciError, Reference, Registry};
use registry::{RegistryProcess, TokenGate};
use support::guests::{guest, rebuilt};
use support::kubectl::{apply_yaml, kubectl, kubectl_until, status_of};
use support::process::{HostProcess, WAIT};

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// `host push FILE REF [extra…]`: its stdout, or a panic with its stderr.
async fn push(file: &Path, reference: &str, extra: &[&str]) -> String {
    let out = tokio::process::Command::new(support::host_bin())
        .arg("push")
        .arg(file)
        .arg(reference)
        .args(extra)
        .output()
        .await
        .expect("host push runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "host push {reference}: {stderr}");
    stdout
}

/// The manifest digest `host push` printed.
fn pushed_digest(stdout: &str) -> String {
    let at = stdout.find("@sha256:").expect("a digest in the output") + 1;
    stdout[at..at + 71].to_owned()
}

#[cfg_attr(
    not(docker_registry),
    ignore = "needs docker-registry (Debian package), not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_pull_through_a_bearer_token_gate_verified_and_cached_by_digest() {
    let dir = support::temp_dir("oci-gate");
    let reg = RegistryProcess::start(&dir.join("registry"), false).await;
    let gate = TokenGate::start(reg.addr()).await;
    let module = guest("reviser");
    let bytes = std::fs::read(&module).expect("guest");

    // `host push` through the gate: it answers the Bearer challenge with an anonymous token.
    let r = format!("oci://{}/team/reviser:v1", gate.host());
    let out = push(
        &module,
        &r,
        &["--cache-dir", &dir.join("push").display().to_string()],
    )
    .await;
    assert!(out.contains("(plugin reviser)"), "{out}");
    let manifest = pushed_digest(&out);
    assert!(gate.counters.tokens.load(Ordering::SeqCst) >= 1);
    assert!(
        gate.counters.refused.load(Ordering::SeqCst) >= 1,
        "challenged first"
    );

    // Pulled: the layer is the module's bytes, cached under its digest, the manifest too.
    let store = BlobStore::new(dir.join("cache"));
    let registry = Registry::new(store.clone(), Credentials::none()).expect("registry");
    let reference = Reference::parse(&r).expect("reference");
    let none = Credentials::none();
    let pulled = registry
        .pull(&reference, &none, Duration::from_secs(60))
        .await
        .expect("pull");
    assert_eq!(pulled.manifest_digest, manifest);
    assert_eq!(pulled.layer_digest, kwh_oci::digest_of(&bytes));
    assert_eq!(pulled.layer_media_type, "application/wasm");
    assert_eq!(std::fs::read(&pulled.path).expect("blob"), bytes);
    assert!(pulled.fetched);
    assert_eq!(
        pulled.pinned.to_string(),
        format!("oci://{}/team/reviser:v1@{manifest}", gate.host())
    );
    // The config is the CNCF layout's, listing the component's imports and exports.
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(store.get(&manifest).expect("manifest")).expect("read"),
    )
    .expect("manifest JSON");
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(m["layers"].as_array().map(Vec::len), Some(1));

    // By digest, from the cache: no request at all.
    let seen = (
        gate.counters.manifests.load(Ordering::SeqCst),
        gate.counters.blobs.load(Ordering::SeqCst),
        gate.counters.refused.load(Ordering::SeqCst),
    );
    let again = registry
        .pull(&reference.at(&manifest), &none, Duration::ZERO)
        .await
        .expect("pull by digest");
    assert!(!again.fetched);
    assert_eq!(again.path, pulled.path);
    assert_eq!(
        seen,
        (
            gate.counters.manifests.load(Ordering::SeqCst),
            gate.counters.blobs.load(Ordering::SeqCst),
            gate.counters.refused.load(Ordering::SeqCst),
        ),
        "nothing asked of the registry"
    );

    // The older wasm-to-oci layout pulls too.
    let legacy = format!("oci://{}/team/legacy:v1", gate.host());
    push(&module, &legacy, &["--layout", "wasm-to-oci"]).await;
    let l = registry
        .pull(
            &Reference::parse(&legacy).expect("ref"),
            &none,
            Duration::ZERO,
        )
        .await
        .expect("legacy pull");
    assert_eq!(
        l.layer_media_type,
        "application/vnd.wasm.content.layer.v1+wasm"
    );
    assert_eq!(l.layer_digest, pulled.layer_digest);

    // A blob altered in flight is refused and not kept.
    let fresh =
        Registry::new(BlobStore::new(dir.join("cache2")), Credentials::none()).expect("registry");
    gate.corrupt_blobs(true);
    let e = fresh
        .pull(&reference, &none, Duration::ZERO)
        .await
        .expect_err("a corrupted layer");
    assert!(matches!(e, OciError::DigestMismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("the module layer has digest sha256:"),
        "{e}"
    );
    assert!(BlobStore::new(dir.join("cache2"))
        .get(&pulled.layer_digest)
        .is_none());
    gate.corrupt_blobs(false);

    // A tag that does not exist: one line naming it.
    let e = fresh
        .pull(
            &Reference::parse(&format!("oci://{}/team/reviser:nope", gate.host())).expect("ref"),
            &none,
            Duration::ZERO,
        )
        .await
        .expect_err("no such tag");
    assert!(
        e.to_string().contains("team/reviser:nope: not found"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg_attr(
    not(docker_registry),
    ignore = "needs docker-registry (Debian package), not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_authentication_takes_credentials_from_a_docker_config_file() {
    let dir = support::temp_dir("oci-basic");
    let reg = RegistryProcess::start(&dir.join("registry"), true).await;
    let r = format!("oci://{}/team/reviser:v1", reg.host());
    let module = guest("reviser");

    // Without credentials: refused, and the reason says what is missing.
    let out = tokio::process::Command::new(support::host_bin())
        .args([os("push"), module.as_os_str(), os(&r)])
        .env("DOCKER_CONFIG", dir.join("none"))
        .output()
        .await
        .expect("host push runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("unauthorized (the registry asks for a username and password, and none is configured for it)"),
        "{stderr}"
    );

    // With a Docker config file (`auth` is base64 of user:password, as `docker login` writes).
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        registry::USER,
        registry::PASSWORD
    ));
    let config = dir.join("docker.json");
    std::fs::write(
        &config,
        format!(
            "{{\"auths\": {{\"{}\": {{\"auth\": \"{auth}\"}}}}}}",
            reg.host()
        ),
    )
    .expect("docker config");
    push(
        &module,
        &r,
        &["--registry-config", &config.display().to_string()],
    )
    .await;
    let creds = Credentials::from_file(&config).expect("credentials");
    let registry = Registry::new(BlobStore::new(dir.join("cache")), creds).expect("registry");
    let pulled = registry
        .pull(
            &Reference::parse(&r).expect("ref"),
            &Credentials::none(),
            Duration::ZERO,
        )
        .await
        .expect("pull with the file's credentials");
    assert_eq!(
        std::fs::read(pulled.path).expect("blob"),
        std::fs::read(&module).expect("guest")
    );

    // `host inspect` takes the reference.
    let out = tokio::process::Command::new(support::host_bin())
        .args([
            os("inspect"),
            os(&r),
            os("--registry-config"),
            config.as_os_str(),
        ])
        .args([os("--cache-dir"), dir.join("inspect").as_os_str()])
        .output()
        .await
        .expect("host inspect runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("name: reviser"), "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A plugins file naming `oci://…:stable`: the host pulls and runs it; pushing another module
/// to the same tag upgrades it at the next pull interval; naming the first manifest by digest
/// rolls back with no request to the registry (both revisions are cached); a reference that
/// cannot be pulled leaves the running revision running.
#[cfg_attr(
    not(docker_registry),
    ignore = "needs docker-registry (Debian package), not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_file_module_from_a_registry_upgrades_when_its_tag_moves_and_rolls_back_by_digest(
) {
    let dir = support::temp_dir("oci-live");
    let reg = RegistryProcess::start(&dir.join("registry"), false).await;
    let gate = TokenGate::start(reg.addr()).await;
    let v1 = guest("reviser");
    let v2 = dir.join("reviser2.wasm");
    rebuilt(&v1, &v2);
    let tag = format!("oci://{}/team/reviser:stable", gate.host());
    let first = pushed_digest(&push(&v1, &tag, &[]).await);

    let plugins = dir.join("plugins.yaml");
    let entry = |module: &str| {
        format!("- module: {module}\n  logLinesPerSecond: 0\n  config: {{revision: a}}\n")
    };
    std::fs::write(&plugins, entry(&tag)).expect("plugins file");
    let cache = dir.join("cache");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            os("--pull-interval"),
            os("1s"),
            os("--cache-dir"),
            cache.as_os_str(),
            os("--emulator"),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    );
    host.emulator().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    let blobs = BlobStore::new(cache.join("oci"));
    let v1_layer = kwh_oci::digest_of(&std::fs::read(&v1).expect("v1"));
    assert!(blobs.get(&v1_layer).is_some(), "pulled into the cache");

    // The tag moves: the next pull interval finds the new digest and upgrades.
    let second = pushed_digest(&push(&v2, &tag, &[]).await);
    assert_ne!(first, second);
    host.line(") upgraded").await;
    let v2_layer = kwh_oci::digest_of(&std::fs::read(&v2).expect("v2"));
    assert!(blobs.get(&v2_layer).is_some());

    // Rollback by digest: both manifests and layers are cached, so nothing is asked.
    let seen = (
        gate.counters.manifests.load(Ordering::SeqCst),
        gate.counters.blobs.load(Ordering::SeqCst),
        gate.counters.refused.load(Ordering::SeqCst),
    );
    let pinned = format!("oci://{}/team/reviser@{first}", gate.host());
    std::fs::write(&plugins, entry(&pinned)).expect("edit");
    host.line(&format!("({pinned}) upgraded")).await;
    assert_eq!(
        seen,
        (
            gate.counters.manifests.load(Ordering::SeqCst),
            gate.counters.blobs.load(Ordering::SeqCst),
            gate.counters.refused.load(Ordering::SeqCst),
        ),
        "the rollback asked nothing of the registry"
    );

    // A reference that cannot be pulled: one line, the running revision carries on.
    std::fs::write(
        &plugins,
        entry(&format!("oci://{}/team/reviser:missing", gate.host())),
    )
    .expect("edit");
    // (Its name is unknown until a module loads, so the plugin running is kept, and said so.)
    host.line("reviser:missing: not found in the registry")
        .await;
    let kept = host.line("not removed: entries [0] failed to load").await;
    assert!(kept.contains("reviser"), "{kept}");
    assert!(!host.has_exited());
    host.sigterm();
    host.exit(Duration::from_secs(30)).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A `WasmController` whose module is in a registry behind Basic authentication, with its
/// credentials in a pull secret: Fetched, Compiled and Ready, the running digest the layer's;
/// its tag moved is an upgrade within its `pullInterval`; a digest that does not exist, and a
/// `publicKey` the module is not signed by, leave it running, `Fetched` False with the reason,
/// which `kubectl describe` shows.
#[cfg_attr(
    any(not(docker_registry), not(kubectl)),
    ignore = "needs docker-registry (Debian package) and kubectl, not both installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasmcontroller_pulls_its_module_with_a_pull_secret_and_keeps_running_on_a_bad_digest() {
    use base64::Engine as _;
    let dir = support::temp_dir("oci-wasmcontroller");
    let reg = RegistryProcess::start(&dir.join("registry"), true).await;
    let module = guest("reviser");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let docker_config = format!(
        "{{\"auths\": {{\"{}\": {{\"auth\": \"{}\"}}}}}}",
        reg.host(),
        b64(&format!("{}:{}", registry::USER, registry::PASSWORD))
    );
    let config = dir.join("docker.json");
    std::fs::write(&config, &docker_config).expect("docker config");
    let r = format!("oci://{}/team/reviser:v1", reg.host());
    push(
        &module,
        &r,
        &["--registry-config", &config.display().to_string()],
    )
    .await;

    let crd = support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml");
    let mut host = HostProcess::spawn(
        [
            os("--plugins-from-cluster"),
            os("--emulator"),
            crd.as_os_str(),
            os("--cache-dir"),
            dir.join("cache").as_os_str(),
            // The host's own file has no credentials: they come from the pull secret.
            os("--registry-config"),
            dir.join("none.json").as_os_str(),
        ],
        "info",
    );
    let (_, kubeconfig) = host.emulator().await;
    std::fs::copy(&kubeconfig, dir.join("kubeconfig")).expect("kubeconfig");
    host.line("running; SIGINT or SIGTERM stops").await;
    let apply = |name: &'static str, yaml: String| {
        let dir = dir.clone();
        async move { apply_yaml(&dir, name, &yaml).await }
    };
    apply(
        "secret",
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\n  namespace: default\n\
             type: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
            b64(&docker_config)
        ),
    )
    .await;
    let wc = |module: &str| {
        format!(
            "apiVersion: kube-wasm.dev/v1alpha1\nkind: WasmController\nmetadata:\n  name: reviser\n\
             spec:\n  module: {module}\n  pullSecret: {{namespace: default, name: regcred}}\n  \
             pullInterval: 1s\n  logLinesPerSecond: 0\n  config:\n    revision: a\n"
        )
    };
    apply("wc", wc(&r)).await;
    let layer = kwh_oci::digest_of(&std::fs::read(&module).expect("guest"));
    let status = || {
        let dir = dir.clone();
        async move { status_of(&dir, "wasmcontroller", "reviser").await }
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    let ready = loop {
        let s = status().await;
        let ready = s["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never Ready: {s}\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(ready["digest"], layer.as_str(), "{ready}");
    let pulled = ready["pulled"].as_str().unwrap_or_default();
    assert!(
        pulled.starts_with(&format!("{r}@sha256:")),
        "the tag resolved: {ready}"
    );
    let (ok, out, err) = kubectl(&dir, &["create", "configmap", "one"]).await;
    assert!(ok, "{out}{err}");
    host.line("REV a reconcile default/one").await;

    // The tag moves: within its pullInterval (1s) the host finds the new digest and upgrades,
    // with no new generation of the resource.
    let v2 = dir.join("reviser2.wasm");
    rebuilt(&module, &v2);
    push(
        &v2,
        &r,
        &["--registry-config", &config.display().to_string()],
    )
    .await;
    let v2_layer = kwh_oci::digest_of(&std::fs::read(&v2).expect("v2"));
    let deadline = tokio::time::Instant::now() + WAIT;
    let moved = loop {
        let s = status().await;
        if s["digest"] == v2_layer.as_str() && s["revision"] == 2 {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never upgraded: {s}\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(moved["observedGeneration"], 1, "{moved}");

    // A digest the registry does not have: Fetched False with the reason; revision 1 runs on.
    let missing = format!(
        "oci://{}/team/reviser@sha256:{}",
        reg.host(),
        "0".repeat(64)
    );
    apply("wc", wc(&missing)).await;
    let (line, out) = kubectl_until(
        &dir,
        &["describe", "wasmcontroller", "reviser"],
        WAIT,
        |l| l.contains("not found in the registry"),
    )
    .await
    .unwrap_or_else(|out| panic!("no failure in describe:\n{out}"));
    assert!(out.contains("FetchFailed"), "{line}\n{out}");
    assert!(out.contains("PreviousRevisionRunning"), "{out}");
    let s = status().await;
    assert_eq!(s["digest"], v2_layer.as_str(), "{s}");

    // A `publicKey` the module is not signed by: Fetched False, the reason in describe.
    let key = rcgen::KeyPair::generate().expect("key pair");
    let pem = key.public_key_pem();
    let indented: String = pem.lines().map(|l| format!("    {l}\n")).collect();
    apply("wc", wc(&r) + &format!("  publicKey: |\n{indented}")).await;
    let (line, out) = kubectl_until(
        &dir,
        &["describe", "wasmcontroller", "reviser"],
        WAIT,
        |l| l.contains("not signed by the required key: no signature"),
    )
    .await
    .unwrap_or_else(|out| panic!("no signature failure in describe:\n{out}"));
    assert!(out.contains("PreviousRevisionRunning"), "{line}\n{out}");
    assert_eq!(status().await["digest"], v2_layer.as_str());
    assert!(!host.has_exited());
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// Signatures: a host given `--verify-key` runs a module `host push --sign-key` signed with the
/// matching key, and refuses one without a signature or signed by another key, with the reason
/// in one line; the running revision carries on.
#[cfg_attr(
    not(docker_registry),
    ignore = "needs docker-registry (Debian package), not installed when this was built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_modules_signed_by_the_required_key_run() {
    let dir = support::temp_dir("oci-signed");
    let reg = RegistryProcess::start(&dir.join("registry"), false).await;
    let keys: Vec<(std::path::PathBuf, std::path::PathBuf)> = ["a", "b"]
        .iter()
        .map(|k| {
            let pair = rcgen::KeyPair::generate().expect("key pair");
            let (private, public) = (dir.join(format!("{k}.pem")), dir.join(format!("{k}.pub")));
            std::fs::write(&private, pair.serialize_pem()).expect("private key");
            std::fs::write(&public, pair.public_key_pem()).expect("public key");
            (private, public)
        })
        .collect();
    let v1 = guest("reviser");
    let v2 = dir.join("reviser2.wasm");
    rebuilt(&v1, &v2);
    let at = |tag: &str| format!("oci://{}/team/reviser:{tag}", reg.host());
    let signed = push(
        &v1,
        &at("signed"),
        &["--sign-key", &keys[0].0.display().to_string()],
    )
    .await;
    assert!(signed.contains("signed by key "), "{signed}");
    push(&v2, &at("unsigned"), &[]).await;
    push(
        &v2,
        &at("other"),
        &["--sign-key", &keys[1].0.display().to_string()],
    )
    .await;

    let plugins = dir.join("plugins.yaml");
    let entry = |module: &str| {
        format!("- module: {module}\n  logLinesPerSecond: 0\n  config: {{revision: a}}\n")
    };
    std::fs::write(&plugins, entry(&at("signed"))).expect("plugins file");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--plugins-poll-interval"),
            os("200ms"),
            os("--verify-key"),
            keys[0].1.as_os_str(),
            os("--cache-dir"),
            dir.join("cache").as_os_str(),
            os("--emulator"),
        ],
        "info",
    );
    host.emulator().await;
    host.line("running; SIGINT or SIGTERM stops").await;

    std::fs::write(&plugins, entry(&at("unsigned"))).expect("edit");
    let line = host.line("reviser:unsigned@sha256:").await;
    assert!(
        line.contains("not signed by the required key: no signature (no tag sha256-"),
        "{line}"
    );
    std::fs::write(&plugins, entry(&at("other"))).expect("edit");
    let line = host.line("reviser:other@sha256:").await;
    assert!(line.contains("a signature by none of the keys"), "{line}");
    assert!(!host.saw(") upgraded"), "{}", host.log());
    assert!(!host.has_exited());
    host.sigterm();
    assert!(host.exit(WAIT).await.success(), "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

/// The registry tests must run on CI: a run with `CI` set that was built without
/// `docker-registry` fails here rather than passing with them ignored.
#[test]
fn docker_registry_is_present_where_ci_is_set() {
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
    assert!(
        cfg!(docker_registry) || !ci,
        "CI is set but docker-registry was not found when the tests were built: install it"
    );
}
