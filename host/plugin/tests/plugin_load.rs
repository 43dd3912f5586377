//! Loading plugins: manifests, refusal of non-components and foreign worlds, the compile cache.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use kwh_plugin::manifest::Verb;
use kwh_plugin::{Limits, LoadCause};
use support::guests::guest;

const T: Duration = Duration::from_secs(120);

#[tokio::test]
async fn noop_loads_and_its_manifest_is_validated() {
    let engine = support::engine();
    let path = guest("noop");
    let loaded = tokio::time::timeout(T, engine.load(&path, Limits::default()))
        .await
        .expect("in time")
        .expect("loads");
    let m = loaded.manifest();
    assert_eq!(loaded.name(), "noop");
    assert_eq!(m.name, "noop");
    assert_eq!(m.workers, 2);
    assert_eq!(m.watches.len(), 1);
    assert_eq!(
        (
            m.watches[0].api_version.as_str(),
            m.watches[0].kind.as_str()
        ),
        ("v1", "ConfigMap")
    );
    assert!(m.writes.is_empty());
    assert_eq!(m.resync_period, None);
    assert_eq!(loaded.path(), path.as_path());
}

#[tokio::test]
async fn manifest_declared_writes_become_permissions() {
    let engine = support::engine();
    let loaded = tokio::time::timeout(T, engine.load(&guest("rogue"), Limits::default()))
        .await
        .expect("in time")
        .expect("loads");
    let m = loaded.manifest();
    assert!(m.may_write("v1", "ConfigMap", Verb::Create));
    assert!(!m.may_write("v1", "ConfigMap", Verb::Delete));
    assert!(!m.may_write("v1", "Secret", Verb::Create));
    assert!(m.may_read("v1", "ConfigMap"));
    assert!(!m.may_read("v1", "Secret"));
}

async fn load_err(bytes: &[u8], name: &str) -> (String, LoadCause) {
    let engine = support::engine();
    let path = Path::new("/plugins").join(name);
    let err = tokio::time::timeout(
        T,
        engine.load_bytes(&path, bytes, Limits::default(), Default::default()),
    )
    .await
    .expect("in time")
    .err()
    .expect("must fail");
    (err.to_string(), err.cause)
}

#[tokio::test]
async fn garbage_is_not_webassembly() {
    let (msg, cause) = load_err(b"#!/bin/sh\necho hi\n", "script.wasm").await;
    assert!(
        matches!(
            cause,
            LoadCause::NotComponent(kwh_sandbox::NotComponent::NotWasm)
        ),
        "{msg}"
    );
    assert!(
        msg.starts_with("plugin /plugins/script.wasm: not a WebAssembly file"),
        "{msg}"
    );
}

#[tokio::test]
async fn core_module_is_refused_with_a_hint() {
    // The smallest valid core module: magic and version 1, no sections.
    let (msg, cause) = load_err(b"\0asm\x01\0\0\0", "core.wasm").await;
    assert!(
        matches!(
            cause,
            LoadCause::NotComponent(kwh_sandbox::NotComponent::CoreModule)
        ),
        "{msg}"
    );
    assert!(msg.contains("/plugins/core.wasm"), "{msg}");
    assert!(msg.contains("not a component"), "{msg}");
    assert!(msg.contains("wasm32-wasip2"), "{msg}");
}

#[tokio::test]
async fn truncated_component_is_an_invalid_component() {
    let bytes = std::fs::read(guest("noop")).expect("read");
    let (msg, cause) = load_err(&bytes[..bytes.len() / 2], "cut.wasm").await;
    assert!(matches!(cause, LoadCause::Compile(_)), "{msg}");
    assert!(
        msg.contains("/plugins/cut.wasm: invalid component"),
        "{msg}"
    );
}

#[tokio::test]
async fn component_of_another_world_is_refused() {
    let bytes = std::fs::read(guest("other-world")).expect("read");
    let (msg, cause) = load_err(&bytes, "other.wasm").await;
    assert!(matches!(cause, LoadCause::World(_)), "{msg}");
    assert!(
        msg.contains("/plugins/other.wasm: not a kube:controller controller component (this host serves 0.1.0 and 0.2.0)"),
        "{msg}"
    );
    assert!(msg.contains("on-add"), "names the missing export: {msg}");
}

/// A controller that also imports an interface no host of controllers provides is refused at
/// load, the import named in plain words (wasmtime's own wording reads as a type mismatch).
#[tokio::test]
async fn a_controller_importing_an_ungranted_interface_is_refused_naming_it() {
    let bytes = std::fs::read(guest("stranger")).expect("read");
    let (msg, cause) = load_err(&bytes, "stranger.wasm").await;
    assert!(matches!(cause, LoadCause::UngrantedImport(_)), "{msg}");
    assert!(
        msg.ends_with("/plugins/stranger.wasm: imports `test:stranger/steal@0.1.0`, which this host does not provide (a controller may import kube:controller's interfaces and WASI's only)"),
        "{msg}"
    );
}

#[tokio::test]
async fn missing_file_names_the_file() {
    let engine = support::engine();
    let err = engine
        .load(Path::new("/nonexistent/x.wasm"), Limits::default())
        .await
        .err()
        .expect("must fail");
    assert!(matches!(err.cause, LoadCause::Read(_)));
    assert!(err
        .to_string()
        .starts_with("plugin /nonexistent/x.wasm: cannot read the file"));
}

#[tokio::test]
async fn second_load_comes_from_the_compile_cache() {
    let cache = support::temp_dir("cache-hit");
    let config = kwh_plugin::EngineConfig {
        cache_dir: Some(cache.clone()),
        max_instances: 8,
        ..Default::default()
    };
    let path = guest("noop");
    {
        let first = kwh_plugin::PluginEngine::new(config.clone()).expect("engine");
        tokio::time::timeout(T, first.load(&path, Limits::default()))
            .await
            .expect("in time")
            .expect("loads");
        assert_eq!(first.compiles(), 1);
        let entries: Vec<_> = std::fs::read_dir(&cache).expect("dir").collect();
        assert_eq!(entries.len(), 1, "one entry, no temp files left behind");
    }
    // A new engine (as after a restart) finds the entry and compiles nothing.
    let second = kwh_plugin::PluginEngine::new(config).expect("engine");
    let started = std::time::Instant::now();
    let loaded = tokio::time::timeout(T, second.load(&path, Limits::default()))
        .await
        .expect("in time")
        .expect("loads from cache");
    let elapsed = started.elapsed();
    assert_eq!(second.compiles(), 0);
    assert_eq!(
        second
            .cache_stats()
            .hits
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(loaded.name(), "noop");
    eprintln!("cached load (deserialize, link, instantiate, manifest): {elapsed:?}");
    let _ = std::fs::remove_dir_all(&cache);
}

#[tokio::test]
async fn corrupt_cache_entry_is_recompiled_and_replaced() {
    let cache = support::temp_dir("cache-corrupt");
    let config = kwh_plugin::EngineConfig {
        cache_dir: Some(cache.clone()),
        max_instances: 8,
        ..Default::default()
    };
    let path = guest("noop");
    let first = kwh_plugin::PluginEngine::new(config.clone()).expect("engine");
    tokio::time::timeout(T, first.load(&path, Limits::default()))
        .await
        .expect("in time")
        .expect("loads");
    let entry = std::fs::read_dir(&cache)
        .expect("dir")
        .next()
        .expect("one entry")
        .expect("entry")
        .path();
    std::fs::write(&entry, b"definitely not an ELF artifact").expect("corrupt");

    let (logs, _guard) = support::logs::capture();
    let second = kwh_plugin::PluginEngine::new(config.clone()).expect("engine");
    tokio::time::timeout(T, second.load(&path, Limits::default()))
        .await
        .expect("in time")
        .expect("recompiles");
    assert_eq!(second.compiles(), 1);
    assert_eq!(
        second
            .cache_stats()
            .corrupt
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(
        logs.lines().iter().any(|l| l.level == tracing::Level::WARN
            && l.message.contains("compile cache entry unusable")),
        "a warning names the bad entry: {:?}",
        logs.lines()
    );
    // The entry was rewritten: a third engine hits it.
    let third = kwh_plugin::PluginEngine::new(config).expect("engine");
    tokio::time::timeout(T, third.load(&path, Limits::default()))
        .await
        .expect("in time")
        .expect("loads");
    assert_eq!(third.compiles(), 0);
    let _ = std::fs::remove_dir_all(&cache);
}

/// A selector is parsed at load with the parser the informers match with, so a typo stops that
/// plugin before it watches anything, in one line that names the file, the watch and the cause.
#[tokio::test]
async fn an_unparsable_selector_fails_the_load_in_one_line_naming_the_file_and_cause() {
    let engine = support::engine();
    for (name, which, selector) in [
        ("badlabel", "label", "app in (a,b"),
        ("badfield", "field", "metadata.name"),
    ] {
        let path = guest(name);
        let err = tokio::time::timeout(T, engine.load(&path, Limits::default()))
            .await
            .expect("in time")
            .err()
            .expect("must fail");
        assert!(matches!(err.cause, LoadCause::Manifest(_)), "{err}");
        let msg = err.to_string();
        assert_eq!(msg.lines().count(), 1, "{msg}");
        let prefix = format!(
            "plugin {}: invalid manifest: watch 0: unparsable {which} selector {selector:?}: ",
            path.display()
        );
        assert!(msg.starts_with(&prefix), "{msg}");
        assert!(
            msg.len() > prefix.len(),
            "the parser's reason follows: {msg}"
        );
    }
}
