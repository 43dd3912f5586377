#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! [`leases`] reads and writes `coordination.k8s.io/v1` Leases with optimistic concurrency;
//! [`leader_election`] elects one leader over a Lease as client-go does and gives it a
//! [`leader_election::Fence`]; [`membership`] keeps the live members of a shard group, one
//! Lease each; [`ownership`] answers, from both, whether this replica may work on a key now;
//! [`replica`] starts and stops both as a process's settings ask.

pub mod leader_election;
pub mod leases;
pub mod membership;
pub mod ownership;
pub mod replica;

pub use leader_election::{ElectionConfig, Fence, LeaderElection, Role, Timings};
pub use ownership::{Ownership, Shards};
