//! Compiling outside the host's own process: a run's cache miss compiled by a child process
//! (the binary's own `host compile`), and `host compile` filling the cache ahead of time so that
//! a later run compiles nothing. Observed from outside: the `plugin loaded` line, the compile
//! counters in `/metrics`, and the cache directory's entries.

mod support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use support::guests::guest;
use support::process::HostProcess;

/// Bound of one `host compile` (the test guests compile in well under a second).
const T: Duration = Duration::from_secs(120);

async fn host_compile(args: &[&OsStr]) -> Output {
    let mut cmd = tokio::process::Command::new(support::host_bin());
    cmd.arg("compile")
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true);
    tokio::time::timeout(T, cmd.output())
        .await
        .expect("host compile finishes")
        .expect("host compile runs")
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// The compile cache's entries in `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut e: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                .collect()
        })
        .unwrap_or_default();
    e.sort();
    e
}

/// The value of the OpenMetrics sample `name` (labels included) in `body`.
fn sample(body: &str, name: &str) -> Option<u64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs `plugin` against the emulator with the compile cache `cache`, until its `plugin loaded`
/// line; returns that line and the `/metrics` body, then stops the host.
async fn run_once(plugin: &Path, cache: &Path) -> (String, String, HostProcess) {
    let mut host = HostProcess::spawn(
        [
            os("--emulator"),
            os("--cache-dir"),
            cache.as_os_str(),
            os("--plugin"),
            plugin.as_os_str(),
            os("--metrics-addr"),
            os("127.0.0.1:0"),
        ],
        "info",
    );
    let loaded = host.line("plugin loaded").await;
    let addr = host.ops_addr().await;
    let (code, body) = support::cluster::http_get(&addr, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    host.sigterm();
    let status = host.exit(T).await;
    assert!(status.success(), "{status:?}\n{}", host.log());
    (loaded, body, host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_compiles_in_a_child_process_which_leaves_the_entry_in_the_cache() {
    let noop = guest("noop");
    let dir = support::temp_dir("compile-cold");
    let cache = dir.join("cache");
    let (loaded, metrics, host) = run_once(&noop, &cache).await;
    assert!(
        loaded.contains("compiled in a child process"),
        "{loaded}\n{}",
        host.log()
    );
    assert!(
        host.saw("component compiled in a child process"),
        "{}",
        host.log()
    );
    assert_eq!(
        sample(&metrics, "component_compiles_total{compiler=\"child\"}"),
        Some(1),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "component_compiles_total{compiler=\"in_process\"}"
        ),
        Some(0),
        "{metrics}"
    );
    // The child wrote one entry, the parent loaded it; the directory is the user's only.
    assert_eq!(entries(&cache).len(), 1, "{:?}", entries(&cache));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache)
            .expect("cache")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    // The next start finds it.
    let (loaded, metrics, _) = run_once(&noop, &cache).await;
    assert!(loaded.contains("cached"), "{loaded}");
    assert_eq!(sample(&metrics, "component_cache_hits_total"), Some(1));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_compile_fills_the_cache_that_a_run_then_loads_without_compiling() {
    let noop = guest("noop");
    let dir = support::temp_dir("compile-ahead");
    let cache = dir.join("cache");
    let out = host_compile(&[os("--cache-dir"), cache.as_os_str(), noop.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expected = format!("compiled {} in ", noop.display());
    assert!(
        stdout.lines().count() == 1 && stdout.starts_with(&expected),
        "{stdout}"
    );
    assert!(out.stderr.is_empty(), "{out:?}");
    let written = entries(&cache);
    assert_eq!(written.len(), 1);

    // Again: found, not compiled.
    let out = host_compile(&[os("--cache-dir"), cache.as_os_str(), noop.as_os_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("already cached {} (", noop.display())),
        "{stdout}"
    );

    // A run with that cache: the entry is exactly what it looks for.
    let (loaded, metrics, host) = run_once(&noop, &cache).await;
    assert!(loaded.contains("cached"), "{loaded}");
    for compiler in ["child", "in_process"] {
        let name = format!("component_compiles_total{{compiler=\"{compiler}\"}}");
        assert_eq!(sample(&metrics, &name), Some(0), "{name}: {metrics}");
    }
    assert_eq!(
        sample(&metrics, "component_cache_hits_total"),
        Some(1),
        "{metrics}"
    );
    assert!(!host.saw("compiled in a child process"), "{}", host.log());
    assert_eq!(entries(&cache), written, "nothing rewritten or added");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn host_compile_names_each_file_it_cannot_compile_in_one_line_and_compiles_the_others() {
    let noop = guest("noop");
    let dir = support::temp_dir("compile-broken");
    let cache = dir.join("cache");
    let missing = dir.join("missing.wasm");
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, b"not wasm at all").expect("write");
    // A component's preamble, then a section that does not parse.
    let broken = dir.join("broken.wasm");
    std::fs::write(&broken, b"\0asm\x0d\0\x01\0\x07\x05garbage").expect("write");
    let plugins = dir.join("plugins.yaml");
    std::fs::write(&plugins, format!("- module: {}\n", noop.display())).expect("write");

    let out = host_compile(&[
        os("--cache-dir"),
        cache.as_os_str(),
        missing.as_os_str(),
        garbage.as_os_str(),
        broken.as_os_str(),
        os("--plugins"),
        plugins.as_os_str(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "one line per bad file: {stderr}");
    let expect = |i: usize, file: &Path, cause: &str| {
        let prefix = format!("error: {}: {cause}", file.display());
        assert!(
            lines[i].starts_with(&prefix),
            "{}\n  wanted {prefix}",
            lines[i]
        );
    };
    expect(0, &missing, "cannot read the file: ");
    expect(1, &garbage, "not a WebAssembly file");
    expect(2, &broken, "invalid component: ");
    // The good one, from the plugins file, still compiled.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("compiled {} in ", noop.display())),
        "{stdout}"
    );
    assert_eq!(entries(&cache).len(), 1);

    // The same broken component met by a run: its child compile fails, in one line naming it.
    let run = tokio::process::Command::new(support::host_bin())
        .args([os("--emulator"), os("--cache-dir"), cache.as_os_str()])
        .args([os("--plugin"), broken.as_os_str()])
        .env("RUST_LOG", "error")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(T, run)
        .await
        .expect("the run ends")
        .expect("it runs");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = format!(
        "plugin {}: compiling in a child process failed: invalid component: ",
        broken.display()
    );
    assert_eq!(
        stderr.lines().filter(|l| l.contains(&line)).count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("no plugin could be started"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}
