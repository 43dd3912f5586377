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
    fn on_add(_watch: u32, obj: Vec<u8>) {
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
    fn on_update(_watch: u32, _old: Vec<u8>, _new: Vec<u8>) {}
    fn on_delete(_watch: u32, _obj: Vec<u8>, _tombstone: bool) {}
    fn reconcile(_key: String) -> Result<Outcome, String> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

kube_guest::export!(Hungry);
