//! Enqueues every Secret named `trap-*`, and traps in every reconcile until the Secret
//! `default/trapper-switch` has the label `mode: ok`; then each reconcile of `trap-X` applies
//! the ConfigMap `trap-X-done`. Exercises quarantine (a plugin that keeps failing), probation
//! and resumption. It watches Secrets so that other plugins' ConfigMap traffic in the same test
//! does not reach it.
use kube_guest::{client, lister, split_key, watch_all, Manifest, Outcome, Verb, Write};
use serde_json::{json, Value};

struct Trapper;

fn wanted(name: &str) -> bool {
    name.starts_with("trap-") && !name.ends_with("-done") && !name.ends_with("-copy")
}

fn switched_on() -> bool {
    match lister::get("v1", "Secret", Some("default"), "trapper-switch") {
        Ok(Some(obj)) => {
            let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
            v["metadata"]["labels"]["mode"] == "ok"
        }
        _ => false,
    }
}

impl kube_guest::Guest for Trapper {
    fn manifest() -> Manifest {
        Manifest {
            name: "trapper".into(),
            watches: vec![watch_all("v1", "Secret")],
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
        if wanted(name) {
            let ns = v["metadata"]["namespace"].as_str().unwrap_or("");
            kube_guest::queue::add(&format!("{ns}/{name}"));
        }
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        if !switched_on() {
            panic!("trapper: broken for {key}");
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
        Ok(Outcome::Done)
    }
}

kube_guest::export!(Trapper);
