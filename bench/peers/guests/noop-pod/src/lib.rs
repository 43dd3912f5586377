//! `tests/guests/bench-noop` watching Pods: a raw guest (no SDK `Controller`) whose handlers
//! and reconcile do nothing.
use kube_guest::{watch_all, Manifest, Outcome};

struct NoopPod;

impl kube_guest::Guest for NoopPod {
    fn manifest() -> Manifest {
        Manifest {
            name: "peers-noop-pod".into(),
            watches: vec![watch_all("v1", "Pod")],
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
    fn reconcile(_key: String) -> Result<Outcome, String> {
        Ok(Outcome::Done)
    }
}

kube_guest::export!(NoopPod);
