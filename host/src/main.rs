//! The `host` binary: runs plugins against a cluster or the embedded emulator.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "host",
    version,
    about = "WebAssembly-pluggable Kubernetes controller host"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded API-server emulator as a process.
    Emulator(host::emulator::cli::EmulatorArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Some(Command::Emulator(args)) => rt.block_on(host::emulator::cli::run(args)),
        None => {
            anyhow::bail!(
                "no command given; try `host emulator` (plugins arrive with the plugin runtime)"
            )
        }
    }
}
