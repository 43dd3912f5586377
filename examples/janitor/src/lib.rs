//! The janitor: deletes ConfigMaps, Secrets, Jobs and Pods once their `janitor/ttl` (counted
//! from creation) or `janitor/expires` time has passed.
//!
//! It never polls: a reconcile of an object that has not expired yet asks the host to run it
//! again when it will have (`requeue-after`), so an idle janitor costs nothing. Objects labelled
//! `janitor/dry-run=true` are not deleted; the janitor logs them and records the time they
//! expired in the `janitor/would-delete-at` annotation instead.
//!
//! Every action is also a Kubernetes Event, which `kubectl events` shows: `Normal Expired`
//! (action `Delete`) for each deletion, `Normal Expired` (action `DryRun`) for each report, and
//! `Warning InvalidAnnotation` (action `Ignore`) for an annotation it cannot read.
//!
//! Its settings ([`config::Settings`]: the key prefix, a global dry run) come from the `config:`
//! of its entry in the host's plugins file. See the README for the manifest's rights and how to
//! run and test it.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube_guest::events::{Event, EventType, Recorder};
use kube_guest::{
    info, warn, Action, Api, Controller, DeleteOptions, Manifest, Object, Patch, PropagationPolicy,
    Result, Verb, Watch, Write,
};
use serde_json::json;

pub mod config;
pub mod kinds;
pub mod ttl;

use config::Settings;
use ttl::{Decision, Rules};

/// The controller; see the crate documentation.
pub struct Janitor;

/// Milliseconds since the epoch, from the host's wall clock.
fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// The rules the configuration makes, worked out once per instance.
fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| Rules::new(Janitor::config()))
}

/// Only annotated objects reach the queue.
fn enqueue(watch: u32, obj: &Object) {
    if let Some(kind) = kinds::of_watch(watch) {
        if ttl::is_managed(obj, rules()) {
            kube_guest::enqueue(&kinds::key(kind, &obj.key()));
        }
    }
}

/// `ConfigMap team-a/cache`: how notes name an object (`kubectl events` shows the kind and
/// name, but not the namespace when listing several).
fn describe(obj: &Object) -> String {
    format!("{} {}", obj.kind(), obj.key())
}

/// Records an Event about `obj` (fire and forget: the host aggregates and writes it).
fn publish(obj: &Object, type_: EventType, reason: &str, action: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
    };
    Recorder::new().publish(&event, &obj.object_ref());
}

impl Controller for Janitor {
    type Config = Settings;

    fn validate_config(settings: &Settings) -> std::result::Result<(), String> {
        settings.validate()
    }

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
        match ttl::decide(&obj, now_ms(), rules()) {
            Decision::Unmanaged => Ok(Action::Done),
            Decision::Invalid(why) => {
                // Retrying cannot fix an annotation; the next update of the object brings it back.
                warn!("{key}: {why}; leaving it alone");
                publish(
                    &obj,
                    EventType::Warning,
                    "InvalidAnnotation",
                    "Ignore",
                    format!("{why}; not deleting it until the annotation is fixed"),
                );
                Ok(Action::Done)
            }
            Decision::Wait(d) => Ok(Action::RequeueAfter(d.max(Duration::from_millis(1)))),
            Decision::Expired { at, dry_run: true } => report(&api, &obj, key, at),
            Decision::Expired { at, dry_run: false } => delete(&api, &obj, key, at),
        }
    }
}

/// A dry run: log the object and record when it expired, once (in an annotation and an Event).
fn report(api: &Api, obj: &Object, key: &str, at: i64) -> Result<Action> {
    let when = ttl::report_value(at);
    let annotation = rules().would_delete.as_str();
    if obj.annotation(annotation) == Some(when.as_str()) {
        return Ok(Action::Done);
    }
    info!("dry run: would delete {key} (expired at {when})");
    let patch = json!({"metadata": {"annotations": {annotation: &when}}});
    api.within(obj.namespace())
        .patch(obj.name(), &Patch::Merge(patch))?;
    publish(
        obj,
        EventType::Normal,
        "Expired",
        "DryRun",
        format!(
            "dry run: would delete {} (expired at {when})",
            describe(obj)
        ),
    );
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
            let when = ttl::report_value(at);
            info!("deleted {key}: expired at {when}");
            // The object is gone: `kubectl describe` cannot show this, `kubectl events` can.
            publish(
                obj,
                EventType::Normal,
                "Expired",
                "Delete",
                format!("deleted {}: expired at {when}", describe(obj)),
            );
            Ok(Action::Done)
        }
        Err(e) if e.is_not_found() => Ok(Action::Done),
        Err(e) => Err(e),
    }
}

kube_guest::export_controller!(Janitor);
