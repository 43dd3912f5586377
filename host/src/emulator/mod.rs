//! The embedded API-server emulator: a kube-apiserver stand-in for tests and first runs.

pub mod cli;
pub mod registry;
pub mod store;
pub mod util;
