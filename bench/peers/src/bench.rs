//! `peers run`: for each object set, seed it once, then run every variant in its own process,
//! round after round (host, kube-rs, host, kube-rs, …), each through the same phases: the
//! initial sync, then the update loads in order.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use crate::clients::{Client, Setup, Variant};
use crate::load::{self, Pace, Targets};
use crate::objects::Kind;
use crate::proc_stats;
use crate::table::{ObjectSet, PhaseSample, Sample};

/// What the driver needs to measure one object set.
pub struct Plan {
    pub kind: Kind,
    pub objects: usize,
    pub updates: u64,
    pub paces: Vec<Pace>,
    pub rounds: usize,
    pub variants: Vec<Variant>,
    pub polls: Polls,
    pub deadlines: Deadlines,
}

#[derive(Debug, Clone, Copy)]
pub struct Polls {
    /// The host's /metrics while it syncs: its sync time is late by up to this.
    pub sync: Duration,
    /// While a load is being sent.
    pub coarse: Duration,
    /// Once the load has been sent, until the last event is seen.
    pub fine: Duration,
    /// Idle window that ends a phase (see [`proc_stats::settle`]).
    pub settle: Duration,
    /// Scrapes per batch (three batches) made back to back to measure what one costs the host.
    pub cost_scrapes: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub sync: Duration,
    pub settle: Duration,
    /// Added to each load's own expected length.
    pub load_slack: Duration,
}

/// The phase's label in the tables.
pub fn pace_label(p: Pace) -> String {
    match p {
        Pace::Rate(r) => format!("{}/s", crate::table::thousands(r as u64)),
        Pace::Burst { .. } => "burst".to_owned(),
    }
}

/// Runs every round of every variant on one seeded object set.
pub async fn measure_set(
    plan: &Plan,
    setup: &Setup,
    api: &kube::Client,
    targets: &Targets,
    objects_seen: u64,
    stored_bytes: usize,
    seq: &AtomicU64,
) -> anyhow::Result<ObjectSet> {
    let mut samples = Vec::new();
    let mut notes = Vec::new();
    let variants: Vec<Variant> = plan
        .variants
        .iter()
        .copied()
        .filter(|v| v.supports(plan.kind))
        .collect();
    for round in 0..plan.rounds {
        for &variant in &variants {
            let run = format!(
                "{}-{}-{:?}-r{}",
                plan.kind.plural(),
                plan.objects,
                variant,
                round + 1
            )
            .to_lowercase();
            eprintln!("[peers] {run}");
            let attempt = || {
                measure_one(
                    plan,
                    setup,
                    api,
                    targets,
                    objects_seen,
                    seq,
                    variant,
                    round,
                    &run,
                )
            };
            // One retry, said in the output: on a shared machine a process can die of causes
            // that are not the client's; twice in a row is not chance.
            let sample = match attempt().await {
                Ok(s) => s,
                Err(e) => {
                    let note = format!("{run} failed and was run again: {e:#}");
                    eprintln!("[peers] {note}");
                    notes.push(note);
                    attempt()
                        .await
                        .with_context(|| format!("run {run}, twice"))?
                }
            };
            eprintln!("[peers]   {}", sample.summary());
            samples.push(sample);
        }
    }
    Ok(ObjectSet {
        kind: plan.kind,
        objects: plan.objects,
        stored_bytes,
        updates: plan.updates,
        phases: plan.paces.iter().map(|&p| pace_label(p)).collect(),
        variants,
        samples,
        notes,
    })
}

#[allow(clippy::too_many_arguments)]
async fn measure_one(
    plan: &Plan,
    setup: &Setup,
    api: &kube::Client,
    targets: &Targets,
    objects: u64,
    seq: &AtomicU64,
    variant: Variant,
    round: usize,
    run: &str,
) -> anyhow::Result<Sample> {
    let mut client = Client::start(setup, variant, plan.kind, run).await?;
    let r = measure_started(
        plan,
        setup,
        api,
        targets,
        objects,
        seq,
        &mut client,
        variant,
        round,
    )
    .await;
    client.explain(r).await
}

#[allow(clippy::too_many_arguments)]
async fn measure_started(
    plan: &Plan,
    setup: &Setup,
    api: &kube::Client,
    targets: &Targets,
    objects: u64,
    seq: &AtomicU64,
    client: &mut Client,
    variant: Variant,
    round: usize,
) -> anyhow::Result<Sample> {
    let pid = client.pid;
    let server_at_spawn = setup.server_pid.map(proc_stats::cpu).transpose()?;
    let synced_at = client
        .wait_synced(objects, plan.polls.sync, plan.deadlines.sync)
        .await?;
    let server_sync_cpu = server_at_spawn
        .zip(setup.server_pid.map(proc_stats::cpu).transpose()?)
        .map(|(b, a)| a.saturating_sub(b));
    let sync_time = synced_at.duration_since(client.spawned);
    let sync_scrapes = client.scrapes();
    let cpu_synced = proc_stats::settle(pid, plan.polls.settle, plan.deadlines.settle).await?;
    let rss_sync = proc_stats::mem(pid)?.rss;

    let scrape_cost = if variant.is_host() {
        Some(scrape_cost(client, &plan.polls, &plan.deadlines).await?)
    } else {
        None
    };
    let net = |cpu: Duration, scrapes: u64| match scrape_cost {
        Some(c) => cpu.saturating_sub(c * scrapes as u32),
        None => cpu,
    };
    let sync_cpu = net(cpu_synced, sync_scrapes);

    let mut phases = Vec::new();
    let mut seen = 0u64;
    for &pace in &plan.paces {
        let expected = match pace {
            Pace::Rate(r) => Duration::from_secs_f64(plan.updates as f64 / r),
            Pace::Burst { .. } => Duration::from_secs_f64(plan.updates as f64 / 500.0),
        };
        let deadline = expected + plan.deadlines.load_slack;
        let (load_done, load_done_rx) = watch::channel(false);
        let scrapes_before = client.scrapes();
        let cpu_before = proc_stats::cpu(pid)?;
        let server_before = setup.server_pid.map(proc_stats::cpu).transpose()?;
        let load = load::run_then_signal(
            api,
            targets,
            seq,
            (plan.updates, pace, deadline),
            &load_done,
        );
        let watch = client.wait_events(
            objects,
            seen + plan.updates,
            &load_done_rx,
            (plan.polls.coarse, plan.polls.fine),
            deadline,
        );
        let (report, last_event) = tokio::join!(load, watch);
        let (report, last_event) = (report?, last_event?);
        seen += plan.updates;
        let server_after = setup.server_pid.map(proc_stats::cpu).transpose()?;
        let cpu_after = proc_stats::settle(pid, plan.polls.settle, plan.deadlines.settle).await?;
        let scrapes = client.scrapes() - scrapes_before;
        let cpu = net(cpu_after.saturating_sub(cpu_before), scrapes);
        let wall = last_event.duration_since(report.started);
        phases.push(PhaseSample {
            events: plan.updates,
            cpu,
            wall,
            achieved_rate: report.achieved_rate(pace),
            worst_lag: report.worst_lag,
            scrapes,
            server_cpu: server_before
                .zip(server_after)
                .map(|(b, a)| a.saturating_sub(b)),
        });
    }
    let mem = proc_stats::mem(pid)?;
    Ok(Sample {
        variant,
        round,
        sync_time,
        sync_cpu,
        sync_scrapes,
        server_sync_cpu,
        rss_sync,
        rss_end: mem.rss,
        hwm: mem.hwm,
        scrape_cost,
        phases,
    })
}

/// What one /metrics scrape costs the idle host `client`: batches of scrapes back to back; the
/// cheapest batch, since anything else the process does meanwhile only adds to a batch. Waits
/// for the process to settle again after.
pub async fn scrape_cost(
    client: &mut Client,
    polls: &Polls,
    deadlines: &Deadlines,
) -> anyhow::Result<Duration> {
    let pid = client.pid;
    let mut best: Option<Duration> = None;
    for _ in 0..3 {
        let before = proc_stats::cpu(pid)?;
        client.scrape_n(polls.cost_scrapes).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let per = proc_stats::cpu(pid)?.saturating_sub(before) / polls.cost_scrapes.max(1) as u32;
        best = Some(best.map_or(per, |b| b.min(per)));
    }
    proc_stats::settle(pid, polls.settle, deadlines.settle).await?;
    Ok(best.unwrap_or_default())
}
