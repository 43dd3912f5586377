//! `host emulator`: run the emulator as a process, plus its admin HTTP paths.
//!
//! The first two lines of stdout are the address and the kubeconfig path, so scripts can read
//! them; logs go to stderr.

use std::io::Write;
use std::path::PathBuf;

use http::{Method, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::response::{self, Body};
use super::{Emulator, Shared};

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
    /// Watch history kept per resource, in events.
    #[arg(long, default_value_t = 10_000)]
    pub history_window: usize,
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: EmulatorArgs) -> anyhow::Result<()> {
    let mut stop = crate::shutdown::ShutdownSignal::install()?;
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

/// A fault command for `POST /_emulator/faults`, e.g. `{"failNext":{"count":2,"code":429}}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum FaultCommand {
    CloseWatchesAfter(u64),
    InjectExpired(bool),
    FailNext {
        count: u64,
        code: u16,
        #[serde(default = "one", rename = "retryAfter")]
        retry_after: u32,
    },
    /// Seconds.
    StallStreams(f64),
    /// An etcd compaction: old Exact lists and continue tokens 410, watches still served.
    CompactHistory(bool),
    /// The watch cache's history dropped: watches from older RVs get an in-stream 410.
    ExpireWatchHistory(bool),
    DropConnections(bool),
    /// Watch-list streams leave out the initial-events-end bookmark while on.
    OmitInitialEventsEnd(bool),
    /// Watches with `sendInitialEvents` get 422 while on.
    RefuseWatchList(bool),
    Clear(bool),
}

fn one() -> u32 {
    1
}

/// The admin paths: `GET /_emulator/stats`, `POST /_emulator/faults`.
pub(crate) fn admin(
    shared: &Shared,
    method: &Method,
    rest: &[String],
    body: &[u8],
) -> Response<Body> {
    match (method, rest.first().map(String::as_str)) {
        (&Method::GET, Some("stats")) => {
            let s = shared.counters.snapshot();
            response::value(
                StatusCode::OK,
                &json!({"requests": s.requests, "openWatches": s.open_watches, "resourceVersion": shared.store.current_rv()}),
            )
        }
        (&Method::POST, Some("faults")) => {
            let cmd: FaultCommand = match serde_json::from_slice(body) {
                Ok(c) => c,
                Err(e) => {
                    return response::status(&response::bad_request(format!(
                        "bad fault command: {e}"
                    )))
                }
            };
            let f = &shared.faults;
            match cmd {
                FaultCommand::CloseWatchesAfter(n) => f.close_watches_after(n),
                FaultCommand::InjectExpired(_) => f.inject_expired(),
                FaultCommand::FailNext {
                    count,
                    code,
                    retry_after,
                } => f.fail_next(count, code, retry_after),
                FaultCommand::StallStreams(s) => {
                    f.stall_streams(std::time::Duration::from_secs_f64(s.clamp(0.0, 86_400.0)))
                }
                FaultCommand::CompactHistory(_) => f.compact_history(),
                FaultCommand::ExpireWatchHistory(_) => f.expire_watch_history(),
                FaultCommand::DropConnections(_) => f.drop_connections(),
                FaultCommand::OmitInitialEventsEnd(on) => f.omit_initial_events_end(on),
                FaultCommand::RefuseWatchList(on) => f.refuse_watch_list(on),
                FaultCommand::Clear(_) => f.clear(),
            }
            response::value(StatusCode::OK, &json!({"ok": true}))
        }
        _ => response::status(&response::no_route()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_commands_parse() {
        let c: FaultCommand =
            serde_json::from_str(r#"{"failNext":{"count":2,"code":429}}"#).unwrap();
        assert!(matches!(
            c,
            FaultCommand::FailNext {
                count: 2,
                code: 429,
                retry_after: 1
            }
        ));
        let c: FaultCommand = serde_json::from_str(r#"{"closeWatchesAfter":3}"#).unwrap();
        assert!(matches!(c, FaultCommand::CloseWatchesAfter(3)));
        let c: FaultCommand = serde_json::from_str(r#"{"refuseWatchList":true}"#).unwrap();
        assert!(matches!(c, FaultCommand::RefuseWatchList(true)));
        let c: FaultCommand = serde_json::from_str(r#"{"omitInitialEventsEnd":false}"#).unwrap();
        assert!(matches!(c, FaultCommand::OmitInitialEventsEnd(false)));
        assert!(serde_json::from_str::<FaultCommand>(r#"{"nope":1}"#).is_err());
    }
}
