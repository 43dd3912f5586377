//! The update load: JSON merge patches, either paced one at a time on a fixed schedule or as a
//! burst.
//!
//! Pacing runs on a thread of its own that sleeps until each patch's time: tokio's timers tick
//! in milliseconds, which at 5,000/s would send patches five at a time. The thread hands each
//! patch to the runtime, which sends it over the client's keep-alive connections (several only
//! when a patch is still in flight at the next one's time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use http::Method;
use kube::Client;
use tokio::sync::{mpsc, Semaphore};

use crate::api;
use crate::objects::Kind;

/// How the patches are sent.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Patch number k is sent at start + k / rate.
    Rate(f64),
    /// As fast as the server answers, with this many patches in flight.
    Burst { in_flight: usize },
}

/// The objects to patch, in the order patches cycle through them.
pub struct Targets {
    pub kind: Kind,
    /// Paths of the objects.
    pub paths: Vec<String>,
}

impl Targets {
    pub fn new(kind: Kind, names: &[(String, String)]) -> Targets {
        let paths = names
            .iter()
            .map(|(ns, name)| format!("{}/{name}?fieldManager=peers", kind.collection(ns)))
            .collect();
        Targets { kind, paths }
    }
}

#[derive(Debug, Clone)]
pub struct LoadReport {
    pub sent: u64,
    /// When the first patch was sent.
    pub started: Instant,
    /// When the last one was sent.
    pub last_sent: Instant,
    /// When the last answer came back.
    pub last_answer: Instant,
    /// How late the pacer sent its latest patch, against its schedule.
    pub worst_lag: Duration,
}

impl LoadReport {
    /// Patches per second: paced, from the first send to the last (the schedule's rate when
    /// kept); a burst, from the first send to the last answer (what the server took).
    pub fn achieved_rate(&self, pace: Pace) -> f64 {
        let (end, n) = match pace {
            Pace::Rate(_) => (self.last_sent, self.sent.saturating_sub(1)),
            Pace::Burst { .. } => (self.last_answer, self.sent),
        };
        let span = end.duration_since(self.started).as_secs_f64();
        if n == 0 || span <= 0.0 {
            return 0.0;
        }
        n as f64 / span
    }
}

/// Sends `count` patches, each to the next object of `targets` (cycling), numbered from `seq`
/// (which each patch advances, so every patch changes its object). Any failed patch ends the
/// load with an error: every client must see exactly one event per patch.
pub async fn run(
    client: &Client,
    targets: &Targets,
    seq: &AtomicU64,
    count: u64,
    pace: Pace,
    deadline: Duration,
) -> anyhow::Result<LoadReport> {
    if targets.paths.is_empty() {
        bail!("no {} to patch", targets.kind.plural());
    }
    tokio::time::timeout(deadline, send_all(client, targets, seq, count, pace))
        .await
        .with_context(|| {
            format!("the load of {count} patches did not finish within {deadline:?}")
        })?
}

/// [`run`], then `done` is told the load has been sent, whatever came of it: a waiter for the
/// last events polls finely from then on.
pub async fn run_then_signal(
    client: &Client,
    targets: &Targets,
    seq: &AtomicU64,
    (count, pace, deadline): (u64, Pace, Duration),
    done: &tokio::sync::watch::Sender<bool>,
) -> anyhow::Result<LoadReport> {
    let r = run(client, targets, seq, count, pace, deadline).await;
    let _ = done.send(true);
    r
}

async fn send_all(
    client: &Client,
    targets: &Targets,
    seq: &AtomicU64,
    count: u64,
    pace: Pace,
) -> anyhow::Result<LoadReport> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
    let in_flight = match pace {
        Pace::Rate(rate) => {
            if rate <= 0.0 {
                bail!("a rate must be positive, not {rate}");
            }
            // The pacer stops at the first failed send: the receiver is gone.
            std::thread::Builder::new()
                .name("pacer".into())
                .spawn(move || pacer(tx, count, rate))
                .context("starting the pacer thread")?;
            // Bounded only so that a server that stops answering cannot pile up requests.
            256
        }
        Pace::Burst { in_flight } => {
            let now = Instant::now();
            for _ in 0..count {
                if tx.send(now).is_err() {
                    break;
                }
            }
            drop(tx);
            in_flight.max(1)
        }
    };
    let permits = Arc::new(Semaphore::new(in_flight));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<anyhow::Result<Instant>>();
    let mut started = None;
    let mut last_sent = Instant::now();
    let mut worst_lag = Duration::ZERO;
    let mut last_answer = None;
    let mut sent = 0u64;
    while let Some(due) = rx.recv().await {
        let permit = Arc::clone(&permits).acquire_owned().await?;
        let now = Instant::now();
        started.get_or_insert(now);
        last_sent = now;
        if let Pace::Rate(_) = pace {
            worst_lag = worst_lag.max(now.saturating_duration_since(due));
        }
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let path = targets.paths[(n % targets.paths.len() as u64) as usize].clone();
        let body = targets.kind.patch(n);
        let client = client.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            let res = api::call(
                &client,
                Method::PATCH,
                &path,
                "application/merge-patch+json",
                body,
            )
            .await
            .map(|_| Instant::now());
            drop(permit);
            let _ = done.send(res);
        });
        sent += 1;
        // A failure already in makes the rest pointless.
        while let Ok(res) = done_rx.try_recv() {
            last_answer = last_answer.max(Some(res?));
        }
    }
    drop(done_tx);
    while let Some(res) = done_rx.recv().await {
        last_answer = last_answer.max(Some(res?));
    }
    let (Some(started), Some(last_answer)) = (started, last_answer) else {
        bail!("no patch was sent");
    };
    Ok(LoadReport {
        sent,
        started,
        last_sent,
        last_answer,
        worst_lag,
    })
}

/// Sleeps until each patch's time and hands it over with that time.
fn pacer(tx: mpsc::UnboundedSender<Instant>, count: u64, rate: f64) {
    let start = Instant::now();
    for k in 0..count {
        let due = start + Duration::from_secs_f64(k as f64 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        if tx.send(due).is_err() {
            return;
        }
    }
}
