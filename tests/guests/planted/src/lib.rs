//! Planted bugs for `host test --explore` (tests/explore.rs), one per class of bug that
//! reaches production controllers and no hand-written test catches; `config: {bug: …}` picks
//! one. Each passes its scenario unperturbed: only a perturbation shows it.
//!
//! - `baseline`, the config-reloader's own baseline race: an app (a ConfigMap naming its
//!   config, a Secret) takes the config's value as its baseline the first time it is
//!   reconciled, and rolls when the config moves away from it. When the config changes before
//!   the app's first notification arrives, the change is taken for the baseline and never
//!   rolled (notifications of different objects reordered).
//! - `stale-delete`: a parent ConfigMap gets a child Secret; a child whose parent the cache does
//!   not hold is deleted as an orphan. A cache listed from a lagging replica does not hold a
//!   new parent yet: its child is deleted (and made again: data lost). The fix trusts
//!   ownerReferences and the garbage collector, or confirms with the server.
//! - `crash-child`: a parent gets a child Secret named by counting the ones it has, then
//!   records the child's name in an annotation. A crash between the two writes leaves a child
//!   no annotation names; the restart makes a second one. The fix names the child
//!   deterministically and creates it only when absent.
//! - `lost-update`: an `index` ConfigMap gets an annotation per Secret in its namespace, by a
//!   replace of the cached object with its resourceVersion removed. From a lagging cache that
//!   replace sets back what someone else changed since: a lost update. `fixed: true` keeps the
//!   resourceVersion, meets the 409 and retries from a fresh read.
//! - (the `edge` guest plants the fifth: depending on seeing every intermediate version.)

use kube_guest::{
    Action, Api, Controller, Error, Manifest, Object, Patch, Result, Verb, Watch, Write,
};
use serde::Deserialize;
use serde_json::json;

const CONFIGMAPS: u32 = 0;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    bug: String,
    #[serde(default)]
    fixed: bool,
}

struct Planted;

fn configmaps() -> Api {
    Api::all("v1", "ConfigMap")
}

fn secrets() -> Api {
    Api::all("v1", "Secret")
}

fn bug() -> &'static str {
    Planted::config().bug.as_str()
}

fn key(ns: Option<&str>, name: &str) -> String {
    kube_guest::object_key(ns, name)
}

/// Merge patch of one annotation.
fn annotate(api: &Api, obj: &Object, name: &str, value: &str) -> Result<Object> {
    let patch = Patch::Merge(json!({"metadata": {"annotations": {name: value}}}));
    api.within(obj.namespace()).patch(obj.name(), &patch)
}

impl Planted {
    /// The ConfigMap keys a change of `obj` (of watch `watch`) concerns.
    fn keys_for(watch: u32, obj: &Object) -> Vec<String> {
        let ns = obj.namespace();
        if watch == CONFIGMAPS {
            return vec![obj.key()];
        }
        match bug() {
            // Every app that names this config.
            "baseline" => configmaps()
                .within(ns)
                .list(None)
                .unwrap_or_default()
                .into_iter()
                .filter(|a| {
                    a.value().pointer("/data/config").and_then(|v| v.as_str()) == Some(obj.name())
                })
                .map(|a| a.key())
                .collect(),
            "lost-update" => vec![key(ns, "index")],
            _ => obj
                .label("planted/parent")
                .map(|p| vec![key(ns, p)])
                .unwrap_or_default(),
        }
    }

    fn changed(watch: u32, obj: &Object) {
        for k in Self::keys_for(watch, obj) {
            kube_guest::enqueue(&k);
        }
    }

    fn baseline(app: &Object) -> Result<Action> {
        let Some(config) = app.value().pointer("/data/config").and_then(|v| v.as_str()) else {
            return Ok(Action::Done);
        };
        let value = secrets()
            .get_by_key(&key(app.namespace(), config))?
            .and_then(|s| {
                s.value()
                    .pointer("/data/v")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        match app.annotation("planted/baseline") {
            None => {
                annotate(&configmaps(), app, "planted/baseline", &value)?;
            }
            Some(b) if b != value && app.annotation("planted/rolled") != Some(value.as_str()) => {
                annotate(&configmaps(), app, "planted/rolled", &value)?;
            }
            Some(_) => {}
        }
        Ok(Action::Done)
    }

    fn stale_delete(k: &str, parent: Option<Object>) -> Result<Action> {
        let (ns, name) = kube_guest::split_key(k);
        let child_name = format!("{name}-child");
        let child = secrets().get_by_key(&key(ns, &child_name))?;
        match (parent, child) {
            (Some(p), None) => {
                let mut s = Object::new("v1", "Secret", ns, &child_name);
                s.set_label("planted/parent", p.name());
                secrets().within(ns).create(&s)?;
            }
            // The bug: the cache's word taken for the cluster's.
            (None, Some(orphan)) => {
                secrets().within(ns).delete(orphan.name())?;
            }
            _ => {}
        }
        Ok(Action::Done)
    }

    fn crash_child(parent: &Object) -> Result<Action> {
        if parent.annotation("planted/child").is_some() {
            return Ok(Action::Done);
        }
        let ns = parent.namespace();
        let selector = format!("planted/parent={}", parent.name());
        let n = secrets().within(ns).list(Some(&selector))?.len();
        let child_name = format!("{}-child-{}", parent.name(), n + 1);
        let mut s = Object::new("v1", "Secret", ns, &child_name);
        s.set_label("planted/parent", parent.name());
        secrets().within(ns).create(&s)?;
        annotate(&configmaps(), parent, "planted/child", &child_name)?;
        Ok(Action::Done)
    }

    fn lost_update(index: &Object) -> Result<Action> {
        let ns = index.namespace();
        let missing: Vec<String> = secrets()
            .within(ns)
            .list(None)?
            .into_iter()
            .map(|s| format!("planted/has-{}", s.name()))
            .filter(|a| index.annotation(a).is_none())
            .collect();
        if missing.is_empty() {
            return Ok(Action::Done);
        }
        let mut want = index.clone();
        for a in &missing {
            want.set_annotation(a, "yes");
        }
        if !Planted::config().fixed {
            // The bug: "last write wins" from whatever the cache held.
            want.metadata_mut().remove("resourceVersion");
        }
        match configmaps().within(ns).replace(&want) {
            Ok(_) => Ok(Action::Done),
            Err(e) if e.is_conflict() => Err(Error::msg(format!("index changed meanwhile: {e}"))),
            Err(e) => Err(e),
        }
    }
}

impl Controller for Planted {
    type Config = Settings;

    fn validate_config(s: &Settings) -> std::result::Result<(), String> {
        match s.bug.as_str() {
            "baseline" | "stale-delete" | "crash-child" | "lost-update" => Ok(()),
            other => Err(format!(
                "unknown bug {other:?} (baseline, stale-delete, crash-child, lost-update)"
            )),
        }
    }

    fn manifest() -> Manifest {
        let all = [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];
        Manifest::new("planted")
            .watch(Watch::new("v1", "ConfigMap"))
            .watch(Watch::new("v1", "Secret"))
            .write(Write::new("v1", "ConfigMap", &all))
            .write(Write::new("v1", "Secret", &all))
    }

    fn on_add(watch: u32, obj: Object) {
        Self::changed(watch, &obj);
    }

    fn on_update(watch: u32, _old: Object, new: Object) {
        Self::changed(watch, &new);
    }

    fn on_delete(watch: u32, obj: Object, _tombstone: bool) {
        Self::changed(watch, &obj);
    }

    fn reconcile(k: &str) -> Result<Action> {
        let obj = configmaps().get_by_key(k)?;
        match (bug(), obj) {
            ("stale-delete", parent) => Self::stale_delete(k, parent),
            (_, None) => Ok(Action::Done),
            ("baseline", Some(app)) => Self::baseline(&app),
            ("crash-child", Some(parent)) => Self::crash_child(&parent),
            (_, Some(o)) if o.name() == "index" => Self::lost_update(&o),
            _ => Ok(Action::Done),
        }
    }
}

kube_guest::export_controller!(Planted);
