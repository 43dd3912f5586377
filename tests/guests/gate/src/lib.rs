//! A reconcile that waits on a gate: for every ConfigMap `job-X` it logs `reconcile started`,
//! then polls ConfigMap `default/gate` (through a no-op merge patch: the client is the only way
//! to read the API server directly, and the informers stop at shutdown) until its data says
//! `open: yes`, then applies `job-X-done`. Exercises draining at SIGTERM.
use kube_guest::{
    client, log, split_key, watch_all, Level, Manifest, Outcome, PatchType, Verb, Write,
};
use serde_json::{json, Value};

struct Gate;

fn is_open() -> Result<bool, String> {
    let obj = client::patch(
        "v1",
        "ConfigMap",
        Some("default"),
        "gate",
        PatchType::Merge,
        b"{}",
    )
    .map_err(|e| format!("{} {}", e.code, e.reason))?;
    let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
    Ok(v["data"]["open"] == "yes")
}

impl kube_guest::Guest for Gate {
    fn manifest() -> Manifest {
        Manifest {
            name: "gate".into(),
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
        let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
        let name = v["metadata"]["name"].as_str().unwrap_or("");
        if name.starts_with("job-") && !name.ends_with("-done") {
            let ns = v["metadata"]["namespace"].as_str().unwrap_or("");
            kube_guest::queue::add(&format!("{ns}/{name}"));
        }
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        log::log(Level::Info, &format!("reconcile started {key}"));
        while !is_open()? {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let (ns, name) = split_key(&key);
        let done = format!("{name}-done");
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": done, "namespace": ns}});
        client::apply(
            "v1",
            "ConfigMap",
            ns,
            &done,
            obj.to_string().as_bytes(),
            true,
        )
        .map_err(|e| format!("{} {}", e.code, e.reason))?;
        log::log(Level::Info, &format!("reconcile finished {key}"));
        Ok(Outcome::Done)
    }
}

kube_guest::export!(Gate);
