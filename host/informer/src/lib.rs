#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! client-go's informer machinery: reflector → DeltaFIFO → shared informer → store + processor.
//!
//! - [`reflector::Reflector`] lists and watches through a [`lister_watcher::ListerWatcher`]
//!   and writes into a [`reflector::ReflectorStore`] (spec §1).
//! - [`delta_fifo::DeltaFifo`] queues per-key deltas and turns relist gaps into tombstones
//!   (spec §2).
//! - [`shared::SharedIndexInformer`] pops deltas into the indexed [`store::Store`] and hands
//!   notifications to [`processor::SharedProcessor`], which runs each
//!   [`processor::ResourceEventHandler`] on its own task (spec §3, §4).
//! - [`factory::SharedInformerFactory`] shares one informer per watch scope and stops it with
//!   its last handler.

pub mod backoff;
#[cfg(test)]
mod convergence_tests;
pub mod delta_fifo;
pub mod factory;
#[cfg(test)]
pub(crate) mod fake;
pub mod lister_watcher;
mod pager;
pub mod processor;
pub mod reflector;
pub mod shared;
pub mod stop;
pub mod store;
pub mod tombstone;
pub mod workqueue;
