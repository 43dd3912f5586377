//! `tests/guests/bench-sdk` watching Pods: the SDK's default handlers enqueue each key, and the
//! reconcile finds the object in the cache and is done.
use kube_guest::{Action, Api, Controller, Manifest, Result, Watch};

struct SdkPod;

impl Controller for SdkPod {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("peers-sdk-pod").watch(Watch::new("v1", "Pod"))
    }

    fn reconcile(key: &str) -> Result<Action> {
        let _ = Api::all("v1", "Pod").get_by_key(key)?;
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(SdkPod);
