//! Watches ConfigMaps with a label selector that does not parse: the host must refuse to load
//! it with one line naming the file and the cause.
use kube_guest::{Manifest, Outcome, Watch};

struct Bad;

impl kube_guest::Guest for Bad {
    fn manifest() -> Manifest {
        Manifest {
            name: "badlabel".into(),
            watches: vec![Watch {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: None,
                label_selector: Some("app in (a,b".into()),
                field_selector: None,
                indexes: vec![],
            }],
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

kube_guest::export!(Bad);
