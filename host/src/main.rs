//! The `host` binary: runs plugins against a cluster or the embedded emulator. This file
//! parses the command line and dispatches; each subcommand is a module of `commands`.

mod cluster_plugins;
mod commands;
mod modules;
mod output;
mod plugins_file;
mod plugins_watch;
mod replica;
mod shutdown;
mod trim;
mod wakeups;

use clap::{Parser, Subcommand};

use commands::compile::CompileArgs;
#[cfg(feature = "emulator")]
use commands::emulator::EmulatorArgs;
use commands::inspect::InspectArgs;
use commands::new::NewArgs;
use commands::push::PushArgs;
use commands::rbac::RbacArgs;
use commands::record::RecordArgs;
use commands::run::RunArgs;
use commands::shadow::ShadowArgs;
#[cfg(feature = "harness")]
use commands::test::TestArgs;
use output::LogFormat;

#[derive(Parser)]
#[command(
    name = "host",
    version,
    about = "WebAssembly-pluggable Kubernetes controller host",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

// Parsed once per process; the variants' sizes differ with the features built in.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the embedded API-server emulator as a process.
    #[cfg(feature = "emulator")]
    Emulator(EmulatorArgs),
    /// Print a plugin's manifest.
    Inspect(InspectArgs),
    /// Create a controller crate (`NAME/`) that builds as a component and passes its own
    /// `cargo test`: a manifest watching the kinds given, a reconcile that reads its object
    /// and logs, a scenario file and the test that runs it.
    New(NewArgs),
    /// Publish a plugin to an OCI registry (`oci://registry/repository:tag`), in the CNCF Wasm
    /// artifact layout.
    Push(PushArgs),
    /// What a running host's shadow revisions would have done differently (`shadow report`).
    Shadow(ShadowArgs),
    /// Print the RBAC the plugins need: a Role and RoleBinding in the namespace of each plugin
    /// confined to one, a ClusterRole and ClusterRoleBinding for the others; with
    /// `--leader-elect` or `--shards`, a Role for the host's own Leases too.
    Rbac(RbacArgs),
    /// Record what a plugin's manifest watches on a cluster (the objects, then every watch
    /// event with its time) as a scenario file that `host test` replays; Secret values and
    /// `--redact` pointers are replaced by stable hashes of the same length.
    Record(RecordArgs),
    /// Run scenario files against a plugin in the test harness (fake cluster, virtual clock)
    /// and print a pass/fail table; exits 0 only when every scenario passes.
    #[cfg(feature = "harness")]
    Test(TestArgs),
    /// Compile components into the compile cache ahead of time (in an image build or an init
    /// container), so that a run with the same cache directory compiles nothing. One line per
    /// component: `compiled` (with the time and this process's peak resident set so far) or
    /// `already cached`; a file that cannot be compiled is one line on stderr and the others
    /// are still compiled. Exits 1 when any file could not be compiled, 3 when all compiled but
    /// an entry could not be written.
    Compile(CompileArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // `host test` reports through its table; only warnings (e.g. a cache problem) go to stderr.
    let default_level = match cli.command {
        #[cfg(feature = "harness")]
        Some(Command::Test(_)) => "warn",
        Some(Command::Compile(_)) => "warn",
        _ => "info",
    };
    output::init_logs(cli.run.log_format, default_level);
    let format = cli.run.log_format;
    let r = match cli.command {
        Some(Command::Compile(args)) => return commands::compile::compile(args),
        Some(Command::New(args)) => commands::new::new(args),
        #[cfg(feature = "harness")]
        Some(Command::Test(args)) => match commands::runtime() {
            Ok(rt) => return rt.block_on(commands::test::test(args)),
            Err(e) => Err(e),
        },
        #[cfg(feature = "emulator")]
        Some(Command::Emulator(args)) => {
            commands::runtime().and_then(|rt| rt.block_on(commands::emulator::run(args)))
        }
        Some(Command::Inspect(args)) => {
            commands::runtime().and_then(|rt| rt.block_on(commands::inspect::inspect(args)))
        }
        Some(Command::Shadow(args)) => {
            commands::runtime().and_then(|rt| rt.block_on(commands::shadow::shadow(args)))
        }
        Some(Command::Push(args)) => {
            commands::runtime().and_then(|rt| rt.block_on(commands::push::push(args)))
        }
        Some(Command::Record(args)) => {
            commands::runtime().and_then(|rt| rt.block_on(commands::record::record(args)))
        }
        Some(Command::Rbac(args)) => {
            commands::runtime().and_then(|rt| rt.block_on(commands::rbac::rbac(args)))
        }
        None => commands::run::main(cli.run),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            match format {
                LogFormat::Text => eprintln!("error: {e:#}"),
                // Written directly rather than through the subscriber, so that no log filter
                // can hide why the host stopped; shaped like the subscriber's own lines.
                LogFormat::Json => eprintln!(
                    "{}",
                    serde_json::json!({
                        "level": "ERROR",
                        "fields": { "message": format!("error: {e:#}") },
                        "target": "host",
                    })
                ),
            }
            std::process::ExitCode::FAILURE
        }
    }
}
