//! Keeps a copy of every ConfigMap `X` as `X-copy` (server-side apply), deletes the copy when
//! `X` goes away, and logs each notification so tests can check order and contents.
//!
//! Data keys steer it: `requeue-ms` → requeue after that long; `fail` → return an error;
//! `secret` → also try to create a Secret (undeclared: the 403 is recorded in the copy's data).
//! A ConfigMap named `handler-panic` makes `on-add` trap.
use kube_guest::{
    client, lister, log, split_key, watch_all, Level, Manifest, Outcome, Verb, Write,
};
use serde_json::{json, Value};

struct Copier;

fn parse(obj: &[u8]) -> Value {
    serde_json::from_slice(obj).unwrap_or(Value::Null)
}

fn key_of(v: &Value) -> String {
    let name = v["metadata"]["name"].as_str().unwrap_or("");
    match v["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn is_copy(v: &Value) -> bool {
    v["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.ends_with("-copy"))
}

fn data_v(v: &Value) -> &str {
    v["data"]["v"].as_str().unwrap_or("-")
}

impl kube_guest::Guest for Copier {
    fn manifest() -> Manifest {
        Manifest {
            name: "copier".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![Write {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                verbs: vec![Verb::Patch, Verb::Delete],
            }],
            resync_period_ms: 0,
            workers: 2,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, obj: kube_guest::CachedObject) {
        let obj = obj.json;
        let v = parse(&obj);
        if is_copy(&v) {
            return;
        }
        if v["metadata"]["name"] == "handler-panic" {
            panic!("copier refuses to handle {}", key_of(&v));
        }
        log::log(
            Level::Info,
            &format!("event add {} v={}", key_of(&v), data_v(&v)),
        );
        kube_guest::queue::add(&key_of(&v));
    }
    fn on_update(_watch: u32, old: kube_guest::CachedObject, new: kube_guest::CachedObject) {
        let old = old.json;
        let new = new.json;
        let (o, n) = (parse(&old), parse(&new));
        if is_copy(&n) {
            return;
        }
        log::log(
            Level::Info,
            &format!(
                "event update {} v={}->{}",
                key_of(&n),
                data_v(&o),
                data_v(&n)
            ),
        );
        kube_guest::queue::add(&key_of(&n));
    }
    fn on_delete(_watch: u32, obj: kube_guest::CachedObject, tombstone: bool) {
        let obj = obj.json;
        let v = parse(&obj);
        if is_copy(&v) {
            return;
        }
        log::log(
            Level::Info,
            &format!(
                "event delete {} v={} tombstone={tombstone}",
                key_of(&v),
                data_v(&v)
            ),
        );
        kube_guest::queue::add(&key_of(&v));
    }
    fn reconcile(key: String) -> Result<Outcome, String> {
        let (ns, name) = split_key(&key);
        let copy_name = format!("{name}-copy");
        let src = lister::get("v1", "ConfigMap", ns, name)
            .map_err(|e| format!("{} {}: {}", e.code, e.reason, e.message))?;
        let Some(src) = src else {
            let opts = kube_guest::DeleteOptions {
                preconditions: None,
                propagation_policy: None,
                grace_period_seconds: None,
            };
            return match client::delete("v1", "ConfigMap", ns, &copy_name, &opts) {
                Ok(_) => Ok(Outcome::Done),
                Err(e) if e.code == 404 => Ok(Outcome::Done),
                Err(e) => Err(format!("{} {}: {}", e.code, e.reason, e.message)),
            };
        };
        let src = parse(&src);
        let mut data = src["data"].clone();
        if !data.is_object() {
            data = json!({});
        }
        if data.get("fail").is_some() {
            return Err(format!("asked to fail for {key}"));
        }
        if data.get("secret").is_some() {
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": ns}});
            let seen = match client::create("v1", "Secret", ns, secret.to_string().as_bytes()) {
                Ok(_) => "created".to_string(),
                Err(e) => format!("{} {}", e.code, e.reason),
            };
            data["secretResult"] = Value::String(seen);
        }
        let copy = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": copy_name, "namespace": ns}, "data": data});
        client::apply(
            "v1",
            "ConfigMap",
            ns,
            &copy_name,
            copy.to_string().as_bytes(),
            true,
        )
        .map_err(|e| format!("{} {}: {}", e.code, e.reason, e.message))?;
        match src["data"]["requeue-ms"]
            .as_str()
            .and_then(|s| s.parse().ok())
        {
            Some(ms) => Ok(Outcome::RequeueAfter(ms)),
            None => Ok(Outcome::Done),
        }
    }
}

kube_guest::export!(Copier);
