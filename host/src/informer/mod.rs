//! client-go's informer machinery: reflector → DeltaFIFO → shared informer → store + processor.

pub mod delta_fifo;
#[cfg(test)]
pub(crate) mod fake;
pub mod lister_watcher;
pub mod processor;
pub mod reflector;
pub mod stop;
pub mod store;
pub mod tombstone;
