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

use kwh_oci::{BlobStore, Credentials, OciError, Pulled, Reference, Registry};
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

/// The requests the gate forwarded or refused so far (manifests, blobs, refusals): unchanged
/// across a step means the step asked nothing of the registry.
fn gate_requests(gate: &TokenGate) -> (u64, u64, u64) {
    (
        gate.counters.manifests.load(Ordering::SeqCst),
        gate.counters.blobs.load(Ordering::SeqCst),
        gate.counters.refused.load(Ordering::SeqCst),
    )
}

/// The cached manifest's config is the CNCF layout's, listing the component's imports and
/// exports, with the module as its one layer.
fn assert_cncf_layout(store: &BlobStore, manifest: &str) {
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(store.get(manifest).expect("manifest")).expect("read"),
    )
    .expect("manifest JSON");
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(m["layers"].as_array().map(Vec::len), Some(1));
}

/// A pull by digest of what is cached comes from the cache: no request at all.
async fn a_pull_by_digest_asks_nothing(
    gate: &TokenGate,
    registry: &Registry,
    reference: &Reference,
    pulled: &Pulled,
) {
    let seen = gate_requests(gate);
    let again = registry
        .pull(
            &reference.at(&pulled.manifest_digest),
            &Credentials::none(),
            Duration::ZERO,
        )
        .await
        .expect("pull by digest");
    assert!(!again.fetched);
    assert_eq!(again.path, pulled.path);
    assert_eq!(seen, gate_requests(gate), "nothing asked of the registry");
}

/// The older wasm-to-oci layout pushed through the gate pulls too, to the same layer.
async fn the_legacy_layout_pulls_too(
    gate: &TokenGate,
    module: &Path,
    registry: &Registry,
    layer_digest: &str,
) {
    let legacy = format!("oci://{}/team/legacy:v1", gate.host());
    push(module, &legacy, &["--layout", "wasm-to-oci"]).await;
    let l = registry
        .pull(
            &Reference::parse(&legacy).expect("ref"),
            &Credentials::none(),
            Duration::ZERO,
        )
        .await
        .expect("legacy pull");
    assert_eq!(
        l.layer_media_type,
        "application/vnd.wasm.content.layer.v1+wasm"
    );
    assert_eq!(l.layer_digest, layer_digest);
}

/// Into an empty cache: a blob altered in flight is refused and not kept, and a tag that does
/// not exist is one line naming it.
async fn a_corrupted_blob_and_a_missing_tag_are_refused(
    gate: &TokenGate,
    dir: &Path,
    reference: &Reference,
    layer_digest: &str,
) {
    let none = Credentials::none();
    let fresh =
        Registry::new(BlobStore::new(dir.join("cache2")), Credentials::none()).expect("registry");
    gate.corrupt_blobs(true);
    let e = fresh
        .pull(reference, &none, Duration::ZERO)
        .await
        .expect_err("a corrupted layer");
    assert!(matches!(e, OciError::DigestMismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("the module layer has digest sha256:"),
        "{e}"
    );
    assert!(BlobStore::new(dir.join("cache2"))
        .get(layer_digest)
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
    assert_cncf_layout(&store, &manifest);

    // By digest, from the cache: no request at all.
    a_pull_by_digest_asks_nothing(&gate, &registry, &reference, &pulled).await;

    // The older wasm-to-oci layout pulls too.
    the_legacy_layout_pulls_too(&gate, &module, &registry, &pulled.layer_digest).await;

    // A blob altered in flight is refused and not kept; a tag that does not exist is one line.
    a_corrupted_blob_and_a_missing_tag_are_refused(&gate, &dir, &reference, &pulled.layer_digest)
        .await;
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
    let seen = gate_requests(&gate);
    let pinned = format!("oci://{}/team/reviser@{first}", gate.host());
    std::fs::write(&plugins, entry(&pinned)).expect("edit");
    host.line(&format!("({pinned}) upgraded")).await;
    assert_eq!(
        seen,
        gate_requests(&gate),
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

/// The `WasmController` `reviser` running `module` with the pull secret `default/regcred`,
/// pulled every second.
fn reviser_wasmcontroller(module: &str) -> String {
    format!(
        "apiVersion: kube-wasm.dev/v1alpha1\nkind: WasmController\nmetadata:\n  name: reviser\n\
         spec:\n  module: {module}\n  pullSecret: {{namespace: default, name: regcred}}\n  \
         pullInterval: 1s\n  logLinesPerSecond: 0\n  config:\n    revision: a\n"
    )
}

/// A host taking its plugins from `WasmController`s on an emulator with the CRD, whose own
/// registry file has no credentials: they must come from the pull secret.
fn spawn_host_with_plugins_from_cluster(dir: &Path) -> HostProcess {
    let crd = support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml");
    HostProcess::spawn(
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
    )
}

/// Polls the status of `WasmController` `reviser` until `done` holds of it, or fails with
/// `what` and the host's log at the deadline.
async fn wait_for_reviser_status(
    dir: &Path,
    host: &HostProcess,
    what: &str,
    mut done: impl FnMut(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = status_of(dir, "wasmcontroller", "reviser").await;
        if done(&s) {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {s}\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A digest the registry does not have: Fetched False with the reason in `kubectl describe`,
/// and the revision with `running` digest runs on.
async fn a_missing_digest_fails_to_fetch_and_the_running_revision_stays(
    dir: &Path,
    reg: &RegistryProcess,
    running: &str,
) {
    let missing = format!(
        "oci://{}/team/reviser@sha256:{}",
        reg.host(),
        "0".repeat(64)
    );
    apply_yaml(dir, "wc", &reviser_wasmcontroller(&missing)).await;
    let (line, out) = kubectl_until(dir, &["describe", "wasmcontroller", "reviser"], WAIT, |l| {
        l.contains("not found in the registry")
    })
    .await
    .unwrap_or_else(|out| panic!("no failure in describe:\n{out}"));
    assert!(out.contains("FetchFailed"), "{line}\n{out}");
    assert!(out.contains("PreviousRevisionRunning"), "{out}");
    let s = status_of(dir, "wasmcontroller", "reviser").await;
    assert_eq!(s["digest"], running, "{s}");
}

/// A `publicKey` the module `r` is not signed by: Fetched False, the reason in describe, and
/// the revision with `running` digest runs on.
async fn an_unsigned_module_fails_to_fetch_and_the_running_revision_stays(
    dir: &Path,
    r: &str,
    running: &str,
) {
    let key = rcgen::KeyPair::generate().expect("key pair");
    let pem = key.public_key_pem();
    let indented: String = pem.lines().map(|l| format!("    {l}\n")).collect();
    let yaml = reviser_wasmcontroller(r) + &format!("  publicKey: |\n{indented}");
    apply_yaml(dir, "wc", &yaml).await;
    let (line, out) = kubectl_until(dir, &["describe", "wasmcontroller", "reviser"], WAIT, |l| {
        l.contains("not signed by the required key: no signature")
    })
    .await
    .unwrap_or_else(|out| panic!("no signature failure in describe:\n{out}"));
    assert!(out.contains("PreviousRevisionRunning"), "{line}\n{out}");
    assert_eq!(
        status_of(dir, "wasmcontroller", "reviser").await["digest"],
        running
    );
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

    let mut host = spawn_host_with_plugins_from_cluster(&dir);
    let (_, kubeconfig) = host.emulator().await;
    std::fs::copy(&kubeconfig, dir.join("kubeconfig")).expect("kubeconfig");
    host.line("running; SIGINT or SIGTERM stops").await;
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\n  namespace: default\n\
         type: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
        b64(&docker_config)
    );
    apply_yaml(&dir, "secret", &secret).await;
    apply_yaml(&dir, "wc", &reviser_wasmcontroller(&r)).await;
    let layer = kwh_oci::digest_of(&std::fs::read(&module).expect("guest"));
    let ready = wait_for_reviser_status(&dir, &host, "never Ready", |s| {
        s["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
    .await;
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
    let moved = wait_for_reviser_status(&dir, &host, "never upgraded", |s| {
        s["digest"] == v2_layer.as_str() && s["revision"] == 2
    })
    .await;
    assert_eq!(moved["observedGeneration"], 1, "{moved}");

    // A digest the registry does not have: Fetched False with the reason; revision 1 runs on.
    a_missing_digest_fails_to_fetch_and_the_running_revision_stays(&dir, &reg, &v2_layer).await;

    // A `publicKey` the module is not signed by: Fetched False, the reason in describe.
    an_unsigned_module_fails_to_fetch_and_the_running_revision_stays(&dir, &r, &v2_layer).await;
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
