//! The embedded API-server emulator: a kube-apiserver stand-in for tests and first runs.

pub mod cli;
pub mod fields;
pub mod patch;
