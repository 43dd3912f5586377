//! client-go's informer machinery: reflector → DeltaFIFO → shared informer → store + processor.

#[cfg(test)]
mod convergence_tests;
pub mod delta_fifo;
pub mod factory;
#[cfg(test)]
pub(crate) mod fake;
pub mod lister_watcher;
pub mod processor;
pub mod reflector;
pub mod shared;
pub mod stop;
pub mod store;
pub mod tombstone;
