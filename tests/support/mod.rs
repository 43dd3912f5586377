//! Shared helpers of the plugin tests: building the test guests, engines, fakes, log capture,
//! `host` processes (one, or replicas behind freezable proxies).
#![allow(dead_code)]

pub mod cluster;
pub mod fakes;
pub mod freeze_proxy;
pub mod guests;
pub mod kubectl;
pub mod logs;
pub mod process;
pub mod rbac;
pub mod replicas;
pub mod scenarios;
pub mod stalled_registry;
pub mod user_crate;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use kwh_plugin::{EngineConfig, PluginEngine};

/// The `host` binary. Only the `host` package's tests (the top-level `tests/`) have it: the
/// crates' own tests, which include these helpers too, never start the binary.
pub fn host_bin() -> &'static str {
    match option_env!("CARGO_BIN_EXE_host") {
        Some(path) => path,
        None => panic!("only the host package's tests run the host binary"),
    }
}

/// A fresh, empty directory under the system temp dir (removed by the caller if it cares).
pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "plugin-test-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    d
}

/// An engine with a small instance pool and a compile cache shared by the tests that do not
/// examine the cache itself (entries are keyed by content and engine, so sharing is safe and
/// spares each test a Cranelift compile).
pub fn engine() -> PluginEngine {
    PluginEngine::new(EngineConfig {
        cache_dir: Some(std::env::temp_dir().join("kube-wasm-host-test-cache")),
        max_instances: 16,
        ..EngineConfig::default()
    })
    .expect("engine")
}
