//! `host test`: scenario files against a plugin in the test harness.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;
use kwh_plugin::{EngineConfig, Limits, PluginEngine};

#[derive(Args, Debug)]
pub struct TestArgs {
    /// The controller component under test.
    #[arg(
        long = "plugin",
        value_name = "FILE.wasm",
        required_unless_present = "compare"
    )]
    plugin: Option<PathBuf>,
    /// Run two revisions of a plugin over each scenario and print what the new one leaves
    /// different (objects' final states, refusals), grouped by kind of change as shadow runs
    /// report it; exit 1 when anything differs. Expectations in the scenarios are not checked.
    #[arg(long, num_args = 2, value_names = ["OLD.wasm", "NEW.wasm"], conflicts_with = "plugin")]
    compare: Option<Vec<PathBuf>>,
    /// Scenario files (format: docs/testing.md).
    #[arg(value_name = "SCENARIO.yaml", required = true)]
    scenarios: Vec<PathBuf>,
    /// Compile cache directory (default: the per-user cache directory).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// After the table, print what the guest logged during each failed step.
    #[arg(long)]
    show_logs: bool,
    /// Rerun each scenario under perturbations a real informer and API server can produce
    /// (coalesced updates, tombstones, notifications reordered across objects, restarts
    /// reading a lagging cache, crashes between two writes, duplicate reconciles, time passing
    /// earlier or later) and report each that breaks an oracle (the end state, an error loop,
    /// a lost update, the scenario's expectations), with a scenario file reproducing it
    /// (docs/testing.md); exit 1 when any does.
    #[arg(long, conflicts_with = "compare")]
    explore: bool,
    /// How long `--explore` runs per scenario.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = kwh_client::duration::parse_duration)]
    budget: std::time::Duration,
    /// At most this many perturbed runs per scenario (besides the budget): a run that is the
    /// same on any machine, for CI.
    #[arg(long, value_name = "N")]
    runs: Option<usize>,
    /// The seed of `--explore`'s choices (default: from the clock; printed, so a run can be
    /// repeated).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Where `--explore` writes the reproducing scenarios (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    out_dir: PathBuf,
}

/// `host test`: every scenario file is parsed before anything runs (a bad file is one line
/// naming it and the cause, exit 2); the plugin is loaded once up front for the same reason;
/// then each scenario runs in its own harness. Exit 0 only when all pass, else 1.
pub async fn test(args: TestArgs) -> std::process::ExitCode {
    use kwh_testing::scenario::{self, Scenario};
    use std::process::ExitCode;
    let mut scenarios = Vec::new();
    let mut invalid = false;
    for path in &args.scenarios {
        match Scenario::from_file(path) {
            Ok(s) => scenarios.push(s),
            Err(e) => {
                eprintln!("error: scenario {e}");
                invalid = true;
            }
        }
    }
    if invalid {
        return ExitCode::from(2);
    }
    let defaults = EngineConfig::default();
    let engine = match PluginEngine::new(EngineConfig {
        cache_dir: args.cache_dir.clone().or(defaults.cache_dir),
        pooling: false,
        ..defaults
    }) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let plugins: Vec<PathBuf> = match (&args.compare, &args.plugin) {
        (Some(both), _) => both.clone(),
        (None, Some(p)) => vec![p.clone()],
        (None, None) => unreachable!("clap requires --plugin or --compare"),
    };
    // Each scenario loads the plugin with its own `config:`; this only checks it is a plugin.
    for p in &plugins {
        if let Err(e) = engine.load_for_inspection(p, Limits::default()).await {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if let [old, new] = &plugins[..] {
        let mut differ = false;
        for s in &scenarios {
            let (_, a) = scenario::run_traced(s, old, &engine).await;
            let (_, b) = scenario::run_traced(s, new, &engine).await;
            let d = scenario::differences(&a, &b);
            differ |= !d.is_empty();
            print!("{}", scenario::render_differences(&s.name, &d));
        }
        let _ = std::io::stdout().flush();
        return if differ {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let plugin = &plugins[0];
    if args.explore {
        return explore(&args, plugin, &engine).await;
    }
    let mut reports = Vec::new();
    for s in &scenarios {
        reports.push(scenario::run(s, plugin, &engine).await);
    }
    print!("{}", scenario::render_table(&reports));
    if args.show_logs {
        print!("{}", scenario::render_failure_logs(&reports));
    }
    let _ = std::io::stdout().flush();
    if reports.iter().all(|r| r.passed()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--explore`: each scenario file explored in turn; one summary line each, then each
/// violation with its perturbation, what differs, and the reproducing file written.
async fn explore(
    args: &TestArgs,
    plugin: &std::path::Path,
    engine: &PluginEngine,
) -> std::process::ExitCode {
    use kwh_testing::scenario::explore::{explore, reproducer_path, ExploreOptions};
    use kwh_testing::scenario::render_differences;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let opts = ExploreOptions {
        budget: args.budget,
        seed,
        max_runs: args.runs.unwrap_or(usize::MAX),
    };
    let mut found = 0;
    for path in &args.scenarios {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: scenario {}: {e}", path.display());
                return std::process::ExitCode::from(2);
            }
        };
        let report = match explore(path, &text, plugin, engine, &opts).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: scenario {e}");
                return std::process::ExitCode::from(2);
            }
        };
        println!(
            "{}: {} perturbed runs in {:.1} s (seed {}, {} of {} single perturbations{}): {} violation(s)",
            path.display(),
            report.runs,
            report.elapsed.as_secs_f64(),
            report.seed,
            report.runs.min(report.singles),
            report.singles,
            if report.exhausted {
                ", every pair too"
            } else {
                ""
            },
            report.violations.len()
        );
        for v in &report.violations {
            found += 1;
            let what: Vec<String> = v.perturbations.iter().map(|p| p.describe()).collect();
            println!(
                "  {}: {}: {} (run {}, after {:.1} s)",
                kwh_testing::scenario::explore::class_of(&v.perturbations),
                v.oracle.describe(),
                what.join("; "),
                v.run,
                v.found_after.as_secs_f64()
            );
            if v.differences.is_empty() {
                for d in &v.details {
                    println!("    {d}");
                }
            } else {
                print!(
                    "{}",
                    render_differences("    the end state differs", &v.differences)
                );
            }
            let out = reproducer_path(&args.out_dir, path, found);
            match std::fs::write(&out, &v.reproducer) {
                Ok(()) => println!("    reproduced by {}", out.display()),
                Err(e) => eprintln!("error: cannot write {}: {e}", out.display()),
            }
        }
    }
    let _ = std::io::stdout().flush();
    if found == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
