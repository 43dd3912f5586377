//! The benchmark SDK guest without its read: the SDK's `Controller` with its default handlers
//! and a reconcile that reads nothing and is done. Beside `bench-sdk` (whose reconcile reads its
//! object from the cache) it splits what an SDK guest costs over the raw guest into the SDK's
//! path (the host enqueues, a worker calls `reconcile`) and the read.
use kube_guest::{Action, Controller, Manifest, Result, Watch};

struct BenchSdkBare;

impl Controller for BenchSdkBare {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("bench-sdk-bare").watch(Watch::new("v1", "ConfigMap"))
    }

    fn reconcile(_key: &str) -> Result<Action> {
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(BenchSdkBare);
