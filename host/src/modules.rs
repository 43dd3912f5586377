//! Where a plugin's module comes from: a file, or an `oci://` reference pulled into the blob
//! cache beside the compile cache before the runtime loads it.
//!
//! Why a step of its own, before the runtime: the runtime loads files and knows nothing of
//! registries; pulling first makes a module from a registry a file like any other (named by its
//! digest, so a new digest is a new file and an upgrade, and a digest already pulled starts
//! with no request at all).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kwh_oci::{BlobStore, Credentials, OciError, PublicKey, Pulled, Reference, Registry};
use kwh_plugin::PluginSpec;

/// Pulls the modules named by reference.
pub struct Modules {
    registry: Registry,
    pull_interval: Duration,
    /// Every module pulled must be signed by one of these (`--verify-key`), when there are any.
    keys: Vec<PublicKey>,
}

impl std::fmt::Debug for Modules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Modules")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// `--registry-config`'s default: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
pub fn default_registry_config() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".docker").join("config.json"))
}

/// The blob cache of `cache_dir` (the compile cache's directory).
pub fn blob_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("oci")
}

/// Whether `path` is written as a registry reference.
pub fn is_reference(path: &Path) -> bool {
    path.to_str().is_some_and(Reference::is_reference)
}

impl Modules {
    /// Blobs kept under `cache_dir`'s `oci/`; credentials from the Docker config file at
    /// `registry_config` (none when it does not exist).
    pub fn new(
        cache_dir: &Path,
        registry_config: Option<&Path>,
        pull_interval: Duration,
        keys: Vec<PublicKey>,
    ) -> Result<Self, OciError> {
        let credentials = match registry_config {
            Some(p) => Credentials::from_file(p)?,
            None => Credentials::none(),
        };
        Ok(Modules {
            registry: Registry::new(BlobStore::new(blob_dir(cache_dir)), credentials)?,
            pull_interval,
            keys,
        })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn pull_interval(&self) -> Duration {
        self.pull_interval
    }

    /// `spec` with its module pulled when it is a reference (its path then the cached blob),
    /// and what was pulled; a file's spec as it is. A tag is asked for its digest again once
    /// its last answer is older than `max_age` (the pull interval when `None`). The manifest
    /// must be signed by one of the `--verify-key` keys or of `keys`, when there are any.
    pub async fn fetch(
        &self,
        mut spec: PluginSpec,
        creds: &Credentials,
        max_age: Option<Duration>,
        keys: &[PublicKey],
    ) -> Result<(PluginSpec, Option<Pulled>), OciError> {
        // A shadow's module is pulled the same way (its pull is not reported).
        if let Some(shadow) = spec.shadow.clone() {
            if let Some(text) = shadow.path.to_str().filter(|s| Reference::is_reference(s)) {
                let r = Reference::parse(text)?;
                let pulled = self
                    .pull(&r, creds, max_age.unwrap_or(self.pull_interval), keys)
                    .await?;
                spec.shadow = Some(std::sync::Arc::new(kwh_plugin::ShadowSpec {
                    path: pulled.path,
                    ..(*shadow).clone()
                }));
            }
        }
        let Some(text) = spec.path.to_str().filter(|s| Reference::is_reference(s)) else {
            return Ok((spec, None));
        };
        let reference = Reference::parse(text)?;
        let pulled = self
            .pull(
                &reference,
                creds,
                max_age.unwrap_or(self.pull_interval),
                keys,
            )
            .await?;
        if pulled.fetched {
            tracing::info!(module = %pulled.pinned, layer = %pulled.layer_digest, "pulled");
        }
        spec.path = pulled.path.clone();
        Ok((spec, Some(pulled)))
    }

    /// `reference` pulled (a tag asked again once its answer is older than `max_age`), its
    /// signature checked against the `--verify-key` keys and `keys` when there are any.
    pub async fn pull(
        &self,
        reference: &Reference,
        creds: &Credentials,
        max_age: Duration,
        keys: &[PublicKey],
    ) -> Result<Pulled, OciError> {
        let pulled = self.registry.pull(reference, creds, max_age).await?;
        let required: Vec<PublicKey> = self.keys.iter().chain(keys).cloned().collect();
        self.registry
            .verify(reference, creds, &pulled.manifest_digest, &required)
            .await?;
        Ok(pulled)
    }
}
