//! A namespace's deletion as the namespace controller does it: marked `Terminating`, its
//! contents deleted, and removed once the last of them is gone.

use std::sync::Arc;

use serde_json::json;

use super::body::{meta_mut, NAMESPACES};
use super::{delete, DeleteOptions, Propagation};
use crate::registry::ResourceDef;
use crate::response;
use crate::store::{Mutation, Outcome, StoreError};
use crate::Shared;
use kwh_client::object::Object;
use kwh_client::Status;

/// Every object in namespace `ns`, as (definition, object), one definition per resource.
fn namespace_contents(shared: &Shared, ns: &str) -> Vec<(Arc<ResourceDef>, Object)> {
    let mut seen = std::collections::HashSet::new();
    let prefix = format!("{ns}/");
    let mut out = Vec::new();
    for d in shared.registry.all().into_iter().filter(|d| d.namespaced) {
        if !seen.insert(d.store_key.clone()) {
            continue;
        }
        for k in shared.store.keys(&d.store_key, &prefix) {
            if let Some(o) = shared.store.get(&d.store_key, &k) {
                out.push((d.clone(), o));
            }
        }
    }
    out
}

/// Deleting a namespace whose contents include objects held by finalizers: like the namespace
/// controller, mark the namespace `Terminating`, delete its contents (finalizers defer some), and
/// keep the namespace until the last of them is gone ([`finish_namespace`]). New objects are
/// refused meanwhile. Returns the marked namespace, or none when nothing holds it, in which case
/// it is removed with its contents at once (the emulator's shortcut).
pub(super) fn terminate_namespace(shared: &Shared, name: &str) -> Result<Option<Object>, Status> {
    let Some(ns) = shared.store.get(NAMESPACES, name) else {
        return Ok(None);
    };
    if ns.meta().deletion_timestamp.is_some() {
        return Ok(Some(ns));
    }
    let contents = namespace_contents(shared, name);
    if contents.iter().all(|(_, o)| o.meta().finalizers.is_empty()) {
        return Ok(None);
    }
    let now = shared.now_rfc3339();
    let namespaces: Arc<str> = Arc::from(NAMESPACES);
    let out = shared.store.mutate::<Status>(&namespaces, name, |cur| {
        let cur = cur.ok_or_else(|| response::not_found("namespaces", name))?;
        let mut v = cur.to_value().map_err(StoreError::from)?;
        let m = meta_mut(&mut v);
        m.insert("deletionTimestamp".into(), now.clone().into());
        m.insert("deletionGracePeriodSeconds".into(), 0.into());
        v["status"] = json!({"phase": "Terminating"});
        Ok(Mutation::Put(v))
    })?;
    let marked = match out {
        Outcome::Updated(o) | Outcome::Created(o) | Outcome::Unchanged(Some(o)) => o,
        Outcome::Deleted(_) | Outcome::Unchanged(None) => {
            return Err(response::not_found("namespaces", name))
        }
    };
    for (def, o) in contents {
        let opts = DeleteOptions {
            propagation: Some(Propagation::Background),
            ..Default::default()
        };
        if let Err(e) = delete(shared, &def, Some(name), o.name(), &opts) {
            tracing::debug!(error = %e.message, "namespace cleanup skipped an object");
        }
    }
    Ok(Some(shared.store.get(NAMESPACES, name).unwrap_or(marked)))
}

/// Removes a `Terminating` namespace once its last object is gone.
pub(super) fn finish_namespace(shared: &Shared, name: &str) {
    let terminating = shared
        .store
        .get(NAMESPACES, name)
        .is_some_and(|n| n.meta().deletion_timestamp.is_some());
    if terminating && namespace_contents(shared, name).is_empty() {
        let _ = shared
            .store
            .mutate::<Status>(&Arc::from(NAMESPACES), name, |_| Ok(Mutation::Delete));
    }
}
