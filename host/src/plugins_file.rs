//! The plugins file (`--plugins FILE`, or the key `plugins:` of `--config`): a YAML list of
//! plugins, each with its module, its configuration and settings of its own, checked whole
//! before anything is loaded.
//!
//! Why up front and all at once: a platform team's file names many third-party controllers; a
//! typo in one must not leave the host running the others under the wrong settings, so any
//! mistake is one line naming the file, the plugin (its index and module) and the key, and
//! nothing starts. The ranges are the ones the global flags and config keys are checked
//! against ([`check`]), so a value means the same wherever it is given.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use kwh_plugin::{Limits, PluginSpec};

/// Handler and reconcile deadlines, in milliseconds: at least one tick, at most an hour.
pub const DEADLINE_MS: RangeInclusive<u64> = 1..=3_600_000;
/// Linear memory per instance, in MiB: a wasm32 memory holds at most 4 GiB.
pub const MEMORY_MB: RangeInclusive<u64> = 1..=4096;
/// Instances per plugin (its workers and its dispatcher).
pub const MAX_INSTANCES: RangeInclusive<u64> = 1..=1024;
/// Keys a plugin's workqueue may hold.
pub const MAX_QUEUED_KEYS: RangeInclusive<u64> = 1..=100_000_000;
/// `--log-lines-per-second` and `logLinesPerSecond` (0: unbounded).
pub const LOG_LINES_PER_SECOND: RangeInclusive<u64> = 0..=1_000_000;
/// `--worker-threads` and `workerThreads`.
pub const WORKER_THREADS: RangeInclusive<u64> = 1..=256;
/// `--list-page-size` and `listPageSize`: the API server caps a page at its own limit anyway.
pub const LIST_PAGE_SIZE: RangeInclusive<u64> = 1..=100_000;
/// Reconcile workers per plugin.
pub const WORKERS: RangeInclusive<u64> = 1..=256;

/// `value` of `key` if it lies in `range`, else the message naming both.
pub fn check(key: &str, value: u64, range: &RangeInclusive<u64>) -> Result<u64, String> {
    in_range(value, range).map_err(|e| format!("{key}: {e}"))
}

fn in_range(value: u64, range: &RangeInclusive<u64>) -> Result<u64, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{value} is out of range ({}..={})",
            range.start(),
            range.end()
        ))
    }
}

/// A clap value parser for a flag checked against `range` (named by the flag in clap's error).
pub fn ranged(range: RangeInclusive<u64>) -> impl Fn(&str) -> Result<u64, String> + Clone {
    move |s: &str| {
        let v: u64 = s.parse().map_err(|e| format!("{e}"))?;
        in_range(v, &range)
    }
}

/// One entry of the list, as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    module: PathBuf,
    #[serde(default)]
    config: Option<yaml_serde::Value>,
    memory_mb: Option<u64>,
    handler_deadline_ms: Option<u64>,
    reconcile_deadline_ms: Option<u64>,
    max_instances: Option<u64>,
    max_queued_keys: Option<u64>,
    log_lines_per_second: Option<u64>,
    workers: Option<u64>,
    namespace: Option<String>,
    #[serde(default)]
    leader_only: bool,
    #[serde(default)]
    shadow: Option<ShadowEntry>,
}

/// An entry's `shadow:`: another module (and configuration) run beside the plugin, its writes
/// only compared; `promote: true` runs it as the plugin instead (by hand), `promoteAfter` once
/// it has agreed long and often enough.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ShadowEntry {
    module: PathBuf,
    #[serde(default)]
    config: Option<yaml_serde::Value>,
    #[serde(default)]
    promote: bool,
    #[serde(default)]
    promote_after: Option<PromoteAfterEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PromoteAfterEntry {
    reconciles: u64,
    /// e.g. `10m`.
    duration: String,
}

/// The global settings a plugin's unset keys take.
pub struct Defaults<'a> {
    /// From the flags, the config file, else the built-in defaults.
    pub limits: &'a Limits,
    /// `--namespace` (or the config file's `namespace`).
    pub namespace: Option<&'a str>,
}

/// Reads `path` (`what` names it in errors: `plugins file` or `config`), a YAML list of plugins.
pub fn read(path: &Path, what: &str, defaults: &Defaults<'_>) -> Result<Vec<PluginSpec>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{what} {}: cannot read it: {e}", path.display()))?;
    let value: yaml_serde::Value =
        yaml_serde::from_str(&text).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    parse(value, path, what, defaults)
}

/// The specs of `value`, the list of plugins of the file at `path`; module paths resolve against
/// the file's directory.
pub fn parse(
    value: yaml_serde::Value,
    path: &Path,
    what: &str,
    defaults: &Defaults<'_>,
) -> Result<Vec<PluginSpec>, String> {
    let items = match value {
        yaml_serde::Value::Sequence(items) => items,
        // `plugins:` with nothing under it, or an empty file: no plugins.
        yaml_serde::Value::Null => return Ok(Vec::new()),
        _ => {
            return Err(format!(
                "{what} {}: expected a list of plugins, each a mapping with at least `module`",
                path.display()
            ))
        }
    };
    let base = path.parent().unwrap_or(Path::new("."));
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            // The module as written, to name the plugin even when the entry is malformed.
            let module = item
                .get("module")
                .and_then(|m| m.as_str())
                .map_or_else(|| "no module".to_string(), str::to_owned);
            entry(item, base, defaults)
                .map_err(|e| format!("{what} {}: plugin {i} ({module}): {e}", path.display()))
        })
        .collect()
}

/// One plugin's spec from `item`, a mapping as one entry of the list is written (a
/// `WasmController`'s spec is one), module paths resolved against `base`; or why not, naming
/// the key.
pub fn one(
    item: yaml_serde::Value,
    base: &Path,
    defaults: &Defaults<'_>,
) -> Result<PluginSpec, String> {
    entry(item, base, defaults)
}

/// A `module:` as the runtime loads it: a file relative to `base`, which must exist, or a
/// registry reference, pulled before the plugin starts (`modules`) and here only checked, so
/// that a malformed one is a mistake in the file, named as such.
fn module_path(module: &Path, base: &Path) -> Result<PathBuf, String> {
    match module
        .to_str()
        .filter(|m| kwh_oci::Reference::is_reference(m))
    {
        Some(r) => {
            kwh_oci::Reference::parse(r).map_err(|e| format!("module: {e}"))?;
            Ok(module.to_path_buf())
        }
        None => {
            let path = base.join(module);
            if !path.is_file() {
                return Err(format!("module: {} is not a file", path.display()));
            }
            Ok(path)
        }
    }
}

/// One plugin's spec, or why not (naming the key).
fn entry(
    item: yaml_serde::Value,
    base: &Path,
    defaults: &Defaults<'_>,
) -> Result<PluginSpec, String> {
    let e: Entry = yaml_serde::from_value(item).map_err(|e| e.to_string())?;
    let module = module_path(&e.module, base)?;
    let d = defaults.limits;
    let ms = |key, v: Option<u64>, default: Duration| -> Result<Duration, String> {
        v.map_or(Ok(default), |v| {
            check(key, v, &DEADLINE_MS).map(Duration::from_millis)
        })
    };
    let limits = Limits {
        handler_deadline: ms(
            "handlerDeadlineMs",
            e.handler_deadline_ms,
            d.handler_deadline,
        )?,
        reconcile_deadline: ms(
            "reconcileDeadlineMs",
            e.reconcile_deadline_ms,
            d.reconcile_deadline,
        )?,
        memory_bytes: match e.memory_mb {
            Some(v) => mib(check("memoryMb", v, &MEMORY_MB)?),
            None => d.memory_bytes,
        },
        max_instances: match e.max_instances {
            Some(v) => narrow(check("maxInstances", v, &MAX_INSTANCES)?),
            None => d.max_instances,
        },
        max_queued_keys: match e.max_queued_keys {
            Some(v) => keys(check("maxQueuedKeys", v, &MAX_QUEUED_KEYS)?),
            None => d.max_queued_keys,
        },
        log_lines_per_second: match e.log_lines_per_second {
            Some(v) => narrow(check("logLinesPerSecond", v, &LOG_LINES_PER_SECOND)?),
            None => d.log_lines_per_second,
        },
        ..d.clone()
    };
    let workers = e
        .workers
        .map(|v| check("workers", v, &WORKERS).map(narrow))
        .transpose()?;
    if let Some(w) = workers {
        // The dispatcher holds one instance besides the workers.
        if w >= limits.max_instances {
            return Err(format!(
                "workers: {w} workers and the dispatcher need {} instances, above maxInstances ({})",
                w + 1,
                limits.max_instances
            ));
        }
    }
    let config = match e.config {
        None => serde_json::Value::Null,
        Some(v) => serde_json::to_value(v).map_err(|e| format!("config: {e}"))?,
    };
    let config = Arc::new(config);
    let shadow = match e.shadow {
        None => None,
        Some(s) => {
            let path = module_path(&s.module, base).map_err(|e| format!("shadow.{e}"))?;
            let config = match s.config {
                None => config.clone(),
                Some(v) => {
                    Arc::new(serde_json::to_value(v).map_err(|e| format!("shadow.config: {e}"))?)
                }
            };
            let promote_after = s
                .promote_after
                .map(|p| {
                    kwh_client::duration::parse_duration(&p.duration)
                        .map(|after| kwh_plugin::PromoteAfter {
                            reconciles: p.reconciles,
                            after,
                        })
                        .map_err(|e| format!("shadow.promoteAfter.duration: {e}"))
                })
                .transpose()?;
            let spec = Arc::new(kwh_plugin::ShadowSpec {
                path,
                config,
                promote_after,
            });
            Some((spec, s.promote))
        }
    };
    // Promoted by hand: the shadow's module and configuration run as the plugin, no shadow.
    let (module, config, shadow) = match shadow {
        Some((s, true)) => (s.path.clone(), s.config.clone(), None),
        Some((s, false)) => (module, config, Some(s)),
        None => (module, config, None),
    };
    Ok(PluginSpec {
        path: module,
        limits,
        workers,
        namespace: e
            .namespace
            .or_else(|| defaults.namespace.map(str::to_owned)),
        config,
        leader_only: e.leader_only,
        shadow,
    })
}

/// MiB to bytes (the ranges keep it far from overflowing).
pub fn mib(v: u64) -> usize {
    usize::try_from(v.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
}

/// A key count (`maxQueuedKeys`), already checked against its range.
pub fn keys(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// A value already checked against a range that fits `u32`.
fn narrow(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Fuzz target (the cargo-fuzz binary in `fuzz/` includes this file): a plugins file's
/// text is refused with an error or read into specs whose every setting lies in its range,
/// and never panics. Module paths resolve against a directory that does not exist, so only
/// absolute ones name a file (whose existence alone is checked).
#[cfg(any(test, fuzzing))]
pub fn fuzz_target(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let Ok(value) = yaml_serde::from_str::<yaml_serde::Value>(text) else {
        return;
    };
    let limits = Limits::default();
    let defaults = Defaults {
        limits: &limits,
        namespace: Some("global"),
    };
    let path = std::env::temp_dir()
        .join("kwh-fuzz-no-such-directory")
        .join("plugins.yaml");
    let Ok(specs) = parse(value, &path, "plugins file", &defaults) else {
        return;
    };
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    for s in specs {
        // A module is a file that exists or a well-formed registry reference (pulled later).
        let module_ok = |p: &Path| {
            p.is_file()
                || p.to_str()
                    .is_some_and(|r| kwh_oci::Reference::parse(r).is_ok())
        };
        assert!(module_ok(&s.path), "{}", s.path.display());
        if let Some(shadow) = &s.shadow {
            assert!(module_ok(&shadow.path), "{}", shadow.path.display());
        }
        let l = &s.limits;
        assert!(DEADLINE_MS.contains(&ms(l.handler_deadline)), "{l:?}");
        assert!(DEADLINE_MS.contains(&ms(l.reconcile_deadline)), "{l:?}");
        assert!(l.memory_bytes <= mib(*MEMORY_MB.end()), "{l:?}");
        assert!(MAX_INSTANCES.contains(&u64::from(l.max_instances)), "{l:?}");
        if let Some(w) = s.workers {
            assert!(
                WORKERS.contains(&u64::from(w)) && w < l.max_instances,
                "{w} {l:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzz_plugins_file() {
        let seeds = kwh_client::fuzzing::target_seeds("plugins_file");
        kwh_client::fuzzing::exercise(&seeds, 3000, 31, fuzz_target);
    }

    fn specs(yaml: &str, dir: &Path) -> Result<Vec<PluginSpec>, String> {
        let limits = Limits::default();
        let d = Defaults {
            limits: &limits,
            namespace: Some("global"),
        };
        parse(
            yaml_serde::from_str(yaml).map_err(|e| e.to_string())?,
            &dir.join("plugins.yaml"),
            "plugins file",
            &d,
        )
    }

    fn dir_with_module() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("plugins-file-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("a.wasm"), b"").expect("module");
        dir
    }

    #[test]
    fn unset_keys_take_the_global_values_and_set_ones_their_own() {
        let dir = dir_with_module();
        let s = specs(
            "- module: a.wasm\n- module: a.wasm\n  memoryMb: 16\n  handlerDeadlineMs: 20\n  \
             reconcileDeadlineMs: 30\n  maxInstances: 4\n  workers: 3\n  namespace: team\n  \
             config: {ttl: 5m, names: [a, b]}\n",
            &dir,
        )
        .expect("valid");
        assert_eq!(s[0].path, dir.join("a.wasm"));
        assert_eq!(s[0].limits, Limits::default());
        assert_eq!(s[0].namespace.as_deref(), Some("global"));
        assert!(s[0].config.is_null());
        assert_eq!(s[1].limits.memory_bytes, 16 << 20);
        assert_eq!(s[1].limits.handler_deadline, Duration::from_millis(20));
        assert_eq!(s[1].limits.reconcile_deadline, Duration::from_millis(30));
        assert_eq!(s[1].limits.max_instances, 4);
        assert_eq!(s[1].workers, Some(3));
        assert_eq!(s[1].namespace.as_deref(), Some("team"));
        assert_eq!(
            *s[1].config,
            serde_json::json!({"ttl": "5m", "names": ["a", "b"]})
        );
    }

    #[test]
    fn a_shadow_runs_beside_its_plugin_until_it_is_promoted_by_hand() {
        let dir = dir_with_module();
        std::fs::write(dir.join("b.wasm"), b"").expect("module");
        let s = specs(
            "- module: a.wasm\n  config: {x: 1}\n  shadow:\n    module: b.wasm\n    \
             promoteAfter: {reconciles: 100, duration: 10m}\n\
             - module: a.wasm\n  config: {x: 1}\n  shadow: {module: b.wasm, config: {x: 2}, promote: true}\n",
            &dir,
        )
        .expect("valid");
        let shadow = s[0].shadow.as_ref().expect("a shadow");
        assert_eq!(s[0].path, dir.join("a.wasm"));
        assert_eq!(shadow.path, dir.join("b.wasm"));
        assert_eq!(
            *shadow.config,
            serde_json::json!({"x": 1}),
            "the plugin's own"
        );
        assert_eq!(
            shadow.promote_after,
            Some(kwh_plugin::PromoteAfter {
                reconciles: 100,
                after: Duration::from_secs(600)
            })
        );
        // Promoted by hand: the shadow's module and configuration are the plugin's.
        assert_eq!(s[1].path, dir.join("b.wasm"));
        assert_eq!(*s[1].config, serde_json::json!({"x": 2}));
        assert!(s[1].shadow.is_none());
        let e = specs("- module: a.wasm\n  shadow: {module: gone.wasm}\n", &dir)
            .expect_err("no such module");
        assert!(e.contains("shadow.module: "), "{e}");
    }

    #[test]
    fn mistakes_name_the_file_the_plugin_and_the_key() {
        let dir = dir_with_module();
        let file = dir.join("plugins.yaml").display().to_string();
        let cases = [
            (
                "- module: a.wasm\n  bogus: 1\n",
                "plugin 0 (a.wasm): unknown field `bogus`",
            ),
            (
                "- module: a.wasm\n- module: a.wasm\n  memoryMb: 0\n",
                "plugin 1 (a.wasm): memoryMb: 0 is out of range (1..=4096)",
            ),
            (
                "- module: a.wasm\n  reconcileDeadlineMs: 3600001\n",
                "plugin 0 (a.wasm): reconcileDeadlineMs: 3600001 is out of range",
            ),
            ("- module: gone.wasm\n", "plugin 0 (gone.wasm): module: "),
            (
                "- memoryMb: 8\n",
                "plugin 0 (no module): missing field `module`",
            ),
            (
                "- module: a.wasm\n  workers: 4\n  maxInstances: 4\n",
                "plugin 0 (a.wasm): workers: 4 workers and the dispatcher need 5 instances",
            ),
            ("module: a.wasm\n", "expected a list of plugins"),
        ];
        assert!(specs("~\n", &dir).expect("empty").is_empty());
        for (yaml, want) in cases {
            let e = specs(yaml, &dir).expect_err(yaml);
            assert!(e.starts_with(&format!("plugins file {file}: ")), "{e}");
            assert!(e.contains(want), "{yaml}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
