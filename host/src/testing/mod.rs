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
//!   [`scenario::Scenario::from_file`] + [`scenario::run`] with [`default_engine`] from Rust).
//!
//! Use an ordinary `#[tokio::test]` (not `start_paused`): the harness keeps its own virtual
//! time, and the sandbox's deadlines are real time so that a spinning guest still stops.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use host::testing::{Harness, ReconcileOutcome, WriteVerb};
//! use serde_json::json;
//!
//! let mut h = Harness::builder("target/guest_copier.wasm")
//!     .seed_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}")
//!     .build()
//!     .await?;
//! // An event: the cluster stores the object, the informer calls on-add.
//! h.add(json!({"apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "web", "namespace": "apps"},
//!     "data": {"requeue-ms": "60000"}})).await?;
//! assert_eq!(h.ready_keys(), ["apps/web"]);
//!
//! // The worker runs the key: outcome, writes and logs are recorded.
//! let out = h.reconcile("apps/web").await;
//! assert_eq!(out, ReconcileOutcome::RequeueAfter(Duration::from_secs(60)));
//! let w = &h.writes()[0];
//! assert_eq!((w.verb, w.key().as_str()), (WriteVerb::Apply, "apps/web-copy"));
//! assert!(h.get("v1", "ConfigMap", Some("apps"), "web-copy").is_some());
//!
//! // Time moves only when told: the requeue comes due after a virtual minute.
//! assert!(h.advance(Duration::from_secs(59)).is_empty());
//! assert_eq!(h.advance(Duration::from_secs(1)), ["apps/web"]);
//! # Ok(()) }
//! ```

pub mod clock;
pub mod cluster;
pub mod harness;
pub mod logs;
pub mod queue;
pub mod scenario;
pub mod world;

pub use crate::plugin::{GuestError, Limits};
pub use clock::VirtualClock;
pub use cluster::{FakeCluster, SeedError};
pub use harness::{
    default_engine, HandlerFailure, Harness, HarnessBuilder, HarnessError, ReconcileOutcome,
    RUN_QUEUE_LIMIT,
};
pub use logs::{LogLevel, LogLine, LogSource};
pub use queue::{ControllerRateLimiter, Enqueued, FakeQueue, Origin};
pub use world::{Notification, RecordedWrite, UnservedKind, WriteVerb};
