//! Allocates (and touches) memory until it dies, unless the key is `ok`: exercises the memory cap.
use kube_guest::{watch_all, Manifest, Outcome};

struct Hog;

impl kube_guest::Guest for Hog {
    fn manifest() -> Manifest {
        Manifest {
            name: "hog".into(),
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
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

kube_guest::export!(Hog);
