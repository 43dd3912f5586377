//! Finalizers as patches.
//!
//! Why a merge patch carrying the resourceVersion: the patch states the whole new list, and the
//! API server refuses it with 409 `Conflict` when the object changed since it was read, so a
//! concurrent writer's finalizer is never dropped (the same optimistic lock client-go's
//! `MergeFromWithOptimisticLock` gives). On conflict the controller reconciles again from the
//! fresher cached object.
//!
//! The usual flow in `reconcile`:
//!
//! ```no_run
//! use kube_guest::{Action, Api, Result};
//! const FINALIZER: &str = "example.com/cleanup";
//! fn reconcile(key: &str) -> Result<Action> {
//!     let api = Api::all("example.com/v1", "Widget");
//!     let Some(w) = api.get_by_key(key)? else { return Ok(Action::Done) };
//!     if w.is_deleting() {
//!         // ... clean up what the widget owns outside the garbage collector's reach ...
//!         api.remove_finalizer(&w, FINALIZER)?;
//!         return Ok(Action::Done);
//!     }
//!     let w = api.add_finalizer(&w, FINALIZER)?;
//!     // ... the normal reconcile of `w` ...
//!     Ok(Action::Done)
//! }
//! ```

use serde_json::{json, Value};

use crate::api::Patch;
use crate::object::Object;

fn patch_with(obj: &Object, finalizers: Vec<&str>) -> Patch {
    let mut meta = json!({ "finalizers": finalizers });
    if let Some(rv) = obj.resource_version() {
        meta["resourceVersion"] = Value::from(rv);
    }
    Patch::Merge(json!({ "metadata": meta }))
}

/// The patch that adds `finalizer`, or none when `obj` has it already (or is being deleted:
/// the API server refuses new finalizers then, and there is nothing left to guard).
///
/// ```
/// use kube_guest::{finalizer, Object, Patch};
/// let obj = Object::from_slice(br#"{"metadata":{"name":"w","resourceVersion":"7",
///     "finalizers":["other"]}}"#).unwrap();
/// let Some(Patch::Merge(p)) = finalizer::add(&obj, "mine") else { panic!() };
/// assert_eq!(p.to_string(),
///     r#"{"metadata":{"finalizers":["other","mine"],"resourceVersion":"7"}}"#);
/// ```
pub fn add(obj: &Object, finalizer: &str) -> Option<Patch> {
    if obj.has_finalizer(finalizer) || obj.is_deleting() {
        return None;
    }
    let mut list = obj.finalizers();
    list.push(finalizer);
    Some(patch_with(obj, list))
}

/// The patch that removes `finalizer`, or none when `obj` does not have it.
pub fn remove(obj: &Object, finalizer: &str) -> Option<Patch> {
    if !obj.has_finalizer(finalizer) {
        return None;
    }
    let list = obj
        .finalizers()
        .into_iter()
        .filter(|f| *f != finalizer)
        .collect();
    Some(patch_with(obj, list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_remove_state_the_whole_list_with_the_resource_version() {
        let o =
            Object::from_value(json!({"metadata": {"name": "w", "resourceVersion": "3"}})).unwrap();
        let p = add(&o, "f").unwrap();
        assert_eq!(
            p.body(),
            &json!({"metadata": {"finalizers": ["f"], "resourceVersion": "3"}})
        );
        assert!(remove(&o, "f").is_none());

        let o =
            Object::from_value(json!({"metadata": {"name": "w", "finalizers": ["a", "f", "b"]}}))
                .unwrap();
        assert!(add(&o, "f").is_none());
        assert_eq!(
            remove(&o, "f").unwrap(),
            Patch::Merge(json!({"metadata": {"finalizers": ["a", "b"]}}))
        );
        let only = Object::from_value(json!({"metadata": {"finalizers": ["f"]}})).unwrap();
        assert_eq!(
            remove(&only, "f").unwrap().body(),
            &json!({"metadata": {"finalizers": []}})
        );
        let deleting =
            Object::from_value(json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}))
                .unwrap();
        assert!(add(&deleting, "f").is_none());
    }
}
