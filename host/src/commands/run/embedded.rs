//! The emulator a run embeds (`host --emulator`), behind the `emulator` cargo feature: the
//! production image is built without it, and a run there says so in one line.

use std::path::Path;
#[cfg(feature = "emulator")]
use std::path::PathBuf;

#[cfg(feature = "emulator")]
use anyhow::Context as _;

#[cfg(feature = "emulator")]
use super::LOG_TARGET;

/// The emulator a run started, with the kubeconfig written for it; stopped at the run's end.
#[cfg(feature = "emulator")]
pub struct Embedded {
    handle: kwh_emulator::EmulatorHandle,
    kubeconfig: PathBuf,
}

/// A build without the emulator never has one.
#[cfg(not(feature = "emulator"))]
pub enum Embedded {}

#[cfg(feature = "emulator")]
impl Embedded {
    /// Starts the emulator (its admin paths on, for faults from a demo or a test), seeded from
    /// `seed` if given, and writes its kubeconfig to the temporary directory.
    pub async fn start(seed: Option<&Path>) -> anyhow::Result<Embedded> {
        // As on any cluster, each namespace gets its `default` ServiceAccount and
        // `kube-root-ca.crt` ConfigMap (kube-controller-manager's part).
        let handle = kwh_emulator::Emulator::builder()
            .admin(true)
            .namespace_controller(true)
            .start()
            .await?;
        if let Some(path) = seed {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read seed {}", path.display()))?;
            let n = handle
                .seed_yaml(&text)
                .with_context(|| format!("seed {}", path.display()))?;
            tracing::info!(target: LOG_TARGET, file = %path.display(), objects = n, "emulator seeded");
        }
        let kubeconfig =
            std::env::temp_dir().join(format!("host-emulator-{}.kubeconfig", handle.addr().port()));
        handle.write_kubeconfig(&kubeconfig)?;
        Ok(Embedded { handle, kubeconfig })
    }

    pub fn url(&self) -> String {
        self.handle.base_url()
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub async fn stop(self) {
        self.handle.shutdown().await;
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

#[cfg(not(feature = "emulator"))]
impl Embedded {
    pub async fn start(_seed: Option<&Path>) -> anyhow::Result<Embedded> {
        anyhow::bail!(
            "--emulator: this host was built without the emulator (cargo feature `emulator`, off in the production image); give it a cluster's kubeconfig"
        )
    }

    pub fn url(&self) -> String {
        match *self {}
    }

    pub fn kubeconfig(&self) -> &Path {
        match *self {}
    }

    pub async fn stop(self) {
        match self {}
    }
}
