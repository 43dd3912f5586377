#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! [`engine`] owns the one wasmtime engine, the on-disk compile [`cache`] (its misses compile
//! where [`compiler`] says: in this process, or in a child process) and the [`watchdog`] that
//! advances the epoch while guest code runs (the epoch ticker thread where no timer signal
//! can). [`component`] tells a component from what is not one; [`store`] makes a guest's store
//! (nothing ambient, capped memory, a deadline the epoch checks; its data generic over the
//! embedder's); [`instance`] runs calls in it under deadlines and says what a failed call was;
//! [`fairness`] is how a long call steps aside on a shared runtime thread; [`clock`] lets a
//! test give guests a virtual time.

pub mod cache;
pub mod clock;
pub mod compiler;
pub mod component;
pub mod engine;
pub mod fairness;
pub mod instance;
pub mod store;
mod ticker;
pub mod watchdog;

pub use cache::{CacheStats, ComponentError, Origin, PrecompileError, Precompiled};
pub use clock::GuestClock;
pub use compiler::Compiler;
pub use component::NotComponent;
pub use engine::{Engine, EngineConfig, EngineError, DEFAULT_MAX_MEMORY};
pub use instance::{Backstop, GuestError, Instance, InstanceStats};
pub use store::{Sandboxed, StoreLimits};
