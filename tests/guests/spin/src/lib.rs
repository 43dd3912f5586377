//! Loops forever in reconcile unless the key is `ok` (or panics for `panic`): exercises the
//! per-call deadline and trap recovery.
use kube_guest::{watch_all, Manifest, Outcome};

struct Spin;

impl kube_guest::Guest for Spin {
    fn manifest() -> Manifest {
        Manifest {
            name: "spin".into(),
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
        if key == "ok" {
            return Ok(Outcome::Done);
        }
        if key == "panic" {
            panic!("spin refuses key {key}");
        }
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

kube_guest::export!(Spin);
