//! `peers scale`: the scaling curve. For each object count, one `host emulator` process is
//! seeded with ConfigMaps of ~1 KB; then each round starts every client fresh and measures its
//! sync only (time from spawn, CPU to sync, RSS after it, peak RSS), through
//! [`bench::measure_set`] with no update phase, so the figures are those of `peers run`'s sync
//! columns. The medians go into a Markdown table, the log-log slopes between sizes into growth
//! rates, and the curves into an SVG.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;

use crate::bench::{self, Deadlines, Plan, Polls};
use crate::clients::{Setup, Variant};
use crate::emulator::Emulator;
use crate::load::Targets;
use crate::objects::Kind;
use crate::svg::{self, Panel, Series};
use crate::table::{self, median, mib, micros, thousands, ObjectSet, Sample};
use crate::{api, loadavg, prepare, proc_stats, seed, Bins, Prepared};

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Object counts, one emulator process each (ConfigMaps of ~1 KB as stored).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000,100000,1000000"
    )]
    objects: Vec<usize>,
    /// Clients, in the order each round runs them.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "host-noop,kube-reflector"
    )]
    variants: Vec<Variant>,
    /// Rounds per object count below `--large-from`; each runs every client once.
    #[arg(long, default_value_t = 3)]
    pairs: usize,
    /// Rounds per object count from `--large-from` up (their syncs take tens of seconds each).
    #[arg(long, default_value_t = 3)]
    large_pairs: usize,
    #[arg(long, default_value_t = 1_000_000)]
    large_from: usize,
    /// Where the chart goes (written again after each object count, so a failed run keeps the
    /// sizes it finished).
    #[arg(long, default_value = "docs/scaling.svg")]
    svg: PathBuf,
    #[command(flatten)]
    bins: Bins,
    /// The `host` binary whose `host emulator` serves the objects (default: `--host`), e.g. a
    /// build with an emulator change while the clients stay the same.
    #[arg(long)]
    emulator_host: Option<PathBuf>,
    /// How often the host's /metrics is read while it syncs (its sync time is late by up to this).
    #[arg(long, default_value_t = 10)]
    sync_poll_ms: u64,
    /// The sync ends when the process has used under 1 % of a core for this long (as `peers run`).
    #[arg(long, default_value_t = 250)]
    settle_ms: u64,
    /// Creates in flight while seeding.
    #[arg(long, default_value_t = 8)]
    seed_concurrency: usize,
    /// Keep the children's logs (they are kept anyway when a run fails).
    #[arg(long)]
    pub keep_logs: bool,
}

/// One object count: what seeding and serving cost the emulator, and every client's samples.
struct Point {
    objects: usize,
    seed_time: Duration,
    /// The driver's own paged LIST of every object (limit 500, as both clients page): its wall
    /// time and what it cost the emulator.
    list_time: Duration,
    list_server_cpu: Duration,
    /// The emulator's resident memory with the objects seeded, after every client's run.
    server_rss: u64,
    loads: (String, String),
    set: ObjectSet,
}

impl Point {
    fn rounds(&self) -> usize {
        self.set
            .samples
            .iter()
            .map(|s| s.round + 1)
            .max()
            .unwrap_or(0)
    }

    /// The median of `f` over `v`'s samples.
    fn median(&self, v: Variant, f: Metric) -> Option<f64> {
        let xs = self
            .set
            .samples
            .iter()
            .filter(|s| s.variant == v)
            .filter_map(|s| (f.1)(s))
            .collect();
        median(xs)
    }
}

/// A figure per sample: its name with unit, how it is read.
type Metric = (&'static str, fn(&Sample) -> Option<f64>);

const SYNC: Metric = ("sync s", |s| Some(s.sync_time.as_secs_f64()));
const CPU: Metric = ("CPU to sync s", |s| Some(s.sync_cpu.as_secs_f64()));
const RSS: Metric = ("RSS after sync MiB", |s| Some(mib(s.rss_sync)));
const PEAK: Metric = ("peak RSS MiB", |s| Some(mib(s.hwm)));
const SERVER: Metric = ("emulator CPU during sync s", |s| {
    s.server_sync_cpu.map(|d| d.as_secs_f64())
});
const METRICS: [Metric; 4] = [SYNC, CPU, RSS, PEAK];

pub async fn run(args: &ScaleArgs, dir: &Path) -> anyhow::Result<()> {
    let kind = Kind::Configmap;
    let Prepared {
        kube_peer,
        guests,
        cache_dir,
    } = prepare(&args.bins, &[kind], &args.variants, dir).await?;
    let rounds_for = |n: usize| {
        if n >= args.large_from {
            args.large_pairs
        } else {
            args.pairs
        }
    };
    let mut out = String::new();
    let _ = writeln!(out, "## peers scale: 1 KB ConfigMaps, each client's sync\n");
    let _ = writeln!(
        out,
        "Command: `peers scale {}`\n",
        std::env::args().skip(2).collect::<Vec<_>>().join(" ")
    );
    let rounds: Vec<String> = args
        .objects
        .iter()
        .map(|&n| format!("{}: {}", thousands(n as u64), rounds_for(n)))
        .collect();
    let _ = writeln!(
        out,
        "Rounds per object count (each starts every client once, in turn): {}. Each object count has an emulator process of its own, seeded once; each client is a fresh process per round, started with the compile cache filled.\n",
        rounds.join(", ")
    );
    eprint!("{out}");
    let seq = AtomicU64::new(1);
    let mut points = Vec::new();
    for &n in &args.objects {
        let before = loadavg();
        let mut p = one_count(
            args,
            n,
            rounds_for(n),
            dir,
            &kube_peer,
            &guests,
            &cache_dir,
            &seq,
        )
        .await
        .with_context(|| format!("{} objects", thousands(n as u64)))?;
        p.loads = (before, loadavg());
        points.push(p);
        write_svg(&args.svg, &points, &args.variants)?;
        eprintln!("[peers] {} written", args.svg.display());
    }
    out.push_str(&render(&points, &args.variants));
    println!("{out}");
    Ok(())
}

/// Seeds `n` ConfigMaps into a fresh emulator and runs `rounds` rounds of the clients' syncs.
#[allow(clippy::too_many_arguments)]
async fn one_count(
    args: &ScaleArgs,
    n: usize,
    rounds: usize,
    dir: &Path,
    kube_peer: &Path,
    guests: &crate::clients::Guests,
    cache_dir: &Path,
    seq: &AtomicU64,
) -> anyhow::Result<Point> {
    let kind = Kind::Configmap;
    let server = args.emulator_host.as_ref().unwrap_or(&args.bins.host);
    let emulator = Emulator::start(server, dir, 10_000).await?;
    let client = api::connect(&emulator.kubeconfig).await?;
    eprintln!("[peers] seeding {} configmaps", thousands(n as u64));
    let seeded = seed::seed(
        &client,
        kind,
        "bench",
        n,
        kind.default_size(),
        args.seed_concurrency,
    )
    .await?;
    eprintln!(
        "[peers] seeded in {:.1} s ({:.0}/s), {} B stored each",
        seeded.took.as_secs_f64(),
        n as f64 / seeded.took.as_secs_f64(),
        seeded.stored_bytes
    );
    // The clients watch every namespace: whatever the emulator holds of the kind is their sync.
    let cpu_before = proc_stats::cpu(emulator.pid)?;
    let listed = Instant::now();
    let seen = api::list_names(&client, kind, None).await?.len() as u64;
    let list_time = listed.elapsed();
    let list_server_cpu = proc_stats::cpu(emulator.pid)?.saturating_sub(cpu_before);
    eprintln!(
        "[peers] a paged LIST of all {seen} took {:.2} s, {:.2} s of the emulator's CPU",
        list_time.as_secs_f64(),
        list_server_cpu.as_secs_f64()
    );
    let plan = Plan {
        kind,
        objects: n,
        updates: 0,
        paces: Vec::new(),
        rounds,
        variants: args.variants.clone(),
        polls: Polls {
            sync: Duration::from_millis(args.sync_poll_ms),
            coarse: Duration::from_millis(150),
            fine: Duration::from_millis(5),
            settle: Duration::from_millis(args.settle_ms),
            cost_scrapes: 10,
        },
        deadlines: Deadlines {
            sync: Duration::from_secs(120) + Duration::from_millis(n as u64 * 2),
            settle: Duration::from_secs(120),
            load_slack: Duration::ZERO,
        },
    };
    let setup = Setup {
        host: args.bins.host.clone(),
        kube_peer: kube_peer.to_path_buf(),
        guests: guests.clone(),
        cache_dir: cache_dir.to_path_buf(),
        kubeconfig: emulator.kubeconfig.clone(),
        namespace: None,
        dir: dir.to_path_buf(),
        server_pid: Some(emulator.pid),
    };
    // No update phase: nothing is patched.
    let targets = Targets {
        kind,
        paths: Vec::new(),
    };
    let set = bench::measure_set(
        &plan,
        &setup,
        &client,
        &targets,
        seen,
        seeded.stored_bytes,
        seq,
    )
    .await?;
    let server_rss = proc_stats::mem(emulator.pid)?.rss;
    Ok(Point {
        objects: n,
        seed_time: seeded.took,
        list_time,
        list_server_cpu,
        server_rss,
        loads: Default::default(),
        set,
    })
}

/// Slope of `ln y` over `ln x` between two points: y grows as x^slope between them.
pub fn slope((x0, y0): (f64, f64), (x1, y1): (f64, f64)) -> Option<f64> {
    (x0 > 0.0 && y0 > 0.0 && x1 > 0.0 && y1 > 0.0 && x0 != x1)
        .then(|| (y1 / y0).ln() / (x1 / x0).ln())
}

/// The least-squares slope of `ln y` over `ln x`: one exponent for the whole curve (points
/// with a non-positive coordinate are left out; fewer than two: none).
pub fn fit_slope(points: &[(f64, f64)]) -> Option<f64> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    let n = logs.len() as f64;
    if logs.len() < 2 {
        return None;
    }
    let mx = logs.iter().map(|p| p.0).sum::<f64>() / n;
    let my = logs.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = logs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// `n^1.02` for a slope.
fn power(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("n^{s:.2}"))
}

fn short(n: usize) -> String {
    svg::tick_label(n as f64, true)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The tables: medians per object count and client, ratios of pairs, growth rates, the
/// emulator's side.
fn render(points: &[Point], variants: &[Variant]) -> String {
    let mut o = String::new();
    let stored = points.first().map_or(0, |p| p.set.stored_bytes);
    let _ = writeln!(
        o,
        "### Medians per client (ConfigMaps of {} B as stored)\n",
        thousands(stored as u64)
    );
    let _ = writeln!(
        o,
        "| objects | rounds | client | sync s | CPU to sync s | CPU per object µs | RSS after sync MiB | RSS per object B | peak RSS MiB | emulator CPU during sync s |"
    );
    let _ = writeln!(o, "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for p in points {
        for &v in variants {
            let n = p.objects as f64;
            let cpu = p.median(v, CPU);
            let rss = p.median(v, RSS);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                thousands(p.objects as u64),
                p.rounds(),
                v.label(),
                opt(p.median(v, SYNC), 3),
                opt(cpu, 3),
                opt(cpu.map(|c| c * 1e6 / n), 2),
                opt(rss, 1),
                opt(rss.map(|r| r * 1024.0 * 1024.0 / n), 0),
                opt(p.median(v, PEAK), 1),
                opt(p.median(v, SERVER), 3),
            );
        }
    }
    let _ = writeln!(
        o,
        "\nRSS per object is the whole process's RSS over the count: at small counts it is mostly the process's fixed footprint (see the marginal cost below).\n"
    );

    let pairs: Vec<(Variant, Variant)> = table::PAIRS
        .iter()
        .copied()
        .filter(|(a, b)| variants.contains(a) && variants.contains(b))
        .collect();
    if !pairs.is_empty() {
        let _ = writeln!(
            o,
            "### Ratios (median of the per-round ratios; below 1: the first uses less or is faster)\n"
        );
        let _ = writeln!(
            o,
            "| objects | pair | sync | CPU to sync | RSS after sync | peak RSS |"
        );
        let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|");
        for p in points {
            for &(a, b) in &pairs {
                let r: Vec<String> = METRICS
                    .iter()
                    .map(|m| {
                        opt(
                            table::pair_ratio(&p.set.samples, p.rounds(), (a, b), m.1),
                            2,
                        )
                    })
                    .collect();
                let _ = writeln!(
                    o,
                    "| {} | {} / {} | {} |",
                    thousands(p.objects as u64),
                    a.label(),
                    b.label(),
                    r.join(" | ")
                );
            }
        }
        o.push('\n');
    }

    o.push_str(&growth(points, variants));

    let _ = writeln!(o, "### The emulator\n");
    let _ = writeln!(
        o,
        "| objects | seeding s | creates/s | a paged LIST of all (limit 500) s | its emulator CPU s | emulator CPU per listed object µs | emulator RSS MiB | load average (start, end) |"
    );
    let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|---|");
    for p in points {
        let _ = writeln!(
            o,
            "| {} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {}, {} |",
            thousands(p.objects as u64),
            p.seed_time.as_secs_f64(),
            thousands((p.objects as f64 / p.seed_time.as_secs_f64()) as u64),
            p.list_time.as_secs_f64(),
            p.list_server_cpu.as_secs_f64(),
            micros(p.list_server_cpu) / p.objects as f64,
            mib(p.server_rss),
            p.loads.0,
            p.loads.1,
        );
    }
    let list: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.objects as f64, p.list_server_cpu.as_secs_f64()))
        .collect();
    let _ = writeln!(
        o,
        "\nThe emulator's CPU for the driver's paged LIST of everything grows as {} (least-squares fit). kube-rs's default watcher lists the same way (the most recent state, pages of 500); the host's reflector asks for resourceVersion=0 first, which the emulator serves in one piece, as kube-apiserver's watch cache does.\n",
        power(fit_slope(&list))
    );
    let _ = writeln!(
        o,
        "Wall times (sync s) depend on the machine's load (2 cores shared with the emulator, the driver and anything else running); CPU seconds and memory much less so."
    );
    o
}

/// Growth rates: for each metric and client, the log-log slope between consecutive object
/// counts and the least-squares one over all; then the marginal cost per object.
fn growth(points: &[Point], variants: &[Variant]) -> String {
    let mut o = String::new();
    let steps: Vec<String> = points
        .windows(2)
        .map(|w| format!("{}→{}", short(w[0].objects), short(w[1].objects)))
        .collect();
    let _ = writeln!(
        o,
        "### Growth rates (y grows as n^slope; log-log slope between counts, and fitted over all)\n"
    );
    let _ = writeln!(o, "| metric | client | {} | fit |", steps.join(" | "));
    let _ = writeln!(o, "|---|---|{}---:|", "---:|".repeat(steps.len()));
    for m in METRICS {
        for &v in variants {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|p| Some((p.objects as f64, p.median(v, m)?)))
                .collect();
            let local: Vec<String> = pts.windows(2).map(|w| opt(slope(w[0], w[1]), 2)).collect();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                m.0,
                v.label(),
                local.join(" | "),
                power(fit_slope(&pts))
            );
        }
    }
    let _ = writeln!(
        o,
        "\nMarginal cost of one more object, between consecutive counts (Δ over Δn):\n"
    );
    let _ = writeln!(o, "| cost | client | {} |", steps.join(" | "));
    let _ = writeln!(o, "|---|---|{}", "---:|".repeat(steps.len()));
    // Name, metric, its unit in the cell's unit, decimals.
    let marginal: [(&str, Metric, f64, usize); 2] = [
        ("CPU to sync µs", CPU, 1e6, 2),
        ("RSS after sync B", RSS, 1024.0 * 1024.0, 0),
    ];
    for (name, m, scale, digits) in marginal {
        for &v in variants {
            let cells: Vec<String> = points
                .windows(2)
                .map(|w| {
                    let d = w[1].median(v, m)? - w[0].median(v, m)?;
                    Some(d * scale / (w[1].objects - w[0].objects) as f64)
                })
                .map(|d| opt(d, digits))
                .collect();
            let _ = writeln!(o, "| {name} | {} | {} |", v.label(), cells.join(" | "));
        }
    }
    o.push('\n');
    o
}

/// `2.7–3.9` from load averages as `/proc/loadavg` gives them (`?` when none could be read).
fn load_range(loads: &[&str]) -> String {
    let xs: Vec<f64> = loads.iter().filter_map(|l| l.parse().ok()).collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(0.0, f64::max);
    if xs.is_empty() {
        "?".into()
    } else {
        format!("{lo:.1}–{hi:.1}")
    }
}

/// The line colour of a client, fixed so that figures of different runs compare.
fn color(v: Variant) -> &'static str {
    match v {
        Variant::HostNoop => "#1f77b4",
        Variant::KubeReflector => "#ff7f0e",
        Variant::HostSdk => "#2ca02c",
        Variant::HostSdkBare => "#17becf",
        Variant::KubeMetadata => "#d62728",
        Variant::HostReloader => "#9467bd",
        Variant::KubeReloaderKinds => "#8c564b",
    }
}

fn write_svg(path: &Path, points: &[Point], variants: &[Variant]) -> anyhow::Result<()> {
    // `label`: the legend's entry, the client's name when none. Solid lines are labelled with
    // their last decade's slope.
    let series = |m: Metric, dashed: bool, label: Option<&str>| -> Vec<Series> {
        variants
            .iter()
            .map(|&v| {
                let points: Vec<(f64, f64)> = points
                    .iter()
                    .filter_map(|p| Some((p.objects as f64, p.median(v, m)?)))
                    .collect();
                let end_slope = match points.as_slice() {
                    [.., a, b] if !dashed => slope(*a, *b),
                    _ => None,
                };
                Series {
                    label: label.unwrap_or(v.label()).to_owned(),
                    color: color(v),
                    dashed,
                    points,
                    end_slope,
                }
            })
            .collect()
    };
    let mut memory = series(RSS, false, None);
    memory.extend(series(
        PEAK,
        true,
        Some("peak RSS (dashed, the client's colour)"),
    ));
    let panels = [
        Panel {
            title: "Time to sync".into(),
            y_label: "seconds from spawn (wall)".into(),
            series: series(SYNC, false, None),
        },
        Panel {
            title: "CPU to sync".into(),
            y_label: "CPU seconds (user + system)".into(),
            series: series(CPU, false, None),
        },
        Panel {
            title: "Memory after sync".into(),
            y_label: "RSS MiB".into(),
            series: memory,
        },
    ];
    let rounds: Vec<String> = points
        .iter()
        .map(|p| format!("{}: {}", short(p.objects), p.rounds()))
        .collect();
    let loads: Vec<&str> = points
        .iter()
        .flat_map(|p| [p.loads.0.as_str(), p.loads.1.as_str()])
        .collect();
    let note = format!(
        "Log-log axes; n^k beside a line: its slope over the last segment. Medians over rounds ({}); each client a fresh process per round\nagainst one `host emulator` process per object count, seeded once. 2 cores, shared with the emulator and other work (load average {}).",
        rounds.join(", "),
        load_range(&loads)
    );
    let text = svg::render(
        "The host against kube-rs: syncing 1 KB ConfigMaps",
        "objects",
        &panels,
        &note,
    );
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slopes_read_the_exponent() {
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(close(slope((1e3, 2.0), (1e4, 20.0)), 1.0));
        assert!(close(slope((1e3, 1.0), (1e5, 100.0 * 100.0)), 2.0));
        assert!(close(slope((10.0, 5.0), (1000.0, 5.0)), 0.0));
        assert_eq!(slope((1e3, 0.0), (1e4, 1.0)), None);
        assert_eq!(slope((1e3, 1.0), (1e3, 2.0)), None);
        // y = 3 x^1.5 exactly: the fit finds 1.5; a constant has slope 0.
        let pts: Vec<(f64, f64)> = [1e3, 1e4, 1e5, 1e6]
            .iter()
            .map(|&x: &f64| (x, 3.0 * x.powf(1.5)))
            .collect();
        assert!(close(fit_slope(&pts), 1.5));
        assert!(close(
            fit_slope(&[(1.0, 4.0), (10.0, 4.0), (100.0, 4.0)]),
            0.0
        ));
        assert_eq!(fit_slope(&[(1.0, 1.0)]), None);
        assert_eq!(power(Some(1.016)), "n^1.02");
    }
}
