//! A no-op controller for the benchmarks. Its name, `bench-noop-00`, is a fixed-width
//! placeholder: the benchmark rewrites the two digits in the component's bytes to run several
//! distinct plugins (each needs its own name) from one build.
use kube_guest::{watch_all, Manifest, Outcome};

struct BenchNoop;

impl kube_guest::Guest for BenchNoop {
    fn manifest() -> Manifest {
        Manifest {
            name: "bench-noop-00".into(),
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
    fn reconcile(_key: String) -> Result<Outcome, String> {
        Ok(Outcome::Done)
    }
}

kube_guest::export!(BenchNoop);
