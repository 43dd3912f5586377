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
        cache_dir: args.cache_dir.or(defaults.cache_dir),
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
