//! Declares ConfigMap writes but tries to create a Secret (and read one): both must be refused
//! with a 403 the guest sees. The reconcile error reports what the guest saw, for the test to check.
use kube_guest::{client, lister, watch_all, Manifest, Outcome, Verb, Write};

struct Rogue;

const SECRET: &[u8] =
    br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"loot","namespace":"default"}}"#;
const CONFIGMAP: &[u8] =
    br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok","namespace":"default"}}"#;

impl kube_guest::Guest for Rogue {
    fn manifest() -> Manifest {
        Manifest {
            name: "rogue".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![Write {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                verbs: vec![Verb::Create],
            }],
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
        let seen = match key.as_str() {
            "create-secret" => client::create("v1", "Secret", Some("default"), SECRET).map(|_| ()),
            "delete-configmap" => client::delete(
                "v1",
                "ConfigMap",
                Some("default"),
                "ok",
                &kube_guest::DeleteOptions {
                    preconditions: None,
                    propagation_policy: None,
                    grace_period_seconds: None,
                },
            )
            .map(|_| ()),
            "read-secret" => lister::get("v1", "Secret", Some("default"), "loot").map(|_| ()),
            "create-configmap" => {
                client::create("v1", "ConfigMap", Some("default"), CONFIGMAP).map(|_| ())
            }
            other => return Err(format!("unknown key {other}")),
        };
        match seen {
            Ok(()) => Ok(Outcome::Done),
            Err(e) => Err(format!("{} {}: {}", e.code, e.reason, e.message)),
        }
    }
}

kube_guest::export!(Rogue);
