#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! The controller runtime: what makes a sandboxed component (`kwh-sandbox`) a Kubernetes
//! controller. [`engine`] pairs the sandbox's engine with the linker of the `kube:controller`
//! imports (`bindings`, one module per contract version; their host side in [`imports`],
//! each call checked against the [`manifest`]); [`loader`] turns a `.wasm` file into a
//! [`loader::LoadedPlugin`] (contract version, world checks, validated manifest, the
//! operator's configuration offered to `validate-config`); [`instance`] calls its handlers and
//! `reconcile` in the sandbox's instances and replaces one that failed. Everything a guest can
//! reach in the host goes through the [`backend`] traits, implemented in its submodules over the
//! shared informer stores, the API client and the plugin's workqueue; Events go to the [`events`]
//! recorder.
//! [`runtime`] wires it all, each plugin by its [`spec`] (its own limits, workers, namespace
//! and configuration): [`dispatch`] feeds informer notifications to the guest, [`reconcile`]
//! runs the workers once [`cache_sync`] says every cache is synced, [`sources`] decides what
//! the plugins files, flags and resources ask to run ([`fetches`]: each entry's module fetched
//! on a task of its own), [`health`] quarantines a
//! plugin that keeps failing, [`status`] and [`ops`] serve metrics and health, and [`rbac`]
//! derives the RBAC a set of plugins needs; [`perturb`] marks where the simulation may hold
//! a task back. Whether this replica may act at all is
//! `kwh-coordination`'s to say.

pub mod backend;
pub mod background;
mod bindings;
pub mod cache_sync;
pub mod contract;
pub mod dispatch;
pub mod engine;
pub mod events;
pub mod fetches;
pub mod follow;
pub mod guest_log;
pub mod health;
pub mod identity;
pub mod imports;
pub mod index;
pub mod instance;
pub mod loader;
pub mod manifest;
pub mod ops;
pub mod options;
pub mod own_keys;
pub mod perturb;
pub mod rbac;
pub mod reconcile;
mod revision;
pub mod runtime;
pub mod sources;
pub mod spec;
mod state;
pub mod status;
mod stdio;
pub mod watch_counters;

pub use backend::{
    ApiError, Backends, ClientBackend, EventBackend, ListerBackend, QueueBackend, WriteRequest,
};
pub use dispatch::RetryPolicy;
pub use engine::PluginEngine;
pub use health::{Health, HealthSnapshot, Phase, QuarantinePolicy};
pub use instance::{GuestError, Limits, Outcome, PluginInstance, ReconcileResult};
/// The sandbox's types in this crate's API, so that a plugin runtime is set up from here.
pub use kwh_sandbox::{Compiler, EngineConfig, GuestClock, Origin, PrecompileError, Precompiled};
pub use loader::{Contract, LoadCause, LoadError, LoadedPlugin, Plugin};
pub use manifest::{Manifest, ManifestError};
pub use options::RuntimeOptions;
pub use runtime::{
    Applied, PluginRuntime, RunningPlugin, RuntimeStatus, StartError, Started, UpgradeError,
};
pub use sources::{
    Change, Desired, EntryError, EntryOutcome, Label, PluginSources, SourceId, SourceOptions, Step,
    Want,
};
pub use spec::{PluginSpec, PromoteAfter, ShadowSpec};
