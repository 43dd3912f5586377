//! Plugins as managed workloads (issue "Plugins as managed workloads"): the floors of modules
//! from OCI registries and of `WasmController` resources.
//!
//! Sections (`BENCH_ONLY=start,controllers`; both by default):
//! - `start`: a plugin started from a module already pulled and compiled, named by digest
//!   (`oci://…@sha256:…`: the manifest and layer read from the blob cache, nothing asked of a
//!   registry), against the same plugin started from a local file; `BENCH_RUNS` (default 30)
//!   rounds, alternating. Floor: the median start by reference within 1 ms of the file's.
//! - `controllers`: `BENCH_CONTROLLERS` (default 100, at most 100) `WasmController` resources,
//!   each a distinct SDK plugin (the `bench-sdk` guest renamed in its bytes, compiled into the
//!   cache first with `host compile`), created at once against a `host --emulator
//!   --plugins-from-cluster` process. Floors: all `Ready` within 10 s of the last create; the
//!   host's resident memory then within the many-plugins figure of 100 plugins (under 100 MiB,
//!   docs/benchmarks-history.md, "Many plugins in one process").
//!
//! `cargo bench -p host --bench managed` prints Markdown tables; a missed floor fails the run.

#[path = "../../tests/bench_common/mod.rs"]
mod bench_common;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use kwh_client::{ApiResource, Client, Config};
use kwh_emulator::Emulator;
use kwh_oci::{digest_of, BlobStore, Credentials, Reference, Registry};
use kwh_plugin::{EngineConfig, Limits, PluginEngine, PluginRuntime, PluginSpec, RuntimeOptions};
use serde_json::json;

use bench_common::{env_or, floor_row, median};
use support::guests::{guest, variants};
use support::process::HostProcess;

fn wanted(section: &str) -> bool {
    match std::env::var("BENCH_ONLY") {
        Ok(v) => v.split(',').any(|s| s.trim() == section),
        Err(_) => true,
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let ok = rt.block_on(async {
        println!("# Plugins as managed workloads\n");
        println!("load average at start: {}\n", bench_common::load());
        let mut ok = true;
        if wanted("start") {
            ok &= start_section(env_or("BENCH_RUNS", 30)).await;
        }
        if wanted("controllers") {
            ok &= controllers_section(env_or("BENCH_CONTROLLERS", 100).min(100)).await;
        }
        ok
    });
    println!("\nmet: {ok}");
    assert!(ok, "a floor was missed");
}

/// A manifest of the CNCF layout for `layer` (its config is not read by a pull).
fn manifest_for(layer: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                   "digest": digest_of(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": digest_of(layer),
                    "size": layer.len()}],
    }))
    .expect("manifest")
}

async fn start_section(runs: usize) -> bool {
    eprintln!("start …");
    let dir = support::temp_dir("bench-managed-start");
    let module = guest("bench-sdk");
    let bytes = std::fs::read(&module).expect("guest");
    // Pulled before: the manifest and the layer in the blob cache, as a pull leaves them.
    let store = BlobStore::new(dir.join("cache").join("oci"));
    let manifest = manifest_for(&bytes);
    let manifest_digest = digest_of(&manifest);
    store
        .put("bench", "manifest", &manifest_digest, &manifest)
        .expect("manifest cached");
    store
        .put("bench", "layer", &digest_of(&bytes), &bytes)
        .expect("layer cached");
    // Nothing listens there: a request would fail the run.
    let reference = Reference::parse(&format!("oci://127.0.0.1:9/bench/sdk@{manifest_digest}"))
        .expect("reference");
    let registry = Registry::new(store, Credentials::none()).expect("registry");

    let h = Emulator::builder().start().await.expect("emulator");
    let client = Client::new(Config::new(h.base_url().parse().expect("url"))).expect("client");
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: Some(dir.join("cache")),
        max_instances: 16,
        ..EngineConfig::default()
    })
    .expect("engine");
    // Compiled once, before any timed start.
    engine
        .load(&module, Limits::default())
        .await
        .expect("precompile");
    let opts = RuntimeOptions {
        namespace: Some("bench".into()),
        ..RuntimeOptions::default()
    };
    let mut rt = PluginRuntime::new(engine, client, opts.clone());
    let none = Credentials::none();
    let (mut file, mut oci, mut pull) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs * 2 {
        let by_reference = i % 2 == 1;
        let t = Instant::now();
        let path = if by_reference {
            let p = registry
                .pull(&reference, &none, Duration::ZERO)
                .await
                .expect("pulled from the cache");
            assert!(!p.fetched, "nothing fetched");
            pull.push(t.elapsed().as_secs_f64() * 1e3);
            p.path
        } else {
            module.clone()
        };
        let started = rt
            .start_spec(PluginSpec::with_defaults(path, &opts))
            .await
            .expect("starts");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(matches!(started, kwh_plugin::Started::Running), "runs");
        if by_reference { &mut oci } else { &mut file }.push(ms);
        let name = rt.plugins().last().expect("started").name().to_owned();
        assert!(rt.remove(&name, Duration::from_secs(5)).await, "removed");
    }
    assert!(rt.shutdown(Duration::from_secs(5)).await, "clean stop");
    h.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    let (f, o, p) = (median(file), median(oci), median(pull));
    println!("## A plugin started from a module already pulled and compiled\n");
    println!("The `bench-sdk` guest, compiled into the cache first; `PluginRuntime::start_spec` (load from the compile cache, validate, instantiate, register its watch), then removed; {runs} rounds of each, alternating, medians.\n");
    println!("| measure | value | floor | met |\n|---|---|---|---|");
    println!("| start from a local file | {f:.2} ms | - | - |");
    println!("| of the start by reference, the pull (manifest and layer from the blob cache) | {p:.3} ms | - | - |");
    floor_row(
        "start by `oci://…@sha256:…`, pull included / its difference to the file's",
        format!("{o:.2} ms / {:+.2} ms", o - f),
        "≤ 1 ms more",
        o - f <= 1.0,
    )
}

/// The `WasmController` of plugin `module`.
fn controller(i: usize, module: &std::path::Path) -> serde_json::Value {
    json!({
        "apiVersion": "kube-wasm.dev/v1alpha1",
        "kind": "WasmController",
        "metadata": {"name": format!("sdk-{i:02}")},
        "spec": {"module": module.display().to_string(), "namespace": "bench"},
    })
}

fn ready(v: &serde_json::Value) -> bool {
    v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

async fn controllers_section(n: usize) -> bool {
    eprintln!("controllers …");
    let dir = support::temp_dir("bench-managed-controllers");
    let modules = variants("bench-sdk", &dir.join("modules"), n);
    let cache = dir.join("cache");
    // Modules cached: compiled ahead of time, as `host compile` does in the deploy's init step.
    let compiled = std::process::Command::new(support::host_bin())
        .arg("compile")
        .arg("--cache-dir")
        .arg(&cache)
        .args(&modules)
        .output()
        .expect("host compile runs");
    assert!(
        compiled.status.success(),
        "{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let crd = support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml");
    let mut host = HostProcess::spawn(
        [
            std::ffi::OsStr::new("--plugins-from-cluster"),
            "--emulator".as_ref(),
            crd.as_os_str(),
            "--cache-dir".as_ref(),
            cache.as_os_str(),
        ],
        "warn",
    );
    let (_, kubeconfig) = host.emulator().await;
    let client = support::process::client(&kubeconfig);
    let wc = ApiResource::new(
        "kube-wasm.dev/v1alpha1",
        "WasmController",
        "wasmcontrollers",
        false,
    );
    // The CRD is served once the host's emulator runs; wait until it answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.list(&wc, None, &Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the CRD is never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (rss_before, _) = host.memory_kib().expect("memory");
    let started = Instant::now();
    for (i, m) in modules.iter().enumerate() {
        client
            .create(
                &wc,
                None,
                controller(i, m).to_string().into(),
                &Default::default(),
            )
            .await
            .expect("create");
    }
    let last_create = Instant::now();
    let deadline = last_create + Duration::from_secs(120);
    let all_ready = loop {
        let list = client
            .list(&wc, None, &Default::default())
            .await
            .expect("list");
        let n_ready = list
            .items
            .iter()
            .filter(|o| {
                serde_json::from_slice::<serde_json::Value>(o.raw()).is_ok_and(|v| ready(&v))
            })
            .count();
        if n_ready == n {
            break last_create.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{n_ready} of {n} Ready after 120 s:\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (rss, hwm) = host.memory_kib().expect("memory");
    host.sigterm();
    let _ = host.exit(Duration::from_secs(60)).await;
    let _ = std::fs::remove_dir_all(dir);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("\n## {n} WasmController resources created at once\n");
    println!("Each a distinct `bench-sdk` plugin (renamed in its bytes) watching ConfigMaps of namespace `bench`, compiled into the cache first (`host compile`); created one after another over the API ({:.0} ms for all); `Ready` read back from each resource's status, polled every 50 ms.\n", (last_create - started).as_secs_f64() * 1e3);
    println!("| measure | value | floor | met |\n|---|---|---|---|");
    let mut ok = floor_row(
        "all Ready, from the last create",
        format!("{:.2} s", all_ready.as_secs_f64()),
        "≤ 10 s",
        all_ready <= Duration::from_secs(10),
    );
    ok &= floor_row(
        "host VmRSS with them running (before the creates / peak)",
        format!(
            "{:.1} MiB ({:.1} MiB / {:.1} MiB)",
            mib(rss),
            mib(rss_before),
            mib(hwm)
        ),
        "< 100 MiB (100 plugins: 90.4 MiB summed RSS)",
        mib(rss) < 100.0,
    );
    ok
}
