#![doc = include_str!("../README.md")]

pub mod blobs;
pub mod credentials;
pub mod error;
pub mod reference;
pub mod registry;
pub mod signature;

pub use blobs::{digest_of, BlobStore};
pub use credentials::{Credential, Credentials};
pub use error::OciError;
pub use reference::Reference;
pub use registry::{Layout, Pulled, Registry};
pub use signature::{PublicKey, SigningKey};
