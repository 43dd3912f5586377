//! Says which revision of it handled what, for the tests that upgrade a running plugin
//! (`host/plugin/tests/plugin_revisions.rs`, `tests/plugins_file.rs`, `tests/wasmcontroller.rs`,
//! the simulation in `host/sim`). One line per call:
//!
//! ```text
//! REV <revision> <add|update|delete> <key> <resourceVersion, or ->
//! REV <revision> reconcile <key> <resourceVersion, or - when absent>
//! ```
//!
//! Settings: `revision` (required: the label its lines carry; `bad` is refused by
//! `validate-config`), `secrets` (default false: also watch Secrets, a second informer),
//! `name` (the manifest's name, default `reviser`), `workers`, `trap` (true: `validate-config`
//! traps, as a revision that fails while it is instantiated), `annotate` (true: each reconcile
//! merge-patches its ConfigMap with `reviser/revision: <revision>` and `reviser/build: <BUILD>`,
//! the build `reviser-00` unless a test renamed it in a copy), `slowKey` and `slowMs` (that
//! key's reconcile runs on after its line, for `slowMs` milliseconds), `mark` (for the
//! simulation of several replicas: every line ends with ` <mark>`, each reconcile of an
//! existing ConfigMap whose mark does not name its version yet (it watches the marks) applies Secret `mark-<name>` annotated `reviser/by: <mark>` and `reviser/rv: <rv>` and ends with a line
//! `REV <revision> done <key> <rv> <mark>`, whether its write succeeded or not),
//! `handlerWrites` (with `mark`: each `on-update` applies Secret `seen-<name>`). Its handlers are its
//! own (never handed over to the host), so every notification is a guest call that says who
//! took it.

use kube_guest::{Action, Api, Controller, Manifest, Object, Patch, Result, Verb, Watch, Write};

/// The plugin's settings (`config:` in a plugins file).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    revision: Option<String>,
    secrets: Option<bool>,
    name: Option<String>,
    workers: Option<u32>,
    /// Trap in `validate-config`, while the revision is being instantiated.
    trap: Option<bool>,
    /// Annotate each ConfigMap it reconciles with `reviser/revision: <revision>` (a merge
    /// patch): a write that differs between revisions, for shadow runs.
    annotate: Option<bool>,
    /// The field selector of its ConfigMap watch.
    field_selector: Option<String>,
    /// The key whose reconcile runs on (a busy loop, after its line) for `slowMs`: a
    /// reconcile that outlives an upgrade's grace period.
    slow_key: Option<String>,
    /// How long the reconcile of `slowKey` runs, in milliseconds (default 60,000).
    slow_ms: Option<u64>,
    /// Who this is (a replica's name): ends every line, and each reconcile applies a Secret
    /// saying so.
    mark: Option<String>,
    /// With `mark`: each `on-update` of a ConfigMap also applies Secret `seen-<name>` (a
    /// handler that writes; under shards the host refuses it).
    handler_writes: Option<bool>,
}

/// ` <mark>` when there is one.
fn mark() -> String {
    Reviser::config()
        .mark
        .as_deref()
        .map(|m| format!(" {m}"))
        .unwrap_or_default()
}

fn revision() -> &'static str {
    Reviser::config().revision.as_deref().unwrap_or("-")
}

fn say(watch: u32, what: &str, obj: &Object) {
    // A mark (with `mark`: a Secret, never the ConfigMaps' watch 0) is its ConfigMap's
    // business: its change queues that, silently.
    if let (Some(_), true) = (Reviser::config().mark.as_ref(), watch != 0) {
        if let Some(cm) = obj.name().strip_prefix("mark-") {
            kube_guest::enqueue(&format!("{}/{cm}", obj.namespace().unwrap_or("default")));
            return;
        }
        // What its handlers write is nobody's business.
        if obj.name().starts_with("seen-") {
            return;
        }
    }
    let key = obj.key();
    println!(
        "REV {} {what} {key} {}{}",
        revision(),
        obj.resource_version().unwrap_or("-"),
        mark()
    );
    kube_guest::enqueue(&key);
}

/// Which build of the guest this is: tests make copies that differ only here (the bytes
/// `reviser-00` occur once), for two revisions whose writes differ whatever their settings.
const BUILD: &str = "reviser-00";

struct Reviser;

impl Controller for Reviser {
    type Config = Settings;

    fn manifest() -> Manifest {
        let config = Self::config();
        let mut m = Manifest::new(config.name.as_deref().unwrap_or("reviser"))
            .watch(match &config.field_selector {
                Some(f) => Watch::new("v1", "ConfigMap").with_fields(f),
                None => Watch::new("v1", "ConfigMap"),
            })
            .workers(config.workers.unwrap_or(2));
        if config.annotate.unwrap_or(false) {
            m = m.write(Write::new("v1", "ConfigMap", &[Verb::Patch]));
        }
        if config.mark.is_some() {
            // It watches what it writes, as a controller that owns its outputs: a write that
            // lands late over another's is seen and put right.
            m = m
                .write(Write::new("v1", "Secret", &[Verb::Patch]))
                .watch(Watch::new("v1", "Secret"));
        }
        if config.secrets.unwrap_or(false) {
            m.watch(Watch::new("v1", "Secret"))
        } else {
            m
        }
    }

    fn validate_config(config: &Settings) -> std::result::Result<(), String> {
        match config.revision.as_deref() {
            None => Err("revision is required".into()),
            Some("bad") => Err("revision bad is refused".into()),
            Some(_) if config.trap == Some(true) => panic!("reviser: trap while starting"),
            Some(_) => Ok(()),
        }
    }

    fn on_add(watch: u32, obj: Object) {
        say(watch, "add", &obj);
    }

    fn on_update(watch: u32, _old: Object, new: Object) {
        say(watch, "update", &new);
        let config = Reviser::config();
        if let (0, Some(by), Some(true)) = (watch, &config.mark, config.handler_writes) {
            let ns = new.namespace().unwrap_or("default");
            let seen = serde_json::json!({"metadata": {
                "name": format!("seen-{}", new.name()), "namespace": ns,
                "annotations": {"reviser/by": by}}});
            // Refused under shards: what the host answers is the point, not kept.
            if let Ok(seen) = Object::from_value(seen) {
                let _ = Api::namespaced("v1", "Secret", ns).apply(&seen, true);
            }
        }
    }

    fn on_delete(watch: u32, obj: Object, _tombstone: bool) {
        say(watch, "delete", &obj);
    }

    fn reconcile(key: &str) -> Result<Action> {
        let cm = Api::all("v1", "ConfigMap").get_by_key(key)?;
        let rv = cm
            .as_ref()
            .and_then(|o| o.resource_version())
            .unwrap_or("-")
            .to_string();
        println!("REV {} reconcile {key} {rv}{}", revision(), mark());
        if Reviser::config().slow_key.as_deref() == Some(key) {
            let ms = Reviser::config().slow_ms.unwrap_or(60_000);
            let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        if let (Some(cm), true) = (&cm, Reviser::config().annotate.unwrap_or(false)) {
            kube_guest::info!("reviser {}: annotating {key}", revision());
            let patch = serde_json::json!({"metadata": {"annotations": {
                "reviser/revision": revision(),
                "reviser/build": std::hint::black_box(BUILD),
            }}});
            Api::namespaced("v1", "ConfigMap", cm.namespace().unwrap_or("default"))
                .patch(cm.name(), &Patch::Merge(patch))?;
        }
        if let (Some(cm), Some(by)) = (&cm, Reviser::config().mark.as_deref()) {
            let ns = cm.namespace().unwrap_or("default");
            let name = format!("mark-{}", cm.name());
            let marked = Api::all("v1", "Secret").get_by_key(&format!("{ns}/{name}"))?;
            if marked.as_ref().and_then(|m| m.annotation("reviser/rv")) == Some(rv.as_str()) {
                println!("REV {} done {key} {rv}{}", revision(), mark());
                return Ok(Action::Done);
            }
            let secret = Object::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns,
                             "annotations": {"reviser/by": by, "reviser/rv": rv}},
            }))?;
            let wrote = Api::namespaced("v1", "Secret", ns).apply(&secret, true);
            println!("REV {} done {key} {rv}{}", revision(), mark());
            wrote?;
        }
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Reviser);
