//! SIGTERM with a reconcile in flight, against the real `host` binary: the reconcile finishes
//! within the grace period and the process exits 0; or the grace period ends first, the
//! reconcile is abandoned with one warning line naming it, and the process still exits 0 (a stop
//! that was asked for is a success). The emulator runs in the test process so that the guest's
//! writes can be checked after the host is gone.
//!
//! Synchronisation is explicit: the `gate` guest logs `reconcile started` and then waits for the
//! test to open its gate (a ConfigMap); the test sends SIGTERM only after that line and opens
//! the gate only after the host logged that it received the signal.

mod support;

use std::time::{Duration, Instant};

use kwh_emulator::EmulatorHandle;
use serde_json::json;
use support::cluster::{cm, emulator, get_cm};
use support::guests::guest;
use support::process::{HostProcess, WAIT};

struct Host {
    process: HostProcess,
    dir: std::path::PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl std::ops::Deref for Host {
    type Target = HostProcess;
    fn deref(&self) -> &HostProcess {
        &self.process
    }
}

impl std::ops::DerefMut for Host {
    fn deref_mut(&mut self) -> &mut HostProcess {
        &mut self.process
    }
}

impl Host {
    fn spawn(em: &EmulatorHandle, grace_seconds: u64) -> Host {
        let dir = support::temp_dir("drain");
        let kubeconfig = dir.join("kubeconfig");
        em.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let args: [std::ffi::OsString; 8] = [
            "--kubeconfig".into(),
            kubeconfig.into_os_string(),
            "--plugin".into(),
            guest("gate").into_os_string(),
            "--grace-period".into(),
            grace_seconds.to_string().into(),
            // The reconcile must be stopped by the grace period, not by its own deadline.
            "--reconcile-deadline-ms".into(),
            "600000".into(),
        ];
        let process = HostProcess::spawn(args, "info");
        Host { process, dir }
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
    let mut host = Host::spawn(&em, grace.as_secs());
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
    assert_eq!(status.code(), Some(0), "{}", host.log());
    assert!(
        get_cm(&em, "job-1-done").is_some(),
        "the reconcile's write reached the API server"
    );
    assert!(
        host.saw("reconcile finished default/job-1"),
        "{}",
        host.log()
    );
    assert!(!host.saw("abandoned"), "{}", host.log());
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_outlasting_the_grace_period_is_abandoned_with_a_warning_and_the_exit_status_is_0(
) {
    let em = with_job().await;
    let grace = Duration::from_secs(1);
    let mut host = Host::spawn(&em, grace.as_secs());
    host.line("reconcile started default/job-1").await;
    host.sigterm();
    let term = Instant::now();
    let status = host.exit(WAIT).await;
    let elapsed = term.elapsed();
    let log = host.log();
    assert!(elapsed >= grace, "waited the grace period: {elapsed:?}");
    assert_eq!(status.code(), Some(0), "{log}");
    let warnings: Vec<_> = host
        .seen
        .iter()
        .filter(|l| l.text.contains("WARN") && l.text.contains("grace period of 1s ended"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0]
            .text
            .contains("1 in-flight reconcile abandoned (gate default/job-1)"),
        "names how many and which: {log}"
    );
    assert!(!host.saw("error:"), "{log}");
    assert!(get_cm(&em, "job-1-done").is_none());
    em.shutdown().await;
}
