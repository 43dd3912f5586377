//! Guest SDK for controllers hosted as WebAssembly components.
//!
//! A controller implements [`Guest`] and registers it with [`export!`]:
//!
//! ```ignore
//! struct MyController;
//! impl kube_guest::Guest for MyController { /* manifest, on_add, ..., reconcile */ }
//! kube_guest::export!(MyController);
//! ```
//!
//! This is the minimal layer (raw bindings plus a few helpers); typed objects and a richer client
//! come later. Objects are JSON bytes in both directions, see `wit/controller.wit`.

/// The raw bindings generated from the WIT world.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "kube:controller/controller",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "kube_guest::bindings",
    });
}

pub use bindings::kube::controller::types::{
    ApiError, DeleteOptions, Index, Level, ObjectMeta, PatchType, Preconditions, PropagationPolicy, Verb,
    Watch, Write,
};
pub use bindings::kube::controller::{client, lister, log, queue};
pub use bindings::{export, Guest, Manifest, Outcome};

/// Logs `message` at `level` through the host.
pub fn log_at(level: Level, message: &str) {
    log::log(level, message);
}

/// Builds a watch of every object of a kind, cluster-wide, without selectors.
pub fn watch_all(api_version: &str, kind: &str) -> Watch {
    Watch {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        namespace: None,
        label_selector: None,
        field_selector: None,
        indexes: Vec::new(),
    }
}

/// Splits a `namespace/name` key (or a bare `name` for cluster-scoped objects).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}
