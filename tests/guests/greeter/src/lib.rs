use kube_guest::{Action, Api, Controller, Manifest, Object, Result, Verb, Watch, Write, info};

struct Greeter;

impl Controller for Greeter {
    // Settings an operator can give this plugin (`config:` in a plugins file); none here.
    type Config = ();

    // What the plugin reads and writes. The host checks every call against it, and
    // `host rbac` turns it into the RBAC the plugin needs in a real cluster.
    fn manifest() -> Manifest {
        Manifest::new("greeter")
            .watch(Watch::new("v1", "ConfigMap").with_labels("greet=yes"))
            .write(Write::new("v1", "ConfigMap", &[Verb::Patch]))
    }

    // on_add / on_update / on_delete are not written: by default they enqueue the object's key.

    fn reconcile(key: &str) -> Result<Action> {
        let api = Api::all("v1", "ConfigMap");
        // Reads come from the host's cache, never from the API server.
        let Some(cm) = api.get_by_key(key)? else {
            return Ok(Action::Done); // gone: the owner reference lets the GC delete the greeting
        };
        let mut greeting = Object::new(
            "v1",
            "ConfigMap",
            cm.namespace(),
            &format!("{}-greeting", cm.name()),
        );
        greeting["data"]["message"] = format!("hello, {}", cm.name()).into();
        greeting.set_owner_reference(cm.controller_owner_ref().ok_or("no uid yet")?);
        api.apply(&greeting, true)?; // server-side apply, field manager "greeter"
        info!("greeted {key}");
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Greeter);
