//! Enqueues every ConfigMap it is told about, except that `on-add` of one named `stall` loops
//! forever; `reconcile` allocates (and touches) memory until it dies. It only finishes inside
//! the limits the host was started with, so its failures show which limits took effect.
use kube_guest::{watch_all, Manifest, Object, Outcome};

struct Hungry;

impl kube_guest::Guest for Hungry {
    fn manifest() -> Manifest {
        Manifest {
            name: "hungry".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![],
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, obj: kube_guest::CachedObject) {
        let obj = obj.json;
        let Ok(o) = Object::from_slice(&obj) else {
            return;
        };
        if o.name() == "stall" {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        kube_guest::queue::add(&o.key());
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(_key: String) -> Result<Outcome, String> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

kube_guest::export!(Hungry);
