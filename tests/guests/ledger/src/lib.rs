//! Keeps a ledger of its reconciles on stdout, for the tests that run several `host` replicas
//! against one API server: `reconcile(key)` reads the ConfigMap from the lister and prints
//!
//! ```text
//! LEDGER start <key> <resourceVersion, or - when absent> <unix time in ns>
//! LEDGER end <key> <the same resourceVersion> <unix time in ns>
//! ```
//!
//! holding for `holdMs` (default 0) between the two, so that two replicas reconciling one key
//! at the same time show as overlapping intervals. It writes nothing to the cluster. Its
//! handlers are the SDK's defaults (enqueue the object's key). `namespace` confines its watch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube_guest::{Action, Api, Controller, Manifest, Result, Watch};

/// The plugin's settings (`config:` in a plugins file).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    /// How long each reconcile holds between its two lines, in milliseconds (default 0).
    hold_ms: Option<u64>,
    /// Watch ConfigMaps in this namespace only (default: every namespace).
    namespace: Option<String>,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

struct Ledger;

impl Controller for Ledger {
    type Config = Settings;

    fn manifest() -> Manifest {
        let config = Self::config();
        let watch = match &config.namespace {
            Some(ns) => Watch::new("v1", "ConfigMap").in_namespace(ns),
            None => Watch::new("v1", "ConfigMap"),
        };
        Manifest::new("ledger").watch(watch)
    }

    fn reconcile(key: &str) -> Result<Action> {
        let cm = Api::all("v1", "ConfigMap").get_by_key(key)?;
        let rv = cm
            .as_ref()
            .and_then(|o| o.resource_version())
            .unwrap_or("-")
            .to_string();
        println!("LEDGER start {key} {rv} {}", now_ns());
        let hold = Self::config().hold_ms.unwrap_or(0);
        if hold > 0 {
            std::thread::sleep(Duration::from_millis(hold));
        }
        println!("LEDGER end {key} {rv} {}", now_ns());
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Ledger);
