//! `host emulator` as a child process: the API server of a run that has no `--kubeconfig`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::spawn;

pub struct Emulator {
    pub kubeconfig: PathBuf,
    pub pid: u32,
    _child: Child,
}

impl Emulator {
    /// Starts it with a watch history of `history_window` events per resource: a client that
    /// falls further behind than that during a burst would relist, and the run would not be
    /// comparable.
    pub async fn start(host: &Path, dir: &Path, history_window: usize) -> anyhow::Result<Emulator> {
        let kubeconfig = dir.join("emulator.kubeconfig");
        let args = vec![
            "emulator".to_owned(),
            "--history-window".to_owned(),
            history_window.to_string(),
            "--kubeconfig".to_owned(),
            kubeconfig.display().to_string(),
        ];
        let log = dir.join("emulator.log");
        let mut child = spawn::child(host, &args, &log, true)?;
        let pid = child.id().context("the emulator exited at once")?;
        let stdout = child.stdout.take().context("the emulator's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first_two = async {
            let a = lines.next_line().await?;
            let b = lines.next_line().await?;
            anyhow::Ok((a, b))
        };
        let (a, b) = tokio::time::timeout(Duration::from_secs(30), first_two)
            .await
            .context("the emulator did not announce itself within 30 s")??;
        match (a.as_deref(), b.as_deref()) {
            (Some(l), Some(k)) if l.starts_with("listening on ") && k.starts_with("kubeconfig: ") => {}
            _ => bail!(
                "the emulator's first lines were {a:?} and {b:?}, not its address and kubeconfig (log: {})",
                log.display()
            ),
        }
        // Keep draining its stdout so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Emulator {
            kubeconfig,
            pid,
            _child: child,
        })
    }
}
