//! The samples of a run and their Markdown tables: medians per client, and host / kube-rs
//! ratios taken round by round (each round runs every client once, one after the other, so a
//! ratio compares two processes measured minutes apart at most) and then their median.

use std::fmt::Write;
use std::time::Duration;

use crate::clients::Variant;
use crate::objects::Kind;

/// One update phase of one process.
#[derive(Debug, Clone)]
pub struct PhaseSample {
    pub events: u64,
    /// The process's CPU from just before the first patch until it was idle again after the
    /// last event, less the driver's scrapes.
    pub cpu: Duration,
    /// From the first patch sent to the last event seen.
    pub wall: Duration,
    pub achieved_rate: f64,
    pub worst_lag: Duration,
    pub scrapes: u64,
    /// The emulator's CPU from the first patch until the last event was seen.
    pub server_cpu: Option<Duration>,
}

impl PhaseSample {
    pub fn cpu_per_event(&self) -> Duration {
        self.cpu / self.events.max(1) as u32
    }

    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// One process, all phases.
#[derive(Debug, Clone)]
pub struct Sample {
    pub variant: Variant,
    pub round: usize,
    /// From spawn to the last initial object handed to the handler.
    pub sync_time: Duration,
    /// CPU from spawn until idle after the sync, less the driver's scrapes.
    pub sync_cpu: Duration,
    pub sync_scrapes: u64,
    /// The emulator's CPU from (just after) the spawn to the sync: what serving the client's
    /// initial list cost the server (none on a real cluster).
    pub server_sync_cpu: Option<Duration>,
    pub rss_sync: u64,
    pub rss_end: u64,
    pub hwm: u64,
    /// What one /metrics scrape cost the host (measured on it, idle, after the sync).
    pub scrape_cost: Option<Duration>,
    pub phases: Vec<PhaseSample>,
}

impl Sample {
    pub fn summary(&self) -> String {
        let mut s = format!(
            "sync {:.3} s, CPU {:.3} s, RSS {:.1} MiB",
            self.sync_time.as_secs_f64(),
            self.sync_cpu.as_secs_f64(),
            mib(self.rss_sync)
        );
        for p in &self.phases {
            let _ = write!(
                s,
                "; {:.1} µs/event at {:.0} events/s (sent {:.0}/s)",
                micros(p.cpu_per_event()),
                p.events_per_s(),
                p.achieved_rate
            );
        }
        let _ = write!(s, "; peak RSS {:.1} MiB", mib(self.hwm));
        if let Some(c) = self.scrape_cost {
            let _ = write!(s, "; scrape {:.0} µs", micros(c));
        }
        s
    }
}

/// Every sample of one seeded object set.
pub struct ObjectSet {
    pub kind: Kind,
    pub objects: usize,
    pub stored_bytes: usize,
    pub updates: u64,
    pub phases: Vec<String>,
    pub variants: Vec<Variant>,
    pub samples: Vec<Sample>,
    /// Runs that failed once and were run again.
    pub notes: Vec<String>,
}

/// The pairs whose ratios are printed, when both were run: host / kube-rs, and the SDK guest
/// against the host alone (issue 17's "within 1.3×").
pub const PAIRS: [(Variant, Variant); 6] = [
    (Variant::HostNoop, Variant::KubeReflector),
    (Variant::HostSdk, Variant::KubeReflector),
    (Variant::HostNoop, Variant::KubeMetadata),
    (Variant::HostReloader, Variant::KubeReloaderKinds),
    (Variant::HostSdk, Variant::HostNoop),
    (Variant::HostSdkBare, Variant::HostNoop),
];

type Metric = (&'static str, fn(&Sample) -> Option<f64>);

/// A column: its name and how it reads a sample.
type Column = (String, Box<dyn Fn(&Sample) -> Option<f64>>);

impl ObjectSet {
    /// The figures per sample, by column.
    fn metrics(&self) -> Vec<Column> {
        let fixed: [Metric; 5] = [
            ("sync s", |s| Some(s.sync_time.as_secs_f64())),
            ("CPU to sync s", |s| Some(s.sync_cpu.as_secs_f64())),
            ("RSS after sync MiB", |s| Some(mib(s.rss_sync))),
            ("RSS at end MiB", |s| Some(mib(s.rss_end))),
            ("peak RSS MiB", |s| Some(mib(s.hwm))),
        ];
        let mut out: Vec<Column> = fixed
            .into_iter()
            .map(|(n, f)| {
                (
                    n.to_owned(),
                    Box::new(f) as Box<dyn Fn(&Sample) -> Option<f64>>,
                )
            })
            .collect();
        for (i, phase) in self.phases.iter().enumerate() {
            out.push((
                format!("{phase}: CPU/event µs"),
                Box::new(move |s: &Sample| s.phases.get(i).map(|p| micros(p.cpu_per_event()))),
            ));
            out.push((
                format!("{phase}: events/s"),
                Box::new(move |s: &Sample| s.phases.get(i).map(|p| p.events_per_s())),
            ));
        }
        out
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let rounds = self.samples.iter().map(|s| s.round + 1).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "### {} × {} ({} B stored each), {} updates per phase, {} round(s)\n",
            self.kind.title(),
            thousands(self.objects as u64),
            thousands(self.stored_bytes as u64),
            thousands(self.updates),
            rounds
        );
        let metrics = self.metrics();
        self.write_medians(&mut out, &metrics);
        self.write_ratios(&mut out, &metrics, rounds);
        self.write_load(&mut out);
        self.write_scrape_cost(&mut out);
        for note in &self.notes {
            let _ = writeln!(out, "\nNote: {note}");
        }
        out
    }

    /// The first table: each client's median of every column, the figures a reader looks up.
    fn write_medians(&self, out: &mut String, metrics: &[Column]) {
        let _ = writeln!(out, "Medians per client:\n");
        out.push_str(&header("client", metrics));
        for &v in &self.variants {
            let samples: Vec<&Sample> = self.samples.iter().filter(|s| s.variant == v).collect();
            let _ = write!(out, "| {} |", v.label());
            for (name, f) in metrics {
                let m = median(samples.iter().filter_map(|s| f(s)).collect());
                let _ = write!(out, " {} |", fmt_metric(name, m));
            }
            out.push('\n');
        }
    }

    /// The ratios of the pairs that were both run (none, no table): the per-round comparison
    /// the medians alone cannot give on a machine whose speed drifts.
    fn write_ratios(&self, out: &mut String, metrics: &[Column], rounds: usize) {
        let pairs: Vec<_> = PAIRS
            .iter()
            .filter(|(a, b)| self.variants.contains(a) && self.variants.contains(b))
            .collect();
        if !pairs.is_empty() {
            let _ = writeln!(
                out,
                "\nRatios, the median of the per-round ratios (below 1: the first uses less or is faster, except events/s):\n"
            );
            out.push_str(&header("pair", metrics));
            for &&(a, b) in &pairs {
                let _ = write!(out, "| {} / {} |", a.label(), b.label());
                for (_, f) in metrics {
                    let r = pair_ratio(&self.samples, rounds, (a, b), f);
                    let _ = write!(out, " {} |", fmt_ratio(r));
                }
                out.push('\n');
            }
        }
    }

    /// The load table: whether the driver and the emulator kept up, so the figures above can
    /// be trusted.
    fn write_load(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nThe load (every run; patches sent per second, from the first send to the last, a burst to the last answer), and the host's /metrics scrapes:\n"
        );
        let _ = writeln!(
            out,
            "| phase | sent/s median | min | max | worst pacer lag | emulator CPU per patch µs (median) | emulator busy, share of a core (median) | host scrapes per phase (median) |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for (i, phase) in self.phases.iter().enumerate() {
            self.write_load_row(out, i, phase);
        }
    }

    /// One phase's row of the load table, over every run of that phase.
    fn write_load_row(&self, out: &mut String, i: usize, phase: &str) {
        let ps: Vec<&PhaseSample> = self
            .samples
            .iter()
            .filter_map(|s| s.phases.get(i))
            .collect();
        let rates: Vec<f64> = ps.iter().map(|p| p.achieved_rate).collect();
        let lag = ps.iter().map(|p| p.worst_lag).max().unwrap_or_default();
        let host_scrapes = median(
            self.samples
                .iter()
                .filter(|s| s.variant.is_host())
                .filter_map(|s| s.phases.get(i).map(|p| p.scrapes as f64))
                .collect(),
        );
        let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = rates.iter().copied().fold(0.0, f64::max);
        let lag = if phase == "burst" {
            "-".to_owned()
        } else {
            format!("{:.2} ms", lag.as_secs_f64() * 1e3)
        };
        let per_patch = median(
            ps.iter()
                .filter_map(|p| p.server_cpu.map(|c| micros(c) / p.events.max(1) as f64))
                .collect(),
        );
        let busy = median(
            ps.iter()
                .filter_map(|p| {
                    p.server_cpu
                        .map(|c| c.as_secs_f64() / p.wall.as_secs_f64().max(1e-9))
                })
                .collect(),
        );
        let _ = writeln!(
            out,
            "| {phase} | {} | {} | {} | {lag} | {} | {} | {} |",
            fmt_count(median(rates.clone())),
            fmt_count(Some(lo).filter(|x| x.is_finite())),
            fmt_count(Some(hi)),
            per_patch.map_or("-".into(), |x| format!("{x:.1}")),
            busy.map_or("-".into(), |x| format!("{x:.2}")),
            host_scrapes.map_or("-".into(), |x| format!("{x:.0}")),
        );
    }

    /// What a /metrics scrape cost the host, when it was measured: the host's CPU figures have
    /// their scrapes taken out, and this says by how much.
    fn write_scrape_cost(&self, out: &mut String) {
        let costs: Vec<f64> = self
            .samples
            .iter()
            .filter_map(|s| s.scrape_cost.map(micros))
            .collect();
        let sync_scrapes: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.variant.is_host())
            .map(|s| s.sync_scrapes as f64)
            .collect();
        if let Some(c) = median(costs) {
            let _ = writeln!(
                out,
                "\nOne /metrics scrape cost the host {c:.0} µs of CPU (median over its runs; each run's is the cheapest of three batches of 10, idle after the sync); the host's CPU figures above have its scrapes taken out ({} during the sync, median).",
                median(sync_scrapes).map_or("-".into(), |x| format!("{x:.0}"))
            );
        }
    }
}

/// A table's header and separator rows: `first` column, then one per metric (the medians and
/// the ratios share their columns).
fn header(first: &str, metrics: &[Column]) -> String {
    let mut h = format!("| {first} |");
    let mut sep = String::from("|---|");
    for (name, _) in metrics {
        let _ = write!(h, " {name} |");
        sep.push_str("---:|");
    }
    format!("{h}\n{sep}\n")
}

/// The median over rounds of `a`'s figure over `b`'s, each ratio taken within one round.
pub fn pair_ratio(
    samples: &[Sample],
    rounds: usize,
    (a, b): (Variant, Variant),
    f: impl Fn(&Sample) -> Option<f64>,
) -> Option<f64> {
    let ratios: Vec<f64> = (0..rounds)
        .filter_map(|r| {
            let x = samples.iter().find(|s| s.variant == a && s.round == r)?;
            let y = samples.iter().find(|s| s.variant == b && s.round == r)?;
            let (x, y) = (f(x)?, f(y)?);
            (y > 0.0).then_some(x / y)
        })
        .collect();
    median(ratios)
}

fn fmt_metric(name: &str, v: Option<f64>) -> String {
    let Some(v) = v else { return "-".into() };
    if name.ends_with("events/s") {
        fmt_count(Some(v))
    } else if name.ends_with(" s") {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}

fn fmt_ratio(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn fmt_count(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| thousands(v.round() as u64))
}

pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
