//! Reconcile does one lister get of the key and returns done; handlers do nothing. The
//! benchmark's reconcile guest.
use kube_guest::{lister, split_key, watch_all, Manifest, Outcome};

struct Lookup;

impl kube_guest::Guest for Lookup {
    fn manifest() -> Manifest {
        Manifest {
            name: "lookup".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![],
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, _obj: kube_guest::CachedObject) {}
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        let (ns, name) = split_key(&key);
        match lister::get("v1", "ConfigMap", ns, name) {
            Ok(Some(obj)) if !obj.is_empty() => Ok(Outcome::Done),
            Ok(_) => Err(format!("{key} not found")),
            Err(e) => Err(format!("{} {}", e.code, e.reason)),
        }
    }
}

kube_guest::export!(Lookup);
