//! `peers many`: N idle SDK plugins in one host against N kube-rs processes, the way a platform
//! team would otherwise run N controllers.
//!
//! Each of N namespaces holds the same few ConfigMaps. Two ways to watch them:
//! - **own**: plugin i is confined to namespace i (the plugins file's `namespace`), so the host
//!   runs N informers, one watch each; kube-rs: process i watches namespace i;
//! - **shared**: every plugin watches all namespaces, so the host runs one informer whose
//!   events go to N plugins; kube-rs: N processes each watching all namespaces.
//!
//! The plugins are N copies of the SDK bench guest, each renamed in its bytes (a plugin's name
//! comes from its manifest, in its code, and names must differ), so each is a component of its
//! own with its own compiled code, as N third-party controllers would be.
//!
//! Memory is given as RSS and as PSS (`smaps_rollup`): N kube-rs processes share their binary's
//! code, which a sum of RSS counts N times and a sum of PSS once. The host maps each plugin's
//! compiled code from the compile cache, so that part of its PSS is file-backed (clean pages the
//! kernel can drop and read again) and listed apart from the anonymous part.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::ValueEnum;
use futures_util::future::try_join_all;
use tokio::sync::watch;

use crate::bench::{self, Deadlines, Polls};
use crate::clients::{Client, Setup, Variant};
use crate::load::{self, Pace, Targets};
use crate::objects::Kind;
use crate::proc_stats::{self, Pss};
use crate::table::{self, median, mib, micros};
use crate::{api, emulator, seed};

/// How the plugins (and the kube-rs processes) watch the namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Watches {
    /// Each in its own namespace: N watches, each event reaches one plugin.
    Own,
    /// All of them all namespaces: the host's one watch feeds N plugins; N kube-rs watches.
    Shared,
}

/// Which side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Side {
    /// One host process with N plugins.
    Host,
    /// N kube-rs reflector processes.
    Kube,
}

pub struct Plan {
    pub counts: Vec<usize>,
    pub per_namespace: usize,
    pub watches: Vec<Watches>,
    pub sides: Vec<Side>,
    /// kube-rs runs only up to this many processes.
    pub kube_up_to: usize,
    /// Patches per update phase (rounded up to a multiple of N, so each namespace gets as many).
    pub updates: u64,
    pub rate: f64,
    pub rounds: usize,
    pub polls: Polls,
    pub deadlines: Deadlines,
    pub seed_concurrency: usize,
}

/// One measurement: one side, N plugins, one way of watching.
#[derive(Debug, Clone)]
struct Row {
    plugins: usize,
    watches: Watches,
    side: Side,
    sync_time: Duration,
    sync_cpu: Duration,
    rss: u64,
    pss: Pss,
    updates: u64,
    /// Handler notifications (host) or events received (kube-rs, summed) per patch.
    fan_out: u64,
    update_cpu: Duration,
    update_wall: Duration,
}

/// Runs every count; prints one table per way of watching.
pub async fn run(plan: &Plan, setup: &Setup, sdk_wasm: &Path) -> anyhow::Result<String> {
    let most = plan.counts.iter().copied().max().unwrap_or(0);
    let modules = renamed_copies(sdk_wasm, &setup.dir.join("plugins"), most)?;
    eprintln!("[peers] compiling {most} plugins into the run's cache");
    crate::warm_cache(&setup.host, &setup.cache_dir, &modules, &setup.dir).await?;
    let seq = AtomicU64::new(1);
    let mut rows = Vec::new();
    let mut stored = 0usize;
    for &n in &plan.counts {
        let (r, s) = one_count(plan, setup, &modules[..n], &seq).await?;
        rows.extend(r);
        stored = s;
    }
    Ok(render(plan, &rows, stored))
}

/// Copies of the SDK bench guest named `plugin-00000`, `plugin-00001`, … in `dir`: the guest's
/// 12-byte name placeholder `bench-sdk-00` occurs once, in a data segment.
fn renamed_copies(sdk_wasm: &Path, dir: &Path, count: usize) -> anyhow::Result<Vec<PathBuf>> {
    const PLACEHOLDER: &[u8] = b"bench-sdk-00";
    let bytes =
        std::fs::read(sdk_wasm).with_context(|| format!("reading {}", sdk_wasm.display()))?;
    let at: Vec<usize> = bytes
        .windows(PLACEHOLDER.len())
        .enumerate()
        .filter(|(_, w)| *w == PLACEHOLDER)
        .map(|(i, _)| i)
        .collect();
    let [at] = at[..] else {
        bail!(
            "{}: the name placeholder `bench-sdk-00` occurs {} times, not once",
            sdk_wasm.display(),
            at.len()
        );
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    (0..count)
        .map(|i| {
            let name = plugin_name(i);
            debug_assert_eq!(name.len(), PLACEHOLDER.len());
            let mut b = bytes.clone();
            b[at..at + PLACEHOLDER.len()].copy_from_slice(name.as_bytes());
            let p = dir.join(format!("{name}.wasm"));
            std::fs::write(&p, b).with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        })
        .collect()
}

fn plugin_name(i: usize) -> String {
    format!("plugin-{i:05}")
}

fn namespace(i: usize) -> String {
    format!("tenant-{i:05}")
}

/// The plugins file of `modules` watching as `watches` says.
fn plugins_file(dir: &Path, modules: &[PathBuf], watches: Watches) -> anyhow::Result<PathBuf> {
    let mut text = String::new();
    for (i, m) in modules.iter().enumerate() {
        let _ = writeln!(text, "- module: {}", m.display());
        if watches == Watches::Own {
            let _ = writeln!(text, "  namespace: {}", namespace(i));
        }
    }
    let p = dir.join(format!("plugins-{}-{watches:?}.yaml", modules.len()).to_lowercase());
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// One emulator with `modules.len()` namespaces; every way of watching, every side, every round.
async fn one_count(
    plan: &Plan,
    setup: &Setup,
    modules: &[PathBuf],
    seq: &AtomicU64,
) -> anyhow::Result<(Vec<Row>, usize)> {
    let n = modules.len();
    let updates = plan.updates.div_ceil(n as u64) * n as u64;
    let window = (2 * updates as usize).max(10_000);
    let emu = emulator::Emulator::start(&setup.host, &setup.dir, window).await?;
    let api = api::connect(&emu.kubeconfig).await?;
    eprintln!(
        "[peers] seeding {n} namespaces × {} ConfigMaps",
        plan.per_namespace
    );
    let mut stored = 0;
    for i in 0..n {
        let s = seed::seed(
            &api,
            Kind::Configmap,
            &namespace(i),
            plan.per_namespace,
            Kind::Configmap.default_size(),
            plan.seed_concurrency,
        )
        .await?;
        stored = s.stored_bytes;
    }
    // Patches go round the namespaces first, so any multiple of N patches is the same number
    // in each namespace.
    let names: Vec<(String, String)> = (0..plan.per_namespace)
        .flat_map(|j| (0..n).map(move |i| (namespace(i), Kind::Configmap.name(j))))
        .collect();
    let targets = Targets::new(Kind::Configmap, &names);
    let setup = Setup {
        kubeconfig: emu.kubeconfig.clone(),
        server_pid: Some(emu.pid),
        ..setup.clone()
    };
    let mut rows = Vec::new();
    for round in 0..plan.rounds {
        for &watches in &plan.watches {
            for &side in &plan.sides {
                if side == Side::Kube && n > plan.kube_up_to {
                    continue;
                }
                let run = format!("many-{n}-{watches:?}-{side:?}-r{}", round + 1).to_lowercase();
                eprintln!("[peers] {run}");
                let row = match side {
                    Side::Host => {
                        let file = plugins_file(&setup.dir, modules, watches)?;
                        measure_host(
                            plan, &setup, &api, &targets, seq, &file, n, watches, updates, &run,
                        )
                        .await
                    }
                    Side::Kube => {
                        measure_kube(plan, &setup, &api, &targets, seq, n, watches, updates, &run)
                            .await
                    }
                }
                .with_context(|| format!("run {run}"))?;
                eprintln!(
                    "[peers]   sync {:.3} s, CPU {:.3} s, PSS {:.1} MiB (anon {:.1}), {:.1} µs CPU per patch",
                    row.sync_time.as_secs_f64(),
                    row.sync_cpu.as_secs_f64(),
                    mib(row.pss.total),
                    mib(row.pss.anon),
                    micros(row.update_cpu) / row.updates.max(1) as f64
                );
                rows.push(row);
            }
        }
    }
    Ok((rows, stored))
}

/// Objects each client holds, and notifications per patch, for N plugins watching as said.
fn fan(n: usize, per: usize, watches: Watches) -> (u64, u64) {
    match watches {
        Watches::Own => ((n * per) as u64, 1),
        Watches::Shared => ((n * n * per) as u64, n as u64),
    }
}

#[allow(clippy::too_many_arguments)]
async fn measure_host(
    plan: &Plan,
    setup: &Setup,
    api: &kube::Client,
    targets: &Targets,
    seq: &AtomicU64,
    file: &Path,
    n: usize,
    watches: Watches,
    updates: u64,
    run: &str,
) -> anyhow::Result<Row> {
    let args = ["--plugins".to_owned(), file.display().to_string()];
    let mut client = Client::host(setup, &args, run)?;
    let result = async {
        let (synced_objects, per_patch) = fan(n, plan.per_namespace, watches);
        let synced = client
            .wait_synced(synced_objects, plan.polls.sync, plan.deadlines.sync)
            .await?;
        let sync_time = synced.duration_since(client.spawned);
        let sync_scrapes = client.scrapes();
        let cpu_synced =
            proc_stats::settle(client.pid, plan.polls.settle, plan.deadlines.settle).await?;
        let (rss, pss) = (
            proc_stats::mem(client.pid)?.rss,
            proc_stats::pss(client.pid)?,
        );
        let cost = bench::scrape_cost(&mut client, &plan.polls, &plan.deadlines).await?;
        let sync_cpu = cpu_synced.saturating_sub(cost * sync_scrapes as u32);

        let events = updates * per_patch;
        let deadline =
            Duration::from_secs_f64(updates as f64 / plan.rate) + plan.deadlines.load_slack;
        let (load_done, load_done_rx) = watch::channel(false);
        let scrapes_before = client.scrapes();
        let cpu_before = proc_stats::cpu(client.pid)?;
        let pace = (updates, Pace::Rate(plan.rate), deadline);
        let load = load::run_then_signal(api, targets, seq, pace, &load_done);
        let seen = client.wait_events(
            synced_objects,
            events,
            &load_done_rx,
            (plan.polls.coarse, plan.polls.fine),
            deadline,
        );
        let (report, last) = tokio::join!(load, seen);
        let (report, last) = (report?, last?);
        let cpu_after =
            proc_stats::settle(client.pid, plan.polls.settle, plan.deadlines.settle).await?;
        let scrapes = client.scrapes() - scrapes_before;
        anyhow::Ok(Row {
            plugins: n,
            watches,
            side: Side::Host,
            sync_time,
            sync_cpu,
            rss,
            pss,
            updates,
            fan_out: per_patch,
            update_cpu: cpu_after
                .saturating_sub(cpu_before)
                .saturating_sub(cost * scrapes as u32),
            update_wall: last.duration_since(report.started),
        })
    }
    .await;
    client.explain(result).await
}

#[allow(clippy::too_many_arguments)]
async fn measure_kube(
    plan: &Plan,
    setup: &Setup,
    api: &kube::Client,
    targets: &Targets,
    seq: &AtomicU64,
    n: usize,
    watches: Watches,
    updates: u64,
    run: &str,
) -> anyhow::Result<Row> {
    let started = Instant::now();
    let mut clients = (0..n)
        .map(|i| {
            let ns = namespace(i);
            let scope = (watches == Watches::Own).then_some(ns.as_str());
            Client::kube(
                setup,
                Variant::KubeReflector,
                Kind::Configmap,
                scope,
                &format!("{run}-{i}"),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pids: Vec<u32> = clients.iter().map(|c| c.pid).collect();
    // Each process holds its namespace's objects (own) or all of them (shared), and sees the
    // patches of its namespace (own: updates / N) or all of them.
    let (each_objects, each_events) = match watches {
        Watches::Own => (plan.per_namespace as u64, updates / n as u64),
        Watches::Shared => ((n * plan.per_namespace) as u64, updates),
    };
    let synced = try_join_all(
        clients
            .iter_mut()
            .map(|c| c.wait_synced(each_objects, plan.polls.sync, plan.deadlines.sync)),
    )
    .await?;
    let last_synced = synced.into_iter().max().unwrap_or(started);
    let sync_time = last_synced.duration_since(started);
    let sync_cpu = proc_stats::settle_all(&pids, plan.polls.settle, plan.deadlines.settle).await?;
    let mut rss = 0;
    let mut pss = Pss::default();
    for &p in &pids {
        rss += proc_stats::mem(p)?.rss;
        let q = proc_stats::pss(p)?;
        pss.total += q.total;
        pss.anon += q.anon;
        pss.file += q.file;
    }

    let deadline = Duration::from_secs_f64(updates as f64 / plan.rate) + plan.deadlines.load_slack;
    let (load_done, load_done_rx) = watch::channel(false);
    let cpu_before = proc_stats::cpu_sum(&pids)?;
    let pace = (updates, Pace::Rate(plan.rate), deadline);
    let load = load::run_then_signal(api, targets, seq, pace, &load_done);
    let seen = try_join_all(clients.iter_mut().map(|c| {
        c.wait_events(
            each_objects,
            each_events,
            &load_done_rx,
            (plan.polls.coarse, plan.polls.fine),
            deadline,
        )
    }));
    let (report, last) = tokio::join!(load, seen);
    let (report, last) = (report?, last?);
    let last = last.into_iter().max().unwrap_or(report.started);
    let cpu_after = proc_stats::settle_all(&pids, plan.polls.settle, plan.deadlines.settle).await?;
    Ok(Row {
        plugins: n,
        watches,
        side: Side::Kube,
        sync_time,
        sync_cpu,
        rss,
        pss,
        updates,
        fan_out: match watches {
            Watches::Own => 1,
            Watches::Shared => n as u64,
        },
        update_cpu: cpu_after.saturating_sub(cpu_before),
        update_wall: last.duration_since(report.started),
    })
}

/// The Markdown tables: medians over rounds.
fn render(plan: &Plan, rows: &[Row], stored: usize) -> String {
    let mut out = String::new();
    for &watches in &plan.watches {
        let title = match watches {
            Watches::Own => "each plugin in its own namespace (host: N watches; kube-rs: N processes, one namespace each)",
            Watches::Shared => "all plugins on all namespaces (host: one watch for N plugins; kube-rs: N processes watching everything)",
        };
        let _ = writeln!(out, "\n### {title}\n");
        let _ = writeln!(
            out,
            "| plugins | client | time to sync | CPU to sync | RSS after sync (sum) | PSS after sync | of which anonymous | PSS per plugin over 1 | CPU per patch | notifications per patch | CPU per notification | events/s |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &side in &plan.sides {
            let base = med(rows, 1, watches, side, |r| r.pss.total as f64);
            for &n in &plan.counts {
                let pick = |f: fn(&Row) -> f64| med(rows, n, watches, side, f);
                let Some(pss) = pick(|r| r.pss.total as f64) else {
                    continue;
                };
                let label = match side {
                    Side::Host => "host, N SDK plugins".to_owned(),
                    Side::Kube => format!("kube-rs reflector × {n}"),
                };
                let per_plugin = match (base, n) {
                    (Some(b), n) if n > 1 => format!(
                        "{:.2} MiB",
                        mib(((pss - b) / (n - 1) as f64).max(0.0) as u64)
                    ),
                    _ => "-".into(),
                };
                let cpu_patch = pick(|r| micros(r.update_cpu) / r.updates.max(1) as f64);
                let fan_out = pick(|r| r.fan_out as f64).unwrap_or(1.0);
                let _ = writeln!(
                    out,
                    "| {n} | {label} | {:.2} s | {:.3} s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {per_plugin} | {:.0} µs | {} | {:.1} µs | {:.0} |",
                    pick(|r| r.sync_time.as_secs_f64()).unwrap_or(0.0),
                    pick(|r| r.sync_cpu.as_secs_f64()).unwrap_or(0.0),
                    mib(pick(|r| r.rss as f64).unwrap_or(0.0) as u64),
                    mib(pss as u64),
                    mib(pick(|r| r.pss.anon as f64).unwrap_or(0.0) as u64),
                    cpu_patch.unwrap_or(0.0),
                    table::thousands(fan_out as u64),
                    cpu_patch.unwrap_or(0.0) / fan_out.max(1.0),
                    pick(|r| (r.updates * r.fan_out) as f64 / r.update_wall.as_secs_f64().max(1e-9)).unwrap_or(0.0),
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\n{} ConfigMaps per namespace, {stored} B each as stored; {} patches per phase at {}/s (rounded up to a multiple of N); kube-rs up to {} processes; {} round(s), medians.",
        plan.per_namespace,
        plan.updates,
        plan.rate,
        plan.kube_up_to,
        plan.rounds
    );
    out
}

fn med(rows: &[Row], n: usize, watches: Watches, side: Side, f: fn(&Row) -> f64) -> Option<f64> {
    median(
        rows.iter()
            .filter(|r| r.plugins == n && r.watches == watches && r.side == side)
            .map(f)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_placeholders_width() {
        assert_eq!(plugin_name(0).len(), b"bench-sdk-00".len());
        assert_eq!(plugin_name(99_999).len(), b"bench-sdk-00".len());
    }

    #[test]
    fn shared_watches_fan_each_patch_out_to_every_plugin() {
        assert_eq!(fan(10, 3, Watches::Own), (30, 1));
        assert_eq!(fan(10, 3, Watches::Shared), (300, 10));
    }
}
