//! `host emulator`: run the emulator as a process.

/// Arguments of `host emulator`.
#[derive(Debug, clap::Args)]
pub struct EmulatorArgs {}

/// Run until Ctrl-C.
pub async fn run(_args: EmulatorArgs) -> anyhow::Result<()> {
    anyhow::bail!("the emulator is not built yet")
}
