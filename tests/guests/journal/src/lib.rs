//! Keeps a journal of its handler calls on stdout, for the tests of what reaches a guest
//! (in order, once): every `on-add`, `on-update` and `on-delete` prints one line
//!
//! ```text
//! JOURNAL <replica> add <key> <resourceVersion>
//! JOURNAL <replica> update <key> <old resourceVersion> <new resourceVersion>
//! JOURNAL <replica> delete <key> <resourceVersion, or - for a tombstone's stub>
//! ```
//!
//! then enqueues the key (its handlers are never handed over: the host calls each of them).
//! `replica` comes from its configuration, so that runtimes of one test tell their lines
//! apart; `namespace` confines its watch. Its reconcile does nothing.

use kube_guest::{Action, Controller, Manifest, Object, Result, Watch};

/// The plugin's settings (`config:` in a plugins file).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    /// The name printed on each line (default `-`).
    replica: Option<String>,
    /// Watch ConfigMaps in this namespace only (default: every namespace).
    namespace: Option<String>,
}

struct Journal;

fn replica() -> &'static str {
    Journal::config().replica.as_deref().unwrap_or("-")
}

fn rv(o: &Object) -> &str {
    o.resource_version().unwrap_or("-")
}

impl Controller for Journal {
    type Config = Settings;

    fn manifest() -> Manifest {
        let watch = match &Self::config().namespace {
            Some(ns) => Watch::new("v1", "ConfigMap").in_namespace(ns),
            None => Watch::new("v1", "ConfigMap"),
        };
        Manifest::new("journal").watch(watch)
    }

    fn on_add(_watch: u32, obj: Object) {
        println!("JOURNAL {} add {} {}", replica(), obj.key(), rv(&obj));
        kube_guest::enqueue(&obj.key());
    }

    fn on_update(_watch: u32, old: Object, new: Object) {
        println!(
            "JOURNAL {} update {} {} {}",
            replica(),
            new.key(),
            rv(&old),
            rv(&new)
        );
        kube_guest::enqueue(&new.key());
    }

    fn on_delete(_watch: u32, obj: Object, _tombstone: bool) {
        println!("JOURNAL {} delete {} {}", replica(), obj.key(), rv(&obj));
        kube_guest::enqueue(&obj.key());
    }

    fn reconcile(_key: &str) -> Result<Action> {
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Journal);
