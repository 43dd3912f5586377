//! Declares a custom index over ConfigMaps (`refs`: the namespaced value of `data.ref`) and
//! reports, for each referenced ConfigMap `T`, which ConfigMaps reference it: reconcile of `T`
//! server-side-applies `T-refs` with `data.keys` (comma-joined `keys-by-index`), `data.objects`
//! (how many objects `by-index` returned) and `data.unknown` (the error of an undeclared index).
use kube_guest::{client, lister, split_key, Index, Manifest, Outcome, Verb, Watch, Write};
use serde_json::{json, Value};

struct Indexer;

fn parse(obj: &[u8]) -> Value {
    serde_json::from_slice(obj).unwrap_or(Value::Null)
}

/// Enqueues the ConfigMap `obj` references, if any (reports themselves are skipped).
fn enqueue_referenced(obj: &[u8]) {
    let v = parse(obj);
    let name = v["metadata"]["name"].as_str().unwrap_or("");
    if name.ends_with("-refs") {
        return;
    }
    if let (Some(ns), Some(target)) = (
        v["metadata"]["namespace"].as_str(),
        v["data"]["ref"].as_str(),
    ) {
        kube_guest::queue::add(&format!("{ns}/{target}"));
    }
}

impl kube_guest::Guest for Indexer {
    fn manifest() -> Manifest {
        Manifest {
            name: "indexer".into(),
            watches: vec![Watch {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                indexes: vec![Index {
                    name: "refs".into(),
                    paths: vec!["data.ref".into()],
                    namespaced: true,
                }],
            }],
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
        enqueue_referenced(&obj);
    }
    fn on_update(_watch: u32, old: kube_guest::CachedObject, new: kube_guest::CachedObject) {
        let old = old.json;
        let new = new.json;
        // Both: a reference that moved must update the old target's report too.
        enqueue_referenced(&old);
        enqueue_referenced(&new);
    }
    fn on_delete(_watch: u32, obj: kube_guest::CachedObject, _tombstone: bool) {
        let obj = obj.json;
        enqueue_referenced(&obj);
    }
    fn reconcile(key: String) -> Result<Outcome, String> {
        let err = |e: kube_guest::ApiError| format!("{} {}: {}", e.code, e.reason, e.message);
        let keys = lister::keys_by_index("v1", "ConfigMap", "refs", &key).map_err(err)?;
        let objects = lister::by_index("v1", "ConfigMap", "refs", &key).map_err(err)?;
        let unknown = match lister::keys_by_index("v1", "ConfigMap", "nope", &key) {
            Ok(k) => format!("unexpectedly found {k:?}"),
            Err(e) => format!("{} {}", e.code, e.reason),
        };
        let (ns, name) = split_key(&key);
        let report_name = format!("{name}-refs");
        let report = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": report_name, "namespace": ns},
            "data": {"keys": keys.join(","), "objects": objects.len().to_string(), "unknown": unknown}});
        client::apply(
            "v1",
            "ConfigMap",
            ns,
            &report_name,
            report.to_string().as_bytes(),
            true,
        )
        .map_err(err)?;
        Ok(Outcome::Done)
    }
}

kube_guest::export!(Indexer);
