//! What the SDK's `k8s-openapi` feature costs: `bench-sdk` with handlers that decode each
//! notified ConfigMap into k8s-openapi's `ConfigMap` before enqueueing its key, and a reconcile
//! that reads it typed from the cache. Its name, `bench-typed-00`, is a fixed-width placeholder.
use k8s_openapi::api::core::v1::ConfigMap;
use kube_guest::typed::{decode, watch, TypedApi};
use kube_guest::{Action, Controller, Manifest, Object, Result};

struct BenchTyped;

fn enqueue_typed(obj: &Object) {
    if let Ok(cm) = decode::<ConfigMap>(obj) {
        let ns = cm.metadata.namespace.as_deref();
        kube_guest::enqueue(&kube_guest::object_key(
            ns,
            cm.metadata.name.as_deref().unwrap_or(""),
        ));
    }
}

impl Controller for BenchTyped {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("bench-typed-00").watch(watch::<ConfigMap>())
    }

    fn on_add(_watch: u32, obj: Object) {
        enqueue_typed(&obj);
    }

    fn on_update(_watch: u32, _old: Object, new: Object) {
        enqueue_typed(&new);
    }

    fn reconcile(key: &str) -> Result<Action> {
        let _ = TypedApi::<ConfigMap>::all().get_by_key(key)?;
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(BenchTyped);
