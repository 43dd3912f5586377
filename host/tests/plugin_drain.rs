//! SIGTERM with a reconcile in flight, against the real `host` binary: the reconcile finishes
//! within the grace period and the process exits 0; or the grace period ends first and the
//! process exits 1 saying so. The emulator runs in the test process so that the guest's writes
//! can be checked after the host is gone.
//!
//! Synchronisation is explicit: the `gate` guest logs `reconcile started` and then waits for the
//! test to open its gate (a ConfigMap); the test sends SIGTERM only after that line and opens
//! the gate only after the host logged that it received the signal.

mod support;

use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use host::emulator::EmulatorHandle;
use serde_json::json;
use support::cluster::{cm, emulator, get_cm};
use support::guests::guest;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(60);

struct Host {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    dir: std::path::PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Host {
    async fn spawn(em: &EmulatorHandle, grace_seconds: u64) -> Host {
        let dir = support::temp_dir("drain");
        let kubeconfig = dir.join("kubeconfig");
        em.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_host"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--plugin")
            .arg(guest("gate"))
            .args(["--grace-period", &grace_seconds.to_string()])
            // The reconcile must be stopped by the grace period, not by its own deadline.
            .args(["--reconcile-deadline-ms", "600000"])
            .arg("--cache-dir")
            .arg(std::env::temp_dir().join("kube-wasm-host-test-cache"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn host");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = r.next_line().await {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Host {
            child,
            lines,
            seen: Vec::new(),
            dir,
        }
    }

    /// Waits for a stderr line containing `text`.
    async fn line(&mut self, text: &str) -> String {
        let found = tokio::time::timeout(WAIT, async {
            while let Some(l) = self.lines.recv().await {
                self.seen.push(l.clone());
                if l.contains(text) {
                    return Some(l);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(l)) => l,
            _ => panic!(
                "no line containing {text:?}; saw:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    fn sigterm(&self) {
        let pid = self.child.id().expect("running").to_string();
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
    }

    /// Waits for the exit, then collects the remaining stderr.
    async fn exit(&mut self, within: Duration) -> ExitStatus {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("no exit within {within:?}"))
            .expect("wait");
        while let Ok(Some(l)) = tokio::time::timeout(WAIT, self.lines.recv()).await {
            self.seen.push(l);
        }
        status
    }
}

async fn with_job() -> EmulatorHandle {
    let em = emulator().await;
    em.create(cm("gate", json!({"open": "no"}))).expect("gate");
    em.create(cm("job-1", json!({}))).expect("job");
    em
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_in_flight_reconcile_finish_and_exits_0() {
    let em = with_job().await;
    let grace = Duration::from_secs(30);
    let mut host = Host::spawn(&em, grace.as_secs()).await;
    host.line("reconcile started default/job-1").await;
    host.sigterm();
    let term = Instant::now();
    host.line("signal received; shutting down").await;
    assert!(
        get_cm(&em, "job-1-done").is_none(),
        "still waiting at the gate"
    );
    let mut gate = get_cm(&em, "gate").expect("gate");
    gate["data"]["open"] = "yes".into();
    em.update(gate).expect("open the gate");
    let status = host.exit(grace + Duration::from_secs(10)).await;
    assert!(
        term.elapsed() < grace,
        "exited within the grace period: {:?}",
        term.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{}", host.seen.join("\n"));
    assert!(
        get_cm(&em, "job-1-done").is_some(),
        "the reconcile's write reached the API server"
    );
    assert!(
        host.seen
            .iter()
            .any(|l| l.contains("reconcile finished default/job-1")),
        "{}",
        host.seen.join("\n")
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_outlasting_the_grace_period_is_abandoned_and_the_exit_status_is_1() {
    let em = with_job().await;
    let grace = Duration::from_secs(1);
    let mut host = Host::spawn(&em, grace.as_secs()).await;
    host.line("reconcile started default/job-1").await;
    host.sigterm();
    let term = Instant::now();
    let status = host.exit(WAIT).await;
    let elapsed = term.elapsed();
    let log = host.seen.join("\n");
    assert!(elapsed >= grace, "waited the grace period: {elapsed:?}");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        host.seen.iter().any(|l| l.contains("plugin=gate")
            && l.contains("grace period over with reconciles in flight")),
        "{log}"
    );
    assert!(
        host.seen
            .iter()
            .any(|l| l.contains("error: grace period of 1s ended with reconciles still running")),
        "{log}"
    );
    assert!(get_cm(&em, "job-1-done").is_none());
    em.shutdown().await;
}
