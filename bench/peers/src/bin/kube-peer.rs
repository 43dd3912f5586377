//! The kube-rs side of the peer benchmark: one process holding a cache of one kind, as a kube-rs
//! controller built on `reflector` does, and nothing else.
//!
//! It talks to the driver over its standard streams so that the driver learns what it needs
//! without polling it: `synced <objects>` once the initial list is in the store, and, for each
//! `target <n>` line read on stdin, `reached <n>` as soon as it has seen `n` events after the
//! sync. `relist` and `error <text>` lines report what would make a run incomparable.

use std::fmt::Debug;
use std::io::Write;

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Lookup};
use kube::runtime::watcher as full_watcher;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Config, Resource};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    Configmap,
    Pod,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    /// `reflector` over the default `watcher`: whole typed objects in a store.
    Reflector,
    /// `reflector` over a metadata-only watcher (kube 5's form of `metadata_watcher`, which it
    /// deprecates: `watcher` over `Api<PartialObjectMeta<K>>`): `PartialObjectMeta` in a store.
    Metadata,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    #[arg(long, value_enum)]
    kind: Kind,
    #[arg(long, value_enum, default_value = "reflector")]
    mode: Mode,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Also keep stores of Deployments and Secrets, as the config reloader watches them, so the
    /// two processes hold the same caches.
    #[arg(long)]
    reloader_kinds: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // A kube-rs controller's usual runtime: tokio's multi-threaded one, a worker per core.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    let ns = args.namespace.as_deref();

    let (targets_tx, targets) = mpsc::unbounded_channel();
    tokio::spawn(read_targets(targets_tx));

    if args.reloader_kinds {
        tokio::spawn(keep_store(api::<Deployment>(&client, ns)));
        tokio::spawn(keep_store(api::<Secret>(&client, ns)));
    }
    let cfg = watcher::Config::default();
    match (args.kind, args.mode) {
        (Kind::Configmap, Mode::Reflector) => {
            count(full_watcher(api::<ConfigMap>(&client, ns), cfg), targets).await
        }
        (Kind::Pod, Mode::Reflector) => {
            count(full_watcher(api::<Pod>(&client, ns), cfg), targets).await
        }
        (Kind::Configmap, Mode::Metadata) => {
            let api = api::<PartialObjectMeta<ConfigMap>>(&client, ns);
            count(full_watcher(api, cfg), targets).await
        }
        (Kind::Pod, Mode::Metadata) => {
            let api = api::<PartialObjectMeta<Pod>>(&client, ns);
            count(full_watcher(api, cfg), targets).await
        }
    }
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Lines `target <n>` from the driver; the stream ends with stdin.
async fn read_targets(tx: mpsc::UnboundedSender<u64>) {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match line
            .strip_prefix("target ")
            .map(|n| n.trim().parse::<u64>())
        {
            Some(Ok(n)) => {
                if tx.send(n).is_err() {
                    return;
                }
            }
            _ => say(&format!("error unknown command {line:?}")),
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The driver reads these lines; if it is gone there is no one left to tell.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A store kept current for a kind whose events the driver does not count.
async fn keep_store<K>(api: Api<K>)
where
    K: Resource + Lookup + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    <K as Lookup>::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let (_reader, writer) = reflector::store::<K>();
    let mut stream = std::pin::pin!(reflector::reflector(
        writer,
        full_watcher(api, watcher::Config::default())
    ));
    while let Some(ev) = stream.next().await {
        if let Err(e) = ev {
            say(&format!("error {e}"));
        }
    }
}

/// Runs the reflector over `events`, keeping the store, and counts events.
async fn count<K, S>(events: S, mut targets: mpsc::UnboundedReceiver<u64>) -> anyhow::Result<()>
where
    K: Lookup + Clone + Send + Sync + 'static,
    <K as Lookup>::DynamicType: Eq + std::hash::Hash + Clone + Default,
    S: Stream<Item = watcher::Result<Event<K>>> + Send,
{
    let (reader, writer) = reflector::store::<K>();
    let mut stream = std::pin::pin!(reflector::reflector(writer, events));
    let mut synced = false;
    let mut initial = 0u64;
    let mut seen = 0u64;
    let mut target: Option<u64> = None;
    let mut targets_open = true;
    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(ev) = ev else { bail!("the watch stream ended") };
                match ev {
                    Ok(Event::Init) => {
                        if synced {
                            say("relist");
                        }
                        initial = 0;
                    }
                    Ok(Event::InitApply(_)) => initial += 1,
                    Ok(Event::InitDone) => {
                        if !synced {
                            synced = true;
                            say(&format!("synced {initial} {}", reader.state().len()));
                        }
                    }
                    Ok(Event::Apply(_) | Event::Delete(_)) => {
                        seen += 1;
                        if target.is_some_and(|t| seen >= t) {
                            say(&format!("reached {seen}"));
                            target = None;
                        }
                    }
                    Err(e) => say(&format!("error {e}")),
                }
            }
            t = targets.recv(), if targets_open => match t {
                Some(t) if seen >= t => say(&format!("reached {seen}")),
                Some(t) => target = Some(t),
                None => targets_open = false,
            },
        }
    }
}
