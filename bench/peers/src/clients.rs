//! The measured processes: the host with one guest, or `kube-peer`, and how the driver learns
//! what each has seen.
//!
//! `kube-peer` says it itself, on its stdout, when asked. The host is asked through its
//! `/metrics` (`plugin_notifications_total`): each scrape costs it some CPU, so the driver
//! scrapes rarely while a load runs, finely only once the load has been sent (when the last
//! events are due), counts its scrapes and measures what one costs, to take them out.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::ValueEnum;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};

use crate::objects::Kind;
use crate::spawn;

/// One measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Variant {
    /// The host with the raw no-op guest (`tests/guests/bench-noop`).
    HostNoop,
    /// kube-rs `reflector` over the default `watcher`.
    KubeReflector,
    /// The host with the SDK guest, default handlers (`tests/guests/bench-sdk`).
    HostSdk,
    /// The same SDK guest with a reconcile that reads nothing (`tests/guests/bench-sdk-bare`):
    /// what the SDK's path costs without the read.
    HostSdkBare,
    /// kube-rs `reflector` over a metadata-only watcher.
    KubeMetadata,
    /// The host with `examples/config-reloader` (ConfigMaps, Deployments, Secrets).
    HostReloader,
    /// kube-rs reflectors over ConfigMaps, Deployments and Secrets: what the reloader watches.
    KubeReloaderKinds,
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::HostNoop => "host, no-op guest",
            Variant::HostSdk => "host, SDK guest",
            Variant::HostSdkBare => "host, SDK guest, reconcile without a read",
            Variant::HostReloader => "host, config-reloader",
            Variant::KubeReflector => "kube-rs reflector",
            Variant::KubeMetadata => "kube-rs metadata watcher",
            Variant::KubeReloaderKinds => "kube-rs reflector ×3 (reloader's kinds)",
        }
    }

    pub fn is_host(self) -> bool {
        matches!(
            self,
            Variant::HostNoop | Variant::HostSdk | Variant::HostSdkBare | Variant::HostReloader
        )
    }

    /// The guests' watches are fixed in their manifests: the no-op and SDK guests watch
    /// ConfigMaps, the reloader ConfigMaps (and Deployments and Secrets); the Pod variants of
    /// the first two are the `pod` builds of the same crates (see [`Guests`]).
    pub fn supports(self, kind: Kind) -> bool {
        !matches!(
            self,
            Variant::HostReloader | Variant::KubeReloaderKinds | Variant::HostSdkBare
        ) || kind == Kind::Configmap
    }
}

/// The guest components, by what they watch.
#[derive(Debug, Clone)]
pub struct Guests {
    pub noop: PathBuf,
    pub sdk: PathBuf,
    pub sdk_bare: PathBuf,
    pub noop_pod: Option<PathBuf>,
    pub sdk_pod: Option<PathBuf>,
    pub reloader: PathBuf,
}

impl Guests {
    pub fn for_variant(&self, variant: Variant, kind: Kind) -> anyhow::Result<&Path> {
        let (cm, pod, flag) = match variant {
            Variant::HostNoop => (&self.noop, &self.noop_pod, "--noop-pod-wasm"),
            Variant::HostSdk => (&self.sdk, &self.sdk_pod, "--sdk-pod-wasm"),
            Variant::HostReloader => return Ok(&self.reloader),
            Variant::HostSdkBare => return Ok(&self.sdk_bare),
            _ => bail!("{} runs no guest", variant.label()),
        };
        match kind {
            Kind::Configmap => Ok(cm),
            Kind::Pod => pod
                .as_deref()
                .with_context(|| format!("{} on Pods needs {flag}", variant.label())),
        }
    }
}

/// Where the binaries are and what the clients connect to.
#[derive(Debug, Clone)]
pub struct Setup {
    pub host: PathBuf,
    pub kube_peer: PathBuf,
    pub guests: Guests,
    pub cache_dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// Confine the clients' watches to this namespace (a real cluster); `None`: all namespaces.
    pub namespace: Option<String>,
    pub dir: PathBuf,
    /// The emulator's process, whose CPU each phase reports too (none on a real cluster).
    pub server_pid: Option<u32>,
}

/// A running client.
pub struct Client {
    pub pid: u32,
    pub spawned: Instant,
    pub log: PathBuf,
    probe: Probe,
    child: Child,
}

enum Probe {
    Host(Scraper),
    Kube {
        stdin: ChildStdin,
        lines: mpsc::UnboundedReceiver<String>,
    },
}

impl Client {
    pub async fn start(
        setup: &Setup,
        variant: Variant,
        kind: Kind,
        run: &str,
    ) -> anyhow::Result<Client> {
        if variant.is_host() {
            let wasm = setup.guests.for_variant(variant, kind)?;
            let mut args = vec!["--plugin".to_owned(), wasm.display().to_string()];
            if let Some(ns) = &setup.namespace {
                args.extend(["--namespace".into(), ns.clone()]);
            }
            return Client::host(setup, &args, run);
        }
        Client::kube(setup, variant, kind, setup.namespace.as_deref(), run)
    }

    /// The host with `plugin_args` (`--plugin x.wasm`, `--plugins FILE`, …), its /metrics on a
    /// free port and the run's compile cache.
    pub fn host(setup: &Setup, plugin_args: &[String], run: &str) -> anyhow::Result<Client> {
        let log = setup.dir.join(format!("{run}.log"));
        let addr = free_port()?;
        let mut args: Vec<String> = vec![
            "--kubeconfig".into(),
            setup.kubeconfig.display().to_string(),
            "--metrics-addr".into(),
            addr.to_string(),
            "--cache-dir".into(),
            setup.cache_dir.display().to_string(),
        ];
        args.extend(plugin_args.iter().cloned());
        let spawned = Instant::now();
        let child = spawn::child(&setup.host, &args, &log, false)?;
        let pid = child.id().context("the host exited at once")?;
        Ok(Client {
            pid,
            spawned,
            log,
            probe: Probe::Host(Scraper::new(addr)),
            child,
        })
    }

    /// `kube-peer` as `variant` (a kube-rs one) over `kind`, in `namespace` (`None`: all).
    pub fn kube(
        setup: &Setup,
        variant: Variant,
        kind: Kind,
        namespace: Option<&str>,
        run: &str,
    ) -> anyhow::Result<Client> {
        let log = setup.dir.join(format!("{run}.log"));
        let mut args: Vec<String> = vec![
            "--kubeconfig".into(),
            setup.kubeconfig.display().to_string(),
        ];
        if let Some(ns) = namespace {
            args.extend(["--namespace".into(), ns.to_owned()]);
        }
        args.extend(["--kind".into(), kind_arg(kind).into(), "--mode".into()]);
        args.push(
            match variant {
                Variant::KubeMetadata => "metadata",
                _ => "reflector",
            }
            .into(),
        );
        if variant == Variant::KubeReloaderKinds {
            args.push("--reloader-kinds".into());
        }
        let spawned = Instant::now();
        let mut child = spawn::child(&setup.kube_peer, &args, &log, true)?;
        let pid = child.id().context("kube-peer exited at once")?;
        let stdin = child.stdin.take().context("kube-peer's stdin")?;
        let stdout = child.stdout.take().context("kube-peer's stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Client {
            pid,
            spawned,
            log,
            probe: Probe::Kube { stdin, lines },
            child,
        })
    }

    /// Waits until the client holds `objects` objects and has handed each to its handler (the
    /// host: notified its guest; kube-rs: the watcher's `InitDone`, after every `InitApply`);
    /// the moment it was seen. The host is scraped every `poll`, so its time is late by up to
    /// that.
    pub async fn wait_synced(
        &mut self,
        objects: u64,
        poll: Duration,
        deadline: Duration,
    ) -> anyhow::Result<Instant> {
        let until = Instant::now() + deadline;
        let log = self.log.display().to_string();
        match &mut self.probe {
            Probe::Host(scraper) => {
                loop {
                    if let Some(status) = self.child.try_wait()? {
                        bail!("the host exited ({status}) before it synced (log: {log})");
                    }
                    if let Ok(n) = scraper.notifications().await {
                        if n >= objects {
                            if n > objects {
                                bail!("the host was notified of {n} objects where {objects} exist (log: {log})");
                            }
                            return Ok(Instant::now());
                        }
                    }
                    if Instant::now() > until {
                        bail!("the host did not sync {objects} objects within {deadline:?} (log: {log})");
                    }
                    tokio::time::sleep(poll).await;
                }
            }
            Probe::Kube { lines, .. } => {
                let line = next_line(lines, until, &log).await?;
                let Some(rest) = line.strip_prefix("synced ") else {
                    bail!("kube-peer said {line:?} before its sync (log: {log})");
                };
                let n = rest.split(' ').next().and_then(|n| n.parse::<u64>().ok());
                if n != Some(objects) {
                    bail!("kube-peer synced {rest:?} objects where {objects} exist");
                }
                Ok(Instant::now())
            }
        }
    }

    /// Waits until the client has seen `events` events since its sync; the moment it was
    /// seen. The host is scraped every `coarse` until `load_done`, then every `fine`.
    pub async fn wait_events(
        &mut self,
        objects: u64,
        events: u64,
        load_done: &watch::Receiver<bool>,
        (coarse, fine): (Duration, Duration),
        deadline: Duration,
    ) -> anyhow::Result<Instant> {
        let until = Instant::now() + deadline;
        let log = self.log.display().to_string();
        match &mut self.probe {
            Probe::Host(scraper) => loop {
                let n = scraper.notifications().await?;
                if n >= objects + events {
                    if n > objects + events {
                        bail!("the host was notified {} times since its sync, {events} expected: a relist? (log: {log})", n - objects);
                    }
                    return Ok(Instant::now());
                }
                if Instant::now() > until {
                    bail!(
                        "the host saw {} of {events} events within {deadline:?} (log: {log})",
                        n - objects
                    );
                }
                if *load_done.borrow() {
                    tokio::time::sleep(fine).await;
                } else {
                    // The load's end is when the last events are due: wake for it at once.
                    let mut done = load_done.clone();
                    tokio::select! {
                        _ = tokio::time::sleep(coarse) => {}
                        _ = done.wait_for(|d| *d) => {}
                    }
                }
            },
            Probe::Kube { stdin, lines } => {
                stdin
                    .write_all(format!("target {events}\n").as_bytes())
                    .await
                    .context("writing to kube-peer")?;
                stdin.flush().await.context("writing to kube-peer")?;
                let line = next_line(lines, until, &log).await?;
                match line.strip_prefix("reached ").map(str::parse::<u64>) {
                    Some(Ok(n)) if n == events => Ok(Instant::now()),
                    Some(Ok(n)) => bail!(
                        "kube-peer saw {n} events since its sync, {events} expected: a relist?"
                    ),
                    _ => bail!("kube-peer said {line:?} while events were due (log: {log})"),
                }
            }
        }
    }

    /// `r`, an error in it told whether and how the process had ended by then.
    pub async fn explain<T>(&mut self, r: anyhow::Result<T>) -> anyhow::Result<T> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                let status = self.exit_note().await;
                Err(e.context(status))
            }
        }
    }

    /// Whether and how the process ended, for an error message.
    async fn exit_note(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(status)) => format!("the process had exited: {status}"),
            Ok(Err(e)) => format!("its exit status is unknown: {e}"),
            Err(_) => "the process was still running".to_owned(),
        }
    }

    /// Scrapes made so far (the host only).
    pub fn scrapes(&self) -> u64 {
        match &self.probe {
            Probe::Host(s) => s.scrapes,
            Probe::Kube { .. } => 0,
        }
    }

    /// Makes `n` scrapes in a row (the host only; kube-peer costs nothing to ask).
    pub async fn scrape_n(&mut self, n: u64) -> anyhow::Result<()> {
        if let Probe::Host(s) = &mut self.probe {
            for _ in 0..n {
                s.notifications().await?;
            }
        }
        Ok(())
    }
}

fn kind_arg(kind: Kind) -> &'static str {
    match kind {
        Kind::Configmap => "configmap",
        Kind::Pod => "pod",
    }
}

/// A line from kube-peer; `error`, `relist` and an ended stream are failures.
async fn next_line(
    lines: &mut mpsc::UnboundedReceiver<String>,
    until: Instant,
    log: &str,
) -> anyhow::Result<String> {
    let left = until.saturating_duration_since(Instant::now());
    let line = tokio::time::timeout(left, lines.recv())
        .await
        .with_context(|| format!("kube-peer said nothing in time (log: {log})"))?
        .with_context(|| format!("kube-peer exited (log: {log})"))?;
    if line.starts_with("error") || line == "relist" {
        bail!("kube-peer: {line} (log: {log})");
    }
    Ok(line)
}

/// A loopback port nothing listens on now (the host binds it a moment later).
fn free_port() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?)
}

/// `GET /metrics` over one keep-alive connection.
struct Scraper {
    addr: SocketAddr,
    conn: Option<SendRequest<Empty<Bytes>>>,
    scrapes: u64,
}

impl Scraper {
    fn new(addr: SocketAddr) -> Scraper {
        Scraper {
            addr,
            conn: None,
            scrapes: 0,
        }
    }

    /// The sum of `plugin_notifications_total` over the host's plugins.
    async fn notifications(&mut self) -> anyhow::Result<u64> {
        let text = match self.get().await {
            Ok(t) => t,
            Err(e) => {
                self.conn = None;
                return Err(e);
            }
        };
        self.scrapes += 1;
        let mut total = 0u64;
        let mut found = false;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("plugin_notifications_total{") {
                let value = rest.rsplit(' ').next().unwrap_or("");
                let v: f64 = value
                    .parse()
                    .with_context(|| format!("/metrics: {line:?} has no number"))?;
                total += v as u64;
                found = true;
            }
        }
        if !found {
            bail!("/metrics has no plugin_notifications_total yet");
        }
        Ok(total)
    }

    async fn get(&mut self) -> anyhow::Result<String> {
        if self.conn.is_none() {
            let tcp = tokio::net::TcpStream::connect(self.addr).await?;
            tcp.set_nodelay(true)?;
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
            tokio::spawn(conn);
            self.conn = Some(sender);
        }
        let Some(sender) = self.conn.as_mut() else {
            bail!("no connection");
        };
        sender.ready().await?;
        let req = http::Request::get("/metrics")
            .header("host", self.addr.to_string())
            .body(Empty::new())?;
        let res = sender.send_request(req).await?;
        if !res.status().is_success() {
            bail!("/metrics answered {}", res.status());
        }
        let body = res.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}
