//! A plugin that fails on every call until told otherwise, for the tests of what a quarantine
//! costs and what reaches a plugin when it recovers.
//!
//! Every handler call and every reconcile traps until the Secret `default/relapse-switch`
//! has the label `mode: ok` (read from its cache). From then on its handlers enqueue each
//! Secret named `item-*`, and a reconcile of `default/item-X` applies the ConfigMap
//! `default/item-X-seen` with `data.rv` set to the resourceVersion of `item-X` as its cache
//! holds it: what the test compares with the API server's last version.

use kube_guest::{Action, Api, Controller, Manifest, Object, Result, Verb, Watch, Write};

struct Relapse;

fn working() -> bool {
    Api::namespaced("v1", "Secret", "default")
        .get("relapse-switch")
        .ok()
        .flatten()
        .is_some_and(|s| s.label("mode") == Some("ok"))
}

fn handle(obj: &Object) {
    if !working() {
        panic!("relapse: broken in a handler");
    }
    if obj.name().starts_with("item-") {
        kube_guest::enqueue(&obj.key());
    }
}

impl Controller for Relapse {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("relapse")
            .watch(Watch::new("v1", "Secret").in_namespace("default"))
            .write(Write::new("v1", "ConfigMap", &[Verb::Patch]))
    }

    fn on_add(_watch: u32, obj: Object) {
        handle(&obj);
    }

    fn on_update(_watch: u32, _old: Object, new: Object) {
        handle(&new);
    }

    fn on_delete(_watch: u32, obj: Object, _tombstone: bool) {
        handle(&obj);
    }

    fn reconcile(key: &str) -> Result<Action> {
        if !working() {
            panic!("relapse: broken in reconcile");
        }
        let Some(secret) = Api::all("v1", "Secret").get_by_key(key)? else {
            return Ok(Action::Done);
        };
        let name = format!("{}-seen", secret.name());
        let rv = secret.resource_version().unwrap_or("-");
        let cm = Object::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"rv": rv}}))?;
        Api::namespaced("v1", "ConfigMap", "default").apply(&cm, true)?;
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Relapse);
