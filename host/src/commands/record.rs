//! `host record`: what a plugin's manifest watches on a cluster, recorded as a scenario file
//! that `host test` replays on the virtual clock: the objects as first listed (`given`), then
//! each watch event in order (`add`, `update`, `updateStatus`, `delete`), the time between
//! events (`advance`), and after each event `runQueue`, as a host's workers would reconcile.
//!
//! Events of different kinds arrive on separate watches; they are written in the order the
//! cluster committed them (their resourceVersions), each held up to 100 ms for that.
//!
//! Secret values and the values at `--redact` pointers are replaced by stable hashes of the
//! same length (equal values stay equal, so a controller comparing them behaves the same), and
//! what the server sets on every object (uid, resourceVersion, managedFields…) is left out:
//! the replay's fake cluster sets its own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use base64::Engine as _;
use clap::Args;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::{inspected, kube_config};
use crate::shutdown::ShutdownSignal;
use futures_util::StreamExt as _;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::WatchEvent;
use kwh_client::{Client, Discovery, ResourceClient};

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// The plugin whose manifest's watches are recorded.
    #[arg(long, value_name = "FILE.wasm")]
    plugin: PathBuf,
    /// Where the trace (a scenario file) is written.
    #[arg(short = 'o', long, value_name = "FILE.yaml")]
    output: PathBuf,
    /// Kubeconfig (default: `$KUBECONFIG`, else `~/.kube/config`, else in-cluster).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// Stop after this long (default: at SIGINT or SIGTERM, or after `--events`).
    #[arg(long = "for", value_name = "DURATION", value_parser = kwh_client::duration::parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many watch events.
    #[arg(long, value_name = "N")]
    events: Option<usize>,
    /// A JSON pointer (e.g. `/spec/password`) whose string value is redacted in every object
    /// (repeatable), besides Secrets' `data` and `stringData`.
    #[arg(long = "redact", value_name = "POINTER")]
    redact: Vec<String>,
    /// Keep Secrets' values as they are.
    #[arg(long)]
    keep_secrets: bool,
    /// Compile cache directory.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

pub async fn record(args: RecordArgs) -> anyhow::Result<()> {
    let mut stop = ShutdownSignal::install().context("cannot listen for SIGINT/SIGTERM")?;
    let loaded = inspected(&args.plugin, args.cache_dir.clone()).await?;
    let client = Client::new(kube_config(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
    )?)?;
    let discovery = Discovery::new(client.clone());
    let mut trace = Trace::new(Redaction {
        secrets: !args.keep_secrets,
        pointers: args.redact.clone(),
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    for w in &loaded.manifest().watches {
        let resource = discovery
            .resolve(&w.api_version, &w.kind)
            .await
            .with_context(|| format!("watch {} {}", w.api_version, w.kind))?;
        let mut scope = ResourceClient::new(client.clone(), resource, w.namespace.clone());
        scope.label_selector = w.label_selector.clone();
        scope.field_selector = w.field_selector.clone();
        let list = scope.list(&ListParams::default()).await?;
        for o in &list.items {
            trace.given(o.to_value()?);
        }
        let rv = list.resource_version.clone();
        tokio::spawn(follow(scope, rv, tx.clone()));
    }
    drop(tx);
    tracing::info!(file = %args.output.display(), objects = trace.given.len(), "recording");
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut window = Window::default();
    loop {
        window.flush(&mut trace, Instant::now() - SETTLE, args.events);
        if args.events.is_some_and(|n| trace.events >= n) {
            break;
        }
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.recv() => break,
            _ = until => break,
            _ = tokio::time::sleep(SETTLE / 2), if !window.is_empty() => {}
            e = rx.recv() => match e {
                Some((at, e)) => window.push(at, e),
                None => break,
            },
        }
    }
    window.flush(&mut trace, Instant::now() + SETTLE, args.events);
    let text = yaml_serde::to_string(&trace.scenario(&args.plugin))?;
    std::fs::write(&args.output, text)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    println!(
        "recorded {} objects and {} events to {}",
        trace.given.len(),
        trace.events,
        args.output.display()
    );
    Ok(())
}

/// One watch, from the listed revision on: each event with the time it arrived. A watch that
/// ends is opened again from the last revision seen; one the server expired (410) ends the
/// recording of that watch with a warning (a relist would hide what happened meanwhile).
async fn follow(
    scope: ResourceClient,
    mut rv: String,
    tx: mpsc::UnboundedSender<(Instant, WatchEvent)>,
) {
    loop {
        let params = WatchParams {
            resource_version: Some(rv.clone()),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(300),
            ..Default::default()
        };
        let mut stream = match scope.watch(&params).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(kind = %scope.resource.kind, error = %e, "watch failed; this kind's recording stops");
                return;
            }
        };
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Bookmark {
                    resource_version, ..
                })) => rv = resource_version,
                Some(Ok(WatchEvent::Error(s))) => {
                    tracing::warn!(kind = %scope.resource.kind, status = %s.message, "watch ended by the server; this kind's recording stops");
                    return;
                }
                Some(Ok(e)) => {
                    if let Some(o) = event_object(&e) {
                        rv = o.resource_version().to_owned();
                    }
                    if tx.send((Instant::now(), e)).is_err() {
                        return;
                    }
                }
                None => break,
                Some(Err(e)) => {
                    tracing::warn!(kind = %scope.resource.kind, error = %e, "watch stream broke; opened again");
                    break;
                }
            }
        }
    }
}

/// How long an event waits for others that the cluster committed before it but whose watch
/// delivered them later (the watches of different kinds are separate streams).
const SETTLE: Duration = Duration::from_millis(100);

/// Events not yet written, put in the cluster's commit order (their resourceVersions, which
/// a kube-apiserver takes from one etcd revision counter) before they are.
#[derive(Default)]
struct Window {
    events: Vec<(Instant, u64, WatchEvent)>,
}

impl Window {
    fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    fn push(&mut self, at: Instant, e: WatchEvent) {
        let rv = event_object(&e)
            .and_then(|o| o.resource_version().parse().ok())
            .unwrap_or(u64::MAX);
        self.events.push((at, rv, e));
    }

    /// Writes, in resourceVersion order, the events that arrived before `settled` (and the
    /// ones committed before them), at most up to `limit` events in all.
    fn flush(&mut self, trace: &mut Trace, settled: Instant, limit: Option<usize>) {
        let Some(newest) = self
            .events
            .iter()
            .filter(|(at, ..)| *at <= settled)
            .map(|(_, rv, _)| *rv)
            .max()
        else {
            return;
        };
        self.events.sort_by_key(|(_, rv, _)| *rv);
        let ready = self
            .events
            .iter()
            .take_while(|(_, rv, _)| *rv <= newest)
            .count();
        for (at, _, e) in self.events.drain(..ready) {
            if limit.is_some_and(|n| trace.events >= n) {
                break;
            }
            trace.event(at, e);
        }
    }
}

fn event_object(e: &WatchEvent) -> Option<&kwh_client::object::Object> {
    match e {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o),
        _ => None,
    }
}

/// What is redacted.
struct Redaction {
    secrets: bool,
    pointers: Vec<String>,
}

/// The trace being recorded.
struct Trace {
    redaction: Redaction,
    started: SystemTime,
    given: Vec<Value>,
    steps: Vec<Value>,
    /// Each object's last recorded state, by (apiVersion, kind, namespace, name).
    last: BTreeMap<(String, String, String, String), Value>,
    last_at: Option<Instant>,
    events: usize,
}

impl Trace {
    fn new(redaction: Redaction) -> Trace {
        Trace {
            redaction,
            started: SystemTime::now(),
            given: Vec::new(),
            steps: Vec::new(),
            last: BTreeMap::new(),
            last_at: None,
            events: 0,
        }
    }

    fn given(&mut self, v: Value) {
        let v = self.clean(v);
        if self.last.insert(identity(&v), v.clone()).is_none() {
            self.given.push(v);
        }
    }

    fn event(&mut self, at: Instant, e: WatchEvent) {
        let Some(o) = event_object(&e) else { return };
        let Ok(v) = o.to_value() else { return };
        let v = self.clean(v);
        let id = identity(&v);
        if let Some(before) = self.last_at {
            let gap = at.saturating_duration_since(before);
            if gap >= Duration::from_millis(1) {
                self.steps
                    .push(json!({"advance": format!("{}ms", gap.as_millis())}));
            }
        }
        self.last_at = Some(at);
        let before = self.last.get(&id).cloned();
        match e {
            WatchEvent::Deleted(_) => {
                self.last.remove(&id);
                let (api_version, kind, ns, name) = id;
                let mut target = json!({"apiVersion": api_version, "kind": kind, "name": name});
                if !ns.is_empty() {
                    target["namespace"] = ns.into();
                }
                self.steps.push(json!({"delete": target}));
            }
            _ => {
                match before {
                    None => self.steps.push(json!({"add": v})),
                    Some(b) => {
                        let status_only = without(&b, "status") == without(&v, "status");
                        if !status_only {
                            self.steps.push(json!({"update": without(&v, "status")}));
                        }
                        if b.get("status") != v.get("status") {
                            self.steps.push(json!({"updateStatus": v}));
                        }
                    }
                }
                self.last.insert(id, v);
            }
        }
        self.steps.push(json!({"runQueue": true}));
        self.events += 1;
    }

    /// The object as a scenario gives it: what the server sets on every object left out,
    /// the redacted values replaced.
    fn clean(&self, mut v: Value) -> Value {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "managedFields",
                "selfLink",
            ] {
                m.remove(f);
            }
        }
        let secret =
            v.get("kind") == Some(&json!("Secret")) && v.get("apiVersion") == Some(&json!("v1"));
        if secret && self.redaction.secrets {
            if let Some(Value::Object(data)) = v.get_mut("data") {
                for val in data.values_mut() {
                    *val = redact_base64(val);
                }
            }
            if let Some(Value::Object(data)) = v.get_mut("stringData") {
                for val in data.values_mut() {
                    *val = redact_text(val);
                }
            }
        }
        for p in &self.redaction.pointers {
            if let Some(x) = v.pointer_mut(p) {
                *x = redact_text(x);
            }
        }
        v
    }

    fn scenario(&self, plugin: &std::path::Path) -> Value {
        let start = kwh_client::time::time(self.started);
        json!({
            "name": format!("recorded for {} at {start}", plugin.display()),
            "start": start,
            "given": self.given,
            "steps": self.steps,
        })
    }
}

fn identity(v: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

fn without(v: &Value, member: &str) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove(member);
    }
    v
}

/// `n` bytes derived from `seed` (SHA-256 in counter mode): the same input, the same bytes.
fn stable_bytes(seed: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 32);
    let mut counter = 0u32;
    while out.len() < n {
        let mut h = Sha256::new();
        h.update(seed);
        h.update(counter.to_be_bytes());
        out.extend_from_slice(&h.finalize());
        counter += 1;
    }
    out.truncate(n);
    out
}

/// A base64 value replaced by base64 of as many stable bytes as it held: the same length,
/// still valid base64, equal for equal values.
fn redact_base64(v: &Value) -> Value {
    let Some(s) = v.as_str() else {
        return v.clone();
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let n = engine.decode(s).map_or(s.len() * 3 / 4, |b| b.len());
    engine.encode(stable_bytes(s.as_bytes(), n)).into()
}

/// A string replaced by hex of stable bytes, to its length.
fn redact_text(v: &Value) -> Value {
    let Some(s) = v.as_str() else {
        return v.clone();
    };
    let hex: String = stable_bytes(s.as_bytes(), s.len().div_ceil(2))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    hex[..s.len()].to_owned().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_values_keep_their_length_and_equality_and_lose_their_content() {
        let a = redact_base64(&json!("czNjcjN0"));
        let b = redact_base64(&json!("czNjcjN0"));
        let c = redact_base64(&json!("b3RoZXI="));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, json!("czNjcjN0"));
        assert_eq!(a.as_str().map(str::len), Some(8));
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(a.as_str().unwrap_or(""))
            .map(|b| b.len());
        assert_eq!(decoded.ok(), Some(6));
        let t = redact_text(&json!("hunter2"));
        assert_eq!(t.as_str().map(str::len), Some(7));
        assert_ne!(t, json!("hunter2"));
        assert_eq!(t, redact_text(&json!("hunter2")));
    }

    #[test]
    fn events_become_steps_in_order_with_the_time_between_them() {
        let mut t = Trace::new(Redaction {
            secrets: true,
            pointers: vec!["/spec/token".into()],
        });
        let cm = |data: &str, rv: &str| {
            kwh_client::object::Object::from_bytes(bytes::Bytes::from(
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": "d", "resourceVersion": rv, "uid": "u"},
                    "data": {"k": data}})
                .to_string(),
            ))
            .unwrap()
        };
        let t0 = Instant::now();
        t.event(t0, WatchEvent::Added(cm("1", "5")));
        t.event(
            t0 + Duration::from_millis(250),
            WatchEvent::Modified(cm("2", "6")),
        );
        t.event(
            t0 + Duration::from_millis(250),
            WatchEvent::Deleted(cm("2", "7")),
        );
        let kinds: Vec<&str> = t
            .steps
            .iter()
            .filter_map(|s| {
                s.as_object()
                    .and_then(|o| o.keys().next())
                    .map(String::as_str)
            })
            .collect();
        assert_eq!(
            kinds,
            ["add", "runQueue", "advance", "update", "runQueue", "delete", "runQueue"]
        );
        assert_eq!(t.steps[2]["advance"], "250ms");
        assert_eq!(t.steps[3]["update"]["data"]["k"], "2");
        assert!(t.steps[0]["add"]["metadata"].get("uid").is_none());
        assert_eq!(
            t.steps[5]["delete"],
            json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "d", "name": "c"})
        );
    }
}
