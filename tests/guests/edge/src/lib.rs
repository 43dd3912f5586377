//! A planted bug for `host test --explore` (tests/explore.rs): it acts on a transition it must
//! see happen (a ConfigMap's `phase` going from `a` to `b`: it creates `<name>-passed-b`), not
//! on the state it can read, so an informer that coalesces updates (`a` then `c`) hides the
//! transition and nothing is created.
//! The level-based fix would reconcile every change and look at the state.

use kube_guest::{Action, Api, Controller, Manifest, Object, Result, Verb, Watch, Write};

struct Edge;

fn phase(o: &Object) -> Option<&str> {
    o.value().pointer("/data/phase").and_then(|v| v.as_str())
}

impl Controller for Edge {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("edge")
            .watch(Watch::new("v1", "ConfigMap"))
            .write(Write::new("v1", "ConfigMap", &[Verb::Create]))
    }

    fn on_add(_watch: u32, _obj: Object) {}

    fn on_update(_watch: u32, old: Object, new: Object) {
        if phase(&old) == Some("a") && phase(&new) == Some("b") {
            kube_guest::enqueue(&new.key());
        }
    }

    fn reconcile(key: &str) -> Result<Action> {
        if let Some(cm) = Api::all("v1", "ConfigMap").get_by_key(key)? {
            let ns = cm.namespace().unwrap_or("default");
            let name = format!("{}-passed-b", cm.name());
            let marker = Object::new("v1", "ConfigMap", Some(ns), &name);
            let api = Api::namespaced("v1", "ConfigMap", ns);
            if api.get(&name)?.is_none() {
                api.create(&marker)?;
            }
        }
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Edge);
