//! The run's settings: the `--config` file, and each setting from its flag, else the file,
//! else its default, checked before anything starts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use kwh_plugin::{Limits, PluginSpec, QuarantinePolicy, RetryPolicy};
use serde::Deserialize;

use super::RunArgs;
use crate::plugins_file::{
    self, check, DEADLINE_MS, LIST_PAGE_SIZE, LOG_LINES_PER_SECOND, MAX_INSTANCES, MAX_QUEUED_KEYS,
    MEMORY_MB, WORKER_THREADS,
};
use crate::replica;

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    pub handler_deadline_ms: Option<u64>,
    pub reconcile_deadline_ms: Option<u64>,
    pub memory_mb: Option<u64>,
    pub max_instances: Option<u64>,
    pub max_queued_keys: Option<u64>,
    pub log_lines_per_second: Option<u64>,
    pub worker_threads: Option<u64>,
    pub wakeup_batching: Option<String>,
    pub list_page_size: Option<u64>,
    pub grace_period_seconds: Option<u64>,
    pub quarantine_failures: Option<u32>,
    pub quarantine_window_seconds: Option<u64>,
    pub quarantine_cooldown_ms: Option<u64>,
    pub quarantine_max_cooldown_ms: Option<u64>,
    pub handler_attempts: Option<u32>,
    pub cache_dir: Option<PathBuf>,
    pub metrics_addr: Option<SocketAddr>,
    pub namespace: Option<String>,
    pub fail_fast: Option<bool>,
    /// Kept raw: checked entry by entry by [`plugins_file::parse`], naming each plugin.
    pub plugins: Option<yaml_serde::Value>,
    pub leader_elect: Option<bool>,
    pub leader_elect_namespace: Option<String>,
    pub leader_elect_lease_name: Option<String>,
    pub leader_elect_lease_duration: Option<String>,
    pub leader_elect_renew_deadline: Option<String>,
    pub leader_elect_retry_period: Option<String>,
    pub shards: Option<bool>,
}

impl FileConfig {
    /// The replica keys, for [`replica::ReplicaSettings::resolve`].
    fn replica(&self) -> replica::ReplicaConfig {
        replica::ReplicaConfig {
            leader_elect: self.leader_elect,
            leader_elect_namespace: self.leader_elect_namespace.clone(),
            leader_elect_lease_name: self.leader_elect_lease_name.clone(),
            leader_elect_lease_duration: self.leader_elect_lease_duration.clone(),
            leader_elect_renew_deadline: self.leader_elect_renew_deadline.clone(),
            leader_elect_retry_period: self.leader_elect_retry_period.clone(),
            shards: self.shards,
        }
    }
}

/// Everything a run takes from its flags and its `--config` file.
pub struct Settings {
    pub limits: Limits,
    pub namespace: Option<String>,
    /// The plugins given at start, by where they were given.
    pub given: Given,
    /// The `--plugins` file, when it is watched for changes.
    pub watched: Option<Watched>,
    pub grace: Duration,
    pub quarantine: QuarantinePolicy,
    pub handler_retry: RetryPolicy,
    pub metrics_addr: Option<SocketAddr>,
    pub replica: replica::ReplicaSettings,
    pub list_page_size: Option<u32>,
    pub fail_fast: bool,
    pub cache_dir: Option<PathBuf>,
}

impl Settings {
    /// Each setting from its flag, else the file, else its default; the first mistake is one
    /// line (naming the file for its keys), and nothing starts.
    pub fn resolve(args: &RunArgs, file: &FileConfig) -> anyhow::Result<Settings> {
        let limits = limits(args, file)?;
        let list_page_size = in_file(args, "listPageSize", file.list_page_size, &LIST_PAGE_SIZE)?;
        let namespace = args.namespace.clone().or(file.namespace.clone());
        let given = plugin_specs(args, file.plugins.clone(), &limits, namespace.as_deref())?;
        let watched = match (&args.plugins_file, args.plugins_poll_interval) {
            (Some(path), Some(interval)) if !interval.is_zero() => Some(Watched {
                path: path.clone(),
                interval,
            }),
            _ => None,
        };
        // A watched plugins file may start empty: plugins are added to it later.
        if given.all().next().is_none() && watched.is_none() && !args.plugins_from_cluster {
            bail!(
                "no plugin given: use `--plugin FILE.wasm` or `--plugins FILE` (see `host \
                 --help`), or a subcommand"
            );
        }
        let replica =
            replica::ReplicaSettings::resolve(&args.replica, &file.replica()).map_err(|e| {
                match &args.config {
                    Some(p) => anyhow::anyhow!("config {}: {e}", p.display()),
                    None => e,
                }
            })?;
        Ok(Settings {
            limits,
            namespace,
            given,
            watched,
            grace: Duration::from_secs(
                args.grace_period
                    .or(file.grace_period_seconds)
                    .unwrap_or(30),
            ),
            quarantine: quarantine(args, file)?,
            handler_retry: RetryPolicy {
                attempts: args
                    .handler_attempts
                    .or(file.handler_attempts)
                    .unwrap_or(RetryPolicy::default().attempts)
                    .max(1),
                ..RetryPolicy::default()
            },
            metrics_addr: args.metrics_addr.or(file.metrics_addr),
            replica,
            list_page_size: args
                .list_page_size
                .or(list_page_size)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            fail_fast: args.fail_fast || file.fail_fast.unwrap_or(false),
            cache_dir: args.cache_dir.clone().or(file.cache_dir.clone()),
        })
    }
}

/// `key` of the config file, if set, checked against `range` (the error names the file).
fn in_file(
    args: &RunArgs,
    key: &str,
    v: Option<u64>,
    range: &std::ops::RangeInclusive<u64>,
) -> anyhow::Result<Option<u64>> {
    v.map(|v| check(key, v, range))
        .transpose()
        .map_err(|e| match &args.config {
            Some(p) => anyhow::anyhow!("config {}: {e}", p.display()),
            None => anyhow::anyhow!("{e}"),
        })
}

/// The plugins' default limits.
fn limits(args: &RunArgs, file: &FileConfig) -> anyhow::Result<Limits> {
    let handler_deadline_ms = in_file(
        args,
        "handlerDeadlineMs",
        file.handler_deadline_ms,
        &DEADLINE_MS,
    )?;
    let reconcile_deadline_ms = in_file(
        args,
        "reconcileDeadlineMs",
        file.reconcile_deadline_ms,
        &DEADLINE_MS,
    )?;
    let memory_mb = in_file(args, "memoryMb", file.memory_mb, &MEMORY_MB)?;
    let max_instances = in_file(args, "maxInstances", file.max_instances, &MAX_INSTANCES)?;
    let max_queued_keys = in_file(
        args,
        "maxQueuedKeys",
        file.max_queued_keys,
        &MAX_QUEUED_KEYS,
    )?;
    let log_lines_per_second = in_file(
        args,
        "logLinesPerSecond",
        file.log_lines_per_second,
        &LOG_LINES_PER_SECOND,
    )?;
    let defaults = Limits::default();
    let ms = Duration::from_millis;
    let u32_or_max = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    Ok(Limits {
        handler_deadline: args
            .handler_deadline_ms
            .or(handler_deadline_ms)
            .map_or(defaults.handler_deadline, ms),
        reconcile_deadline: args
            .reconcile_deadline_ms
            .or(reconcile_deadline_ms)
            .map_or(defaults.reconcile_deadline, ms),
        memory_bytes: args
            .memory_mb
            .or(memory_mb)
            .map_or(defaults.memory_bytes, plugins_file::mib),
        max_instances: args
            .max_instances
            .or(max_instances)
            .map_or(defaults.max_instances, u32_or_max),
        max_queued_keys: args
            .max_queued_keys
            .or(max_queued_keys)
            .map_or(defaults.max_queued_keys, plugins_file::keys),
        log_lines_per_second: args
            .log_lines_per_second
            .or(log_lines_per_second)
            .map_or(defaults.log_lines_per_second, u32_or_max),
        ..defaults
    })
}

/// The quarantine policy; a maximum cool-down shorter than the first is refused.
fn quarantine(args: &RunArgs, file: &FileConfig) -> anyhow::Result<QuarantinePolicy> {
    let qd = QuarantinePolicy::default();
    let ms = Duration::from_millis;
    let quarantine = QuarantinePolicy {
        failures: args
            .quarantine_failures
            .or(file.quarantine_failures)
            .unwrap_or(qd.failures),
        window: args
            .quarantine_window
            .or(file.quarantine_window_seconds)
            .map_or(qd.window, Duration::from_secs),
        cooldown: args
            .quarantine_cooldown_ms
            .or(file.quarantine_cooldown_ms)
            .map_or(qd.cooldown, ms),
        max_cooldown: args
            .quarantine_max_cooldown_ms
            .or(file.quarantine_max_cooldown_ms)
            .map_or(qd.max_cooldown, ms),
    };
    if quarantine.max_cooldown < quarantine.cooldown {
        bail!(
            "the quarantine's maximum cool-down ({:?}) is shorter than its first one ({:?})",
            quarantine.max_cooldown,
            quarantine.cooldown
        );
    }
    Ok(quarantine)
}

/// The `--config` file, read before the runtime starts (it may set the runtime's threads).
pub fn read_config(args: &RunArgs) -> anyhow::Result<FileConfig> {
    Ok(match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read config {}", p.display()))?;
            yaml_serde::from_str(&text).with_context(|| format!("config {}", p.display()))?
        }
        None => FileConfig::default(),
    })
}

/// `--worker-threads`, else the config's `workerThreads`, else one.
pub fn worker_threads(args: &RunArgs, file: &FileConfig) -> anyhow::Result<usize> {
    let from_file = in_file(args, "workerThreads", file.worker_threads, &WORKER_THREADS)?;
    let n = args.worker_threads.or(from_file).unwrap_or(1);
    Ok(usize::try_from(n).unwrap_or(1))
}

/// The longest `--wakeup-batching` window: beyond it the wait would be noticeable.
pub const MAX_WAKEUP_BATCHING: Duration = Duration::from_millis(100);

/// `--wakeup-batching`, else the config's `wakeupBatching`, else 10 ms: a delay no controller
/// notices (kube-controller-manager trades latency for fewer wake-ups the same way with
/// `--endpointslice-updates-batch-period`).
pub fn wakeup_batching(args: &RunArgs, file: &FileConfig) -> anyhow::Result<Duration> {
    let in_config = |e: String| match &args.config {
        Some(p) => anyhow::anyhow!("config {}: wakeupBatching: {e}", p.display()),
        None => anyhow::anyhow!("wakeupBatching: {e}"),
    };
    let from_file = file
        .wakeup_batching
        .as_deref()
        .map(kwh_client::duration::parse_duration)
        .transpose()
        .map_err(in_config)?;
    let too_long = |w: Duration| -> Result<Duration, String> {
        if w > MAX_WAKEUP_BATCHING {
            return Err(format!("{w:?} is longer than {MAX_WAKEUP_BATCHING:?}"));
        }
        Ok(w)
    };
    match (args.wakeup_batching, from_file) {
        (Some(w), _) => too_long(w).map_err(|e| anyhow::anyhow!("--wakeup-batching: {e}")),
        (None, Some(w)) => too_long(w).map_err(in_config),
        (None, None) => Ok(Duration::from_millis(10)),
    }
}

/// The `--plugins` file when it is watched for changes (`--plugins-poll-interval` not 0).
pub struct Watched {
    pub path: PathBuf,
    pub interval: Duration,
}

/// The plugins given at start, by source (each one a source of the run's plugins, see
/// [`kwh_plugin::sources`]), in start order: the config file's `plugins:`, the `--plugins`
/// file's, then each `--plugin` with the global settings.
#[derive(Debug, Default)]
pub struct Given {
    pub config: Vec<PluginSpec>,
    pub file: Vec<PluginSpec>,
    pub flags: Vec<PluginSpec>,
}

impl Given {
    /// Every plugin given, in start order.
    pub fn all(&self) -> impl Iterator<Item = &PluginSpec> {
        self.config.iter().chain(&self.file).chain(&self.flags)
    }
}

/// Every plugin to run, by where it was given. Any mistake in either list is one line and
/// nothing is returned, so nothing starts.
pub fn plugin_specs(
    args: &RunArgs,
    from_config: Option<yaml_serde::Value>,
    limits: &Limits,
    namespace: Option<&str>,
) -> anyhow::Result<Given> {
    let defaults = plugins_file::Defaults { limits, namespace };
    let mut given = Given::default();
    if let (Some(value), Some(path)) = (from_config, &args.config) {
        given.config =
            plugins_file::parse(value, path, "config", &defaults).map_err(anyhow::Error::msg)?;
    }
    if let Some(path) = &args.plugins_file {
        given.file =
            plugins_file::read(path, "plugins file", &defaults).map_err(anyhow::Error::msg)?;
    }
    given.flags = args
        .plugins
        .iter()
        .map(|p| PluginSpec {
            path: p.clone(),
            limits: limits.clone(),
            workers: None,
            namespace: namespace.map(str::to_owned),
            config: std::sync::Arc::new(serde_json::Value::Null),
            leader_only: false,
            shadow: None,
        })
        .collect();
    Ok(given)
}
