//! The chaos soak's guest (`tests/support/soak.rs`): it reconciles ConfigMaps, says what each
//! reconcile read, and traps on about one call in a hundred. One line per reconcile, printed
//! as it ends:
//!
//! ```text
//! SOAK <name> <key> <resourceVersion, or - when absent> <start ns> <end ns> ok|trap
//! ```
//!
//! and one per handler call that traps: `SOAK-TRAP <name> <add|update|delete> <key> <rv>`.
//!
//! Settings: `name` (the manifest's name, default `soak`: the same component runs as two
//! plugins), `namespace` (confines its watch), `trapPerMille` (default 10), `guestHandlers`
//! (default false: the SDK's handlers, handed over to the host, so notifications cost no
//! guest call; true: handlers that enqueue the key themselves, and may trap), `shards`
//! (default 0; N: instead of the one ConfigMap watch, N watches of Secrets, in the namespaces
//! `<namespace>-000` … `<namespace>-<N-1>`, each an informer of its own, so that a fault
//! injected once reaches N informers; their reconciles print nothing).
//!
//! Which calls trap: a call on an instance that has already served one, when a hash of the
//! plugin's name, the key, the resourceVersion and the instance's count of calls falls under
//! `trapPerMille`. A trap discards the instance, and the host retries a failed notification on
//! a fresh one (a bounded number of times): that retry never traps, so no notification is
//! dropped for good and every object's last version can still be reconciled. A failed
//! reconcile is retried with backoff for as long as it takes; the count in the hash makes
//! its next attempt trap or not afresh. Traps are `abort()`, a Wasm trap without a panic
//! message, so "panicked" in a host's log can only be the host's own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kube_guest::queue::Changes;
use kube_guest::{Action, Api, Controller, Manifest, Object, Result, Watch};

/// The plugin's settings (`config:` in a plugins file).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    name: Option<String>,
    namespace: Option<String>,
    trap_per_mille: Option<u64>,
    guest_handlers: Option<bool>,
    shards: Option<u32>,
}

/// Calls this instance has served (an instance is one guest's memory: a trap discards it).
static CALLS: AtomicU64 = AtomicU64::new(0);

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn name() -> &'static str {
    Soak::config().name.as_deref().unwrap_or("soak")
}

/// Whether this call traps (see the crate's documentation); counts the call.
fn traps(key: &str, rv: &str) -> bool {
    let served = CALLS.fetch_add(1, Ordering::Relaxed);
    if served == 0 {
        return false;
    }
    let per_mille = Soak::config().trap_per_mille.unwrap_or(10);
    // FNV-1a over the inputs, then a finaliser so that nearby counts spread.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let count = served.to_le_bytes();
    for part in [name().as_bytes(), key.as_bytes(), rv.as_bytes(), &count[..]] {
        for &b in part.iter().chain(&[0xff]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h = (h ^ (h >> 31)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 29;
    h % 1000 < per_mille
}

fn handle(what: &str, watch: u32, obj: &Object, change: Changes) {
    if !Soak::config().guest_handlers.unwrap_or(false) {
        // The SDK's default: enqueue the key, and let the host do it from now on.
        kube_guest::enqueue(&obj.key());
        kube_guest::queue::enqueue_own_keys(watch, change);
        return;
    }
    let key = obj.key();
    let rv = obj.resource_version().unwrap_or("-");
    if traps(&key, rv) {
        println!("SOAK-TRAP {} {what} {key} {rv}", name());
        std::process::abort();
    }
    kube_guest::enqueue(&key);
}

struct Soak;

impl Controller for Soak {
    type Config = Settings;

    fn manifest() -> Manifest {
        let config = Self::config();
        let in_ns = |w: Watch| match &config.namespace {
            Some(ns) => w.in_namespace(ns),
            None => w,
        };
        match config.shards {
            Some(n) if n > 0 => {
                let ns = config.namespace.as_deref().unwrap_or("soak-shard");
                (0..n).fold(Manifest::new(name()), |m, i| {
                    m.watch(Watch::new("v1", "Secret").in_namespace(&format!("{ns}-{i:03}")))
                })
            }
            _ => Manifest::new(name()).watch(in_ns(Watch::new("v1", "ConfigMap"))),
        }
    }

    fn validate_config(config: &Settings) -> std::result::Result<(), String> {
        match config.trap_per_mille {
            Some(n) if n > 1000 => Err(format!("trapPerMille {n} is over 1000")),
            _ => Ok(()),
        }
    }

    fn on_add(watch: u32, obj: Object) {
        handle("add", watch, &obj, Changes::ADD);
    }

    fn on_update(watch: u32, _old: Object, new: Object) {
        handle("update", watch, &new, Changes::UPDATE);
    }

    fn on_delete(watch: u32, obj: Object, _tombstone: bool) {
        handle("delete", watch, &obj, Changes::DELETE);
    }

    fn reconcile(key: &str) -> Result<Action> {
        if Self::config().shards.unwrap_or(0) > 0 {
            return Ok(Action::Done);
        }
        let start = now_ns();
        let cm = Api::all("v1", "ConfigMap").get_by_key(key)?;
        let rv = cm
            .as_ref()
            .and_then(|o| o.resource_version())
            .unwrap_or("-")
            .to_string();
        let trap = traps(key, &rv);
        let outcome = if trap { "trap" } else { "ok" };
        println!("SOAK {} {key} {rv} {start} {} {outcome}", name(), now_ns());
        if trap {
            std::process::abort();
        }
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Soak);
