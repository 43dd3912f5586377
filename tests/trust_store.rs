//! A kubeconfig without a certificate authority trusts the system's roots, as client-go does
//! (Go's system pool), and the roots bundled in the binary only where the system has none.
//!
//! Each case runs the client in a child process (this test binary again, with the
//! `KWH_TRUST_CHILD` variable naming the kubeconfig), because the system's store is read once
//! per process and from its environment: `SSL_CERT_FILE` stands in for the system's store,
//! as it does for OpenSSL and Go. The server is the HTTPS emulator, whose self-signed
//! certificate is in no store but the one the test writes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use kwh_client::config::{Config, KubeconfigOptions};
use kwh_client::params::ListParams;
use kwh_client::resource::ApiResource;
use kwh_client::Client;
use kwh_emulator::Emulator;

const CHILD: &str = "KWH_TRUST_CHILD";
const T: Duration = Duration::from_secs(60);

/// Run by the test below in a child process (does nothing otherwise): one LIST with the
/// kubeconfig named in `KWH_TRUST_CHILD`, its outcome on stdout.
#[tokio::test]
async fn child_lists_with_the_kubeconfig_its_parent_names() {
    let Ok(path) = std::env::var(CHILD) else {
        return;
    };
    let outcome = async {
        let cfg = Config::from_kubeconfig_paths(&[path.into()], &KubeconfigOptions::default())?;
        let client = Client::new(cfg)?;
        let cms = ApiResource::new("v1", "ConfigMap", "configmaps", true);
        client
            .list(&cms, Some("default"), &ListParams::default())
            .await
    }
    .await;
    match outcome {
        Ok(list) => println!("OUTCOME listed {}", list.items.len()),
        Err(e) => println!("OUTCOME failed: {e}"),
    }
}

/// This binary's `child_lists_with_the_kubeconfig_its_parent_names`, with `env`: its outcome line.
async fn child(kubeconfig: &Path, env: &[(&str, &Path)]) -> String {
    let exe = std::env::current_exe().expect("this test binary");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "--exact",
        "child_lists_with_the_kubeconfig_its_parent_names",
        "--nocapture",
    ])
    .env(CHILD, kubeconfig)
    .env_remove("SSL_CERT_FILE")
    .env_remove("SSL_CERT_DIR")
    .stdin(Stdio::null())
    .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(T, cmd.output())
        .await
        .expect("the child in time")
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("OUTCOME "))
        .unwrap_or_else(|| {
            panic!(
                "no outcome from the child: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_without_a_ca_trusts_the_system_roots_and_the_bundled_ones_only_without_them()
{
    let em = Emulator::builder()
        .tls(true)
        .start()
        .await
        .expect("emulator");
    em.create(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "one", "namespace": "default"}}))
        .expect("seed");
    let dir = std::env::temp_dir().join(format!("trust-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, em.certificate_pem().expect("TLS on")).expect("write");
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").expect("write");
    // The emulator's kubeconfig without the line that skips verification: no CA at all. The
    // certificate names `localhost`, the server is an IP address.
    let kc = em.kubeconfig();
    assert!(kc.contains("insecure-skip-tls-verify: true"), "{kc}");
    let kc = kc.replace(
        "insecure-skip-tls-verify: true",
        "tls-server-name: localhost",
    );
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, kc).expect("write");

    // The system's store holds the server's certificate: trusted.
    assert_eq!(
        child(&kubeconfig, &[("SSL_CERT_FILE", &ca)]).await,
        "listed 1"
    );
    // The system's store is empty: the bundled roots, which do not hold it.
    let refused = child(&kubeconfig, &[("SSL_CERT_FILE", &empty)]).await;
    assert!(
        refused.starts_with("failed") && refused.contains("UnknownIssuer"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
