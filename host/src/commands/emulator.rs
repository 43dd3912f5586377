//! `host emulator`: run the emulator as a process.
//!
//! The first two lines of stdout are the address and the kubeconfig path, so scripts can read
//! them; logs go to stderr.

use std::io::Write;
use std::path::PathBuf;

use kwh_emulator::Emulator;

use crate::shutdown::ShutdownSignal;

/// Arguments of `host emulator`.
#[derive(Debug, clap::Args)]
pub struct EmulatorArgs {
    /// YAML files to load at start (multi-document; `kind: List` is unpacked).
    #[arg(long = "seed", value_name = "FILE.yaml")]
    pub seed: Vec<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Serve HTTPS with a self-signed certificate.
    #[arg(long)]
    pub tls: bool,
    /// Require this bearer token (with `--authorize`: the admin's, in `system:masters`).
    #[arg(long)]
    pub token: Option<String>,
    /// Authorize every request by RBAC (Roles, ClusterRoles and their bindings), as a cluster
    /// with RBAC on does; the written kubeconfig authenticates as an admin.
    #[arg(long)]
    pub authorize: bool,
    /// Tokens of users and groups, in kube-apiserver's `--token-auth-file` format
    /// (`token,user,uid,"group1,group2"` per line); implies `--authorize`.
    #[arg(long, value_name = "FILE")]
    pub token_auth_file: Option<PathBuf>,
    /// Where to write the kubeconfig (default: a file in the temp directory).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Do not do what kube-controller-manager does in every new namespace (create its
    /// `default` ServiceAccount and `kube-root-ca.crt` ConfigMap, as every cluster does; a Pod
    /// is then refused with 403 when its ServiceAccount does not exist).
    #[arg(long = "no-namespace-controller", action = clap::ArgAction::SetFalse)]
    pub namespace_controller: bool,
    /// Watch history kept per resource, in events.
    #[arg(long, default_value_t = 10_000)]
    pub history_window: usize,
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: EmulatorArgs) -> anyhow::Result<()> {
    let mut stop = ShutdownSignal::install()?;
    let mut builder = Emulator::builder()
        .tls(args.tls)
        .token(args.token.clone())
        .authorize(args.authorize);
    if let Some(path) = &args.token_auth_file {
        builder = builder.token_auth_file(path);
    }
    let handle = builder
        .port(args.port)
        .history_window(args.history_window)
        .admin(true)
        .namespace_controller(args.namespace_controller)
        .start()
        .await?;
    for path in &args.seed {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read seed {}: {e}", path.display()))?;
        let n = handle
            .seed_yaml(&text)
            .map_err(|e| anyhow::anyhow!("seed {}: {e}", path.display()))?;
        tracing::info!(file = %path.display(), objects = n, "seeded");
    }
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("host-emulator-{}.kubeconfig", handle.addr().port()))
    });
    handle.write_kubeconfig(&kubeconfig)?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", handle.base_url())?;
        writeln!(out, "kubeconfig: {}", kubeconfig.display())?;
        out.flush()?;
    }
    stop.recv().await;
    tracing::info!("stopping");
    handle.shutdown().await;
    if args.kubeconfig.is_none() {
        let _ = std::fs::remove_file(&kubeconfig);
    }
    Ok(())
}
