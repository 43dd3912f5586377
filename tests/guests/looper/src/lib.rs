//! Enqueues every ConfigMap it is told about and then loops forever in reconcile: the host must
//! stop it at its deadline while other plugins carry on.
use kube_guest::{watch_all, Manifest, Outcome};

struct Looper;

impl kube_guest::Guest for Looper {
    fn manifest() -> Manifest {
        Manifest {
            name: "looper".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![],
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, _obj: kube_guest::CachedObject) {
        kube_guest::queue::add("spin");
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(_key: String) -> Result<Outcome, String> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

kube_guest::export!(Looper);
