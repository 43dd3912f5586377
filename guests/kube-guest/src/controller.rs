//! The [`Controller`] trait and the [`export_controller!`](crate::export_controller) macro that
//! turns an implementation into the component's exports.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::object::Object;
use crate::queue::Changes;
use crate::{Manifest, Outcome};

/// What to do with a key after a successful reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Up to date: the key's backoff history is forgotten and it waits for the next event.
    Done,
    /// Reconcile again after this long (e.g. a TTL expires then), without backoff.
    RequeueAfter(Duration),
}

impl From<Action> for Outcome {
    fn from(a: Action) -> Outcome {
        match a {
            Action::Done => Outcome::Done,
            Action::RequeueAfter(d) => {
                Outcome::RequeueAfter(d.as_millis().try_into().unwrap_or(u64::MAX))
            }
        }
    }
}

/// A controller, in the shape of controller-runtime's reconciler with its event handlers.
///
/// The host calls the handlers when a watched object changes (`watch` is the position of the
/// watch in the manifest) and `reconcile` for each key they enqueue, one key at a time per key,
/// retrying failures with backoff. Handlers default to enqueueing the changed object's own key,
/// so the simplest controller implements only `manifest` and `reconcile`. Override a handler
/// to map an event to other keys, e.g. a ConfigMap change to the Deployments that use it.
///
/// Handlers cannot fail: they run on the host's dispatch path and should only decide what to
/// enqueue. All work with side effects belongs in `reconcile`, which must be idempotent: it is
/// called again after restarts, resyncs and failures, with only the key to go by. The objects
/// handlers receive are parsed only when read beyond their metadata (see [`Object`]), so the
/// default handlers never parse JSON.
///
/// Settings come from the operator ([`Controller::Config`], read with `Self::config()`);
/// `type Config = ();` for a controller without any (it then refuses any configuration but
/// none).
///
/// ```no_run
/// use kube_guest::{Action, Api, Controller, Manifest, Result, Verb, Watch, Write};
/// use serde_json::json;
///
/// struct Labeler;
///
/// impl Controller for Labeler {
///     type Config = ();
///
///     fn manifest() -> Manifest {
///         Manifest::new("labeler")
///             .watch(Watch::new("v1", "ConfigMap"))
///             .write(Write::new("v1", "ConfigMap", &[Verb::Patch]))
///     }
///
///     fn reconcile(key: &str) -> Result<Action> {
///         let api = Api::all("v1", "ConfigMap");
///         let Some(cm) = api.get_by_key(key)? else { return Ok(Action::Done) };
///         if cm.label("seen").is_none() {
///             let mut want = kube_guest::Object::new("v1", "ConfigMap", cm.namespace(), cm.name());
///             want.set_label("seen", "yes");
///             api.apply(&want, true)?;
///         }
///         Ok(Action::Done)
///     }
/// }
///
/// kube_guest::export_controller!(Labeler);
/// ```
pub trait Controller {
    /// The plugin's settings, as the operator writes them under `config:` in the host's plugins
    /// file (any `serde::Deserialize` type; no configuration reads as `Default`). Checked once
    /// at load: a configuration that does not parse, or that [`Controller::validate_config`]
    /// refuses, stops the plugin from starting, with the message in the host's log.
    type Config: DeserializeOwned + Default + Send + Sync + 'static;

    /// What the plugin watches and writes; called by the host once, at load, and by the SDK
    /// once per instance at its first read by key ([`Api::get_by_key`](crate::Api::get_by_key)
    /// needs the watches' numbers), so it should only build the manifest.
    fn manifest() -> Manifest;

    /// Checks settings that parsed (ranges, combinations) at load. Default: accept.
    fn validate_config(config: &Self::Config) -> std::result::Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// The settings, parsed once per instance.
    fn config() -> &'static Self::Config
    where
        Self: Sized,
    {
        crate::config::get::<Self::Config>()
    }

    /// An object appeared in watch `watch`'s cache. Default: enqueue its key.
    ///
    /// The default handlers also tell the host, on their first call, that they do nothing
    /// else; the host then enqueues those keys itself and stops calling them (a guest call
    /// fewer per notification). A controller that overrides a handler keeps every call of it.
    fn on_add(watch: u32, obj: Object) {
        crate::enqueue(&obj.key());
        hand_over(watch, Changes::ADD);
    }

    /// An object changed (on a resync, `old` equals `new`). Default: enqueue the new key.
    fn on_update(watch: u32, old: Object, new: Object) {
        let _ = old;
        crate::enqueue(&new.key());
        hand_over(watch, Changes::UPDATE);
    }

    /// An object was deleted; `tombstone` means the host missed the delete and `obj` is the
    /// last state it knew. Default: enqueue its key (reconcile then finds it gone).
    fn on_delete(watch: u32, obj: Object, tombstone: bool) {
        let _ = tombstone;
        crate::enqueue(&obj.key());
        hand_over(watch, Changes::DELETE);
    }

    /// Brings the object named by `key` to its desired state. An error is logged by the host
    /// and the key retried with rate-limited backoff.
    ///
    /// The host calls it only once every watch of the manifest has synced (its informer's
    /// initial list is in the cache), at start and after any restart of the plugin, as
    /// client-go and controller-runtime start workers after `WaitForCacheSync`. So an object
    /// [`Api::get`](crate::Api::get) does not find is absent, not merely not listed yet; the
    /// event handlers, by contrast, run while the caches fill.
    fn reconcile(key: &str) -> Result<Action>;
}

/// Tells the host that the default handler for `changes` of `watch` only enqueues the object's
/// own key (`queue.enqueue-own-keys`): from then on the host does it without calling the guest.
/// Called only from the default handlers, whose whole behaviour that is.
fn hand_over(watch: u32, changes: Changes) {
    crate::queue::enqueue_own_keys(watch, changes);
}

/// The glue [`export_controller!`](crate::export_controller) expands to: bytes in, [`Object`]s
/// out. Objects from the host are always JSON objects; if one ever were not, the event is logged
/// and dropped rather than trapping the instance.
#[doc(hidden)]
pub mod glue {
    use super::*;
    use crate::CachedObject;

    fn object(o: CachedObject) -> Object {
        Object::from_host(o)
    }

    pub fn on_add<C: Controller>(watch: u32, obj: CachedObject) {
        crate::watches::register(C::manifest);
        C::on_add(watch, object(obj));
    }

    pub fn on_update<C: Controller>(watch: u32, old: CachedObject, new: CachedObject) {
        crate::watches::register(C::manifest);
        C::on_update(watch, object(old), object(new));
    }

    pub fn on_delete<C: Controller>(watch: u32, obj: CachedObject, tombstone: bool) {
        crate::watches::register(C::manifest);
        C::on_delete(watch, object(obj), tombstone);
    }

    pub fn validate_config<C: Controller>(config: Vec<u8>) -> std::result::Result<(), String> {
        let parsed = crate::config::parse::<C::Config>(&config)?;
        C::validate_config(&parsed)
    }

    pub fn reconcile<C: Controller>(key: String) -> std::result::Result<Outcome, String> {
        crate::watches::register(C::manifest);
        C::reconcile(&key)
            .map(Outcome::from)
            .map_err(|e| e.to_string())
    }
}

/// Exports a [`Controller`] implementation as the component's `kube:controller` world.
///
/// ```ignore
/// struct MyController;
/// impl kube_guest::Controller for MyController { /* manifest, reconcile, ... */ }
/// kube_guest::export_controller!(MyController);
/// ```
#[macro_export]
macro_rules! export_controller {
    ($ty:ty) => {
        const _: () = {
            struct KubeGuestExports;
            impl $crate::Guest for KubeGuestExports {
                fn manifest() -> $crate::Manifest {
                    <$ty as $crate::Controller>::manifest()
                }
                fn on_add(watch: u32, obj: $crate::CachedObject) {
                    $crate::controller::glue::on_add::<$ty>(watch, obj)
                }
                fn on_update(watch: u32, old: $crate::CachedObject, new: $crate::CachedObject) {
                    $crate::controller::glue::on_update::<$ty>(watch, old, new)
                }
                fn on_delete(watch: u32, obj: $crate::CachedObject, tombstone: bool) {
                    $crate::controller::glue::on_delete::<$ty>(watch, obj, tombstone)
                }
                fn validate_config(
                    config: ::std::vec::Vec<u8>,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::controller::glue::validate_config::<$ty>(config)
                }
                fn reconcile(
                    key: ::std::string::String,
                ) -> ::std::result::Result<$crate::Outcome, ::std::string::String> {
                    $crate::controller::glue::reconcile::<$ty>(key)
                }
            }
    $crate::export!(KubeGuestExports with_types_in $crate::bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    //! What runs without the host: outcome mapping and the glue's parsing and dispatch. The log,
    //! queue and lister imports exist only in a component (natively their stubs panic), so the
    //! default handlers, which enqueue, are tested in a component run by the host (the greeter
    //! test guest's scenario in `tests/guests`). The glue's drop-with-a-log of an event that does
    //! not parse is tested nowhere: it logs through an import, and the host only sends objects.
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// What the overriding handlers below saw, in order.
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn seen() -> Vec<String> {
        SEEN.with(|s| s.take())
    }

    /// Records each call; reconcile fails for keys starting with `fail`.
    struct Recorder;

    impl Controller for Recorder {
        type Config = Settings;

        fn manifest() -> Manifest {
            unreachable!("not called by these tests")
        }
        fn on_add(watch: u32, obj: Object) {
            SEEN.with(|s| s.borrow_mut().push(format!("add {watch} {}", obj.key())));
        }
        fn on_update(watch: u32, old: Object, new: Object) {
            let (o, n) = (old["data"]["v"].clone(), new["data"]["v"].clone());
            SEEN.with(|s| {
                s.borrow_mut()
                    .push(format!("update {watch} {} {o} -> {n}", new.key()))
            });
        }
        fn on_delete(watch: u32, obj: Object, tombstone: bool) {
            SEEN.with(|s| {
                s.borrow_mut()
                    .push(format!("delete {watch} {} {tombstone}", obj.key()))
            });
        }
        fn validate_config(c: &Settings) -> std::result::Result<(), String> {
            match c.limit {
                Some(n) if n > 100 => Err(format!("limit must be at most 100, not {n}")),
                _ => Ok(()),
            }
        }
        fn reconcile(key: &str) -> Result<Action> {
            match key.strip_prefix("fail") {
                Some(rest) => Err(crate::Error::msg(format!("cannot{rest}"))),
                None if key == "later" => Ok(Action::RequeueAfter(Duration::from_millis(1500))),
                None => Ok(Action::Done),
            }
        }
    }

    /// A configuration with a range the parse alone does not check.
    #[derive(serde::Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        limit: Option<u32>,
    }

    /// What the host sends: the JSON, and its metadata as positions in it.
    fn cm(name: &str, v: &str) -> crate::CachedObject {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","uid":"uid-{name}","resourceVersion":"7","labels":{{"app":"web"}}}},"data":{{"v":"{v}"}}}}"#
        );
        let span = |needle: &str| {
            let start = json.find(needle).expect("in the JSON") as u32;
            [start, needle.len() as u32]
        };
        let mut meta = vec![1];
        for s in [
            span("ns"),
            span(name),
            span(&format!("uid-{name}")),
            span("7"),
        ] {
            meta.extend(s);
        }
        meta.extend(span("app"));
        meta.extend(span("web"));
        crate::CachedObject {
            json: json.clone().into_bytes(),
            meta,
            generation: 0,
        }
    }

    #[test]
    fn host_objects_answer_metadata_without_parsing_and_parse_on_first_read() {
        // Metadata positions into bytes that do not parse: only a read of the body parses.
        let mut raw = cm("a", "1");
        raw.json.truncate(raw.json.len() - 1);
        let bytes = raw.json.clone();
        let mut o = Object::from_host(raw);
        // Everything the default handlers and label filters read comes from the metadata.
        assert_eq!(o.key(), "ns/a");
        assert_eq!(o.uid(), Some("uid-a"));
        assert_eq!(o.resource_version(), Some("7"));
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.labels().collect::<Vec<_>>(), [("app", "web")]);
        assert!(!o.is_deleting());
        assert_eq!(o.to_vec(), bytes);
        // Reading the body parses it (here it does not parse: an empty object, no trap).
        assert_eq!(o.kind(), "");
        let mut g = Object::from_host(cm("b", "2"));
        assert_eq!(g["data"]["v"], "2");
        // A mutation leaves the host's metadata behind: reads follow the JSON from then on.
        g.set_label("app", "api");
        assert_eq!(g.label("app"), Some("api"));
        o.set_label("x", "y");
        assert_eq!(
            o.name(),
            "",
            "the unparsable body read as empty once modified"
        );
        // Without verbatim positions, the metadata is read from the JSON.
        let mut nv = cm("c", "3");
        nv.meta = vec![0];
        let n = Object::from_host(nv);
        assert_eq!((n.key(), n.label("app")), ("ns/c".to_string(), Some("web")));
    }

    #[test]
    fn validate_config_parses_null_as_default_and_runs_the_controller_s_check() {
        assert_eq!(glue::validate_config::<Recorder>(b"null".to_vec()), Ok(()));
        assert_eq!(
            glue::validate_config::<Recorder>(br#"{"limit": 5}"#.to_vec()),
            Ok(())
        );
        let err = glue::validate_config::<Recorder>(br#"{"limit": 500}"#.to_vec()).unwrap_err();
        assert_eq!(err, "limit must be at most 100, not 500");
        let err = glue::validate_config::<Recorder>(br#"{"limt": 5}"#.to_vec()).unwrap_err();
        assert!(
            err.starts_with("invalid configuration: unknown field `limt`"),
            "{err}"
        );
    }

    #[test]
    fn actions_become_outcomes_in_milliseconds() {
        assert_eq!(Outcome::from(Action::Done), Outcome::Done);
        assert_eq!(
            Outcome::from(Action::RequeueAfter(Duration::from_secs(30))),
            Outcome::RequeueAfter(30_000)
        );
        // Below a millisecond rounds down: the host's queue has millisecond resolution.
        assert_eq!(
            Outcome::from(Action::RequeueAfter(Duration::from_micros(1999))),
            Outcome::RequeueAfter(1)
        );
        // Beyond u64 milliseconds saturates rather than wrapping to a short delay.
        assert_eq!(
            Outcome::from(Action::RequeueAfter(Duration::MAX)),
            Outcome::RequeueAfter(u64::MAX)
        );
    }

    #[test]
    fn glue_hands_parsed_objects_with_watch_and_tombstone_to_the_handlers() {
        seen();
        glue::on_add::<Recorder>(2, cm("a", "1"));
        glue::on_update::<Recorder>(0, cm("a", "1"), cm("a", "2"));
        glue::on_delete::<Recorder>(1, cm("a", "2"), true);
        glue::on_delete::<Recorder>(1, cm("b", "3"), false);
        assert_eq!(
            seen(),
            [
                "add 2 ns/a",
                r#"update 0 ns/a "1" -> "2""#,
                "delete 1 ns/a true",
                "delete 1 ns/b false",
            ]
        );
    }

    #[test]
    fn glue_maps_reconcile_results_and_errors_to_what_the_host_reads() {
        assert_eq!(
            glue::reconcile::<Recorder>("ns/a".into()),
            Ok(Outcome::Done)
        );
        assert_eq!(
            glue::reconcile::<Recorder>("later".into()),
            Ok(Outcome::RequeueAfter(1500))
        );
        // The host logs this string and retries the key with backoff.
        assert_eq!(
            glue::reconcile::<Recorder>("fail to write".into()),
            Err("cannot to write".to_string())
        );
    }
}
