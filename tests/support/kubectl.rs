//! The real `kubectl` against an emulator, for end-to-end tests that read what users read.

use std::time::Duration;

/// `kubectl` with the emulator's kubeconfig and its own cache directory under `dir`.
pub async fn kubectl(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .env("HOME", dir)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .arg("--request-timeout=20s")
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kubectl in time")
    .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `kubectl args` every 200 ms until its output has a line for which `pred` holds (the
/// host writes Events on its own time), within `within`: that line and the whole output, or
/// the last output.
pub async fn kubectl_until(
    dir: &std::path::Path,
    args: &[&str],
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> Result<(String, String), String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (ok, out, err) = kubectl(dir, args).await;
        assert!(ok, "kubectl {args:?}: {err}");
        if let Some(l) = out.lines().find(|l| pred(l)) {
            return Ok((l.to_string(), out.clone()));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(out);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl apply -f` of `yaml`, written to `dir/<name>.yaml` first; panics with kubectl's
/// output when it is refused.
pub async fn apply_yaml(dir: &std::path::Path, name: &str, yaml: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("write the manifest");
    let (ok, out, err) = kubectl(dir, &["apply", "-f", &file.display().to_string()]).await;
    assert!(ok, "kubectl apply {name}: {out}{err}");
}

/// The `.status` of `kind` `name` (cluster-scoped, or in the kubeconfig's namespace) as JSON;
/// `null` when it has none.
pub async fn status_of(dir: &std::path::Path, kind: &str, name: &str) -> serde_json::Value {
    let (ok, out, err) = kubectl(dir, &["get", kind, name, "-o", "jsonpath={.status}"]).await;
    assert!(ok, "kubectl get {kind} {name}: {err}");
    serde_json::from_str(&out).unwrap_or_default()
}
