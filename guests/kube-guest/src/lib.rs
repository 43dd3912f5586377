//! Guest SDK for Kubernetes controllers hosted as WebAssembly components (`kube:controller`).
//!
//! The host runs the informers, caches, workqueue and API client natively; a guest declares what
//! it watches and writes, maps events to keys, and reconciles keys. This crate gives that the
//! shape of kube-runtime / controller-runtime:
//!
//! - [`Controller`]: `manifest` + `reconcile`, with event handlers that default to enqueueing
//!   the object's key (from the metadata the host sends along, without parsing the object),
//!   and its settings type `Config`, read from the operator's configuration and checked at load;
//!   [`export_controller!`] turns it into the component's exports.
//! - [`events::Recorder`]: Kubernetes Events (`kubectl describe` shows them), as kube-rs's.
//! - `typed` (feature `k8s-openapi`): `TypedApi<Deployment>` and friends, objects as the
//!   generated k8s-openapi structs, as kube-rs users write them.
//! - [`Manifest`], [`Watch`], [`Index`], [`Write`] builders: the plugin's rights and caches.
//! - [`Object`]: the JSON object with typed metadata (name, namespace, labels, annotations,
//!   owner references, finalizers, generation, ...), keys ([`object_key`], [`split_key`]) and
//!   owner references ([`Object::controller_owner_ref`]).
//! - [`Api`]: cache reads (get, list, by-index; complete during `reconcile`, which runs only
//!   after every watched kind's cache has synced) and writes (create, replace, patch, server-side
//!   apply, status by replace, patch or apply, conditions, delete, finalizers), failing with
//!   [`Error`]s that keep the API's code and reason (`is_not_found()`, `is_conflict()`, ...).
//! - [`finalizer`], [`conditions`], [`time`]: pure helpers, unit-testable on the host target.
//!
//! A complete controller:
//!
//! ```no_run
//! use kube_guest::{Action, Api, Controller, Manifest, Object, Result, Verb, Watch, Write};
//!
//! /// Keeps a `<name>-copy` of every ConfigMap labelled `copy=yes`.
//! struct Copier;
//!
//! impl Controller for Copier {
//!     type Config = ();
//!
//!     fn manifest() -> Manifest {
//!         Manifest::new("copier")
//!             .watch(Watch::new("v1", "ConfigMap").with_labels("copy=yes"))
//!             .write(Write::new("v1", "ConfigMap", &[Verb::Patch]))
//!     }
//!
//!     fn reconcile(key: &str) -> Result<Action> {
//!         let api = Api::all("v1", "ConfigMap");
//!         let Some(src) = api.get_by_key(key)? else { return Ok(Action::Done) };
//!         let mut copy = Object::new("v1", "ConfigMap", src.namespace(), &format!("{}-copy", src.name()));
//!         copy["data"] = src["data"].clone();
//!         copy.set_owner_reference(src.controller_owner_ref().ok_or("no uid")?);
//!         api.apply(&copy, true)?;
//!         Ok(Action::Done)
//!     }
//! }
//!
//! kube_guest::export_controller!(Copier);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the plugin. The raw bindings stay available ([`Guest`],
//! [`export!`], and the [`lister`], [`client`], [`queue`], [`log`](mod@log) import modules) for guests
//! that want bytes in and out. This SDK builds against `kube:controller@0.2.0`.

/// The raw bindings generated from the WIT world.
pub mod bindings {
    // The generated export glue takes a notification's objects as flattened arguments.
    #![allow(clippy::too_many_arguments)]
    wit_bindgen::generate!({
        path: "wit",
        world: "kube:controller/controller",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "kube_guest::bindings",
        additional_derives: [PartialEq],
    });
}

pub mod api;
pub mod conditions;
pub mod config;
pub mod controller;
mod error;
pub mod events;
pub mod finalizer;
mod manifest;
mod object;
mod short_str;
pub mod time;
#[cfg(feature = "k8s-openapi")]
pub mod typed;
mod watches;

pub use api::{Api, Patch};
pub use bindings::kube::controller::types::{
    ApiError, CachedObject, DeleteOptions, Index, Level, ObjectMeta, PatchType, Preconditions,
    PropagationPolicy, Verb, Watch, Write,
};
pub use bindings::kube::controller::{client, lister, log, queue};
pub use bindings::{export, Guest, Manifest, Outcome};
pub use controller::{Action, Controller};
pub use error::{Error, Result};
pub use manifest::watch_all;
pub use object::{object_key, split_key, Object, OwnerReference};

/// Enqueues `key` for reconcile (deduplicated by the host's workqueue).
pub fn enqueue(key: &str) {
    queue::add(key);
}

/// Enqueues `key` for reconcile after `delay`.
pub fn enqueue_after(key: &str, delay: std::time::Duration) {
    queue::add_after(key, delay.as_millis().try_into().unwrap_or(u64::MAX));
}

/// Logs `message` at `level` through the host (tagged with the plugin's name).
pub fn log_at(level: Level, message: &str) {
    log::log(level, message);
}

/// Whether the host would write a line at `level`: the log macros check it before formatting.
pub fn log_enabled(level: Level) -> bool {
    log::enabled(level)
}

/// Logs through the host at a level, formatting only if the host would keep the line:
/// `kube_guest::log!(Level::Info, "synced {key}")`. See also [`info!`], [`warn!`], etc.
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {{
        let level = $level;
        if $crate::log_enabled(level) {
            $crate::log_at(level, &::std::format!($($arg)+));
        }
    }};
}

/// Logs at `Trace`.
#[macro_export]
macro_rules! trace { ($($arg:tt)+) => { $crate::log!($crate::Level::Trace, $($arg)+) }; }
/// Logs at `Debug`.
#[macro_export]
macro_rules! debug { ($($arg:tt)+) => { $crate::log!($crate::Level::Debug, $($arg)+) }; }
/// Logs at `Info`.
#[macro_export]
macro_rules! info { ($($arg:tt)+) => { $crate::log!($crate::Level::Info, $($arg)+) }; }
/// Logs at `Warn`.
#[macro_export]
macro_rules! warn { ($($arg:tt)+) => { $crate::log!($crate::Level::Warn, $($arg)+) }; }
/// Logs at `Error`.
#[macro_export]
macro_rules! error { ($($arg:tt)+) => { $crate::log!($crate::Level::Error, $($arg)+) }; }
