//! A controller that imports an interface the host does not grant (`test:stranger/steal`):
//! the host must refuse to load it, naming the import, and start its other plugins.
// The imported host interface has wide functions; the generated bindings are not ours to shape.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ path: "wit", world: "stranger", generate_all });

struct Stranger;

impl Guest for Stranger {
    fn manifest() -> Manifest {
        Manifest {
            name: "stranger".into(),
            watches: Vec::new(),
            writes: Vec::new(),
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn on_add(_watch: u32, _obj: CachedObject) {}
    fn on_update(_watch: u32, _old: CachedObject, _new: CachedObject) {}
    fn on_delete(_watch: u32, _obj: CachedObject, _tombstone: bool) {}
    fn reconcile(_key: String) -> Result<Outcome, String> {
        Err(test::stranger::steal::grab())
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

export!(Stranger);
