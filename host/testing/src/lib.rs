#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! Unit-testing guests: load a controller component into wasmtime exactly as the host does and
//! drive it against an in-memory cluster, a recording queue and a virtual clock.
//!
//! - [`FakeCluster`]: the API-server emulator's store and write logic in-process, so writes
//!   behave as on kube-apiserver (resourceVersion, uid, 409s, patches, server-side apply,
//!   finalizers, status subresource) and later lister reads see them;
//! - lister reads go through real informer stores with the manifest's indexes, and every import
//!   is permission-checked against the manifest by the production code; a plugin whose watches
//!   all sit in one namespace is confined to it as the host confines it (its writes elsewhere
//!   are refused with a 403 and not recorded);
//! - [`FakeQueue`]: records `add` / `add-after`, holds delayed keys on the [`VirtualClock`]; a
//!   failed reconcile is retried after the production rate limiter's delay
//!   ([`ControllerRateLimiter`], its bucket on the virtual clock too);
//! - the guest's WASI wall and monotonic clocks read the [`VirtualClock`], so a guest computing
//!   an expiry from `SystemTime::now()` is tested by [`Harness::advance`], not by sleeping;
//! - [`scenario`]: the same, driven by YAML files (`host test --plugin x.wasm s.yaml`, or
//!   [`scenario::Scenario::from_file`] + [`scenario::run`] with [`default_engine`] from Rust);
//! - in a guest crate's own tests, with this crate as its only dev-dependency: [`component()`]
//!   builds the crate under test for `wasm32-wasip2` when `cargo test` runs,
//!   [`Harness::for_this_crate`] loads it, [`block_on`] drives the harness from a plain
//!   `#[test]`, and [`run_scenarios`] runs the crate's `tests/*.yaml` in one test.
//!
//! Use an ordinary `#[tokio::test]` (not `start_paused`), or [`block_on`] in a plain `#[test]`:
//! the harness keeps its own virtual time, and the sandbox's deadlines are real time so that a
//! spinning guest still stops.

pub mod cargo_test;
pub mod clock;
pub mod cluster;
pub mod component;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
pub mod harness;
pub mod logs;
mod lost_update;
pub mod queue;
pub mod scenario;
pub mod world;

pub use cargo_test::{block_on, run_scenarios, run_scenarios_in};
pub use clock::VirtualClock;
pub use cluster::{FakeCluster, SeedError};
pub use component::{build_component, component, ComponentError};
pub use events::{FakeRecorder, RecordedEvent};
pub use harness::{
    default_engine, HandlerFailure, Harness, HarnessBuilder, HarnessError, ReconcileOutcome,
    RUN_QUEUE_LIMIT,
};
pub use kwh_plugin::{GuestError, Limits};
pub use logs::{LogLevel, LogLine, LogSource};
pub use queue::{ControllerRateLimiter, Enqueued, FakeQueue, Origin};
/// `json!` and `Value`, so a test can write objects without its own `serde_json` dependency.
pub use serde_json::{json, Value};
pub use world::{Notification, RecordedWrite, UnservedKind, WriteVerb};
