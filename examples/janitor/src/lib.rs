//! The janitor: deletes ConfigMaps, Secrets, Jobs and Pods once their `janitor/ttl` (counted
//! from creation) or `janitor/expires` time has passed.
//!
//! It never polls: a reconcile of an object that has not expired yet asks the host to run it
//! again when it will have (`requeue-after`), so an idle janitor costs nothing. Objects labelled
//! `janitor/dry-run=true` are not deleted; the janitor logs them and records the time they
//! expired in the `janitor/would-delete-at` annotation instead.
//!
//! See the README for the manifest's rights and how to run and test it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube_guest::{
    info, warn, Action, Api, Controller, DeleteOptions, Manifest, Object, Patch, PropagationPolicy,
    Result, Verb, Watch, Write,
};
use serde_json::json;

pub mod kinds;
pub mod ttl;

use ttl::Decision;

/// The controller; see the crate documentation.
pub struct Janitor;

/// Milliseconds since the epoch, from the host's wall clock.
fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// Whether the janitor cares about `obj` at all: only annotated objects reach the queue.
fn annotated(obj: &Object) -> bool {
    obj.annotation(ttl::TTL).is_some() || obj.annotation(ttl::EXPIRES).is_some()
}

fn enqueue(watch: u32, obj: &Object) {
    if let Some(kind) = kinds::of_watch(watch) {
        if annotated(obj) {
            kube_guest::enqueue(&kinds::key(kind, &obj.key()));
        }
    }
}

impl Controller for Janitor {
    type Config = ();

    fn manifest() -> Manifest {
        kinds::KINDS.iter().fold(
            // The dry-run report is a patch; deletion is the janitor's job.
            Manifest::new("janitor").workers(2),
            |m, k| {
                m.watch(Watch::new(k.api_version, k.kind)).write(Write::new(
                    k.api_version,
                    k.kind,
                    &[Verb::Delete, Verb::Patch],
                ))
            },
        )
    }

    fn on_add(watch: u32, obj: Object) {
        enqueue(watch, &obj);
    }

    fn on_update(watch: u32, _old: Object, new: Object) {
        // A changed TTL must be looked at again even if a requeue is pending: the queue
        // deduplicates, and the reconcile computes the new wait.
        enqueue(watch, &new);
    }

    fn on_delete(_watch: u32, _obj: Object, _tombstone: bool) {
        // Nothing to clean up: a pending requeue finds the object gone.
    }

    fn reconcile(key: &str) -> Result<Action> {
        let Some((kind, object_key)) = kinds::parse_key(key) else {
            warn!("ignoring key {key:?}: not one the janitor makes");
            return Ok(Action::Done);
        };
        let api = Api::all(kind.api_version, kind.kind);
        let Some(obj) = api.get_by_key(object_key)? else {
            return Ok(Action::Done);
        };
        if obj.is_deleting() {
            return Ok(Action::Done);
        }
        match ttl::decide(&obj, now_ms()) {
            Decision::Unmanaged => Ok(Action::Done),
            Decision::Invalid(why) => {
                // Retrying cannot fix an annotation; the next update of the object brings it back.
                warn!("{key}: {why}; leaving it alone");
                Ok(Action::Done)
            }
            Decision::Wait(d) => Ok(Action::RequeueAfter(d.max(Duration::from_millis(1)))),
            Decision::Expired { at, dry_run: true } => report(&api, &obj, key, at),
            Decision::Expired { at, dry_run: false } => delete(&api, &obj, key, at),
        }
    }
}

/// A dry run: log the object and record when it expired, once.
fn report(api: &Api, obj: &Object, key: &str, at: i64) -> Result<Action> {
    let when = ttl::report_value(at);
    if obj.annotation(ttl::WOULD_DELETE) == Some(when.as_str()) {
        return Ok(Action::Done);
    }
    info!("dry run: would delete {key} (expired at {when})");
    let patch = json!({"metadata": {"annotations": {ttl::WOULD_DELETE: when}}});
    api.within(obj.namespace())
        .patch(obj.name(), &Patch::Merge(patch))?;
    Ok(Action::Done)
}

/// Deletes the expired object, exactly the one that was judged: the preconditions make the API
/// server refuse (409) if it was recreated or changed since the cache showed it, e.g. someone
/// extended its TTL a moment ago. Dependents (a Job's Pods) go too: `batch/v1` Jobs would
/// orphan them by default.
fn delete(api: &Api, obj: &Object, key: &str, at: i64) -> Result<Action> {
    let mut opts = DeleteOptions::default().propagation(PropagationPolicy::Background);
    if let Some(uid) = obj.uid() {
        opts = opts.precondition_uid(uid);
    }
    if let Some(rv) = obj.resource_version() {
        opts = opts.precondition_resource_version(rv);
    }
    match api.within(obj.namespace()).delete_with(obj.name(), &opts) {
        Ok(_) => {
            info!("deleted {key}: expired at {}", ttl::report_value(at));
            Ok(Action::Done)
        }
        Err(e) if e.is_not_found() => Ok(Action::Done),
        Err(e) => Err(e),
    }
}

kube_guest::export_controller!(Janitor);
