//! Enqueues every ConfigMap it is told about; `reconcile` of a key whose name is `take-N`
//! allocates (and touches) N MiB, logs `allocated N MiB for KEY` and is done, any other key logs
//! `reconciled KEY`. A bounded appetite, so one build shows a cap that stops it and one that
//! does not. Its name, `portion-00`, is a fixed-width placeholder a test rewrites to run several
//! distinct plugins from one build.
use kube_guest::{log, watch_all, Level, Manifest, Object, Outcome};

struct Portion;

impl kube_guest::Guest for Portion {
    fn manifest() -> Manifest {
        Manifest {
            name: "portion-00".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![],
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, obj: kube_guest::CachedObject) {
        let obj = obj.json;
        if let Ok(o) = Object::from_slice(&obj) {
            kube_guest::queue::add(&o.key());
        }
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        let name = key.rsplit('/').next().unwrap_or(&key);
        match name
            .strip_prefix("take-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(mib) => {
                let mut hoard: Vec<Vec<u8>> = Vec::with_capacity(mib);
                for _ in 0..mib {
                    hoard.push(vec![1u8; 1 << 20]);
                }
                std::hint::black_box(&hoard);
                log::log(Level::Info, &format!("allocated {mib} MiB for {key}"));
            }
            None => log::log(Level::Info, &format!("reconciled {key}")),
        }
        Ok(Outcome::Done)
    }
}

kube_guest::export!(Portion);
