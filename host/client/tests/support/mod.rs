//! What the client's integration tests share: the in-process emulator and a client for it.

use kwh_client::config::KubeconfigOptions;
use kwh_client::{Client, Config};
use kwh_emulator::{Emulator, EmulatorHandle};

/// A fresh in-process emulator on a loopback port, and a client through its kubeconfig.
pub async fn emulator() -> (EmulatorHandle, Client) {
    let h = Emulator::builder().start().await.unwrap();
    let cfg = Config::from_kubeconfig_str(
        &h.kubeconfig(),
        &std::env::temp_dir(),
        &KubeconfigOptions::default(),
    )
    .unwrap();
    (h, Client::new(cfg).unwrap())
}
