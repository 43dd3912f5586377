//! The subcommands, one module each; what several of them share (the engine, the async
//! runtime, the kubeconfig) is here.

pub mod compile;
#[cfg(feature = "emulator")]
pub mod emulator;
pub mod inspect;
pub mod new;
pub mod push;
pub mod rbac;
pub mod record;
pub mod run;
pub mod shadow;
#[cfg(feature = "harness")]
pub mod test;

/// The target of the run's own log lines: `host`, as before the subcommands had modules, so
/// that log filters and collectors keyed on it still match.
pub const LOG_TARGET: &str = "host";

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kwh_client::config::KubeconfigOptions;
use kwh_client::Config;
use kwh_plugin::{Compiler, EngineConfig, Limits, PluginEngine};
use kwh_sandbox::DEFAULT_MAX_MEMORY;

/// The engine, with pool slots for `instances` instances (at least one plugin's default
/// limit, for the commands that load plugins one at a time): a run needs every plugin's worker
/// and dispatch instances at once, and the loader holds each plugin to its own limit, so the
/// sum is enough. Why not more: every slot is set up when the process starts (a fiber stack
/// and its guard page each), which was a tenth of a start's CPU at the default 256 slots.
pub fn engine(
    cache_dir: Option<PathBuf>,
    max_memory: usize,
    instances: u32,
    compiler: Compiler,
) -> anyhow::Result<PluginEngine> {
    let defaults = EngineConfig::default();
    Ok(PluginEngine::new(EngineConfig {
        cache_dir: cache_dir.or(defaults.cache_dir),
        max_memory_bytes: max_memory.max(DEFAULT_MAX_MEMORY),
        max_instances: instances.max(Limits::default().max_instances),
        compiler,
        ..EngineConfig::default()
    })?)
}

/// A plugin loaded only to read its manifest (`host inspect`, `host record`): compiled in this
/// process, the compile cached in `cache_dir`.
pub async fn inspected(
    plugin: &Path,
    cache_dir: Option<PathBuf>,
) -> anyhow::Result<kwh_plugin::LoadedPlugin> {
    let engine = engine(cache_dir, DEFAULT_MAX_MEMORY, 0, Compiler::InProcess)?;
    Ok(engine
        .load_for_inspection(plugin, Limits::default())
        .await?)
}

/// Where `oci://` modules are pulled from: the flags of every command that takes modules.
#[derive(Args, Debug, Clone)]
pub struct RegistryArgs {
    /// Docker config file with registry credentials (default: `$DOCKER_CONFIG/config.json`,
    /// else `~/.docker/config.json`; none when it does not exist). Credential helpers are not
    /// run.
    #[arg(long, value_name = "PATH")]
    pub registry_config: Option<PathBuf>,
    /// How often an `oci://` reference's tag is asked for its digest again; a new digest is
    /// an upgrade.
    #[arg(long, value_name = "DURATION", value_parser = kwh_client::duration::parse_duration,
        default_value = "5m")]
    pub pull_interval: Duration,
    /// A public key (PEM, ECDSA P-256, as `cosign generate-key-pair` writes `cosign.pub`) every
    /// `oci://` module must carry a cosign signature by (repeatable: any of them); an unsigned
    /// or otherwise signed module fails to load.
    #[arg(long = "verify-key", value_name = "FILE.pub")]
    pub verify_keys: Vec<PathBuf>,
}

/// The module puller: blobs beside the compile cache (`cache_dir`, else the default one, else
/// a directory of this process's own under the system's temp dir).
pub fn modules(
    cache_dir: Option<&Path>,
    args: &RegistryArgs,
) -> anyhow::Result<crate::modules::Modules> {
    let dir = cache_dir
        .map(Path::to_path_buf)
        .or(EngineConfig::default().cache_dir)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("kube-wasm-host-{}", std::process::id()))
        });
    let config = args
        .registry_config
        .clone()
        .or_else(crate::modules::default_registry_config);
    let mut keys = Vec::with_capacity(args.verify_keys.len());
    for f in &args.verify_keys {
        let pem =
            std::fs::read_to_string(f).with_context(|| format!("--verify-key {}", f.display()))?;
        keys.push(
            kwh_oci::PublicKey::from_pem(&pem)
                .with_context(|| format!("--verify-key {}", f.display()))?,
        );
    }
    Ok(crate::modules::Modules::new(
        &dir,
        config.as_deref(),
        args.pull_interval,
        keys,
    )?)
}

/// A run compiles what the cache lacks in a child process, this same binary's `host compile`:
/// the compiler's memory goes back to the system when it exits (see `kwh_sandbox::compiler`).
pub fn run_compiler() -> Compiler {
    match std::env::current_exe() {
        Ok(exe) => Compiler::child(exe),
        Err(e) => {
            tracing::warn!(target: LOG_TARGET, error = %e,
                "cannot find this program's path; components missing from the cache compile in this process");
            Compiler::InProcess
        }
    }
}

/// tokio's default runtime, for the commands other than a run (the emulator serves many
/// clients).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn kube_config(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Config> {
    Ok(match kubeconfig {
        Some(p) => Config::from_kubeconfig_paths(
            &[p.to_path_buf()],
            &KubeconfigOptions {
                context: context.map(str::to_owned),
                ..Default::default()
            },
        )?,
        None => Config::infer(context)?,
    })
}
