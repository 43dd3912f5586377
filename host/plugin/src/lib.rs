#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! The Wasm plugin runtime: controllers as WebAssembly components of the `kube:controller` world.
//!
//! [`engine`] owns the one wasmtime engine and the on-disk compile cache (its misses compile
//! where [`compiler`] says: in this process, or in a child process); [`loader`] turns a
//! `.wasm` file into a [`loader::LoadedPlugin`] (validated manifest, pre-linked instance);
//! [`instance`] runs guest calls in a sandboxed store with deadlines and memory caps and replaces
//! an instance that failed; [`watchdog`] advances the epoch the deadlines are checked against. Everything the guest can reach in the host goes through the
//! [`backend`] traits, checked against the manifest by [`imports`]; [`backends`] implements them
//! over the shared informer stores, the API client and the plugin's workqueue. [`runtime`] wires
//! it all, each plugin by its [`spec`] (its own limits, workers, namespace and configuration): [`dispatch`] feeds informer notifications to the guest, [`reconcile`] runs the
//! workers, [`ops`] serves metrics and health.

pub mod backend;
pub mod backends;
mod bindings;
pub mod cache;
pub mod cache_sync;
pub mod compiler;
pub mod dispatch;
pub mod engine;
pub mod events;
mod fairness;
pub mod guest_log;
pub mod handover;
pub mod health;
pub mod identity;
pub mod imports;
pub mod index;
pub mod instance;
pub mod loader;
pub mod manifest;
pub mod ops;
pub mod options;
pub mod rbac;
pub mod reconcile;
pub mod runtime;
pub mod spec;
pub mod status;
mod stdio;
mod ticker;
pub mod watch_counters;
pub mod watchdog;

pub use backend::{
    ApiError, Backends, ClientBackend, EventBackend, ListerBackend, QueueBackend, WriteRequest,
};
pub use cache::{Origin, PrecompileError, Precompiled};
pub use compiler::Compiler;
pub use dispatch::RetryPolicy;
pub use engine::{EngineConfig, PluginEngine};
pub use health::{Health, HealthSnapshot, Phase, QuarantinePolicy};
pub use instance::{GuestClock, GuestError, Limits, Outcome, PluginInstance, ReconcileResult};
pub use loader::{Contract, LoadCause, LoadError, LoadedPlugin, Plugin};
pub use manifest::{Manifest, ManifestError};
pub use options::RuntimeOptions;
pub use runtime::{PluginRuntime, RunningPlugin, RuntimeStatus, StartError, Started};
pub use spec::PluginSpec;
