//! The columns `kubectl get` prints, per kind, as kube-apiserver's table printers give them
//! (`kubectl get deployments` shows READY, UP-TO-DATE and AVAILABLE; ConfigMaps their DATA
//! count); a custom resource's from its CRD's `additionalPrinterColumns`. Every other kind
//! gets NAME and AGE, as the server's default table does.

use serde_json::{json, Value};

/// The columns of a kind's table between NAME and AGE.
pub(crate) enum Printer {
    Builtin(&'static [Column]),
    /// Core Events: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, and neither NAME nor AGE.
    Events,
    /// A custom resource's: (name, type, JSONPath) each.
    Custom(Vec<(String, String, String)>),
}

impl Printer {
    /// The printer of `def`'s kind; a custom resource's read from its CRD.
    pub(crate) fn of(shared: &crate::Shared, def: &kwh_client::registry::ResourceDef) -> Printer {
        if def.builtin && &*def.store_key == "/events" {
            return Printer::Events;
        }
        if def.builtin {
            return Printer::Builtin(columns(&def.store_key));
        }
        let crd = shared
            .store
            .get(
                "apiextensions.k8s.io/customresourcedefinitions",
                &format!("{}.{}", def.plural, def.group),
            )
            .and_then(|o| o.to_value().ok());
        Printer::Custom(crd.map_or_else(Vec::new, |c| custom_columns(&c, &def.version)))
    }

    /// The column definitions (name, type) between NAME and AGE.
    pub(crate) fn definitions(&self) -> Vec<(String, String)> {
        match self {
            Printer::Builtin(cols) => cols
                .iter()
                .map(|c| (c.name.to_owned(), c.kind.to_owned()))
                .collect(),
            Printer::Custom(cols) => cols
                .iter()
                .map(|(n, t, _)| (n.clone(), t.clone()))
                .collect(),
            Printer::Events => ["Last Seen", "Type", "Reason", "Object", "Message"]
                .iter()
                .map(|n| ((*n).to_owned(), "string".to_owned()))
                .collect(),
        }
    }

    /// Whether the row starts with NAME and ends with AGE (every table but Events').
    pub(crate) fn named(&self) -> bool {
        !matches!(self, Printer::Events)
    }

    /// Whether it reads the object beyond its metadata.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Printer::Builtin(cols) => cols.is_empty(),
            Printer::Custom(cols) => cols.is_empty(),
            Printer::Events => false,
        }
    }

    /// The cells of `o` between NAME and AGE.
    pub(crate) fn cells(&self, o: &Value) -> Vec<Value> {
        match self {
            Printer::Builtin(cols) => cols.iter().map(|c| (c.cell)(o)).collect(),
            Printer::Custom(cols) => cols.iter().map(|(_, _, p)| at_path(o, p)).collect(),
            Printer::Events => event_cells(o),
        }
    }
}

/// One column: its definition and how a cell is read from the object.
pub(crate) struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub cell: fn(&Value) -> Value,
}

/// A `'static` slice of columns (a const item: closures become function pointers there).
macro_rules! cols {
    ($($c:expr),* $(,)?) => {{
        const C: &[Column] = &[$($c),*];
        C
    }};
}

const fn col(name: &'static str, kind: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column { name, kind, cell }
}

/// The columns between NAME and AGE of a built-in kind (`store_key`).
pub(crate) fn columns(store_key: &str) -> &'static [Column] {
    match store_key {
        "/configmaps" => cols![col("Data", "integer", |o| count(
            o,
            &["data", "binaryData"]
        ))],
        "/secrets" => cols![
            col("Type", "string", |o| text(o, "/type")),
            col("Data", "integer", |o| count(o, &["data"])),
        ],
        "/serviceaccounts" => cols![col("Secrets", "integer", |o| len(o, "/secrets"))],
        "/namespaces" => cols![col("Status", "string", |o| text(o, "/status/phase"))],
        "/pods" => cols![
            col("Ready", "string", pod_ready),
            col("Status", "string", |o| {
                o.pointer("/status/reason")
                    .or_else(|| o.pointer("/status/phase"))
                    .cloned()
                    .unwrap_or(json!(""))
            }),
            col("Restarts", "string", pod_restarts),
        ],
        "apps/deployments" | "apps/statefulsets" => cols![
            col("Ready", "string", |o| {
                json!(format!(
                    "{}/{}",
                    int(o, "/status/readyReplicas"),
                    int(o, "/spec/replicas")
                ))
            }),
            col("Up-to-date", "integer", |o| json!(int(
                o,
                "/status/updatedReplicas"
            ))),
            col("Available", "integer", |o| json!(int(
                o,
                "/status/availableReplicas"
            ))),
        ],
        "apps/replicasets" | "/replicationcontrollers" => cols![
            col("Desired", "integer", |o| json!(int(o, "/spec/replicas"))),
            col("Current", "integer", |o| json!(int(o, "/status/replicas"))),
            col("Ready", "integer", |o| json!(int(
                o,
                "/status/readyReplicas"
            ))),
        ],
        "apps/daemonsets" => cols![
            col("Desired", "integer", |o| json!(int(
                o,
                "/status/desiredNumberScheduled"
            ))),
            col("Current", "integer", |o| json!(int(
                o,
                "/status/currentNumberScheduled"
            ))),
            col("Ready", "integer", |o| json!(int(o, "/status/numberReady"))),
            col("Up-to-date", "integer", |o| json!(int(
                o,
                "/status/updatedNumberScheduled"
            ))),
            col("Available", "integer", |o| json!(int(
                o,
                "/status/numberAvailable"
            ))),
        ],
        "batch/jobs" => cols![col("Completions", "string", |o| {
            json!(format!(
                "{}/{}",
                int(o, "/status/succeeded"),
                int(o, "/spec/completions").max(1)
            ))
        })],
        "batch/cronjobs" => cols![
            col("Schedule", "string", |o| text(o, "/spec/schedule")),
            col("Suspend", "boolean", |o| {
                json!(o.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true))
            }),
            col("Active", "integer", |o| len(o, "/status/active")),
            col("Last Schedule", "string", |o| {
                text(o, "/status/lastScheduleTime")
            }),
        ],
        other => more_columns(other),
    }
}

/// The columns of the kinds after the workloads'.
fn more_columns(store_key: &str) -> &'static [Column] {
    match store_key {
        "/services" => cols![
            col("Type", "string", |o| text(o, "/spec/type")),
            col("Cluster-IP", "string", |o| text(o, "/spec/clusterIP")),
            col("External-IP", "string", |o| {
                let ips: Vec<&str> = o
                    .pointer("/status/loadBalancer/ingress")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.get("ip").or_else(|| i.get("hostname")))
                    .filter_map(Value::as_str)
                    .collect();
                json!(if ips.is_empty() {
                    "<none>".into()
                } else {
                    ips.join(",")
                })
            }),
            col("Port(s)", "string", service_ports),
        ],
        "coordination.k8s.io/leases" => cols![col("Holder", "string", |o| {
            text(o, "/spec/holderIdentity")
        })],
        "/persistentvolumeclaims" => cols![
            col("Status", "string", |o| text(o, "/status/phase")),
            col("Volume", "string", |o| text(o, "/spec/volumeName")),
            col("Capacity", "string", |o| text(
                o,
                "/status/capacity/storage"
            )),
        ],
        "networking.k8s.io/ingresses" => cols![
            col("Class", "string", |o| {
                o.pointer("/spec/ingressClassName")
                    .cloned()
                    .unwrap_or(json!("<none>"))
            }),
            col("Hosts", "string", |o| {
                let hosts: Vec<&str> = o
                    .pointer("/spec/rules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("host").and_then(Value::as_str))
                    .collect();
                json!(if hosts.is_empty() {
                    "*".into()
                } else {
                    hosts.join(",")
                })
            }),
        ],
        _ => cols![],
    }
}

fn text(o: &Value, pointer: &str) -> Value {
    o.pointer(pointer).cloned().unwrap_or(json!(""))
}

fn int(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn len(o: &Value, pointer: &str) -> Value {
    json!(o
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(0, Vec::len))
}

fn count(o: &Value, members: &[&str]) -> Value {
    json!(members
        .iter()
        .filter_map(|m| o.get(*m).and_then(Value::as_object))
        .map(|m| m.len())
        .sum::<usize>())
}

fn container_statuses(o: &Value) -> impl Iterator<Item = &Value> {
    o.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn pod_ready(o: &Value) -> Value {
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = container_statuses(o)
        .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    json!(format!("{ready}/{total}"))
}

fn pod_restarts(o: &Value) -> Value {
    let n: i64 = container_statuses(o)
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum();
    json!(n.to_string())
}

/// `80/TCP,443:30443/TCP`.
fn service_ports(o: &Value) -> Value {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(n) if n > 0 => format!("{port}:{n}/{proto}"),
                _ => format!("{port}/{proto}"),
            }
        })
        .collect();
    json!(if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    })
}

/// A custom resource's columns from its CRD version's `additionalPrinterColumns`: (name, type,
/// JSONPath) each; a cell is the value at the path (simple `.a.b` paths).
pub(crate) fn custom_columns(crd: &Value, version: &str) -> Vec<(String, String, String)> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("name").and_then(Value::as_str) == Some(version))
        .filter_map(|v| v.get("additionalPrinterColumns").and_then(Value::as_array))
        .flatten()
        .filter(|c| c.get("priority").and_then(Value::as_i64).unwrap_or(0) == 0)
        .filter_map(|c| {
            Some((
                c.get("name")?.as_str()?.to_owned(),
                c.get("type")?.as_str()?.to_owned(),
                c.get("jsonPath")?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// The value at a simple JSONPath (`.spec.size`, `.status.conditions[0].type`), as a cell.
pub(crate) fn at_path(o: &Value, path: &str) -> Value {
    let mut cur = o;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        cur = match cur.get(name) {
            Some(v) => v,
            None => return Value::Null,
        };
        if let Some(i) = index {
            cur = match cur.get(i) {
                Some(v) => v,
                None => return Value::Null,
            };
        }
    }
    cur.clone()
}

/// An Event's row: when it was last seen (its age), type, reason, the object it is about
/// (`kind/name`, the kind lowercased as kubectl writes it), message.
fn event_cells(o: &Value) -> Vec<Value> {
    let last = [
        "/series/lastObservedTime",
        "/lastTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .find_map(|p| o.pointer(p).and_then(Value::as_str));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let seen = last.and_then(crate::util::parse_rfc3339).map_or_else(
        || "<unknown>".to_owned(),
        |t| crate::list::age(now.saturating_sub(t)),
    );
    let kind = o
        .pointer("/involvedObject/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = o
        .pointer("/involvedObject/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    vec![
        json!(seen),
        text(o, "/type"),
        text(o, "/reason"),
        json!(format!("{}/{name}", kind.to_lowercase())),
        text(o, "/message"),
    ]
}
