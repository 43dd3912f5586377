//! A plugin run as on a cluster with RBAC on: an emulator that authorizes every request, the
//! roles `host rbac` prints for the plugin applied as printed, and the host binary running with
//! a ServiceAccount token bound to them (and to nothing else).
//!
//! Why through the binary and its printed output: the RBAC a platform team applies is what
//! `host rbac` prints, and what it must suffice for is the host as they run it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kwh_emulator::{Emulator, EmulatorHandle};
use serde_json::{json, Value};

use super::process::HostProcess;

/// Namespace and name of the host's ServiceAccount (`host rbac`'s defaults).
pub const SA_NAMESPACE: &str = "kube-system";
pub const SA_NAME: &str = "kube-wasm-host";

/// One rule of the printed roles.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Index of the Role or ClusterRole among the printed documents.
    pub doc: usize,
    /// Index of the rule in it.
    pub index: usize,
    /// The resource it grants (`configmaps`, `namespacedefaults/status`).
    pub resource: String,
    pub verbs: Vec<String>,
}

/// The authorizing emulator, the printed RBAC applied, and a kubeconfig for the host's token.
pub struct RbacCluster {
    pub em: EmulatorHandle,
    /// The documents `host rbac` printed, as JSON.
    pub docs: Vec<Value>,
    pub kubeconfig: PathBuf,
    dir: PathBuf,
}

/// `host rbac ARGS…` as JSON documents; panics (with its output) if it fails.
pub async fn printed_rbac<S: AsRef<OsStr>>(args: &[S]) -> Vec<Value> {
    let out = tokio::process::Command::new(super::host_bin())
        .arg("rbac")
        .args(args)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("kube-wasm-host-test-cache"),
        )
        .output()
        .await
        .expect("host rbac runs");
    assert!(out.status.success(), "host rbac: {out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect()
}

impl RbacCluster {
    /// An emulator enforcing RBAC, `seed` applied as the admin, then what `host rbac
    /// RBAC_ARGS…` prints applied as printed, bound to the host's ServiceAccount.
    pub async fn new<S: AsRef<OsStr>>(seed: &[Value], rbac_args: &[S]) -> Self {
        let em = Emulator::builder()
            .authorize(true)
            .start()
            .await
            .expect("emulator starts");
        for o in seed {
            em.create(o.clone()).expect("seed object");
        }
        let docs = printed_rbac(rbac_args).await;
        em.create(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": SA_NAME, "namespace": SA_NAMESPACE}}))
            .expect("service account");
        for d in &docs {
            em.create(d.clone()).expect("printed RBAC is accepted");
        }
        let token = em
            .issue_service_account_token(SA_NAMESPACE, SA_NAME, Duration::from_secs(3600))
            .expect("token");
        let dir = super::temp_dir("rbac-run");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, em.kubeconfig_with_token(&token)).expect("kubeconfig");
        RbacCluster {
            em,
            docs,
            kubeconfig,
            dir,
        }
    }

    /// Every rule of the printed Roles and ClusterRoles.
    pub fn rules(&self) -> Vec<Rule> {
        let mut out = Vec::new();
        for (doc, d) in self.docs.iter().enumerate() {
            if !matches!(d["kind"].as_str(), Some("Role" | "ClusterRole")) {
                continue;
            }
            for (index, r) in d["rules"].as_array().into_iter().flatten().enumerate() {
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                };
                out.push(Rule {
                    doc,
                    index,
                    resource: strings(&r["resources"]).join(","),
                    verbs: strings(&r["verbs"]),
                });
            }
        }
        out
    }

    /// Puts the printed roles back, less `rule` if given, or with only `verb` removed from it.
    pub fn grant(&self, without: Option<(&Rule, Option<&str>)>) {
        for (doc, d) in self.docs.iter().enumerate() {
            if !matches!(d["kind"].as_str(), Some("Role" | "ClusterRole")) {
                continue;
            }
            let mut rules: Vec<Value> = d["rules"].as_array().cloned().unwrap_or_default();
            if let Some((rule, verb)) = without.filter(|(r, _)| r.doc == doc) {
                match verb {
                    None => {
                        rules.remove(rule.index);
                    }
                    Some(v) => {
                        let verbs = rules[rule.index]["verbs"].as_array_mut().expect("verbs");
                        verbs.retain(|x| x != v);
                    }
                }
            }
            let ns = d["metadata"]["namespace"].as_str();
            let name = d["metadata"]["name"].as_str().expect("name");
            let mut current = self
                .em
                .get(
                    "rbac.authorization.k8s.io/v1",
                    d["kind"].as_str().expect("kind"),
                    ns,
                    name,
                )
                .expect("role exists");
            current["rules"] = Value::Array(rules);
            self.em.update(current).expect("role updated");
        }
    }

    /// The host binary running `plugin` with the ServiceAccount's token, logging at info.
    pub fn host(&self, plugin: &Path) -> HostProcess {
        HostProcess::spawn(
            [
                OsStr::new("--kubeconfig"),
                self.kubeconfig.as_os_str(),
                OsStr::new("--plugin"),
                plugin.as_os_str(),
            ],
            "info",
        )
    }

    /// Stops the emulator and removes the kubeconfig.
    pub async fn shutdown(self) {
        self.em.shutdown().await;
        let _ = std::fs::remove_dir_all(self.dir);
    }
}

/// Whether a log line reports a 403 naming `resource` (`configmaps`, `deployments/status`) as
/// the API server words a refusal: `cannot list resource "configmaps" …`.
pub fn is_forbidden_line(line: &str, resource: &str) -> bool {
    (line.contains("403 (Forbidden)") || line.contains("403 Forbidden"))
        && line.contains(&format!("resource \"{resource}\""))
}
