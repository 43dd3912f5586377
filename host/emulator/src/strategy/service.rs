//! A Service's defaults and what the server allocates for it: a cluster IP from the service
//! range (10.96.0.0/12, kubeadm's default), node ports from 30000-32767.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Map, Value};

use super::{absent, set};
use crate::response::{self, FieldError};
use kwh_client::registry::ResourceDef;
use kwh_client::Status;

pub(super) fn default(s: &mut Map<String, Value>) {
    set(s, "type", json!("ClusterIP"));
    set(s, "sessionAffinity", json!("None"));
    let external_name = s.get("type") == Some(&json!("ExternalName"));
    if !external_name {
        set(s, "internalTrafficPolicy", json!("Cluster"));
    }
    let node_ports = matches!(
        s.get("type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    );
    if node_ports {
        set(s, "externalTrafficPolicy", json!("Cluster"));
    }
    if s.get("type") == Some(&json!("LoadBalancer")) {
        set(s, "allocateLoadBalancerNodePorts", json!(true));
    }
    if let Some(Value::Array(ports)) = s.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set(p, "protocol", json!("TCP"));
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(t)) => t.is_empty(),
                Some(_) => false,
            };
            if unset {
                if let Some(port) = p.get("port").cloned() {
                    p.insert("targetPort".into(), port);
                }
            }
        }
    }
}

/// The addresses and ports given out, per emulator: each allocation takes the next value of a
/// counter, spread over the range by a step coprime with its size so that consecutive
/// Services do not get neighbouring addresses (clients must not rely on either).
#[derive(Debug, Default)]
pub struct Allocator {
    ips: AtomicU32,
    ports: AtomicU32,
}

/// Host addresses of 10.96.0.0/12 after the first ten (10.96.0.1 is the `kubernetes`
/// Service's, 10.96.0.10 kube-dns's on kubeadm clusters).
const IP_RANGE: u32 = (1 << 20) - 12;
const NODE_PORTS: u32 = 32767 - 30000 + 1;

impl Allocator {
    fn next_ip(&self) -> String {
        let n = self.ips.fetch_add(1, Ordering::Relaxed);
        let host = 11 + (n.wrapping_mul(104_729) % IP_RANGE);
        let ip = (10u32 << 24) | (96 << 16) | host;
        std::net::Ipv4Addr::from(ip).to_string()
    }

    fn next_port(&self) -> u32 {
        let n = self.ports.fetch_add(1, Ordering::Relaxed);
        30000 + (n.wrapping_mul(997) % NODE_PORTS)
    }

    /// What a created Service gets: its cluster IP(s) and IP family (unless it is an
    /// ExternalName), and a node port per port of a NodePort or LoadBalancer Service.
    pub(crate) fn allocate(
        &self,
        def: &ResourceDef,
        name: &str,
        s: &mut Map<String, Value>,
    ) -> Result<(), Status> {
        let kind = s
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_owned();
        if kind == "ExternalName" {
            return Ok(());
        }
        let ip = match s.get("clusterIP").and_then(Value::as_str) {
            Some(ip) if !ip.is_empty() => {
                if ip != "None" && ip.parse::<std::net::Ipv4Addr>().is_err() {
                    return Err(response::invalid(
                        &def.kind,
                        &def.group,
                        name,
                        &[FieldError::invalid(
                            "spec.clusterIPs[0]",
                            ip,
                            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                        )],
                    ));
                }
                ip.to_owned()
            }
            _ => self.next_ip(),
        };
        s.insert("clusterIP".into(), ip.clone().into());
        if absent(s, "clusterIPs") {
            s.insert("clusterIPs".into(), json!([ip]));
        }
        set(s, "ipFamilies", json!(["IPv4"]));
        set(s, "ipFamilyPolicy", json!("SingleStack"));
        if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
            if let Some(Value::Array(ports)) = s.get_mut("ports") {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    if p.get("nodePort").and_then(Value::as_u64).unwrap_or(0) == 0 {
                        p.insert("nodePort".into(), self.next_port().into());
                    }
                }
            }
        }
        Ok(())
    }
}

/// An update that leaves out what was allocated keeps it (the server's REST layer copies it
/// from the stored Service), so a PUT of a manifest without a clusterIP is not a change.
pub(super) fn keep_allocated(old: &Value, s: &mut Map<String, Value>) {
    let Some(o) = old.get("spec").and_then(Value::as_object) else {
        return;
    };
    if s.get("type") == Some(&json!("ExternalName")) {
        return;
    }
    for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if absent(s, f) {
            if let Some(v) = o.get(f) {
                s.insert(f.into(), v.clone());
            }
        }
    }
    let old_ports = o.get("ports").and_then(Value::as_array);
    if let (Some(Value::Array(ports)), Some(old_ports)) = (s.get_mut("ports"), old_ports) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            if p.get("nodePort").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let same = old_ports
                .iter()
                .find(|q| q.get("port") == p.get("port") && q.get("protocol") == p.get("protocol"));
            if let Some(n) = same.and_then(|q| q.get("nodePort")) {
                p.insert("nodePort".into(), n.clone());
            }
        }
    }
}

/// A cluster IP may not change once set (other than by changing the type to ExternalName).
pub(super) fn immutable(old: &Value, new: &Value) -> Vec<FieldError> {
    let ip = |v: &Value| v.pointer("/spec/clusterIP").cloned();
    let external = new.pointer("/spec/type") == Some(&json!("ExternalName"));
    match (ip(old), ip(new)) {
        (Some(a), Some(b)) if a != b && !external && a != json!("") => {
            vec![FieldError {
                reason: "FieldValueInvalid",
                field: "spec.clusterIPs[0]".into(),
                detail: format!("Invalid value: []string{{{b}}}: may not change once set"),
            }]
        }
        _ => Vec::new(),
    }
}
