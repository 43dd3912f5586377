#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! Access to a Kubernetes API server over hyper: configuration, the HTTP client, discovery,
//! resource paths, the watch-stream decoder, selectors, the `Status` error type, and an Event
//! recorder that aggregates as client-go does and never waits on the API (`events`), Leases
//! (`leases`) and leader election over one (`leader_election`).

mod auth;
pub mod client;
pub mod clip;
pub mod config;
pub mod decode;
pub mod discovery;
pub mod duration;
pub mod error;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
mod json;
pub mod leader_election;
pub mod leases;
pub mod object;
pub mod params;
pub mod proxy;
pub mod registry;
pub mod resource;
pub mod resource_version;
pub mod selector;
pub mod time;
mod tls;
pub mod watch;

/// How many rounds a randomized or exhaustive unit test runs: all of them natively, a hundredth
/// under Miri, which interprets every step. There the point is the soundness of each `unsafe`
/// path, which a few rounds reach; the native runs keep the coverage.
#[cfg(test)]
pub(crate) const fn test_rounds(n: usize) -> usize {
    if cfg!(miri) {
        n.div_ceil(100)
    } else {
        n
    }
}

pub use client::{Client, ResourceClient};
pub use config::Config;
pub use discovery::Discovery;
pub use error::{Error, Status};
pub use object::Object;
pub use resource::ApiResource;
