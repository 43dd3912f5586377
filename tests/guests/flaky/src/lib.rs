//! A handler that fails a set number of times per object, then succeeds: exercises the retry of
//! a failed notification on a fresh instance, and order across retries.
//!
//! A fresh instance remembers nothing, so the attempt count lives in the API server: attempt `i`
//! of `on-add` for ConfigMap `X` whose data says `traps: N` (i ≤ N) creates `X-try-i` and traps;
//! once every marker exists (409 AlreadyExists) the attempt succeeds, logs `event add X` and
//! enqueues `X`.
use kube_guest::{client, log, watch_all, Level, Manifest, Outcome, Verb, Write};
use serde_json::{json, Value};

struct Flaky;

fn parse(obj: &[u8]) -> Value {
    serde_json::from_slice(obj).unwrap_or(Value::Null)
}

fn key_of(v: &Value) -> (String, String) {
    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
    let ns = v["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    (ns, name)
}

fn is_marker(name: &str) -> bool {
    name.contains("-try-")
}

impl kube_guest::Guest for Flaky {
    fn manifest() -> Manifest {
        Manifest {
            name: "flaky".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![Write {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                verbs: vec![Verb::Create],
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
        let v = parse(&obj);
        let (ns, name) = key_of(&v);
        if is_marker(&name) {
            return;
        }
        let traps: u32 = v["data"]["traps"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        for i in 1..=traps {
            let marker = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-try-{i}"), "namespace": ns}});
            match client::create("v1", "ConfigMap", Some(&ns), marker.to_string().as_bytes()) {
                Ok(_) => panic!("flaky: attempt {i} for {ns}/{name} fails"),
                Err(e) if e.code == 409 => continue,
                Err(e) => panic!("flaky: marker write failed: {} {}", e.code, e.reason),
            }
        }
        log::log(Level::Info, &format!("event add {ns}/{name}"));
        kube_guest::queue::add(&format!("{ns}/{name}"));
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(_key: String) -> Result<Outcome, String> {
        Ok(Outcome::Done)
    }
}

kube_guest::export!(Flaky);
