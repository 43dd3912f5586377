//! The benchmarks' guest as users write one: the SDK's `Controller` with its default handlers
//! (each notification enqueues its key from the metadata the host sends, without parsing the
//! object: contract 0.2.0) and a reconcile that finds the
//! object in the cache and is done. Its name, `bench-sdk-00`, is a fixed-width placeholder the
//! benchmark rewrites to run several distinct plugins from one build.
use kube_guest::{Action, Api, Controller, Manifest, Result, Watch};

struct BenchSdk;

impl Controller for BenchSdk {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("bench-sdk-00").watch(Watch::new("v1", "ConfigMap"))
    }

    fn reconcile(key: &str) -> Result<Action> {
        let _ = Api::all("v1", "ConfigMap").get_by_key(key)?;
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(BenchSdk);
