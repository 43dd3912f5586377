#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! Access to a Kubernetes API server over hyper: configuration, the HTTP client, discovery,
//! resource paths, the watch-stream decoder, selectors, the `Status` error type, and the RFC 3339
//! times the API writes (`time`); and `web`, the same TLS and proxy rules for other servers
//! (OCI registries). Events and Leases, which are controllers' concerns rather than
//! a client's, live above it: the Event recorder in `kwh-plugin`, Leases and leader election in
//! `kwh-coordination`.

mod auth;
pub mod client;
pub mod clip;
pub mod config;
pub mod decode;
pub mod dial;
pub mod discovery;
pub mod duration;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod json;
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
pub mod web;

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
pub use web::WebClient;
