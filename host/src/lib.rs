//! The native half of the controller host: an API client on hyper, client-go's informer machinery
//! (reflector, DeltaFIFO, indexer, shared processor), the rate-limited workqueue, and an embedded
//! API-server emulator that stands in for a kube-apiserver in tests and first runs.
//!
//! Objects travel through the pipeline as [`kube::object::Object`]: shared raw JSON bytes plus the
//! metadata the pipeline needs, parsed once at ingest. Nothing on the hot path decodes a whole object.

pub mod emulator;
pub mod informer;
pub mod kube;
pub mod plugin;
pub mod shutdown;
pub mod testing;
pub mod workqueue;
