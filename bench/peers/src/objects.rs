//! The objects the benchmark seeds and the patches it sends.
//!
//! The shapes mirror the in-process benchmarks' (`tests/bench_common`): ConfigMaps padded to
//! ~1 KB and Pods with a realistic spec padded to ~4 KB, both sizes as the server stores them,
//! `managedFields` included. This crate is built apart from the workspace, so it has its own
//! small copy of the two shapes rather than a dependency on the test helpers.

use clap::ValueEnum;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Configmap,
    Pod,
}

impl Kind {
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Configmap => "configmaps",
            Kind::Pod => "pods",
        }
    }

    /// What the tables call it.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Configmap => "ConfigMaps 1 KB",
            Kind::Pod => "Pods 4 KB (managedFields)",
        }
    }

    /// Stored size (JSON as the server returns it, `managedFields` included) the padding aims at.
    pub fn default_size(self) -> usize {
        match self {
            Kind::Configmap => 1024,
            Kind::Pod => 4096,
        }
    }

    /// The collection path in namespace `ns`.
    pub fn collection(self, ns: &str) -> String {
        format!("/api/v1/namespaces/{ns}/{}", self.plural())
    }

    pub fn name(self, i: usize) -> String {
        match self {
            Kind::Configmap => format!("cm-{i:06}"),
            Kind::Pod => format!("pod-{i:06}"),
        }
    }

    /// Object `i` in `ns`, padded by `pad` bytes.
    pub fn object(self, ns: &str, i: usize, pad: usize) -> Value {
        let name = self.name(i);
        let shard = (i % 16).to_string();
        match self {
            Kind::Configmap => json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {"app": "bench", "rev": rev(0), "shard": shard}},
                "data": {"rev": rev(0), "payload": "x".repeat(pad)}
            }),
            Kind::Pod => json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": name, "namespace": ns,
                    "labels": {"app": "bench", "pod-template-hash": "5d8f7c9b4", "rev": rev(0), "shard": shard},
                    "annotations": {"bench/pad": "y".repeat(pad)},
                },
                "spec": {
                    "containers": [{
                        "name": "app", "image": "registry.example/app:1.2.3",
                        "args": ["--port=8080", "--verbose"],
                        "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                        "env": [{"name": "MODE", "value": "bench"}, {"name": "LEVEL", "value": "info"}],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                    }],
                    "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}}],
                    "nodeName": format!("node-{}", i % 50),
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                    "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                }
            }),
        }
    }

    /// A JSON merge patch that changes the object without changing its size. A ConfigMap's
    /// data changes (so the config reloader sees a payload change, not only a label), a Pod's
    /// `rev` label changes (its spec is mostly immutable).
    pub fn patch(self, seq: u64) -> Vec<u8> {
        let body = match self {
            Kind::Configmap => json!({"data": {"rev": rev(seq)}}),
            Kind::Pod => json!({"metadata": {"labels": {"rev": rev(seq)}}}),
        };
        body.to_string().into_bytes()
    }
}

/// Fixed width, so an update never changes an object's size; patches are numbered globally, so
/// each one gives its object a value it did not have.
fn rev(seq: u64) -> String {
    format!("{:07}", seq % 10_000_000)
}
