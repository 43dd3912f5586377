//! A reconcile that misbehaves on request, for the reconcile loop's failure paths end to end.
//!
//! Every ConfigMap `X` (but its own `X-done` reports) is enqueued on add and update; reconcile
//! of `X` reads it from the lister and does what its data asks:
//! - `fail: yes` → logs `attempt X +<µs>us` (monotonic time since the instance's first call)
//!   and returns an error, so the attempts' spacing shows the workqueue's backoff;
//! - `hog: yes` → allocates (and touches) memory until it dies at the instance's memory cap;
//! - otherwise → server-side-applies `X-done` and logs `reconciled X`.
//!
//! The object steers it, not the key, so a test can make a failing key succeed later by
//! changing its data.
use std::sync::OnceLock;
use std::time::Instant;

use kube_guest::{
    client, lister, log, split_key, watch_all, Level, Manifest, Outcome, Verb, Write,
};
use serde_json::{json, Value};

struct Unruly;

fn enqueue(obj: &[u8]) {
    let v: Value = serde_json::from_slice(obj).unwrap_or(Value::Null);
    let name = v["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty() || name.ends_with("-done") {
        return;
    }
    let ns = v["metadata"]["namespace"].as_str().unwrap_or("");
    kube_guest::queue::add(&format!("{ns}/{name}"));
}

fn hog() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

impl kube_guest::Guest for Unruly {
    fn manifest() -> Manifest {
        Manifest {
            name: "unruly".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![Write {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                verbs: vec![Verb::Patch],
            }],
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, obj: kube_guest::CachedObject) {
        let obj = obj.json;
        enqueue(&obj);
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, new: kube_guest::CachedObject) {
        let new = new.json;
        enqueue(&new);
    }
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        static FIRST: OnceLock<Instant> = OnceLock::new();
        let since_first = FIRST.get_or_init(Instant::now).elapsed();
        let (ns, name) = split_key(&key);
        let obj = lister::get("v1", "ConfigMap", ns, name)
            .map_err(|e| format!("{} {}: {}", e.code, e.reason, e.message))?;
        let Some(obj) = obj else {
            return Ok(Outcome::Done);
        };
        let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
        if v["data"]["fail"] == "yes" {
            log::log(
                Level::Info,
                &format!("attempt {key} +{}us", since_first.as_micros()),
            );
            return Err(format!("asked to fail for {key}"));
        }
        if v["data"]["hog"] == "yes" {
            hog();
        }
        let done = format!("{name}-done");
        let report = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": done, "namespace": ns}, "data": {"from": key}});
        client::apply(
            "v1",
            "ConfigMap",
            ns,
            &done,
            report.to_string().as_bytes(),
            true,
        )
        .map_err(|e| format!("{} {}: {}", e.code, e.reason, e.message))?;
        log::log(Level::Info, &format!("reconciled {key}"));
        Ok(Outcome::Done)
    }
}

kube_guest::export!(Unruly);
